use tessera_sdk::{GpuRecord, NodeDelta, NodeRecord, Resources, ScorerHarness};

use super::*;

fn node(id: u32, cpu_free: u32, model: &str, gpu_free: &[u32]) -> NodeDelta {
    NodeDelta::Upsert(NodeRecord {
        id,
        gpu_model: model.into(),
        capacity: Resources { cpu_milli: 64_000, memory_mib: 262_144 },
        free: Resources { cpu_milli: cpu_free, memory_mib: 262_144 },
        gpus: gpu_free.iter().map(|&f| GpuRecord { free_milli: f, ..GpuRecord::default() }).collect(),
        ready: true,
        ..NodeRecord::default()
    })
}

fn pod(cpu: u32, gpus: u32, milli: u32) -> Pod {
    Pod { requests: Resources { cpu_milli: cpu, memory_mib: 0 }, gpu_count: gpus, gpu_milli: milli, ..Pod::default() }
}

fn scores<S: Scorer>(h: &mut ScorerHarness<S>, p: &Pod, ids: &[u32]) -> (Vec<i64>, Vec<u8>) {
    let (mut v, mut hints) = (Vec::new(), Vec::new());
    h.score(p, ids, &mut v, &mut hints).unwrap();
    (v, hints)
}

fn best(v: &[i64]) -> usize {
    v.iter().enumerate().max_by_key(|&(i, s)| (*s, std::cmp::Reverse(i))).unwrap().0
}

#[test]
fn dotprod_prefers_the_node_with_less_free_and_best_fit_gpu() {
    let mut h = ScorerHarness::<DotProd>::new("").unwrap();
    h.apply([node(0, 64_000, "V100", &[1000, 1000]), node(1, 8_000, "V100", &[1000, 300])]).unwrap();
    let (v, hints) = scores(&mut h, &pod(4_000, 1, 200), &[0, 1]);
    assert_eq!(best(&v), 1);
    assert_eq!(hints, [0, 1]);
}

#[test]
fn bestfit_minimises_leftover_then_normalises_over_candidates() {
    let mut h = ScorerHarness::<BestFit>::new("").unwrap();
    h.apply([
        node(0, 64_000, "V100", &[1000; 8]),
        node(1, 16_000, "V100", &[1000, 1000]),
        node(2, 64_000, "V100", &[1000; 8]),
    ])
    .unwrap();
    // raw: node 0 = (1 - (0.5*56/128 + 0.5*7/8))*100 = 34.375 -> 34;
    // node 1 = (1 - (0.5*8/128 + 0.5*1/8))*100 = 90.625 -> 90.
    let (v, hints) = scores(&mut h, &pod(8_000, 1, 1000), &[0, 1, 2]);
    assert_eq!(v, [0, 100, 0]);
    assert_eq!(hints, [255; 3], "whole GPUs: no hint");
    let (v, _) = scores(&mut h, &pod(8_000, 1, 1000), &[0, 2]);
    assert_eq!(v, [0, 0], "all equal: all 0");
    let mut raw = [5, 7, 9];
    normalize_0_100(&mut raw);
    assert_eq!(raw, [0, 50, 100]);
}

#[test]
fn gpu_packing_tiers() {
    let mut h = ScorerHarness::<GpuPacking>::new("").unwrap();
    h.apply([
        node(0, 64_000, "V", &[1000, 1000]),
        node(1, 64_000, "V", &[0, 1000]),
        node(2, 64_000, "V", &[400, 1000]),
    ])
    .unwrap();
    let (v, hints) = scores(&mut h, &pod(1_000, 1, 300), &[0, 1, 2]);
    assert_eq!(best(&v), 2, "a partly used GPU that fits wins");
    assert_eq!(hints[2], 0);
    let (v, _) = scores(&mut h, &pod(1_000, 1, 1000), &[0, 1]);
    assert_eq!(best(&v), 1, "a busy node beats an idle one");
}

#[test]
fn gpu_clustering_keeps_request_classes_together() {
    let mut h = ScorerHarness::<GpuClustering>::new("").unwrap();
    let with_classes = |d: NodeDelta, classes: &[(&str, u32)]| match d {
        NodeDelta::Upsert(mut r) => {
            r.gpu_classes =
                classes.iter().map(|&(c, n)| tessera_sdk::WorkloadCount { workload: c.into(), pods: n }).collect();
            NodeDelta::Upsert(r)
        }
        other => other,
    };
    h.apply([
        with_classes(node(0, 64_000, "V", &[700, 1000]), &[("share-gpu", 1)]),
        with_classes(node(1, 64_000, "V", &[500, 1000]), &[("2-gpu", 1)]),
        node(2, 64_000, "V", &[1000, 1000]),
        with_classes(node(3, 64_000, "V", &[0, 700]), &[("share-gpu", 1), ("1-gpu", 1)]),
    ])
    .unwrap();
    // Sharing pod: node 0 = 25*(8000-1700)/8000 + 75 = 19 + 75; node 1 =
    // 20 + 0 (only another class); node 2 = 18 + 25 (no GPU pod); node 3 =
    // 22 + 50 (its class among others).
    let (v, _) = scores(&mut h, &pod(1_000, 1, 300), &[0, 1, 2, 3]);
    assert_eq!(v, [94, 20, 43, 72]);
    let (v, _) = scores(&mut h, &pod(1_000, 0, 0), &[0, 1]);
    assert_eq!(v, [0, 0], "CPU-only pods: no preference");
}

#[test]
fn random_is_seeded_and_hints_a_fitting_gpu() {
    let mut h = ScorerHarness::<Random>::new("").unwrap();
    h.apply([node(0, 64_000, "V", &[100, 900, 1000]), node(1, 64_000, "V", &[1000])]).unwrap();
    let (v, hints) = scores(&mut h, &pod(1_000, 1, 800), &[0, 1]);
    assert!(v.iter().all(|&x| x >= 0));
    assert!([1, 2].contains(&hints[0]), "{hints:?}");
    assert_eq!(hints[1], 0);
}

fn fgd_config() -> String {
    r#"{"workload": [
        {"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 500, "weight": 0.5},
        {"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 1000, "weight": 0.5}
    ]}"#
    .into()
}

#[test]
fn fgd_picks_the_gpu_and_node_with_the_least_fragmentation_increase() {
    let mut h = ScorerHarness::<Fgd>::new(&fgd_config()).unwrap();
    // Node 0: GPUs 1000, 600. Node 1: GPUs 1000, 1000.
    h.apply([node(0, 64_000, "V", &[1000, 600]), node(1, 64_000, "V", &[1000, 1000])]).unwrap();
    // A 500-milli pod. On node 0 GPU 1 (600 -> 100): before F = 0.5*0 + 0.5*600
    // = 300; after: 100 < 500 -> 0.5*100 + 0.5*100 = 100: F drops by 200,
    // score 100*sigmoid(0.2) = 54. On node 0 GPU 0 (1000 -> 500): F = 0.5*0 +
    // 0.5*(500+600) = 550, +250: 100*sigmoid(-0.25) = 43. Node 1: F 0 -> 250:
    // 43 too.
    let (v, hints) = scores(&mut h, &pod(1_000, 1, 500), &[0, 1]);
    assert_eq!(v, [54, 43]);
    assert_eq!(hints, [1, 0]);
}

/// Without a configured workload FGD learns it from the pods it places:
/// after pods of one shape it scores exactly as if configured with that
/// shape.
#[test]
fn fgd_learns_the_workload_when_none_is_given() {
    let nodes =
        || [node(0, 64_000, "V", &[1000, 600]), node(1, 64_000, "V", &[1000, 300]), node(2, 2_000, "V", &[1000])];
    let mut learned = ScorerHarness::<Fgd>::new("").unwrap();
    learned.apply(nodes()).unwrap();
    let one = r#"{"workload": [{"cpu_milli": 4000, "gpu_count": 1, "gpu_milli": 500, "weight": 1.0}]}"#;
    let mut configured = ScorerHarness::<Fgd>::new(one).unwrap();
    configured.apply(nodes()).unwrap();
    let p = pod(4_000, 1, 500);
    for _ in 0..4 {
        let _ = scores(&mut learned, &p, &[0, 1, 2]);
    }
    assert_eq!(scores(&mut learned, &p, &[0, 1, 2]), scores(&mut configured, &p, &[0, 1, 2]));
    // A second shape, once seen often enough, changes the scores.
    for _ in 0..60 {
        let _ = scores(&mut learned, &pod(1_000, 1, 1000), &[0, 1, 2]);
    }
    assert_ne!(scores(&mut learned, &p, &[0, 1, 2]), scores(&mut configured, &p, &[0, 1, 2]));
}

#[test]
fn fgd_respects_models_and_rejects_bad_workloads() {
    assert!(ScorerHarness::<Fgd>::new(r#"{"workload": [], "x": 1}"#).is_err());
    assert!(
        ScorerHarness::<Fgd>::new(
            r#"{"workload": [{"cpu_milli": 1, "gpu_count": 1, "gpu_milli": 2000, "weight": 1}]}"#
        )
        .is_err()
    );
    let cfg =
        r#"{"workload": [{"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 500, "models": ["T4"], "weight": 1.0}]}"#;
    let mut h = ScorerHarness::<Fgd>::new(cfg).unwrap();
    h.apply([node(0, 64_000, "V100", &[1000]), node(1, 64_000, "T4", &[1000])]).unwrap();
    // On the V100 node the T4-only shape never fits: all free share is a
    // fragment, 1000 before and 800 after: F drops 200 -> 54. On the T4
    // node 800 left still fits a 500 pod: no fragment either way -> 50.
    let (v, _) = scores(&mut h, &pod(500, 1, 200), &[0, 1]);
    assert_eq!(v, [54, 50]);
}

#[test]
fn sigmoid_score_matches_the_formula() {
    let h = ScorerHarness::<Fgd>::new(&fgd_config()).unwrap();
    let _ = h;
    let thresholds: Vec<f64> = (1..100).map(|k| (f64::from(k) / f64::from(100 - k)).ln()).collect();
    for i in -4000..=4000 {
        let x = f64::from(i) / 517.0;
        let direct = (100.0 / (1.0 + (-x).exp())) as i64;
        assert_eq!(crate::fgd::sigmoid_score(&thresholds, x), direct, "x = {x}");
    }
}

/// With `spare_gpu_nodes`, FGD's ties go: CPU-only pods to the node with the
/// least GPU share free; whole-GPU pods (with `balance_cpu`) to the node whose
/// CPU left per GPU left is closest to the workload's. The published scores
/// stay the primary key.
#[test]
fn fgd_breaks_its_ties_to_spare_gpu_nodes_and_balance_cpu() {
    let cfg = |extra: &str| {
        format!(r#"{{"workload": [{{"cpu_milli": 8000, "gpu_count": 1, "gpu_milli": 1000, "weight": 1.0}}]{extra}}}"#)
    };
    // Node 0: all 4 GPUs free; node 1: 1 of 4 free; both with CPU to spare.
    let nodes = || [node(0, 60_000, "V", &[1000, 1000, 1000, 1000]), node(1, 60_000, "V", &[0, 0, 0, 1000])];
    let mut plain = ScorerHarness::<Fgd>::new(&cfg("")).unwrap();
    plain.apply(nodes()).unwrap();
    let mut spare = ScorerHarness::<Fgd>::new(&cfg(r#", "spare_gpu_nodes": true, "balance_cpu": true"#)).unwrap();
    spare.apply(nodes()).unwrap();
    let cpu_only = pod(2_000, 0, 0);
    let (v, _) = scores(&mut plain, &cpu_only, &[0, 1]);
    assert_eq!(v[0], v[1], "FGD alone ties: {v:?}");
    let (v, _) = scores(&mut spare, &cpu_only, &[0, 1]);
    assert_eq!(best(&v), 1, "to the node with fewer GPUs free: {v:?}");
    // Whole-GPU pod of 8 cores: on node 0, 52 cores for 3 GPUs left (17 per
    // GPU); on node 1, 52 cores for none. The workload wants 8 per GPU:
    // node 0 is closer... but FGD itself already prefers node 1 (it fills
    // the lone free GPU). The primary key wins.
    let whole = pod(8_000, 1, 1000);
    let (p, _) = scores(&mut plain, &whole, &[0, 1]);
    let (s, _) = scores(&mut spare, &whole, &[0, 1]);
    assert_eq!(best(&p), best(&s), "{p:?} vs {s:?}");
    // Two nodes FGD cannot tell apart (each 2 GPUs free), one with 16 cores
    // left and one with 60: 8 per GPU is the workload's, so 16 cores wins.
    let mut spare = ScorerHarness::<Fgd>::new(&cfg(r#", "spare_gpu_nodes": true, "balance_cpu": true"#)).unwrap();
    spare.apply([node(0, 24_000, "V", &[1000, 1000, 0, 0]), node(1, 68_000, "V", &[1000, 1000, 0, 0])]).unwrap();
    let mut plain = ScorerHarness::<Fgd>::new(&cfg("")).unwrap();
    plain.apply([node(0, 24_000, "V", &[1000, 1000, 0, 0]), node(1, 68_000, "V", &[1000, 1000, 0, 0])]).unwrap();
    let (p, _) = scores(&mut plain, &whole, &[0, 1]);
    assert_eq!(p[0], p[1], "{p:?}");
    let (s, _) = scores(&mut spare, &whole, &[0, 1]);
    assert_eq!(best(&s), 0, "{s:?}");
}

/// With `fill_residue`, FGD's ties for a sharing pod go where the gap left
/// is one the workload's common sizes fill: with sizes 300 and 400 common,
/// a 300 pod on a GPU with 600 free leaves 300 (fillable) where 500 free
/// would leave 200 (not); on 700 it leaves 400 (fillable), on 800 it
/// leaves 500 (100 of it not).
#[test]
fn fgd_breaks_sharing_ties_by_the_residue_of_the_gap() {
    let cfg = r#"{"workload": [{"cpu_milli": 4000, "gpu_count": 1, "gpu_milli": 1000, "weight": 0.5},
        {"cpu_milli": 4000, "gpu_count": 1, "gpu_milli": 300, "weight": 0.25},
        {"cpu_milli": 4000, "gpu_count": 1, "gpu_milli": 400, "weight": 0.25}], "spare_gpu_nodes": true"#;
    let p = pod(4_000, 1, 300);
    for (a, b, want) in [(500, 600, 1), (700, 800, 0)] {
        let nodes = || [node(0, 60_000, "V", &[a, 0]), node(1, 60_000, "V", &[b, 0])];
        let mut plain = ScorerHarness::<Fgd>::new(&format!("{cfg}}}")).unwrap();
        plain.apply(nodes()).unwrap();
        let (v, _) = scores(&mut plain, &p, &[0, 1]);
        assert_eq!(v[0], v[1], "FGD alone ties ({a} vs {b}): {v:?}");
        let mut residue = ScorerHarness::<Fgd>::new(&format!(r#"{cfg}, "fill_residue": true}}"#)).unwrap();
        residue.apply(nodes()).unwrap();
        let (v, _) = scores(&mut residue, &p, &[0, 1]);
        assert_eq!(best(&v), want, "{a} vs {b}: {v:?}");
    }
    // Within a node too: GPUs with 800 and 700 free tie for FGD (the
    // first wins); by residue, the 700 one.
    let one = || [node(0, 60_000, "V", &[800, 700])];
    let mut plain = ScorerHarness::<Fgd>::new(&format!("{cfg}}}")).unwrap();
    plain.apply(one()).unwrap();
    assert_eq!(scores(&mut plain, &p, &[0]).1, [0]);
    let mut residue = ScorerHarness::<Fgd>::new(&format!(r#"{cfg}, "fill_residue": true}}"#)).unwrap();
    residue.apply(one()).unwrap();
    assert_eq!(scores(&mut residue, &p, &[0]).1, [1]);
}

/// With `residue_first`, the residue decides even against FGD: with sizes
/// 300 and 400 common, a 300 pod scores higher for FGD on a node with two
/// GPUs of 800 free (leaving 500, of which 100 no common size fills) than on
/// one with a GPU of 600 free (leaving 300, fillable); residue first, the
/// second wins, and on the first node FGD still picks among GPUs that tie.
#[test]
fn residue_first_overrides_fgd_for_sharing_pods() {
    let cfg = r#"{"workload": [{"cpu_milli": 4000, "gpu_count": 1, "gpu_milli": 1000, "weight": 0.5},
        {"cpu_milli": 4000, "gpu_count": 1, "gpu_milli": 300, "weight": 0.25},
        {"cpu_milli": 4000, "gpu_count": 1, "gpu_milli": 400, "weight": 0.25}], "spare_gpu_nodes": true, "fill_residue": true"#;
    let p = pod(4_000, 1, 300);
    let nodes = || [node(0, 60_000, "V", &[800, 800]), node(1, 60_000, "V", &[600, 0])];
    let mut tie_break = ScorerHarness::<Fgd>::new(&format!("{cfg}}}")).unwrap();
    tie_break.apply(nodes()).unwrap();
    let (v, _) = scores(&mut tie_break, &p, &[0, 1]);
    assert_eq!(best(&v), 0, "FGD prefers the 800s: {v:?}");
    let mut first = ScorerHarness::<Fgd>::new(&format!(r#"{cfg}, "residue_first": true}}"#)).unwrap();
    first.apply(nodes()).unwrap();
    let (v, gpus) = scores(&mut first, &p, &[0, 1]);
    assert_eq!(best(&v), 1, "the residue prefers the 600: {v:?}");
    assert_eq!(gpus, [0, 0]);
    // Two fresh GPUs and a 700 one: 300 on the 700 leaves 400 (residue 0,
    // as on a fresh GPU, which leaves 700 = 300 + 400); FGD then prefers
    // filling the partly used GPU, which keeps the whole ones whole.
    let mut first = ScorerHarness::<Fgd>::new(&format!(r#"{cfg}, "residue_first": true}}"#)).unwrap();
    first.apply([node(0, 60_000, "V", &[1000, 1000, 700])]).unwrap();
    assert_eq!(scores(&mut first, &p, &[0]).1, [2]);
}

fn sharing(gpu_milli: u32, weight: f64) -> ShapeConfig {
    ShapeConfig { cpu_milli: 4_000, gpu_count: 1, gpu_milli, models: Vec::new(), weight }
}

/// The residue counts only common sizes, and of those only the ones a gap
/// is likely to get: a size far rarer than another that fits the gap does
/// not fill it.
#[test]
fn the_residue_counts_sizes_a_gap_is_likely_to_get() {
    let whole = ShapeConfig { cpu_milli: 4_000, gpu_count: 1, gpu_milli: 1000, models: Vec::new(), weight: 0.5 };
    // 0.47 and 0.32 common; 0.16 is 1% of GPU pods: not common.
    let r = crate::fgd::residues(&[whole.clone(), sharing(470, 0.2), sharing(320, 0.1), sharing(160, 0.01)]);
    assert_eq!((r[1000], r[530], r[210], r[680], r[790], r[100]), (0, 60, 210, 40, 0, 100));
    // 0.55 is common (5% of GPU pods) but fills a 0.55 gap only while it is
    // at least a quarter as frequent as 0.45, which fits there too.
    let rare = crate::fgd::residues(&[whole.clone(), sharing(450, 0.4), sharing(550, 0.05)]);
    assert_eq!((rare[550], rare[1000 - 450]), (100, 100));
    let frequent = crate::fgd::residues(&[whole, sharing(450, 0.4), sharing(550, 0.1)]);
    assert_eq!(frequent[550], 0);
}
