//! The hard filter, GPU choice, bind and unbind, and the node summaries.

use super::*;
use crate::model::{Gpu, Resources};

fn node(gpu_free: &[u32]) -> Node {
    let mut n = Node::new(0, "n", Resources { cpu_milli: 32_000, memory_mib: 65_536 }, gpu_free.len(), "V100");
    for (g, &f) in n.gpus.iter_mut().zip(gpu_free) {
        g.free_milli = f;
    }
    n
}

fn pod(cpu: u64, gpus: u32, milli: u32) -> Pod {
    Pod {
        name: "p".into(),
        requests: Resources { cpu_milli: cpu, memory_mib: 1024 },
        gpu_count: gpus,
        gpu_milli: milli,
        ..Pod::default()
    }
}

#[test]
fn hard_filter_reasons() {
    let n = node(&[1000, 300]);
    assert_eq!(check(&n, &pod(64_000, 0, 0)), Err(FilterReason::CpuInsufficient));
    assert_eq!(check(&n, &pod(1000, 1, 500)), Ok(()));
    assert_eq!(check(&n, &pod(1000, 2, 1000)), Err(FilterReason::GpuInsufficient));
    let mut p = pod(1000, 1, 200);
    p.allowed_models = vec!["T4".into()];
    assert_eq!(check(&n, &p), Err(FilterReason::ModelMismatch));
    p.allowed_models.push("V100".into());
    assert_eq!(check(&n, &p), Ok(()));
    let mut sick = node(&[1000, 1000]);
    sick.gpus[0].health = GpuHealth::Failed;
    assert_eq!(check(&sick, &pod(1, 2, 1000)), Err(FilterReason::GpuInsufficient));
    sick.ready = false;
    assert_eq!(check(&sick, &pod(1, 0, 0)), Err(FilterReason::NodeNotReady));
    assert_eq!(FilterReason::GpuInsufficient.code(), "SCHED-GPU-INSUFFICIENT");
}

#[test]
fn gpu_choice_best_fit_hint_and_whole() {
    let n = node(&[1000, 600, 300, 1000]);
    assert_eq!(choose_gpus(&n, &pod(1, 1, 250), None), Some(GpuSet(1 << 2)));
    assert_eq!(choose_gpus(&n, &pod(1, 1, 500), None), Some(GpuSet(1 << 1)));
    assert_eq!(choose_gpus(&n, &pod(1, 1, 500), Some(3)), Some(GpuSet(1 << 3)));
    assert_eq!(choose_gpus(&n, &pod(1, 1, 500), Some(2)), Some(GpuSet(1 << 1)), "a hint that does not fit is ignored");
    assert_eq!(choose_gpus(&n, &pod(1, 2, 1000), None), Some(GpuSet(0b1001)));
    assert_eq!(choose_gpus(&n, &pod(1, 3, 1000), None), None);
    assert_eq!(choose_gpus(&n, &pod(1, 0, 0), None), Some(GpuSet(0)));
}

#[test]
fn bind_and_unbind_round_trip() {
    let mut c = Cluster::new(vec![node(&[1000, 1000, 1000])]);
    let before = c.clone();
    let mut shared = pod(4000, 1, 400);
    shared.workload = "web".into();
    let p1 = c.bind(0, &shared, GpuSet(1 << 1)).unwrap();
    let whole = pod(2000, 2, 1000);
    let p2 = c.bind(0, &whole, choose_gpus(c.node(0).unwrap(), &whole, None).unwrap()).unwrap();
    let n = c.node(0).unwrap();
    assert_eq!(n.gpus.iter().map(|g| g.free_milli).collect::<Vec<_>>(), [0, 600, 0]);
    assert_eq!(n.free.cpu_milli, 26_000);
    assert_eq!(n.workloads["web"], 1);
    assert_eq!((n.gpu_classes["share-gpu"], n.gpu_classes["2-gpu"]), (1, 1));
    assert!(matches!(
        c.bind(0, &whole, GpuSet(0b11)),
        Err(BindError::Rejected { reason: FilterReason::GpuInsufficient, .. })
    ));
    assert!(matches!(c.bind(0, &shared, GpuSet(1)), Err(BindError::BadGpus { .. })), "GPU 0 is full");
    assert!(matches!(c.bind(0, &shared, GpuSet(0b110)), Err(BindError::BadGpus { .. })), "a sharing pod takes one GPU");
    c.unbind(&p2, &whole);
    c.unbind(&p1, &shared);
    assert_eq!(c, before);
}

#[test]
fn feasible_counts_rejections() {
    let c = Cluster::new(vec![node(&[1000]), node(&[0]), node(&[500])]);
    let (mut out, mut rej) = (Vec::new(), [0; FilterReason::COUNT]);
    c.feasible(&pod(1, 1, 600), &mut out, &mut rej);
    assert_eq!(out, [0]);
    assert_eq!(rej[FilterReason::GpuInsufficient as usize], 2);
    assert_eq!(c.total_gpus(), 3);
    let _ = Gpu::default();
}

/// The summary the filter scans answers like [`check`] on the node
/// itself, through binds, unbinds and node updates.
#[test]
fn summary_filter_agrees_with_check() {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let nodes: Vec<Node> = (0..40)
        .map(|i| {
            let model = ["V100", "A100", "T4"][i % 3];
            Node::new(0, format!("n{i}"), Resources { cpu_milli: 16_000, memory_mib: 65_536 }, i % 9, model)
        })
        .collect();
    let mut c = Cluster::new(nodes);
    let mut bound = Vec::new();
    for step in 0..3000 {
        let gpu_count = rng.random_range(0..4);
        let milli = if gpu_count == 1 && rng.random_bool(0.5) { rng.random_range(1..1000) } else { 1000 };
        let mut p = pod(rng.random_range(0..6000), gpu_count, milli);
        if rng.random_bool(0.3) {
            p.allowed_models = vec![["V100", "A100", "H100"][rng.random_range(0..3)].to_string()];
        }
        if rng.random_bool(0.2) {
            p.node_selector.insert("pool".into(), ["a", "b"][rng.random_range(0..2)].into());
        }
        if rng.random_bool(0.5) {
            p.tolerations.push(crate::model::Toleration { key: "spot".into(), exists: true, ..Default::default() });
        }
        let (mut out, mut rej) = (Vec::new(), [0; FilterReason::COUNT]);
        c.feasible(&p, &mut out, &mut rej);
        let mut expect_rej = [0; FilterReason::COUNT];
        let expect: Vec<NodeId> = c
            .nodes()
            .iter()
            .filter(|n| check(n, &p).map_err(|r| expect_rej[r as usize] += 1).is_ok())
            .map(|n| n.id)
            .collect();
        assert_eq!((out.clone(), rej), (expect, expect_rej), "step {step}");
        match rng.random_range(0..10) {
            0..6 if !out.is_empty() => {
                let n = out[rng.random_range(0..out.len())];
                let gpus = choose_gpus(c.node(n).unwrap(), &p, None).unwrap();
                bound.push((c.bind(n, &p, gpus).unwrap(), p));
            }
            6..8 if !bound.is_empty() => {
                let (placement, p) = bound.swap_remove(rng.random_range(0..bound.len()));
                c.unbind(&placement, &p);
            }
            8 => {
                let n = rng.random_range(0..40);
                let (taint, pool) = (rng.random_bool(0.3), ["a", "b"][rng.random_range(0..2)]);
                c.update_node(n, |node| {
                    node.taints.clear();
                    if taint {
                        node.taints.push(crate::model::Taint {
                            key: "spot".into(),
                            value: String::new(),
                            effect: "NoSchedule".into(),
                        });
                    }
                    node.labels.insert("pool".into(), pool.into());
                    node.ready = !node.ready;
                    if let Some(g) = node.gpus.first_mut() {
                        g.health = if g.health == GpuHealth::Failed { GpuHealth::Healthy } else { GpuHealth::Failed };
                    }
                });
            }
            _ => {}
        }
    }
}
