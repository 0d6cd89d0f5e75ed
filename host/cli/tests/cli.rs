//! The `tessera` binary as a user runs it.

use std::process::Command;

fn tessera(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("run tessera");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn plugin_check_accepts_a_good_scorer() {
    let (ok, out, err) = tessera(&["plugin", "check", tessera_plugins::BINPACK.path]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("loadable        yes"), "{out}");
    assert!(out.contains("world           scorer"), "{out}");
    assert!(out.contains("contract        tessera:policy@0.2.2"), "{out}");
    assert!(out.contains("tessera:policy/scoring@0.2.2"), "{out}");
    assert!(out.contains("reuse           node-shape"), "binpack promises the node-shape scope: {out}");
    assert!(out.contains("pod shared"), "canned calls are shown: {out}");
}

#[test]
fn plugin_check_json_for_a_detector() {
    let (ok, out, _) = tessera(&["plugin", "check", tessera_plugins::OVERLOAD.path, "--format", "json"]);
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["world"], "detector");
    assert_eq!(v["contract"], "0.2.2");
    assert!(v["canned"].as_array().unwrap().iter().any(|c| c.as_str().unwrap().contains("Overload")), "{v}");
}

#[test]
fn plugin_check_fails_on_foreign_world_hostile_and_missing_files() {
    let (ok, out, _) = tessera(&["plugin", "check", tessera_plugins::NOT_A_POLICY.path]);
    assert!(!ok);
    assert!(out.contains("loadable        NO"), "{out}");
    assert!(out.contains("neither the `scorer` nor the `detector` world"), "{out}");

    let (ok, out, _) = tessera(&["plugin", "check", tessera_plugins::HOSTILE.path, "--config", r#"{"mode":"loop"}"#]);
    assert!(!ok);
    assert!(out.contains("PLUGIN-TIMEOUT"), "{out}");

    let (ok, out, _) = tessera(&["plugin", "check", "/nonexistent/x.wasm"]);
    assert!(!ok);
    assert!(out.contains("cannot read /nonexistent/x.wasm"), "{out}");
}

#[test]
fn policy_check_loads_plugins_and_reports_bad_documents_with_location() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::create_dir(dir.path().join("plugins")).unwrap();
    std::fs::write(dir.path().join("plugins/spread.wasm"), tessera_plugins::TOPOLOGY_SPREAD.bytes).unwrap();
    std::fs::write(
        &good,
        "name: demo\nplugins:\n  - name: binpack\n    source: builtin:binpack\n    weight: 2\n  - name: spread\n    source: plugins/spread.wasm\n",
    )
    .unwrap();
    let (ok, out, err) = tessera(&["policy", "check", good.to_str().unwrap()]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("policy demo is valid"), "{out}");
    assert!(out.contains("binpack"), "{out}");

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "name: demo\nplugins:\n  - name: binpack\n    source: builtin:binpack\n    colour: red\n")
        .unwrap();
    let (ok, _, err) = tessera(&["policy", "check", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("bad.yaml:5:5: plugins[0].colour: unknown field `colour`"), "{err}");

    // A source outside the policy's directory is refused, not read.
    let sneaky = dir.path().join("sneaky.yaml");
    std::fs::write(&sneaky, "name: demo\nplugins:\n  - name: x\n    source: /etc/passwd\n").unwrap();
    let (ok, _, err) = tessera(&["policy", "check", sneaky.to_str().unwrap()]);
    assert!(!ok && err.contains("plugin x: source /etc/passwd: outside") && !err.contains("root:"), "{err}");

    // Files that never end are refused before they are read.
    for args in [&["policy", "check", "/dev/zero"][..], &["sim", "--pods", "/dev/zero"]] {
        let (ok, _, err) = tessera(args);
        assert!(!ok && err.contains("/dev/zero: is a character device, not a regular file"), "{err}");
    }

    let missing = dir.path().join("missing.yaml");
    std::fs::write(&missing, "name: demo\nplugins:\n  - name: x\n    source: builtin:nope\n").unwrap();
    let (ok, _, err) = tessera(&["policy", "check", missing.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("plugin x: no built-in plugin `nope`"), "{err}");
}

#[test]
fn plugin_bench_prints_the_documented_json() {
    let (ok, out, err) = tessera(&["plugin", "bench", "--nodes", "200", "--reps", "1", "--format", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    for key in [
        "nodes",
        "wasm_ns_per_call",
        "wasm_ns_per_node",
        "native_ns_per_node",
        "ratio",
        "wasm_ns_per_changed_node",
        "native_ns_per_changed_node",
        "changed_ratio",
        "cache_hit_load_us",
        "first_sync_ms",
        "wasm_calls",
        "wasm_faults",
        "wasm_timeouts",
        "host_starved_calls",
        "native_errors",
    ] {
        assert!(v.get(key).is_some_and(|x| x.is_number()), "{key} in {v}");
    }
    assert_eq!(v["nodes"], 200);
    // The calls after every node changed ran too, and none failed.
    assert_eq!((v["wasm_faults"].as_u64(), v["native_errors"].as_u64()), (Some(0), Some(0)), "{v}");
}

/// On a machine made busy, the benches report (faults and timeouts
/// counted in the table and the JSON) and never panic: a call the host
/// starves is not the plugin's timeout.
/// The pod scored is a choice: gpu-topology has an opinion only on pods of
/// whole GPUs, so its cost is measured with one; bad shapes are refused.
#[test]
fn plugin_bench_scores_the_pod_asked_for() {
    let run = |args: &[&str]| {
        let mut all = vec!["plugin", "bench", "--plugin", "gpu-topology", "--nodes", "200", "--reps", "1"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--format", "json"]);
        tessera(&all)
    };
    let (ok, out, err) = run(&["--pod-gpus", "2", "--pod-gpu-milli", "1000"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((v["pod_gpus"].as_u64(), v["pod_gpu_milli"].as_u64()), (Some(2), Some(1000)), "{v}");
    assert_eq!((v["wasm_faults"].as_u64(), v["native_errors"].as_u64()), (Some(0), Some(0)), "{v}");
    let (ok, out, _) = run(&[]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((v["pod_gpus"].as_u64(), v["pod_gpu_milli"].as_u64()), (Some(1), Some(500)), "the default: {v}");
    for (bad, flag) in [(&["--pod-gpus", "9"][..], "--pod-gpus"), (&["--pod-gpu-milli", "0"], "--pod-gpu-milli")] {
        let (ok, _, err) = run(bad);
        assert!(!ok && err.contains(flag), "{bad:?}: {err}");
    }
}

#[test]
fn benches_on_a_busy_machine_report_and_never_panic() {
    let _busy = Contention::start();
    let (ok, out, err) = tessera(&["plugin", "bench", "--nodes", "10000", "--reps", "1", "--format", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["wasm_timeouts"], 0, "{v}");
    let (ok, out, err) = tessera(&["bench", "throughput", "--nodes", "200", "--pods", "300", "--format", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["plugin_errors"].is_number(), "{v}");
}

#[test]
fn sim_on_the_builtin_workload_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str| {
        let out = dir.path().join(name);
        let (ok, stdout, err) = tessera(&["sim", "--node-count", "80", "--seed", "7", "--out", out.to_str().unwrap()]);
        assert!(ok, "{stdout}\n{err}");
        assert!(stdout.contains("GPU allocation (end)"), "{stdout}");
        std::fs::read(out).unwrap()
    };
    let (a, b) = (run("a.json"), run("b.json"));
    let svg = dir.path().join("curve.svg");
    let (ok, _, err) = tessera(&["sim", "--node-count", "40", "--seed", "7", "--plot", svg.to_str().unwrap()]);
    assert!(ok, "{err}");
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("GPU allocation") && svg.contains("<polyline"),
        "{}",
        &svg[..200.min(svg.len())]
    );
    assert_eq!(a, b, "same seed, byte-identical run.json");
    let v: serde_json::Value = serde_json::from_slice(&a).unwrap();
    assert_eq!(v["policy"], "default");
    let buckets = v["report"]["buckets"].as_array().unwrap();
    assert!(buckets.len() > 100, "one bucket per arrived-demand percent");
    assert!(buckets.iter().all(|b| b["allocation"].as_f64().unwrap() <= 100.0));
}

#[test]
fn sim_rejects_a_malformed_trace_before_simulating() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = dir.path().join("nodes.csv");
    std::fs::write(&nodes, "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,lots,1,0,\n").unwrap();
    let (ok, out, err) = tessera(&["sim", "--nodes", nodes.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("nodes.csv:3:2 (cpu_milli): `lots` is not a non-negative integer"), "{err}");
    assert!(!out.contains("pods submitted"), "nothing was simulated: {out}");
    let (ok, _, err) = tessera(&["sim", "--node-count", "10", "--policy", "no-such-policy"]);
    assert!(!ok);
    assert!(
        err.contains("not a file, a shipped policy (default, throughput, training, learned), or a built-in plugin"),
        "{err}"
    );
}

#[test]
fn sim_replays_the_published_protocol_on_the_shared_trace() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/openb");
    if !dir.exists() {
        assert!(std::env::var_os("CI").is_none(), "{} is missing in CI", dir.display());
        return;
    }
    let p = |f: &str| dir.join(f).display().to_string();
    let (ok, out, err) = tessera(&[
        "sim",
        "--nodes",
        &p("openb_node_list_gpu_node.csv"),
        "--pods",
        &p("openb_pod_list_default.csv"),
        "--order",
        &p("arrival-order/openb_pod_list_default_tune1.3_seed42.txt"),
        "--policy",
        "binpack",
    ]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("nodes / GPUs                   1213 / 6212"), "{out}");
    assert!(out.contains("pods submitted                 10866"), "{out}");
    assert!(out.contains("GPU allocation @ 130% arrived"), "{out}");
}

/// `bench fidelity` on a directory laid out like shared/traces/openb, cut
/// down to one workload, policy and seed.
#[test]
fn fidelity_bench_reproduces_a_published_bestfit_run() {
    let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/openb");
    if !shared.exists() {
        assert!(std::env::var_os("CI").is_none(), "{} is missing in CI", shared.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("expected")).unwrap();
    std::fs::create_dir_all(d.join("arrival-order")).unwrap();
    for f in ["openb_node_list_gpu_node.csv", "openb_pod_list_default.csv"] {
        std::os::unix::fs::symlink(shared.join(f), d.join(f)).unwrap();
    }
    let order = "arrival-order/openb_pod_list_default_tune1.3_seed42.txt";
    std::os::unix::fs::symlink(shared.join(order), d.join(order)).unwrap();
    for f in ["analysis_allo_discrete.csv", "analysis_frag_discrete.csv", "analysis_frag_ratio_discrete.csv"] {
        let text = std::fs::read_to_string(shared.join("expected").join(f)).unwrap();
        let mut lines = text.lines();
        let mut kept = vec![lines.next().unwrap().to_string()];
        kept.extend(lines.filter(|l| l.starts_with("openb_pod_list_default,05-BestFit,1.3,42,")).map(String::from));
        assert_eq!(kept.len(), 2, "{f}");
        std::fs::write(d.join("expected").join(f), kept.join("\n") + "\n").unwrap();
    }
    let plots = d.join("plots");
    let (ok, out, err) = tessera(&[
        "bench",
        "fidelity",
        "--traces",
        d.to_str().unwrap(),
        "--format",
        "json",
        "--plot",
        plots.to_str().unwrap(),
    ]);
    assert!(ok, "{out}\n{err}");
    let svg = std::fs::read_to_string(plots.join("openb_pod_list_default.svg")).unwrap();
    assert!(svg.contains("bestfit (ours)") && svg.contains("bestfit (published)"), "legend names both curves");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    let r = &runs[0];
    assert_eq!(
        (r["workload"].as_str(), r["policy"].as_str(), r["seed"].as_u64()),
        (Some("openb_pod_list_default"), Some("bestfit"), Some(42))
    );
    let dev = r["alloc_mean_abs_dev"].as_f64().unwrap();
    assert!(dev < 0.5, "bestfit within half a point of the published curve: {dev}");
    assert!(r["unallocated_at_130"].as_f64().is_some() && v["wall_s"].as_f64().is_some());
}

#[test]
fn throughput_bench_prints_the_documented_json() {
    let (ok, out, err) = tessera(&["bench", "throughput", "--nodes", "60", "--pods", "200", "--format", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    for key in ["nodes", "pods", "pods_per_sec", "p50_ms", "p99_ms", "wasm_native_ratio", "nodes_scored_per_pod"] {
        assert!(v.get(key).is_some_and(|x| x.is_number()), "{key} in {v}");
    }
    assert!(v["placed"].as_u64().unwrap() > 50, "{v}");
    assert!(v["p99_ms"].as_f64().unwrap() >= v["p50_ms"].as_f64().unwrap());
}

/// `bench serve` runs the bare loop and the service's engine on the same
/// cluster, arrivals and seed: the same decisions, each run timed, and
/// the throughput and reuse flag of `bench throughput --no-reuse` reported.
#[test]
fn serve_bench_runs_the_bare_loop_and_the_service_on_the_same_work() {
    let (ok, out, err) = tessera(&[
        "bench",
        "serve",
        "--nodes",
        "60",
        "--seconds",
        "1800",
        "--policy",
        "throughput",
        "--format",
        "json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3, "{v}");
    let decisions: Vec<u64> = runs.iter().map(|r| r["decisions"].as_u64().unwrap()).collect();
    assert!(decisions[0] > 50 && decisions.iter().all(|&d| d == decisions[0]), "the same work: {decisions:?}");
    for r in runs {
        for key in ["wall_s", "decisions_per_sec", "p50_ms", "p99_ms", "of_bare"] {
            assert!(r[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {r}");
        }
    }
    assert_eq!(runs[0]["of_bare"].as_f64(), Some(1.0));
    let (ok, out, err) =
        tessera(&["bench", "throughput", "--nodes", "60", "--pods", "200", "--no-reuse", "--format", "json"]);
    assert!(ok, "{err}");
    assert!(out.contains("\"reuse\":false"), "{out}");
}

/// `sim --online` runs the scheduling loop with an adaptive policy from a
/// file, reports queue, tiers, preemption, telemetry, carbon and the
/// bandit's arms, and replays exactly.
#[test]
fn sim_online_runs_the_loop_with_adaptive_weights() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("adaptive.yaml");
    std::fs::write(
        &policy,
        "name: adaptive\nplugins:\n  - name: binpack\n    source: builtin:binpack\n  - name: hybrid\n    source: builtin:hybrid-score\n\
scheduling:\n  queue: { levels: 3, base_quantum: 4, aging_after: 1800 }\n\
adaptive:\n  weight_sets: [[1, 1], [3, 1], [1, 3]]\n",
    )
    .unwrap();
    let run = |name: &str| {
        let out = dir.path().join(name);
        let args = ["sim", "--online", "--node-count", "40", "--seed", "3", "--policy", policy.to_str().unwrap()];
        let (ok, stdout, err) = tessera(&[&args[..], &["--out", out.to_str().unwrap()]].concat());
        assert!(ok, "{stdout}\n{err}");
        (stdout, std::fs::read(out).unwrap())
    };
    let ((stdout, a), (_, b)) = (run("a.json"), run("b.json"));
    assert_eq!(a, b, "same seed, byte-identical run.json");
    for line in ["preemptions", "wait soft p50 / p99", "SLA violations", "mean carbon at bind", "weights #2 [1.0, 3.0]"]
    {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
    let v: serde_json::Value = serde_json::from_slice(&a).unwrap();
    assert_eq!(v["protocol"], "online");
    let r = &v["report"];
    let pulls: u64 = r["bandit"].as_array().unwrap().iter().map(|a| a["pulls"].as_u64().unwrap()).sum();
    assert_eq!(pulls, r["intervals"].as_u64().unwrap());
    assert!(r["binds"].as_u64().unwrap() > 100, "{r}");
    // A policy whose adaptive weights do not match its scorers is refused
    // before anything runs.
    std::fs::write(&policy, std::fs::read_to_string(&policy).unwrap().replace("[1, 3]]", "[1, 3, 1]]")).unwrap();
    let (ok, _, err) = tessera(&["sim", "--online", "--node-count", "10", "--policy", policy.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("adaptive.weight_sets[2]: has 3 weights, the policy has 2 scorers"), "{err}");
}

/// `sim --reschedule` moves running pods to make room for pods that fit
/// nowhere and plans globally, never more than the cap × pods placed,
/// and prints placement alone beside placement with rescheduling.
#[test]
fn sim_reschedule_migrates_within_its_cap() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.json");
    let (ok, stdout, err) = tessera(&[
        "sim",
        "--node-count",
        "30",
        "--seed",
        "3",
        "--reschedule",
        "--max-migrations-pct",
        "5",
        "--reschedule-every",
        "50",
        "--bound",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{stdout}\n{err}");
    for row in [
        "placement alone → with rescheduling",
        "unallocated GPUs @130%",
        "hotspot ratio",
        "global plans",
        "moves executed",
        "peak unavailable / workload",
        "re-packing bound (admitted)",
        "offline bound (LP)",
    ] {
        assert!(stdout.contains(row), "{row}: {stdout}");
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let r = &v["report"];
    let (migrations, planned, placed) =
        (r["migrations"].as_u64().unwrap(), r["planned_migrations"].as_u64().unwrap(), r["placed"].as_u64().unwrap());
    assert!(migrations > 0 && planned <= migrations, "{r}");
    assert!(migrations as f64 <= 0.05 * placed as f64, "{migrations} migrations for {placed} placed");
    assert!(v["plans"]["plans"].as_u64().unwrap() > 0, "{}", v["plans"]);
    // Every planned move went through the Movement Manager; those done are
    // the migrations the plans made.
    let x = &v["execution"];
    assert_eq!(x["executed"].as_u64(), Some(planned), "{x}");
    assert_eq!(x["lost"], 0, "{x}");
    assert!(v["placement_only"]["unallocated_pct"].as_f64().is_some());
    let bound = v["bound_allocation_pct"].as_f64().unwrap();
    let repack = v["repacking_bound_allocation_pct"].as_f64().unwrap();
    let reached = r["last"]["allocation"].as_f64().unwrap();
    assert!(bound + 1e-9 >= reached && bound <= 100.0 + 1e-9, "bound {bound} vs reached {reached}");
    assert!(repack + 1e-9 >= reached, "re-packing bound {repack} vs reached {reached}");
    let (ok, _, err) = tessera(&["sim", "--node-count", "10", "--time-replay", "--reschedule"]);
    assert!(!ok && err.contains("cannot be used with"), "{err}");
    let (ok, _, err) = tessera(&["sim", "--node-count", "10", "--reschedule", "--max-migrations-pct", "150"]);
    assert!(!ok && err.contains("--max-migrations-pct must be within 0..=100"), "{err}");
}

/// Plans executed with failing moves and a disruption budget: moves fail
/// or roll back, none is lost, and no workload is ever more unavailable
/// than its budget allows.
#[test]
fn sim_reschedule_executes_plans_within_budgets_despite_failures() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.yaml");
    let budgets: String = (0..97).map(|k| format!("    - {{ workload: job-{k}, max_unavailable: 1 }}\n")).collect();
    std::fs::write(
        &policy,
        format!(
            "name: budgeted\nplugins:\n  - name: binpack\n    source: builtin:binpack\nmovement:\n  batch_size: 4\n  concurrency_limit: 4\n  budgets:\n{budgets}"
        ),
    )
    .unwrap();
    let out = dir.path().join("run.json");
    let (ok, stdout, err) = tessera(&[
        "sim",
        "--node-count",
        "60",
        "--seed",
        "5",
        "--policy",
        policy.to_str().unwrap(),
        "--reschedule",
        "--reschedule-every",
        "40",
        "--move-failure-rate",
        "0.3",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{stdout}\n{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let x = &v["execution"];
    assert!(x["moves_planned"].as_u64().unwrap() > 0, "{x}");
    assert!(x["failed"].as_u64().unwrap() > 0, "30% of starts and evictions fail: {x}");
    assert_eq!(x["lost"], 0, "{x}");
    assert_eq!(x["budget_violations"].as_array().unwrap().len(), 0, "{x}");
    for (w, peak) in x["peak_unavailable"].as_object().unwrap() {
        assert!(peak.as_u64().unwrap() <= 1, "{w}: {peak}");
    }
    assert_eq!(v["report"]["planned_migrations"].as_u64(), x["executed"].as_u64(), "only moves done count");
    let (ok, _, err) = tessera(&["sim", "--node-count", "10", "--reschedule", "--move-failure-rate", "2"]);
    assert!(!ok && err.contains("--move-failure-rate must be within 0..=1"), "{err}");
}

/// Online, the policy's detectors trigger plans and their moves are carried
/// out in the loop through the Movement Manager.
#[test]
fn sim_online_reschedules_on_anomalies() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.json");
    let (ok, stdout, err) = tessera(&[
        "sim",
        "--online",
        "--node-count",
        "40",
        "--seed",
        "3",
        "--reschedule",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{stdout}\n{err}");
    assert!(stdout.contains("plans on anomalies") && stdout.contains("pods migrated"), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let (r, x) = (&v["report"], &v["execution"]);
    assert!(r["reschedule_plans"].as_u64().unwrap() > 0, "{r}");
    assert!(r["reschedule_plans"].as_u64() <= r["detection_rounds"].as_u64());
    assert_eq!(r["migrations"].as_u64(), x["executed"].as_u64(), "{x}");
    assert_eq!(x["lost"], 0);
}

/// `bench quality` on a directory laid out like shared/traces/openb, cut
/// down to one workload and seed.
#[test]
fn quality_bench_prints_the_documented_json() {
    let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/openb");
    if !shared.exists() {
        assert!(std::env::var_os("CI").is_none(), "{} is missing in CI", shared.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("arrival-order")).unwrap();
    std::fs::create_dir_all(d.join("expected")).unwrap();
    for f in [
        "openb_node_list_gpu_node.csv",
        "openb_pod_list_default.csv",
        "arrival-order/openb_pod_list_default_tune1.3_seed42.txt",
        "expected/analysis_allo_discrete.csv",
    ] {
        std::os::unix::fs::symlink(shared.join(f), d.join(f)).unwrap();
    }
    let (ok, out, err) = tessera(&[
        "bench",
        "quality",
        "--traces",
        d.to_str().unwrap(),
        "--policy",
        "fgd",
        "--reschedule",
        "--reschedule-every",
        "500",
        "--format",
        "json",
    ]);
    assert!(ok, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    for r in runs {
        assert_eq!(r["workload"], "openb_pod_list_default");
        let ours = r["unallocated_at_130"].as_f64().unwrap();
        let fgd = r["fgd_published_unallocated_at_130"].as_f64().unwrap();
        let bound = r["offline_bound_unallocated"].as_f64().unwrap();
        // Keeping every admitted pod, no re-packing does better than this.
        let repack = r["repacking_bound_unallocated"].as_f64().unwrap();
        assert!(repack <= ours + 1e-9, "re-packing bound {repack} vs ours {ours}");
        let (migrations, placed) = (r["migrations"].as_u64().unwrap(), r["placed_pods"].as_u64().unwrap());
        assert!(bound <= ours + 1e-9, "the bound bounds: {bound} vs {ours}");
        assert!(ours < fgd + 0.5, "FGD with rescheduling stays near or under FGD's published {fgd}: {ours}");
        assert!(migrations as f64 <= 0.05 * placed as f64 && placed > 8000, "{r}");
    }
    assert!(v["wall_s"].as_f64().is_some());
    let (ok, _, err) = tessera(&["bench", "quality", "--traces", "/nonexistent"]);
    assert!(!ok && err.contains("cannot read /nonexistent/arrival-order"), "{err}");
}

/// The default policy's detectors (`overload`, `rebalance`, Wasm) watch the
/// online run's telemetry and their anomalies are reported by kind.
#[test]
fn sim_online_runs_the_default_detectors() {
    let (ok, stdout, err) = tessera(&["sim", "--online", "--node-count", "20", "--seed", "3"]);
    assert!(ok, "{stdout}\n{err}");
    assert!(stdout.contains("detection rounds"), "{stdout}");
    assert!(stdout.contains("anomalies: low-load") || stdout.contains("anomalies: fragmentation"), "{stdout}");
}

#[test]
fn reschedule_bench_prints_the_documented_json() {
    let (ok, out, err) =
        tessera(&["bench", "reschedule", "--nodes", "300", "--pods", "3000", "--reps", "2", "--format", "json"]);
    assert!(ok, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    for key in
        ["nodes", "pods", "plan_ms_p50", "plan_ms_p99", "incremental_ms_p50", "moves", "freed_gpus", "lp_bound_gap_pct"]
    {
        assert!(v[key].is_number(), "{key}: {v}");
    }
    assert_eq!(v["nodes"], 300);
    assert!(v["moves"].as_u64().unwrap() > 0 && v["freed_gpus"].as_i64().unwrap() > 0, "{v}");
    let gap = v["lp_bound_gap_pct"].as_f64().unwrap();
    assert!((0.0..100.0).contains(&gap), "{v}");
    assert!(v["whole_free_after"].as_u64() <= v["whole_free_bound"].as_u64(), "{v}");
}

/// `tessera plan` plans once on the placed workload and prints the batches
/// the Movement Manager would run, acting on nothing.
#[test]
fn plan_prints_a_dry_run_of_the_batches() {
    let (ok, out, err) =
        tessera(&["plan", "--node-count", "300", "--policy", "random", "--max-moves", "6", "--format", "json"]);
    assert!(ok, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let moves = v["plan"]["moves"].as_array().unwrap();
    assert!(!moves.is_empty() && moves.len() <= 6, "{v}");
    let steps: usize = v["batches"].as_array().unwrap().iter().map(|b| b.as_array().unwrap().len()).sum();
    let dropped = v["dropped"].as_array().unwrap().len();
    assert!(steps >= moves.len() - dropped, "every kept move is a step: {v}");
    let first = v["batches"][0][0].as_str().unwrap();
    assert!(first.starts_with("step 0: reserve on node") && first.contains("evict pod"), "{first}");
    let (ok, table, _) = tessera(&["plan", "--node-count", "300", "--policy", "random", "--max-moves", "6"]);
    assert!(ok && table.contains("dry run, nothing acted on") && table.contains("batch 1:"), "{table}");
}

/// Busy threads on every core (twice over) until dropped.
struct Contention(std::sync::Arc<std::sync::atomic::AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Contention {
    fn start() -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let n = 2 * std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
                    }
                })
            })
            .collect();
        Self(stop, threads)
    }
}

impl Drop for Contention {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

/// The simulator replays byte for byte on a busy machine: plugin calls are
/// bounded by fuel, not by a clock, so a 1 ms deadline that the wall
/// clock would blow under contention changes nothing.
#[test]
fn a_replay_is_byte_identical_on_a_machine_made_busy() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("tight.yaml");
    std::fs::write(
        &policy,
        concat!(
            "name: tight\nplugins:\n",
            "  - name: binpack\n    source: builtin:binpack\n    limits: { deadline_ms: 1 }\n",
            "  - name: hybrid\n    source: builtin:hybrid-score\n    limits: { deadline_ms: 1 }\n",
        ),
    )
    .unwrap();
    let run = |name: &str| {
        let out = dir.path().join(name);
        let args = ["sim", "--online", "--node-count", "40", "--seed", "5", "--policy", policy.to_str().unwrap()];
        let (ok, stdout, err) = tessera(&[&args[..], &["--out", out.to_str().unwrap()]].concat());
        assert!(ok, "{stdout}\n{err}");
        std::fs::read(out).unwrap()
    };
    let idle = run("idle.json");
    let busy = {
        let _busy = Contention::start();
        run("busy.json")
    };
    assert!(idle == busy, "the busy machine's run differs from the idle one's");
    let v: serde_json::Value = serde_json::from_slice(&idle).unwrap();
    assert_eq!(v["report"]["plugin_errors"], 0, "{}", v["report"]);
}

#[test]
fn bench_counts_past_their_range_are_refused_before_anything_is_allocated() {
    // Each used to abort on an allocation of hundreds of gigabytes.
    for (args, says) in [
        (&["bench", "throughput", "--nodes", "4000000000"][..], "4000000000 is not in 1..=1000000"),
        (&["bench", "throughput", "--pods", "4000000000"][..], "4000000000 is not in 1..=10000000"),
        (&["bench", "reschedule", "--nodes", "4000000000"][..], "4000000000 is not in 1..=1000000"),
        (&["bench", "serve", "--nodes", "4000000000"][..], "4000000000 is not in 1..=1000000"),
        (&["bench", "gangs", "--members", "4000000000"][..], "4000000000 is not in 2..=4096"),
        (&["plugin", "bench", "--nodes", "4000000000"][..], "4000000000 is not in 1..=1000000"),
        (&["plugin", "bench", "--reps", "0"][..], "0 is not in 1..=1000"),
        (&["sim", "--node-count", "4000000000"][..], "4000000000 is not in 1..=1000000"),
        (&["sim", "--inflate", "1e300"][..], "1e300 is not within (0, 10]"),
        (&["sim", "--online", "--telemetry-interval", "0"][..], "0 is not in 1..=86400"),
        (&["bench", "jobs", "--traces", ".", "--declared-limit", "0.5"][..], "0.5 is not within [1, 100]"),
        (&["sim", "--jobs", "x.trace", "--declared-limit", "NaN"][..], "NaN is not within [1, 100]"),
        (&["train", "--traces", ".", "--out", ".", "--pairs", "4000000000"][..], "4000000000 is not in 1..=1000"),
        (&["train", "--traces", ".", "--out", ".", "--hidden", "4000000000"][..], "4000000000 is not in 0..=1024"),
        (
            &["workload", "generate", "--traces", ".", "--member", "cpu:50", "--out", ".", "--orders", "4000000000"][..],
            "4000000000 is not in 1..=1000",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
    }
}
