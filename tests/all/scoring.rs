use tessera_core::{Pod, Resources};
use tessera_plugins::{BINPACK, TOPOLOGY_SPREAD};

use crate::{cluster, load, member, policy, runtime};

fn gpu_pod(gpus: u32) -> Pod {
    Pod {
        name: "p".into(),
        requests: Resources { cpu_milli: 1000, memory_mib: 1024 },
        gpu_count: gpus,
        gpu_milli: 1000,
        ..Pod::default()
    }
}

#[test]
fn binpack_component_prefers_the_fullest_node() {
    let rt = runtime();
    let nodes = cluster(8);
    let p = policy(vec![member(load(&rt, BINPACK, "binpack", "null"), 1.0)], &nodes);
    let ids: Vec<u32> = (0..8).collect();
    let d = p.decide(&gpu_pod(1), &ids);
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    assert_eq!(d.chosen, Some(7), "node 7 has 7 of 8 GPUs allocated");
    let scores = &d.outcomes[0].scores;
    assert!(scores.windows(2).all(|w| w[0] < w[1]), "{scores:?}");
}

#[test]
fn wasm_and_native_binpack_agree() {
    use tessera_sdk::{NodeDelta, ScorerHarness};
    let rt = runtime();
    let nodes = cluster(50);
    let p = policy(vec![member(load(&rt, BINPACK, "binpack", r#"{"gpu_weight": 5}"#), 1.0)], &nodes);
    let mut native = ScorerHarness::<tessera_plugin_binpack::BinPack>::new(r#"{"gpu_weight": 5}"#).unwrap();
    native.apply(nodes.iter().map(|n| NodeDelta::Upsert(tessera::native::sdk_node(n)))).unwrap();
    let ids: Vec<u32> = (0..50).collect();
    let mut pod = gpu_pod(1);
    pod.gpu_milli = 400;
    let d = p.decide(&pod, &ids);
    let (mut values, mut hints) = (Vec::new(), Vec::new());
    native.score(&tessera::native::sdk_pod(&pod), &ids, &mut values, &mut hints).unwrap();
    assert_eq!(d.outcomes[0].scores, values);
    assert_eq!(d.gpu_hint, hints.get(ids.iter().position(|&i| Some(i) == d.chosen).unwrap()).copied());
}

#[test]
fn weights_combine_binpack_and_spread_and_mirror_follows_deltas() {
    let rt = runtime();
    let mut nodes = cluster(6);
    // Workload "web" already has 3 pods in zone-1 (nodes 1 and 4).
    nodes[1].workloads.insert("web".into(), 2);
    nodes[4].workloads.insert("web".into(), 1);
    let p = policy(
        vec![
            member(load(&rt, BINPACK, "binpack", "null"), 1.0),
            member(load(&rt, TOPOLOGY_SPREAD, "topology-spread", "null"), 10.0),
        ],
        &nodes,
    );
    let mut pod = gpu_pod(1);
    pod.workload = "web".into();
    let ids: Vec<u32> = (0..6).collect();
    let d = p.decide(&pod, &ids);
    // Spread dominates: zones 0 and 2 tie on spread, binpack picks node 5 (zone-2).
    assert_eq!(d.chosen, Some(5), "{d:?}");
    // Now zone-2 gets crowded: a delta, not a reload.
    nodes[5].workloads.insert("web".into(), 5);
    p.upsert_nodes([&nodes[5]]);
    let d = p.decide(&pod, &ids);
    assert_eq!(d.chosen, Some(3), "zone-0's fullest node after the delta: {d:?}");
}

#[test]
fn spread_hard_mode_filters_with_its_reason_code() {
    let rt = runtime();
    let mut nodes = cluster(3);
    nodes[0].workloads.insert("web".into(), 3);
    let p = policy(vec![member(load(&rt, TOPOLOGY_SPREAD, "topology-spread", r#"{"max_skew": 1}"#), 1.0)], &nodes);
    let pod = Pod { workload: "web".into(), ..gpu_pod(0) };
    let d = p.decide(&pod, &[0, 1, 2]);
    assert_eq!(d.feasible, [1, 2]);
    assert_eq!(d.rejections.len(), 1);
    assert_eq!((d.rejections[0].node, d.rejections[0].reason.as_str()), (0, "SCHED-ZONE-SPREAD"));
    // Offered only node 0, the pod is refused with that code, not placed.
    let mut p = p;
    let choice = tessera_core::framework::Placer::place(&mut p, &pod, &[0]);
    assert_eq!((choice.node, choice.filtered.as_deref()), (None, Some("SCHED-ZONE-SPREAD")));
}

#[test]
fn one_version_serves_policies_over_different_clusters() {
    let rt = runtime();
    let version = load(&rt, BINPACK, "binpack", "null");
    let small = cluster(4);
    let mut other = cluster(8);
    // In the second cluster node 2 is the fullest; in the first, node 3.
    for g in &mut other[2].gpus {
        g.free_milli = 0;
    }
    other[2].gpus[0].free_milli = 1000;
    let a = policy(vec![member(version.clone(), 1.0)], &small);
    let b = policy(vec![member(version, 1.0)], &other);
    for _ in 0..3 {
        assert_eq!(a.decide(&gpu_pod(1), &[0, 1, 2, 3]).chosen, Some(3));
        assert_eq!(b.decide(&gpu_pod(1), &[0, 1, 2, 3]).chosen, Some(2));
    }
}

#[test]
fn telemetry_aware_components_read_gpu_health_and_load() {
    use tessera_core::GpuHealth;
    use tessera_plugins::{GPU_AWARE, LOAD_AWARE};
    let rt = runtime();
    let mut nodes = cluster(3);
    for n in &mut nodes {
        for g in &mut n.gpus {
            g.free_milli = 1000;
            g.util_permille = 600;
        }
    }
    nodes[1].gpus[3].util_permille = 50;
    nodes[2].gpus[0].util_permille = 10;
    nodes[2].gpus[0].health = GpuHealth::Degraded;
    let p = policy(vec![member(load(&rt, GPU_AWARE, "gpu-aware", r#"{"degraded": "hard"}"#), 1.0)], &nodes);
    let mut pod = gpu_pod(1);
    pod.gpu_milli = 300;
    let d = p.decide(&pod, &[0, 1, 2]);
    assert_eq!((d.chosen, d.gpu_hint), (Some(1), Some(3)), "{d:?}");
    // Load-aware: node 0 runs hot on CPU.
    nodes[0].cpu_util_permille = 950;
    let p = policy(vec![member(load(&rt, LOAD_AWARE, "load-aware", "null"), 1.0)], &nodes);
    let d = p.decide(&gpu_pod(0), &[0, 2]);
    assert_eq!(d.chosen, Some(2), "{d:?}");
}

/// The native twin of a policy decides exactly as the Wasm policy does.
#[test]
fn native_twin_decides_like_the_components() {
    use tessera_core::framework::Placer;
    let doc =
        tessera_policy::PolicyDocument::parse(include_str!("../../deploy/policies/throughput.yaml"), "throughput.yaml")
            .unwrap();
    let rt = runtime();
    let mut wasm = tessera::load::load_policy(&rt, &doc).unwrap();
    let mut twin = tessera::native::NativePolicy::from_document(&doc).unwrap();
    let nodes = tessera::bench::synthetic_cluster(40);
    let refs: Vec<&tessera_core::Node> = nodes.iter().collect();
    wasm.nodes_changed(&refs);
    twin.nodes_changed(&refs);
    let pods = tessera_core::synthetic::pods(60, &[], 5);
    let ids: Vec<u32> = (0..40).collect();
    for pod in &pods {
        assert_eq!(wasm.place(pod, &ids), twin.place(pod, &ids), "{pod:?}");
    }
}

/// Scoring on worker threads (each plugin on its own) chooses exactly what
/// scoring in turn chooses, pod after pod, as the cluster fills up; so does
/// the native twin on as many threads.
#[test]
fn parallel_workers_decide_like_one() {
    use tessera_core::cluster::{Cluster, choose_gpus};
    use tessera_core::framework::Placer;
    let doc = tessera::sim::policy_document("throughput", 1).unwrap();
    let rt = runtime();
    let mut placers: Vec<Box<dyn Placer>> = vec![
        Box::new(tessera::load::load_policy(&rt, &doc).unwrap()),
        Box::new(tessera::load::load_policy(&rt, &doc).unwrap().with_workers(2).unwrap()),
        Box::new(tessera::native::NativePolicy::from_document(&doc).unwrap().with_workers(2).unwrap()),
    ];
    let mut clusters: Vec<Cluster> = (0..3).map(|_| Cluster::new(tessera::bench::synthetic_cluster(30))).collect();
    for (p, c) in placers.iter_mut().zip(&clusters) {
        p.nodes_changed(&c.nodes().iter().collect::<Vec<_>>());
        p.prime();
    }
    let (mut candidates, mut rejected) = (Vec::new(), [0; tessera_core::cluster::FilterReason::COUNT]);
    let mut placed = 0;
    for pod in &tessera_core::synthetic::pods(400, &[], 9) {
        clusters[0].feasible(pod, &mut candidates, &mut rejected);
        if candidates.is_empty() {
            continue;
        }
        let choices: Vec<_> = placers.iter_mut().map(|p| p.place(pod, &candidates)).collect();
        assert!(choices.iter().all(|c| *c == choices[0]), "{pod:?}: {choices:?}");
        let node = choices[0].node.expect("a feasible node is chosen");
        for (p, c) in placers.iter_mut().zip(clusters.iter_mut()) {
            let gpus = choose_gpus(c.node(node).unwrap(), pod, choices[0].gpu_hint).unwrap();
            c.bind(node, pod, gpus).unwrap();
            p.nodes_changed(&[c.node(node).unwrap()]);
        }
        placed += 1;
    }
    assert!(placed > 100, "the cluster filled up: {placed} placed");
}

/// The `learned` component (the trained weights embedded in Wasm) chooses
/// exactly what its native twin — the scorer `tessera train` trains
/// through — chooses, node and GPU, pod after pod as the cluster fills,
/// with the target workload given (as the simulator injects it) and
/// without (learned from the pods placed).
#[test]
fn learned_component_decides_like_its_native_twin() {
    use tessera_core::cluster::{Cluster, choose_gpus};
    use tessera_core::framework::Placer;
    let pods = tessera_core::synthetic::pods(500, &[], 17);
    let workload = tessera_core::metrics::TargetWorkload::from_pods(&pods, 0.95);
    let rt = runtime();
    for with_workload in [true, false] {
        let mut doc = tessera::sim::policy_document("learned", 1).unwrap();
        if with_workload {
            tessera::sim::inject_workload(&mut doc, &workload);
        }
        let mut placers: Vec<Box<dyn Placer>> = vec![
            Box::new(tessera::load::load_policy(&rt, &doc).unwrap()),
            Box::new(tessera::native::NativePolicy::from_document(&doc).unwrap()),
        ];
        let mut clusters: Vec<Cluster> = (0..2).map(|_| Cluster::new(tessera::bench::synthetic_cluster(30))).collect();
        for (p, c) in placers.iter_mut().zip(&clusters) {
            p.nodes_changed(&c.nodes().iter().collect::<Vec<_>>());
            p.prime();
        }
        let (mut candidates, mut rejected) = (Vec::new(), [0; tessera_core::cluster::FilterReason::COUNT]);
        let mut placed = 0;
        for pod in &pods {
            clusters[0].feasible(pod, &mut candidates, &mut rejected);
            if candidates.is_empty() {
                continue;
            }
            let choices: Vec<_> = placers.iter_mut().map(|p| p.place(pod, &candidates)).collect();
            assert_eq!(choices[0], choices[1], "workload given: {with_workload}; {pod:?}");
            let node = choices[0].node.expect("a feasible node is chosen");
            for (p, c) in placers.iter_mut().zip(clusters.iter_mut()) {
                let gpus = choose_gpus(c.node(node).unwrap(), pod, choices[0].gpu_hint).unwrap();
                c.bind(node, pod, gpus).unwrap();
                p.nodes_changed(&[c.node(node).unwrap()]);
            }
            placed += 1;
        }
        assert!(placed > 100, "the cluster filled up: {placed} placed");
    }
}

/// The hybrid-score component reads zone carbon intensity from the host
/// (`zone-carbon-intensity`), and follows it as the host's values move.
#[test]
fn hybrid_score_follows_the_hosts_carbon_intensity() {
    use tessera_plugins::HYBRID_SCORE;
    let rt = runtime();
    // Three identical nodes in zone-0, zone-1, zone-2 (cluster(3) differs
    // only in allocation; level it).
    let mut nodes = cluster(3);
    for n in &mut nodes {
        n.gpus.iter_mut().for_each(|g| g.free_milli = 1000);
    }
    let cfg = r#"{"weights": {"efficiency": 0, "sla": 0, "carbon": 1}}"#;
    let p = policy(vec![member(load(&rt, HYBRID_SCORE, "hybrid-score", cfg), 1.0)], &nodes);
    let d = p.decide(&gpu_pod(1), &[0, 1, 2]);
    assert_eq!(d.outcomes[0].scores, [0, 0, 0], "nothing known, nothing preferred");
    p.set_zone_carbon("zone-0", 500);
    p.set_zone_carbon("zone-1", 50);
    p.set_zone_carbon("zone-2", 250);
    let d = p.decide(&gpu_pod(1), &[0, 1, 2]);
    assert_eq!((d.outcomes[0].scores.as_slice(), d.chosen), ([-1000, -100, -500].as_slice(), Some(1)));
    // Evening: the wind in zone-1 drops.
    p.set_zone_carbon("zone-1", 600);
    let d = p.decide(&gpu_pod(1), &[0, 1, 2]);
    assert_eq!(d.chosen, Some(2), "{:?}", d.outcomes[0].scores);
}

/// The gpu-aware component reads GPU device memory in use through the host
/// (`gpu-memory-used`, with each node record) and steers a sharing pod away
/// from a GPU whose memory is nearly full, and follows when that changes.
#[test]
fn gpu_aware_reads_device_memory_through_the_host() {
    use tessera_plugins::GPU_AWARE;
    let rt = runtime();
    let mut nodes = cluster(1);
    for g in &mut nodes[0].gpus {
        g.memory_mib = 16_000;
        g.util_permille = 500;
    }
    nodes[0].gpus[0].util_permille = 100; // the coolest GPU ...
    nodes[0].gpus[0].memory_used_mib = 15_500; // ... is out of memory
    let p = policy(vec![member(load(&rt, GPU_AWARE, "gpu-aware", "null"), 1.0)], &nodes);
    let mut pod = gpu_pod(1);
    pod.gpu_milli = 300;
    let d = p.decide(&pod, &[0]);
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    assert_ne!(d.gpu_hint, Some(0), "the memory-full GPU is not suggested: {d:?}");
    // Memory frees up: the coolest GPU is preferred again.
    nodes[0].gpus[0].memory_used_mib = 1_000;
    p.upsert_nodes(&nodes);
    assert_eq!(p.decide(&pod, &[0]).gpu_hint, Some(0));
}
