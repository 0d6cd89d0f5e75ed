//! Co-location (`co_location` in the strategy weights): empty low-load nodes by moving their few
//! pods onto busier nodes, so whole nodes (all their GPUs and CPU) come
//! free for large pods or can be powered down.
//!
//! A node is low-load when both its allocated GPU share and its allocated
//! CPU are at or under the threshold. The least loaded are emptied first;
//! each pod goes to the busiest node that still takes it (best fit: sharing
//! pods to the fullest GPU that holds them, others to the node with the
//! least free CPU that fits), never to another low-load node. An emptied
//! node is kept if `γ·(fragmentation removed + the node's GPUs)` beats the
//! moves' cost.

use tessera_core::cluster::{GpuSet, check, choose_gpus};
use tessera_core::model::{GPU_MILLI, Node, NodeId};

use crate::plan::Strategy;
use crate::scratch::Scratch;

/// Allocated share of a node: the larger of GPU share and CPU allocated.
pub fn allocated(n: &Node) -> f64 {
    let gpu = if n.gpus.is_empty() {
        0.0
    } else {
        let total = n.gpus.len() as f64 * f64::from(GPU_MILLI);
        let free: f64 = n.gpus.iter().map(|g| f64::from(g.free_milli)).sum();
        (total - free) / total
    };
    let cpu = if n.capacity.cpu_milli == 0 { 0.0 } else { 1.0 - n.free.cpu_milli as f64 / n.capacity.cpu_milli as f64 };
    gpu.max(cpu)
}

/// Empties low-load nodes while `budget` moves remain.
pub(crate) fn run(s: &mut Scratch<'_>, budget: usize, threshold: f64) -> usize {
    let start = s.moves.len();
    let low: Vec<bool> = s.cluster.nodes().iter().map(|n| n.ready && allocated(n) <= threshold).collect();
    let mut order: Vec<(u64, usize, NodeId)> = s
        .cluster
        .nodes()
        .iter()
        .filter(|n| low[n.id as usize] && s.in_focus(n.id) && !s.on_node[n.id as usize].is_empty())
        .map(|n| ((allocated(n) * 1e6) as u64, s.on_node[n.id as usize].len(), n.id))
        .collect();
    order.sort_unstable();
    // Targets: ready nodes that are not low-load, fullest CPU first.
    let targets: Vec<NodeId> = {
        let mut t: Vec<&Node> = s.cluster.nodes().iter().filter(|n| n.ready && !low[n.id as usize]).collect();
        t.sort_by_key(|n| (n.free.cpu_milli, n.id));
        t.iter().map(|n| n.id).collect()
    };
    for (_, pods, node) in order {
        let used = s.moves.len() - start;
        if pods > budget - used || s.out_of_time() {
            if used >= budget {
                break;
            }
            continue;
        }
        empty_node(s, node, &low, &targets);
    }
    s.moves.len() - start
}

fn empty_node(s: &mut Scratch<'_>, node: NodeId, low: &[bool], targets: &[NodeId]) -> bool {
    let mut pods = s.on_node[node as usize].clone();
    if pods.iter().any(|&i| !s.movable(i)) {
        return false;
    }
    // Largest first.
    pods.sort_by_key(|&i| {
        let p = s.pod(i);
        (std::cmp::Reverse((u64::from(p.gpu_count) * u64::from(p.gpu_milli), p.requests.cpu_milli)), i)
    });
    let mark = s.moves.len();
    for i in pods {
        let p = s.pod(i);
        let placed = if p.gpu_count == 1 && p.gpu_milli < GPU_MILLI {
            let mut found = None;
            for &(_, n, g) in s.partial.range((p.gpu_milli, 0, 0)..).take(256) {
                if n != node && !low[n as usize] && check(&s.cluster.nodes()[n as usize], p).is_ok() {
                    found = Some((n, GpuSet(1 << g)));
                    break;
                }
            }
            found.or_else(|| first_fit(s, i, targets))
        } else {
            first_fit(s, i, targets)
        };
        let Some((to, gpus)) = placed else {
            s.undo_to(mark);
            return false;
        };
        if !s.try_move(i, to, gpus, Strategy::CoLocation) {
            s.undo_to(mark);
            return false;
        }
    }
    let bonus = s.cluster.nodes()[node as usize].gpus.len() as f64 * f64::from(GPU_MILLI);
    s.keep_if_it_pays(mark, bonus)
}

fn first_fit(s: &Scratch<'_>, i: usize, targets: &[NodeId]) -> Option<(NodeId, GpuSet)> {
    let p = s.pod(i);
    targets.iter().find_map(|&n| {
        let node = &s.cluster.nodes()[n as usize];
        if check(node, p).is_err() {
            return None;
        }
        choose_gpus(node, p, None).map(|g| (n, g))
    })
}
