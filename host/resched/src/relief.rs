//! CPU relief (`fragment_merge`): free the CPU that keeps a node's free
//! GPUs from being used.
//!
//! A node whose pods took its cores strands its free GPUs as surely as a
//! gap too small for any pod: FGD's measure counts them fragmented. Two
//! ways out, each kept only when the fragmentation it removes (weighted
//! by the target workload) pays for its moves: CPU-only pods go to
//! GPU-saturated nodes with CPU to spare ([`relieve_cpu`]); failing that,
//! the GPU pods asking most CPU go where they leave enough CPU beside the
//! GPUs still free there ([`relieve_gpu_pods`]).

use tessera_core::cluster::GpuSet;
use tessera_core::model::{GPU_MILLI, Node, NodeId};

use crate::plan::Strategy;
use crate::scratch::Scratch;

/// Most pods moved off one node by [`relieve_cpu`] before its gain is judged.
const RELIEF_GROUP: usize = 3;

/// Free GPU share under which a node counts as GPU-saturated: its spare CPU
/// is of no use to GPU pods.
const SATURATED_MILLI: u32 = 100;

/// Moves CPU-only pods off nodes whose GPUs sit free for want of CPU onto
/// GPU-saturated nodes with spare CPU (best fit on CPU). A node's group of
/// moves (at most [`RELIEF_GROUP`]) is kept when the fragmentation it
/// removes pays for it: GPU share the workload could not use becomes usable.
pub(crate) fn relieve_cpu(s: &mut Scratch<'_>, budget: usize) -> usize {
    let start = s.moves.len();
    let mut sources: Vec<(u64, NodeId)> = s
        .cluster
        .nodes()
        .iter()
        .filter(|n| n.ready && s.in_focus(n.id) && n.free_gpu_milli() >= SATURATED_MILLI && s.frag[n.id as usize] > 0.0)
        .filter(|n| s.on_node[n.id as usize].iter().any(|&i| s.pod(i).gpu_count == 0))
        .map(|n| ((s.frag[n.id as usize] * 1e3) as u64, n.id))
        .collect();
    sources.sort_unstable_by(|a, b| b.cmp(a));
    if sources.is_empty() {
        return 0;
    }
    // Moves here take no GPU share, so the saturated nodes stay saturated.
    let saturated: Vec<NodeId> =
        s.cluster.nodes().iter().filter(|n| n.ready && n.free_gpu_milli() < SATURATED_MILLI).map(|n| n.id).collect();
    for (_, node) in sources {
        let used = s.moves.len() - start;
        if used >= budget || s.out_of_time() {
            break;
        }
        let mut pods: Vec<usize> =
            s.on_node[node as usize].iter().copied().filter(|&i| s.pod(i).gpu_count == 0 && s.movable(i)).collect();
        pods.sort_by_key(|&i| (std::cmp::Reverse(s.pod(i).requests.cpu_milli), i));
        let mark = s.moves.len();
        for i in pods.into_iter().take(RELIEF_GROUP.min(budget - used)) {
            let Some(to) = saturated_fit(s, &saturated, i, node) else { break };
            if !move_on(s, i, node, to, GpuSet::default()) {
                break;
            }
        }
        judge(s, mark);
    }
    s.moves.len() - start
}

/// Moves pod `i` off `node` to `gpus` of `to`; whether the node's group
/// goes on: not when the move failed or the node's fragmentation fell
/// already (the group is judged as soon as it does).
fn move_on(s: &mut Scratch<'_>, i: usize, node: NodeId, to: NodeId, gpus: GpuSet) -> bool {
    s.try_move(i, to, gpus, Strategy::FragmentMerge) && s.frag_delta(&[node], false) >= 0.0
}

/// Keeps the moves after `mark` if the fragmentation they remove pays.
fn judge(s: &mut Scratch<'_>, mark: usize) {
    if s.moves.len() > mark {
        s.keep_if_it_pays(mark, 0.0);
    }
}

/// The GPU-saturated node (of `saturated`, other than `not`) with the
/// least free CPU that takes CPU-only pod `i`.
fn saturated_fit(s: &Scratch<'_>, saturated: &[NodeId], i: usize, not: NodeId) -> Option<NodeId> {
    let p = s.pod(i);
    saturated
        .iter()
        .map(|&n| &s.cluster.nodes()[n as usize])
        .filter(|n| n.id != not)
        .filter(|n| n.free.cpu_milli >= p.requests.cpu_milli && n.free.memory_mib >= p.requests.memory_mib)
        .min_by_key(|n| (n.free.cpu_milli, n.id))
        .map(|n| n.id)
}

/// GPU shapes at least this share of the workload's GPU pods count as
/// common: their CPU is what a free GPU needs beside it.
const COMMON: f64 = 0.015;

/// Sharing GPUs looked at per pod for a destination.
const TRIES: usize = 64;

/// The least CPU a common one-GPU shape of the workload asks for: a node
/// with less free strands its free GPUs.
fn least_gpu_cpu(s: &Scratch<'_>) -> Option<u64> {
    let shapes = &s.workload.shapes;
    let gpu_weight: f64 = shapes.iter().filter(|(m, _)| m.gpu_count > 0).map(|(_, w)| w).sum();
    shapes
        .iter()
        .filter(|(m, w)| m.gpu_count == 1 && m.gpu_milli > 0 && *w >= COMMON * gpu_weight)
        .map(|(m, _)| m.cpu_milli)
        .min()
}

/// CPU `n` keeps beside its whole free GPUs, `need` each, after taking a
/// pod of `cpu` on `gpus` of them; negative: it would strand one.
fn spare(n: &Node, need: u64, cpu: u64, gpus: u64) -> i64 {
    n.free.cpu_milli as i64 - cpu as i64 - (need * u64::from(n.whole_free_gpus()).saturating_sub(gpus)) as i64
}

/// Moves the GPU pods asking most CPU (at most [`RELIEF_GROUP`] per node)
/// off nodes whose whole free GPUs lack the CPU of any common one-GPU pod.
/// A whole-GPU pod goes to a free GPU of the node with the fewest whole
/// GPUs free (so empty nodes stay empty for multi-GPU pods) whose CPU left
/// still covers its other free GPUs; a sharing pod to the best-fitting
/// shared GPU with that much CPU.
pub(crate) fn relieve_gpu_pods(s: &mut Scratch<'_>, budget: usize) -> usize {
    let start = s.moves.len();
    let Some(need) = least_gpu_cpu(s) else { return 0 };
    let mut sources: Vec<(u64, NodeId)> = s
        .cluster
        .nodes()
        .iter()
        .filter(|n| n.ready && s.in_focus(n.id) && n.whole_free_gpus() > 0 && n.free.cpu_milli < need)
        .filter(|n| s.frag[n.id as usize] > 0.0)
        .map(|n| ((s.frag[n.id as usize] * 1e3) as u64, n.id))
        .collect();
    sources.sort_unstable_by(|a, b| b.cmp(a));
    for (_, node) in sources {
        let used = s.moves.len() - start;
        if used >= budget || s.out_of_time() {
            break;
        }
        let mut pods: Vec<usize> = s.on_node[node as usize]
            .iter()
            .copied()
            .filter(|&i| s.movable(i) && !s.moved[i] && s.pod(i).gpu_count == 1 && s.pod(i).gpu_milli > 0)
            .collect();
        pods.sort_by_key(|&i| (std::cmp::Reverse(s.pod(i).requests.cpu_milli), i));
        let mark = s.moves.len();
        for i in pods.into_iter().take(RELIEF_GROUP.min(budget - used)) {
            let p = s.pod(i);
            let to = if p.gpu_milli >= GPU_MILLI {
                s.cluster
                    .nodes()
                    .iter()
                    .filter(|n| {
                        n.id != node
                            && n.ready
                            && n.whole_free_gpus() > 0
                            && spare(n, need, p.requests.cpu_milli, 1) >= 0
                    })
                    .filter(|n| tessera_core::cluster::check(n, p).is_ok())
                    .min_by_key(|n| (n.whole_free_gpus(), spare(n, need, p.requests.cpu_milli, 1), n.id))
                    .and_then(|n| Some((n.id, tessera_core::cluster::choose_gpus(n, p, None)?)))
            } else {
                s.partial
                    .range((p.gpu_milli, 0, 0)..)
                    .filter(|&&(_, n, _)| n != node)
                    .take(TRIES)
                    .find(|&&(_, n, _)| {
                        let n = &s.cluster.nodes()[n as usize];
                        spare(n, need, p.requests.cpu_milli, 0) >= 0 && tessera_core::cluster::check(n, p).is_ok()
                    })
                    .map(|&(_, n, g)| (n, GpuSet(1 << g)))
            };
            let Some((to, gpus)) = to else { continue };
            if !move_on(s, i, node, to, gpus) {
                break;
            }
        }
        judge(s, mark);
    }
    s.moves.len() - start
}

#[cfg(test)]
mod tests {
    use tessera_core::metrics::{Shape, TargetWorkload};
    use tessera_core::model::{Node, Resources};

    use crate::controller::Planner;
    use crate::plan::{self, Strategy};
    use crate::tests::{build, only, pod};

    use super::*;

    fn node(id: NodeId, gpus: usize, cores: u64) -> Node {
        Node::new(id, format!("n{id}"), Resources { cpu_milli: cores * 1000, memory_mib: 256 * 1024 }, gpus, "A100")
    }

    fn with_cpu(mut p: tessera_core::model::Pod, cores: u64) -> tessera_core::model::Pod {
        p.requests.cpu_milli = cores * 1000;
        p
    }

    /// Whole-GPU pods of 4 cores.
    fn workload() -> TargetWorkload {
        let shape = Shape { cpu_milli: 4_000, gpu_count: 1, gpu_milli: GPU_MILLI, allowed_models: vec![] };
        TargetWorkload { shapes: vec![(shape, 1.0)] }
    }

    #[test]
    fn a_cpu_hungry_gpu_pod_leaves_the_node_whose_free_gpu_it_starves() {
        // Node 0 (2 GPUs, 16 cores): a whole-GPU pod of 14 cores leaves
        // 2 cores beside the free GPU, which no 4-core pod can use. Node
        // 1 (2 GPUs, 32 cores) runs a 2-core pod: the 14-core pod fits
        // beside it and node 0's two GPUs then have 16 cores.
        let (c, running) = build(
            vec![node(0, 2, 16), node(1, 2, 32)],
            vec![(with_cpu(pod("x", 1000), 14), 0, 0), (with_cpu(pod("y", 1000), 2), 1, 0)],
        );
        let p = Planner::new(only(Strategy::FragmentMerge)).plan(&c, &running, &workload(), 10, None);
        plan::validate(&c, &running, &p.moves).unwrap();
        assert_eq!(p.moves.len(), 1, "{p:?}");
        assert_eq!((p.moves[0].pod, p.moves[0].to.node), (0, 1));
        assert!(p.fragmentation_after < p.fragmentation_before);
    }

    #[test]
    fn a_gpu_pod_is_not_moved_where_it_would_starve_free_gpus_in_turn() {
        // Node 1 has three GPUs free and 16 cores: the 14-core pod would
        // leave 2 free GPUs with 2 cores. Nothing moves.
        let (c, running) = build(
            vec![node(0, 2, 16), node(1, 4, 16)],
            vec![(with_cpu(pod("x", 1000), 14), 0, 0), (with_cpu(pod("y", 1000), 0), 1, 0)],
        );
        let p = Planner::new(only(Strategy::FragmentMerge)).plan(&c, &running, &workload(), 10, None);
        assert!(p.moves.is_empty(), "{p:?}");
    }

    #[test]
    fn cpu_only_pods_leave_for_a_node_whose_gpus_are_full() {
        // Node 0 (1 GPU, 8 cores): two CPU-only pods of 3 cores starve its
        // free GPU; node 1's GPU is taken and it has 28 cores spare.
        let mut cpu_only = with_cpu(pod("c", 0), 3);
        cpu_only.gpu_count = 0;
        let (c, running) = build(
            vec![node(0, 1, 8), node(1, 1, 32)],
            vec![(cpu_only.clone(), 0, 0), (cpu_only, 0, 0), (with_cpu(pod("y", 1000), 4), 1, 0)],
        );
        let p = Planner::new(only(Strategy::FragmentMerge)).plan(&c, &running, &workload(), 10, None);
        plan::validate(&c, &running, &p.moves).unwrap();
        assert!(!p.moves.is_empty() && p.moves.iter().all(|m| m.to.node == 1 && m.pod < 2), "{p:?}");
    }
}
