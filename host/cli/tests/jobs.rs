//! Training jobs as a user runs them: `tessera bench jobs` and `tessera
//! sim --jobs` on Philly/Gavel job traces.

use std::process::Command;

fn tessera(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("run tessera");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// `tessera bench jobs --traces DIR --policy binpack --format json` with
/// `extra` arguments; its JSON.
fn bench_jobs(dir: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["bench", "jobs", "--traces", dir.to_str().unwrap(), "--policy", "binpack", "--format", "json"];
    args.extend_from_slice(extra);
    let (ok, out, err) = tessera(&args);
    assert!(ok, "{out}\n{err}");
    serde_json::from_str(out.trim()).unwrap()
}

/// A job trace written here (not a shared one): x holds one of two nodes
/// for hours; a (both nodes) arrives next, c (one node) after it.
fn job_trace(dir: &std::path::Path) -> std::path::PathBuf {
    let line = |ty: &str, steps: u64, at: u64, gpus: u32| {
        format!("{ty}\tcd %s && python3 x.py\t-n\t1\t{steps}\t{at}.000000\t{gpus}\n")
    };
    let text = [
        line("ResNet-50 (batch size 64)", 200_000, 0, 8),
        line("ResNet-50 (batch size 64)", 200_000, 1, 16),
        line("ResNet-50 (batch size 64)", 20_000, 2, 8),
    ]
    .concat();
    let f = dir.join("t1.trace");
    std::fs::write(&f, text).unwrap();
    std::fs::write(dir.join("vc_cluster_specs.json"), r#"{"t1": ["16:0:0", "32:0:0"]}"#).unwrap();
    f
}

#[test]
fn bench_jobs_prints_the_documented_json_and_gangs_hold_nothing_partly() {
    let dir = tempfile::tempdir().unwrap();
    job_trace(dir.path());
    let v = bench_jobs(dir.path(), &[]);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(
        runs.iter().map(|r| r["policy"].as_str().unwrap()).collect::<Vec<_>>(),
        ["fair-share", "gangs", "one-at-a-time", "fifo"]
    );
    for r in runs {
        for key in [
            "jobs",
            "completed",
            "jct_p50_s",
            "jct_p99_s",
            "queue_delay_p50_s",
            "gpu_util",
            "jain_fairness",
            "jain_share",
            "partial_gang_gpu_s",
            "wall_s",
        ] {
            assert!(r[key].is_number(), "{key} in {r}");
        }
        let progress = r["queue_progress"].as_object().unwrap_or_else(|| panic!("queue_progress in {r}"));
        assert!(
            !progress.is_empty() && progress.values().all(|p| p.as_f64().is_some_and(|p| p > 0.0 && p <= 1.0)),
            "{r}"
        );
        assert_eq!((r["jobs"].as_u64(), r["completed"].as_u64()), (Some(3), Some(3)), "{r}");
        assert_eq!(r["extrapolated"], 1, "the 16-GPU job is past Gavel's 8: {r}");
        assert_eq!(r["gpus"], serde_json::json!([16, 0, 0]), "Gavel's first size for t1");
    }
    assert_eq!(runs[0]["partial_gang_gpu_s"], 0, "fair share: {}", runs[0]);
    assert_eq!(runs[1]["partial_gang_gpu_s"], 0, "gangs: {}", runs[1]);
    assert!(runs[2]["partial_gang_gpu_s"].as_u64().unwrap() > 0, "one at a time: {}", runs[2]);
    assert!(runs[1]["jct_p50_s"].as_u64() <= runs[3]["jct_p50_s"].as_u64(), "gangs vs FIFO: {runs:?}");
}

#[test]
fn bench_jobs_names_the_job_types_it_skips() {
    // A job type Gavel never measured cannot be given a run time: it is
    // skipped, counted, and named, in the JSON and under the table.
    let dir = tempfile::tempdir().unwrap();
    let f = job_trace(dir.path());
    let mut text = std::fs::read_to_string(&f).unwrap();
    for at in [3, 4] {
        text += &format!("Mystery-Net (batch size 7)\tcd %s && python3 x.py\t-n\t1\t100\t{at}.000000\t1\n");
    }
    std::fs::write(&f, text).unwrap();
    let v = bench_jobs(dir.path(), &[]);
    for r in v["runs"].as_array().unwrap() {
        assert_eq!((r["jobs"].as_u64(), r["skipped"].as_u64(), r["completed"].as_u64()), (Some(5), Some(2), Some(3)));
        assert_eq!(r["skipped_job_types"], serde_json::json!({"Mystery-Net (batch size 7)": 2}), "{r}");
    }
    let (ok, out, err) = tessera(&["bench", "jobs", "--traces", dir.path().to_str().unwrap(), "--policy", "binpack"]);
    assert!(ok, "{err}");
    let notes: Vec<&str> = out.lines().filter(|l| l.starts_with("note:")).collect();
    assert_eq!(
        notes,
        [
            "note: t1: 2 of 5 jobs skipped, no measured throughput on V100, P100 or K80: `Mystery-Net (batch size 7)` ×2",
            "note: t1: run time extrapolated past the largest scale Gavel measured for 1 of 5 jobs",
        ],
        "{out}"
    );
    // Every type measured: nothing skipped, no note of it, no key.
    std::fs::write(
        &f,
        std::fs::read_to_string(&f).unwrap().lines().take(3).map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    let (ok, out, _) = tessera(&["bench", "jobs", "--traces", dir.path().to_str().unwrap(), "--policy", "binpack"]);
    assert!(ok && !out.contains("skipped"), "{out}");
    assert!(bench_jobs(dir.path(), &[])["runs"][0].get("skipped_job_types").is_none());
}

#[test]
fn jobs_between_measured_scales_run_at_an_interpolated_rate() {
    // Gavel measured 1, 2, 4 and 8 GPUs; a 3- or 6-GPU job (Philly has
    // them) runs at a rate between its neighbours', counted and noted,
    // not skipped.
    let dir = tempfile::tempdir().unwrap();
    let f = job_trace(dir.path());
    let mut text = std::fs::read_to_string(&f).unwrap();
    for (at, gpus) in [(3, 3), (4, 6)] {
        text += &format!("ResNet-50 (batch size 64)\tcd %s && python3 x.py\t-n\t1\t1000\t{at}.000000\t{gpus}\n");
    }
    std::fs::write(&f, text).unwrap();
    let v = bench_jobs(dir.path(), &[]);
    for r in v["runs"].as_array().unwrap() {
        assert_eq!(
            (r["jobs"].as_u64(), r["skipped"].as_u64(), r["interpolated"].as_u64()),
            (Some(5), Some(0), Some(2))
        );
        assert_eq!(r["completed"].as_u64(), Some(5), "{r}");
    }
    let (ok, out, err) = tessera(&["bench", "jobs", "--traces", dir.path().to_str().unwrap(), "--policy", "binpack"]);
    assert!(ok, "{err}");
    assert!(
        out.lines().any(|l| l == "note: t1: run time interpolated between the scales Gavel measured for 2 of 5 jobs"),
        "{out}"
    );
}

#[test]
fn bench_jobs_says_which_jobs_the_cluster_can_never_hold() {
    // A 64-GPU job on the 16-GPU cluster of the spec: it never runs (and
    // holds up FIFO's line); counted, its width given, a note under the
    // table. The others all finish under the gang modes.
    let dir = tempfile::tempdir().unwrap();
    let f = job_trace(dir.path());
    let text = std::fs::read_to_string(&f).unwrap()
        + "ResNet-50 (batch size 64)\tcd %s && python3 x.py\t-n\t1\t100\t3.000000\t64\n";
    std::fs::write(&f, text).unwrap();
    let v = bench_jobs(dir.path(), &[]);
    for r in v["runs"].as_array().unwrap() {
        assert_eq!((r["never_fit"].as_u64(), r["widest_never_fit"].as_u64()), (Some(1), Some(64)), "{r}");
        if r["policy"] != "fifo" && r["policy"] != "one-at-a-time" {
            assert_eq!((r["jobs"].as_u64(), r["completed"].as_u64()), (Some(4), Some(3)), "{r}");
        }
    }
    let (ok, out, err) = tessera(&["bench", "jobs", "--traces", dir.path().to_str().unwrap(), "--policy", "binpack"]);
    assert!(ok, "{err}");
    assert!(
        out.lines().any(|l| l
            == "note: t1: 1 of 4 jobs can never run here, asking for more GPUs at once (up to 64) than the cluster \
                has of any model they can use"),
        "{out}"
    );
    // Every job fits: no key, no note.
    std::fs::write(
        &f,
        std::fs::read_to_string(&f).unwrap().lines().take(3).map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    assert!(bench_jobs(dir.path(), &[])["runs"][0].get("never_fit").is_none());
}

#[test]
fn a_trace_without_a_spec_gets_the_room_its_jobs_use_and_an_endless_job_is_refused() {
    // Two 1-GPU jobs of about 10^6 s arriving together, no spec beside
    // them: one node of 8 GPUs. (The cluster was sized by GPU-seconds over
    // the arrivals' span: 2.2 million GPUs, minutes and a gigabyte.)
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("long.trace");
    let line = |steps: u64, at: u64| {
        format!("ResNet-50 (batch size 64)\tcd %s && python3 x.py\t-n\t1\t{steps}\t{at}.000000\t1\n")
    };
    std::fs::write(&f, line(10_000_000, 0) + &line(10_000_000, 0)).unwrap();
    let v = bench_jobs(dir.path(), &[]);
    for r in v["runs"].as_array().unwrap() {
        assert_eq!(r["gpus"], serde_json::json!([8, 0, 0]), "{r}");
        assert_eq!(r["completed"].as_u64(), Some(2), "{r}");
    }
    // A job that would run for centuries: refused, naming it, before any
    // run ticks through its years.
    std::fs::write(&f, line(10_000_000, 0) + &line(10_000_000_000_000, 5)).unwrap();
    let (ok, _, err) = tessera(&["bench", "jobs", "--traces", dir.path().to_str().unwrap(), "--policy", "binpack"]);
    assert!(!ok);
    assert!(
        err.contains("long.trace: job long-1 (ResNet-50 (batch size 64), 10000000000000 steps on 1 GPUs) runs"),
        "{err}"
    );
    assert!(err.contains("more than the 1464 days a trace may span"), "{err}");
    // Queues past what a queue tree holds: refused before anything is
    // built for them (4,294,967,295 used to abort on a 103 GB allocation).
    let (ok, _, err) = tessera(&["bench", "jobs", "--traces", dir.path().to_str().unwrap(), "--queues", "4294967295"]);
    assert!(!ok && err.contains("4294967295 is not in 1..=1024"), "{err}");
}

#[test]
fn sim_jobs_is_deterministic_and_names_a_malformed_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = job_trace(dir.path());
    let run = |name: &str| {
        let out = dir.path().join(name);
        let (ok, stdout, err) =
            tessera(&["sim", "--jobs", f.to_str().unwrap(), "--policy", "binpack", "--out", out.to_str().unwrap()]);
        assert!(ok, "{stdout}\n{err}");
        assert!(stdout.contains("fair-share"), "{stdout}");
        std::fs::read(out).unwrap()
    };
    assert_eq!(run("a.json"), run("b.json"), "same trace and seed, byte-identical report");
    let bad = dir.path().join("bad.trace");
    std::fs::write(&bad, "ResNet-50 (batch size 64)\tcmd\t-n\t1\t100\t0.0\t0\n").unwrap();
    let (ok, _, err) = tessera(&["sim", "--jobs", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("bad.trace:1:7 (scale_factor): 0 GPUs; a job needs 1..=4096"), "{err}");
}

/// The shared Philly traces that are small enough for a debug build.
#[test]
fn bench_jobs_runs_the_small_shared_philly_traces() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/philly-gavel");
    if !dir.exists() {
        assert!(std::env::var_os("CI").is_none(), "{} is missing in CI", dir.display());
        return;
    }
    let v = bench_jobs(&dir, &["--only", "23dbec,795a4c"]);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 8, "{v}");
    for r in runs.iter().filter(|r| r["policy"] == "gangs" || r["policy"] == "fair-share") {
        assert_eq!(r["partial_gang_gpu_s"], 0, "{r}");
        assert_eq!(r["completed"].as_u64(), r["jobs"].as_u64().map(|j| j - r["skipped"].as_u64().unwrap()), "{r}");
    }
}

/// Two virtual clusters on one: t1 fills the shared cluster at 0, t2's
/// short jobs come at 100. With fair-share each VC is a queue guaranteed
/// its own cluster's 8 GPUs, so t2 takes its share back at once; in one
/// queue it waits behind all of t1.
#[test]
fn bench_jobs_mix_gives_each_virtual_cluster_its_guarantee() {
    let dir = tempfile::tempdir().unwrap();
    let line = |steps: u64, at: u64| format!("ResNet-50 (batch size 64)\tcd %s\t-n\t1\t{steps}\t{at}.000000\t8\n");
    std::fs::write(dir.path().join("t1.trace"), (0..4).map(|_| line(200_000, 0)).collect::<String>()).unwrap();
    std::fs::write(dir.path().join("t2.trace"), (0..2).map(|_| line(20_000, 100)).collect::<String>()).unwrap();
    std::fs::write(dir.path().join("vc_cluster_specs.json"), r#"{"t1": ["8:0:0"], "t2": ["8:0:0"]}"#).unwrap();
    let v = bench_jobs(dir.path(), &["--mix"]);
    let runs = v["runs"].as_array().unwrap();
    let row = |p: &str| runs.iter().find(|r| r["policy"] == p).unwrap();
    for r in runs {
        assert_eq!(
            (r["trace"].as_str(), r["jobs"].as_u64(), r["completed"].as_u64()),
            (Some("mix:2"), Some(6), Some(6)),
            "{r}"
        );
        assert_eq!(r["gpus"], serde_json::json!([16, 0, 0]), "the two clusters together");
    }
    let (fair, one) = (row("fair-share"), row("gangs"));
    assert!(fair["jain_fairness"].as_f64() > one["jain_fairness"].as_f64(), "{fair}\n{one}");
    assert!(fair["queue_delay_p50_s"].as_u64() < one["queue_delay_p50_s"].as_u64(), "{fair}\n{one}");
    assert!(fair["jain_share"].as_f64() > one["jain_share"].as_f64(), "{fair}\n{one}");
    // Equal weights: here the same guarantees (each VC had 8 of 16).
    let v = bench_jobs(dir.path(), &["--mix", "--equal"]);
    let eq = v["runs"].as_array().unwrap().iter().find(|r| r["policy"] == "fair-share").unwrap().clone();
    assert_eq!(eq["trace"], "mix:2=");
    assert_eq!(eq["jain_share"], fair["jain_share"], "{eq}\n{fair}");
    // The fair-share gate: every job still finishes.
    let v = bench_jobs(dir.path(), &["--mix", "--equal", "--gate"]);
    let gated = v["runs"].as_array().unwrap().iter().find(|r| r["policy"] == "fair-share").unwrap().clone();
    assert_eq!((gated["trace"].as_str(), gated["completed"].as_u64()), (Some("mix:2=+gate"), Some(6)), "{gated}");
    // Half the pooled cluster: each VC guaranteed half of its own.
    let v = bench_jobs(dir.path(), &["--mix", "--capacity", "50"]);
    assert_eq!(v["runs"][0]["trace"], "mix:2@50%");
    assert_eq!(v["runs"][0]["gpus"], serde_json::json!([8, 0, 0]));
    let (ok, _, err) =
        tessera(&["bench", "jobs", "--traces", dir.path().to_str().unwrap(), "--mix", "--capacity", "5"]);
    assert!(!ok && err.contains("--capacity must be 10..=100"), "{err}");
}

/// Two VCs of 8 GPUs each: t1 with six 8-GPU jobs, t2 with one 16-GPU
/// job, all arriving at 0 (the scene of the two tests below).
fn wide_job_beside_a_stream(dir: &std::path::Path) {
    let line = |gpus: u32| format!("ResNet-50 (batch size 64)\tcd %s\t-n\t1\t20000\t0.000000\t{gpus}\n");
    std::fs::write(dir.join("t1.trace"), (0..6).map(|_| line(8)).collect::<String>()).unwrap();
    std::fs::write(dir.join("t2.trace"), line(16)).unwrap();
    std::fs::write(dir.join("vc_cluster_specs.json"), r#"{"t1": ["8:0:0"], "t2": ["8:0:0"]}"#).unwrap();
}

/// A VC whose one job is as wide as the pooled cluster (t2: 16 GPUs, its
/// share 8) beside one that always has an 8-GPU job to start (t1). The
/// gate alone holds t1 at its share, but each time t1's job ends t1 uses
/// nothing and starts the next, so t2 waits for all of t1's jobs; with
/// use remembered (`--usage-half-life`), t1 owes for the time t2 was shut
/// out, waits its turn, and t2's job runs after t1's first.
#[test]
fn bench_jobs_with_remembered_use_gives_a_wide_job_its_turn() {
    let dir = tempfile::tempdir().unwrap();
    wide_job_beside_a_stream(dir.path());
    let fair = |extra: &[&str]| {
        let mut args = vec!["--mix", "--equal", "--gate"];
        args.extend_from_slice(extra);
        let v = bench_jobs(dir.path(), &args);
        v["runs"].as_array().unwrap().iter().find(|r| r["policy"] == "fair-share").unwrap().clone()
    };
    let (present, remembered) = (fair(&[]), fair(&["--usage-half-life", "3600"]));
    assert_eq!(remembered["trace"], "mix:2=+gate~3600s");
    for r in [&present, &remembered] {
        assert_eq!((r["completed"].as_u64(), r["partial_gang_gpu_s"].as_u64()), (Some(7), Some(0)), "{r}");
    }
    let t2 = |r: &serde_json::Value| r["queue_share"]["t2"].as_f64().unwrap_or(0.0);
    assert!(t2(&present) < 0.01, "without memory t2 never runs while contended: {present}");
    assert!(t2(&remembered) > 0.5, "{remembered}");
    assert!(
        remembered["jain_share"].as_f64().unwrap() > present["jain_share"].as_f64().unwrap() + 0.2,
        "{present}\n{remembered}"
    );
    let (ok, _, err) = tessera(&[
        "bench",
        "jobs",
        "--traces",
        dir.path().to_str().unwrap(),
        "--mix",
        "--gate",
        "--usage-half-life",
        "5",
    ]);
    assert!(!ok && err.contains("usage_half_life_s: 5 s must be within 60..="), "{err}");
}

/// The scene above with a fairness floor (`--fairness-target 0.9`): t1
/// may take everything while the queues have been treated alike, but t2
/// shut out drags remembered fairness below the floor, the gate holds t1,
/// and t2's job runs; a floor of 0.5, which two queues never fall below,
/// holds no one and t2 waits as without a gate. A floor outside (0, 1] is refused by name.
/// `--smallest-first` is named in the run and every job still finishes.
#[test]
fn bench_jobs_with_a_fairness_floor_and_smallest_first() {
    let dir = tempfile::tempdir().unwrap();
    wide_job_beside_a_stream(dir.path());
    let fair = |extra: &[&str]| {
        let mut args = vec!["--mix", "--equal", "--gate", "--usage-half-life", "3600"];
        args.extend_from_slice(extra);
        let v = bench_jobs(dir.path(), &args);
        v["runs"].as_array().unwrap().iter().find(|r| r["policy"] == "fair-share").unwrap().clone()
    };
    let floor = fair(&["--fairness-target", "0.9"]);
    assert_eq!(floor["trace"], "mix:2=+gate~3600s≥0.9");
    assert_eq!((floor["completed"].as_u64(), floor["partial_gang_gpu_s"].as_u64()), (Some(7), Some(0)), "{floor}");
    assert!(floor["queue_share"]["t2"].as_f64().unwrap_or(0.0) > 0.5, "t2's job ran while contended: {floor}");
    // Jain over two queues is never below 0.5: that floor never holds t1.
    let never = fair(&["--fairness-target", "0.5"]);
    assert!(never["queue_share"]["t2"].as_f64().unwrap_or(0.0) < 0.01, "{never}");

    let sized = fair(&["--smallest-first"]);
    assert_eq!(sized["trace"], "mix:2=+gate~3600s+smallest");
    assert_eq!(sized["completed"].as_u64(), Some(7), "{sized}");

    let dir_s = dir.path().to_str().unwrap();
    let args = ["bench", "jobs", "--traces", dir_s, "--mix", "--gate", "--usage-half-life", "3600"];
    let (ok, _, err) = tessera(&[&args[..], &["--fairness-target", "1.5"]].concat());
    assert!(!ok && err.contains("fairness_target") && err.contains("(0, 1]"), "{err}");
    let (ok, _, err) = tessera(&["bench", "jobs", "--traces", dir_s, "--mix", "--gate", "--fairness-target", "0.9"]);
    assert!(!ok && err.contains("--usage-half-life"), "the floor reads remembered use: {err}");
}

/// The same scene, queues taking turns by reclaim (`--reclaim-to-share`)
/// and jobs that checkpoint: named in the run, every job finishes, t2
/// gets its share while contended, and the options' preconditions are
/// refused by name.
#[test]
fn bench_jobs_with_reclaim_to_fair_share_and_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    wide_job_beside_a_stream(dir.path());
    let args = [
        "--mix",
        "--equal",
        "--gate",
        "--usage-half-life",
        "3600",
        "--reclaim-to-share",
        "--reclaim-min-runtime",
        "600",
        "--checkpoint-every",
        "300",
    ];
    let v = bench_jobs(dir.path(), &args);
    let runs = v["runs"].as_array().unwrap();
    let fair = runs.iter().find(|r| r["policy"] == "fair-share").unwrap();
    assert_eq!(fair["trace"], "mix:2=+gate~3600s+reclaim>share+turn@600s+ckpt@300s");
    assert_eq!((fair["completed"].as_u64(), fair["partial_gang_gpu_s"].as_u64()), (Some(7), Some(0)), "{fair}");
    assert!(fair["queue_share"]["t2"].as_f64().unwrap_or(0.0) > 0.5, "{fair}");
    let figures = |mut v: serde_json::Value| {
        for r in v["runs"].as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("wall_s");
        }
        v
    };
    assert_eq!(figures(bench_jobs(dir.path(), &args)), figures(v.clone()), "deterministic but for wall time");

    let dir_s = dir.path().to_str().unwrap();
    let (ok, _, err) = tessera(&["bench", "jobs", "--traces", dir_s, "--mix", "--reclaim-to-share"]);
    assert!(!ok && err.contains("--gate"), "reclaim to the gate's shares needs the gate: {err}");
    let (ok, _, err) = tessera(&["bench", "jobs", "--traces", dir_s, "--checkpoint-every", "0"]);
    assert!(!ok && err.contains("--checkpoint-every"), "{err}");
}

#[test]
fn bench_gangs_times_each_gangs_pass_with_and_without_queues() {
    let (ok, out, err) = tessera(&[
        "bench",
        "gangs",
        "--nodes",
        "300",
        "--gangs",
        "30",
        "--members",
        "3",
        "--policy",
        "binpack",
        "--format",
        "json",
    ]);
    assert!(ok, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!((v["members"].as_u64(), v["member_gpus"].as_u64()), (Some(3), Some(8)), "{v}");
    let idle = v["idle_nodes"].as_u64().unwrap();
    assert!((60..=120).contains(&idle), "about 30% of 300 nodes start idle: {idle}");
    assert_eq!(runs.iter().map(|r| r["queues"].as_str().unwrap()).collect::<Vec<_>>(), ["one queue", "4 queues"]);
    for r in runs {
        let (a, b) = (r["admitted"].as_u64().unwrap(), r["rolled_back"].as_u64().unwrap());
        assert_eq!(a + b, 30, "every gang is placed whole or released: {r}");
        assert!(a > 0, "{r}");
        assert!(r["p99_ms"].as_f64().unwrap() >= r["p50_ms"].as_f64().unwrap(), "{r}");
        assert_eq!(r["plugin_errors"], 0, "{r}");
    }
    let (ok, _, err) = tessera(&["bench", "gangs", "--members", "1"]);
    assert!(!ok && err.contains("1 is not in 2..=4096"), "{err}");
}

/// The shipped `training` policy (GPU topology first) checks and runs a
/// job trace by name.
#[test]
fn the_training_policy_runs_a_job_trace() {
    let dir = tempfile::tempdir().unwrap();
    let trace = job_trace(dir.path());
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let file = root.join("deploy/policies/training.yaml");
    let (ok, out, err) = tessera(&["policy", "check", file.to_str().unwrap()]);
    assert!(ok && out.contains("policy training is valid"), "{out}\n{err}");
    let (ok, out, err) = tessera(&["sim", "--jobs", trace.to_str().unwrap(), "--policy", "training"]);
    assert!(ok, "{out}\n{err}");
    let row: Vec<&str> = out.lines().find(|l| l.starts_with("t1")).expect(&out).split_whitespace().collect();
    assert_eq!(row[2..4], ["3", "3"], "every job completed: {out}");
    // Its `queues:` and reservations are fair-share's settings in the
    // bench (named in the run), and an option adds to them.
    let mix = tempfile::tempdir().unwrap();
    wide_job_beside_a_stream(mix.path());
    let training = |extra: &[&str]| {
        let mut args = vec!["bench", "jobs", "--traces", mix.path().to_str().unwrap(), "--mix", "--equal"];
        args.extend_from_slice(&["--policy", "training", "--format", "json"]);
        args.extend_from_slice(extra);
        let (ok, out, err) = tessera(&args);
        assert!(ok, "{out}\n{err}");
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
    };
    let v = training(&[]);
    assert_eq!(v["runs"][0]["trace"], "mix:2=+gate+reserve@3600s", "{v}");
    assert_eq!(v["runs"][0]["completed"], 7, "{v}");
    let v = training(&["--usage-half-life", "3600", "--fairness-target", "0.9"]);
    assert_eq!(v["runs"][0]["trace"], "mix:2=+gate~3600s≥0.9+reserve@3600s", "{v}");
}
