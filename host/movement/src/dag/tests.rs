use tessera_core::cluster::GpuSet;
use tessera_core::model::{Node, Pod, Resources};

use super::*;

/// `n` nodes with `gpus` GPUs each.
fn cluster(n: usize, gpus: usize) -> Cluster {
    Cluster::new(
        (0..n)
            .map(|i| Node::new(0, format!("n{i}"), Resources { cpu_milli: 64_000, memory_mib: 262_144 }, gpus, "A100"))
            .collect(),
    )
}

fn pod(name: &str) -> Pod {
    Pod {
        name: name.into(),
        requests: Resources { cpu_milli: 1_000, memory_mib: 1_024 },
        gpu_count: 1,
        gpu_milli: 1000,
        ..Pod::default()
    }
}

/// Binds `pod` on `node` and returns the move of it to `to`.
fn running(c: &mut Cluster, id: u64, node: NodeId, to: NodeId) -> PodMove {
    let spec = pod(&format!("p{id}"));
    let gpus = choose_gpus(c.node(node).unwrap(), &spec, None).unwrap();
    let from = c.bind(node, &spec, gpus).unwrap();
    PodMove { pod: id, spec, from, to, gpu_hint: None }
}

#[test]
fn independent_moves_have_no_dependencies() {
    let mut c = cluster(4, 2);
    let moves = vec![running(&mut c, 1, 0, 2), running(&mut c, 2, 1, 3)];
    let dag = build(&c, &MovePlan { id: 1, moves });
    assert!(dag.dropped.is_empty());
    assert_eq!(dag.steps.iter().map(|s| s.deps.len()).sum::<usize>(), 0);
}

#[test]
fn a_chain_waits_for_the_move_that_makes_room() {
    // n1 is full (1 GPU, taken by p2); p1 moves n0 → n1 only after p2 moves n1 → n2.
    let mut c = cluster(3, 1);
    let into_full = running(&mut c, 1, 0, 1);
    let making_room = running(&mut c, 2, 1, 2);
    let dag = build(&c, &MovePlan { id: 1, moves: vec![into_full, making_room] });
    assert!(dag.dropped.is_empty(), "{:?}", dag.dropped);
    let order: Vec<u64> = dag.steps.iter().map(|s| s.mv.pod).collect();
    assert_eq!(order, [2, 1], "the room-making move first");
    assert_eq!(dag.steps[1].deps, [0]);
    assert!(!dag.steps.iter().any(|s| s.hop));
    assert_eq!(dag.waits_for(2), [vec![1], vec![]], "by move: the first waits for the second");
}

#[test]
fn a_swap_hops_through_a_free_node() {
    // n0 and n1 full, each pod wants the other's node; n2 is free.
    let mut c = cluster(3, 1);
    let a = running(&mut c, 1, 0, 1);
    let b = running(&mut c, 2, 1, 0);
    let dag = build(&c, &MovePlan { id: 1, moves: vec![a, b] });
    assert!(dag.dropped.is_empty(), "{:?}", dag.dropped);
    let steps: Vec<(u64, NodeId, NodeId, bool)> =
        dag.steps.iter().map(|s| (s.mv.pod, s.mv.from.node, s.mv.to, s.hop)).collect();
    assert_eq!(steps, [(1, 0, 2, true), (2, 1, 0, false), (1, 2, 1, true)]);
    assert_eq!(dag.steps[1].deps, [0], "p2 enters n0 once p1 left it");
    assert_eq!(dag.steps[2].deps, [0, 1], "p1's second hop after its first and after p2 left n1");
    assert_eq!(dag.waits_for(2), [vec![1], vec![0]], "a swap waits both ways, its own hop excluded");
    // Replaying the steps in order never overcommits a node.
    let mut state = c.clone();
    for s in &dag.steps {
        state.unbind(&s.mv.from, &s.mv.spec);
        let gpus = choose_gpus(state.node(s.mv.to).unwrap(), &s.mv.spec, None).expect("room");
        state.bind(s.mv.to, &s.mv.spec, gpus).unwrap();
    }
}

#[test]
fn a_swap_with_no_free_node_is_dropped_not_overcommitted() {
    let mut c = cluster(2, 1);
    let a = running(&mut c, 1, 0, 1);
    let b = running(&mut c, 2, 1, 0);
    let dag = build(&c, &MovePlan { id: 1, moves: vec![a, b] });
    // Neither can go first and no node has room for a hop: both dropped.
    assert!(dag.steps.is_empty(), "{:?}", dag.steps);
    assert_eq!(dag.dropped.iter().map(|d| d.move_index).collect::<Vec<_>>(), [0, 1]);
    assert!(dag.dropped[0].reason.contains("not overcommitting"), "{}", dag.dropped[0].reason);
}

#[test]
fn a_move_to_the_same_or_a_missing_node_is_refused() {
    let mut c = cluster(2, 2);
    let same = running(&mut c, 1, 0, 0);
    let missing = PodMove { to: 9, ..running(&mut c, 2, 0, 1) };
    let dag = build(&c, &MovePlan { id: 1, moves: vec![same, missing] });
    assert_eq!(dag.dropped.len(), 2);
    let _ = GpuSet::default();
}
