//! `tessera workload generate`: members of the openb families generated
//! from the shared default pod list, checked against the members the
//! artifact published, and read back by `bench quality` with our FGD as
//! the reference.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tessera(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("run tessera");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn shared() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/openb");
    if !dir.exists() {
        assert!(std::env::var_os("CI").is_none(), "{} is missing in CI", dir.display());
        return None;
    }
    Some(dir)
}

/// Pods by class (CPU-only, sharing, one whole GPU, several) and how many
/// name allowed models, read from a pod list as the simulator reads it.
fn classes(path: &Path) -> ([usize; 4], usize) {
    let rows = tessera_trace::read_pods(std::fs::File::open(path).unwrap(), "x").unwrap();
    let c = tessera_trace::family::class_counts(&rows);
    (c, rows.iter().filter(|r| !r.gpu_spec.is_empty()).count())
}

fn generate(traces: &Path, out: &Path, members: &str, seeds: &str) -> serde_json::Value {
    let (ok, stdout, err) = tessera(&[
        "workload",
        "generate",
        "--traces",
        traces.to_str().unwrap(),
        "--member",
        members,
        "--seeds",
        seeds,
        "--orders",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(ok, "{stdout}\n{err}");
    serde_json::from_str(stdout.trim()).unwrap()
}

/// The three families the artifact names by what they change give, at
/// the published members' levels, the published members' mix: within 5%
/// per class (they were resampled by the artifact too, so not exactly).
#[test]
fn generated_members_have_the_mix_of_the_published_ones() {
    let Some(dir) = shared() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let v = generate(&dir, tmp.path(), "gpushare:40,multigpu:20,gpuspec:10", "1,2");
    assert_eq!(v["workloads"].as_array().unwrap().len(), 6);
    for (member, published) in [("gpushare40", "gpushare40"), ("multigpu20", "multigpu20"), ("gpuspec10", "gpuspec10")]
    {
        let (want, want_named) = classes(&dir.join(format!("openb_pod_list_{published}.csv")));
        for seed in [1, 2] {
            let (got, named) = classes(&tmp.path().join(format!("openb_pod_list_gen-{member}-w{seed}.csv")));
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (*g as f64 - *w as f64).abs() <= 0.05 * *w as f64 + 5.0,
                    "{member} w{seed}: {got:?} vs {want:?}"
                );
            }
            let named_share = named as f64 / (got[1] + got[2] + got[3]) as f64;
            let want_share = want_named as f64 / (want[1] + want[2] + want[3]) as f64;
            assert!((named_share - want_share).abs() < 0.005, "{member}: {named_share} vs {want_share}");
        }
    }
    // The seed decides: two seeds, two different lists of the same mix.
    let a = std::fs::read(tmp.path().join("openb_pod_list_gen-gpushare40-w1.csv")).unwrap();
    let b = std::fs::read(tmp.path().join("openb_pod_list_gen-gpushare40-w2.csv")).unwrap();
    assert_ne!(a, b);
    let again = tempfile::tempdir().unwrap();
    generate(&dir, again.path(), "gpushare:40", "1");
    for f in
        ["openb_pod_list_gen-gpushare40-w1.csv", "arrival-order/openb_pod_list_gen-gpushare40-w1_tune1.3_seed43.txt"]
    {
        assert_eq!(std::fs::read(tmp.path().join(f)).unwrap(), std::fs::read(again.path().join(f)).unwrap(), "{f}");
    }
}

/// A generated directory is a trace directory: `bench quality` runs every
/// order of every member, and with nothing published, runs our FGD on the
/// same orders as the reference.
#[test]
fn bench_quality_reads_generated_members_with_our_fgd_as_reference() {
    let Some(dir) = shared() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let v = generate(&dir, tmp.path(), "cpu:200", "3");
    let w = &v["workloads"][0];
    assert_eq!(w["workload"], "openb_pod_list_gen-cpu200-w3");
    assert_eq!(w["classes"][0], 2176, "twice default's 1,088 CPU-only pods: {w}");
    let order =
        std::fs::read_to_string(tmp.path().join("arrival-order/openb_pod_list_gen-cpu200-w3_tune1.3_seed42.txt"))
            .unwrap();
    let order: Vec<usize> = order.lines().map(|l| l.parse().unwrap()).collect();
    let n: usize = w["classes"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap() as usize).sum();
    let mut first = order[..n].to_vec();
    first.sort_unstable();
    assert_eq!(first, (0..n).collect::<Vec<_>>(), "every pod once, then clones");
    assert!(order.len() > n);

    let (ok, out, err) = tessera(&[
        "bench",
        "quality",
        "--traces",
        tmp.path().to_str().unwrap(),
        "--policy",
        "bestfit",
        "--format",
        "json",
    ]);
    assert!(ok, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "two orders");
    let mut by_seed = BTreeMap::new();
    for r in runs {
        assert!(r["fgd_published_unallocated_at_130"].is_null(), "{r}");
        let ours = r["unallocated_at_130"].as_f64().unwrap();
        let fgd = r["fgd_ours_unallocated_at_130"].as_f64().unwrap();
        // BestFit leaves more than FGD on every published workload.
        assert!(fgd < ours && fgd > 0.0, "{r}");
        by_seed.insert(r["seed"].as_u64().unwrap(), fgd);
    }
    assert_eq!(by_seed.keys().copied().collect::<Vec<_>>(), [42, 43]);
    // FGD run as the policy is its own reference.
    let (ok, out, err) =
        tessera(&["bench", "quality", "--traces", tmp.path().to_str().unwrap(), "--policy", "fgd", "--format", "json"]);
    assert!(ok, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    for r in v["runs"].as_array().unwrap() {
        assert_eq!(r["unallocated_at_130"], r["fgd_ours_unallocated_at_130"], "{r}");
        assert_eq!(r["fgd_ours_unallocated_at_130"].as_f64(), by_seed.get(&r["seed"].as_u64().unwrap()).copied());
    }
    // With rescheduling, its reference is still FGD placing alone.
    let (ok, out, err) = tessera(&[
        "bench",
        "quality",
        "--traces",
        tmp.path().to_str().unwrap(),
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
    for r in v["runs"].as_array().unwrap() {
        assert_eq!(r["fgd_ours_unallocated_at_130"], r["placement_only_unallocated_at_130"], "{r}");
        assert_eq!(r["fgd_ours_unallocated_at_130"].as_f64(), by_seed.get(&r["seed"].as_u64().unwrap()).copied());
    }
    let (ok, out, _) = tessera(&["bench", "quality", "--traces", tmp.path().to_str().unwrap(), "--policy", "bestfit"]);
    assert!(ok && out.contains("%*") && out.contains("* ours on the same orders"), "{out}");
}

#[test]
fn a_bad_member_or_a_missing_base_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().to_str().unwrap();
    let (ok, _, err) = tessera(&["workload", "generate", "--traces", out, "--member", "gpushare:140", "--out", out]);
    assert!(!ok && err.contains("workload member `gpushare:140`: level 140 outside 0..=100 % for gpushare"), "{err}");
    let (ok, _, err) = tessera(&["workload", "generate", "--traces", out, "--member", "cpu:200", "--out", out]);
    assert!(!ok && err.contains("openb_pod_list_default.csv"), "{err}");
}
