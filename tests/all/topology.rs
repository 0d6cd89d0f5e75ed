//! The `gpu-topology` component choosing nodes on a cluster of DGX-like
//! nodes (two NVLink islands of four GPUs each), with the host's own
//! filter, GPU choice and binding: pods come and go, and every 4-GPU pod
//! that has to span islands is a training job on the slow path.

use std::collections::VecDeque;

use tessera_core::cluster::{Cluster, FilterReason, Placement, choose_gpus};
use tessera_core::topology::{GpuLink, cost, links};
use tessera_core::{Node, Pod, Resources};
use tessera_plugins::{BINPACK, GPU_TOPOLOGY};
use tessera_wasm::{Member, Policy};

use crate::{load, member, policy, runtime};

fn dgx_cluster(n: u32) -> Vec<Node> {
    (0..n)
        .map(|i| {
            let mut node =
                Node::new(i, format!("dgx-{i}"), Resources { cpu_milli: 128_000, memory_mib: 1 << 20 }, 8, "H100");
            for (g, gpu) in node.gpus.iter_mut().enumerate() {
                gpu.link = GpuLink { island: (g / 4) as u8, pcie: (g / 2) as u8, numa: (g / 4) as u8 };
            }
            node
        })
        .collect()
}

/// What a run did to the 4-GPU pods.
#[derive(Debug, Default, PartialEq, Eq)]
struct Outcome {
    /// 4-GPU pods bound.
    placed: u32,
    /// Of those, bound across islands.
    across: u32,
    /// Pods of any size with no room.
    unplaced: u32,
}

/// Pods of 1, 2 and 4 GPUs with varied CPU arrive and leave (a seeded
/// stream, the same for every policy); each is placed by `p` among the
/// host filter's feasible nodes and bound on the GPUs the host picks.
fn run(members: Vec<Member>) -> Outcome {
    let nodes = dgx_cluster(16);
    let p: Policy = policy(members, &nodes);
    let mut cluster = Cluster::new(nodes);
    let mut state: u64 = 0x5EED;
    let mut next = |m: u64| {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % m
    };
    let mut running: VecDeque<(u64, Placement, Pod)> = VecDeque::new();
    let mut out = Outcome::default();
    let (mut feasible, mut rejected) = (Vec::new(), [0; FilterReason::COUNT]);
    for step in 0..900u64 {
        while running.front().is_some_and(|(until, ..)| *until <= step) {
            let (_, at, pod) = running.pop_front().unwrap();
            cluster.unbind(&at, &pod);
            p.upsert_nodes([cluster.node(at.node).unwrap()]);
        }
        let gpus = [1, 1, 1, 2, 4][next(5) as usize];
        let pod = Pod {
            name: format!("p{step}"),
            requests: Resources { cpu_milli: 1_000 * (1 + next(24)), memory_mib: 4_096 },
            gpu_count: gpus,
            gpu_milli: 1000,
            ..Pod::default()
        };
        let life = 20 + next(60);
        feasible.clear();
        cluster.feasible(&pod, &mut feasible, &mut rejected);
        let d = p.decide(&pod, &feasible);
        assert!(d.errors.is_empty(), "{:?}", d.errors);
        let Some(id) = d.chosen else {
            out.unplaced += 1;
            continue;
        };
        let node = cluster.node(id).unwrap();
        let set = choose_gpus(node, &pod, d.gpu_hint).expect("the host filter let it through");
        if gpus == 4 {
            out.placed += 1;
            let indices: Vec<usize> = set.indices().collect();
            out.across += u32::from(cost(&links(&node.gpus), &indices) > 0);
        }
        let at = cluster.bind(id, &pod, set).unwrap();
        p.upsert_nodes([cluster.node(id).unwrap()]);
        // Departures in step order (a queue sorted on insert).
        let until = step + life;
        let i = running.partition_point(|(u, ..)| *u <= until);
        running.insert(i, (until, at, pod));
    }
    out
}

#[test]
fn the_topology_plugin_keeps_islands_whole_for_the_pods_that_need_them() {
    let rt = runtime();
    let packing = run(vec![member(load(&rt, BINPACK, "binpack", "null"), 1.0)]);
    let aware = run(vec![
        member(load(&rt, BINPACK, "binpack", "null"), 1.0),
        member(load(&rt, GPU_TOPOLOGY, "gpu-topology", "null"), 2.0),
    ]);
    eprintln!("binpack: {packing:?}\nbinpack + gpu-topology: {aware:?}");
    assert!(packing.placed > 50 && aware.placed > 50, "the stream must place many 4-GPU pods");
    assert!(packing.across > 0, "binpack alone must be seen to split islands: {packing:?}");
    assert!(
        aware.across * 4 <= packing.across,
        "the topology plugin should split at most a quarter as many 4-GPU pods: {aware:?} vs {packing:?}"
    );
    assert!(aware.unplaced <= packing.unplaced + packing.unplaced / 10, "{aware:?} vs {packing:?}");
}

#[test]
fn a_hard_topology_filter_never_binds_a_pod_across_islands() {
    let rt = runtime();
    let strict = run(vec![
        member(load(&rt, BINPACK, "binpack", "null"), 1.0),
        member(load(&rt, GPU_TOPOLOGY, "gpu-topology", r#"{"max_distance": "nvlink"}"#), 1.0),
    ]);
    assert_eq!(strict.across, 0, "{strict:?}");
    assert!(strict.placed > 50, "{strict:?}");
}
