//! Load balancing: minimum-cost moves off nodes whose *measured* load is
//! over the threshold, until each is under it.
//!
//! A node's load is the larger of its CPU utilisation and its GPUs' mean
//! utilisation (telemetry, 0..=1). A pod is credited with the node's load
//! in proportion to what it holds of the node's allocation (GPU share for
//! GPU pods, CPU otherwise). The hottest node is relieved first, each time
//! by the pod with the least cost per unit of load it takes away, sent to
//! the coolest node that takes it and stays under the threshold with it.
//! Relief is worth `γ` per GPU-equivalent of load taken off a hot node;
//! moves that do not pay are undone.

use tessera_core::cluster::choose_gpus;
use tessera_core::model::{GPU_MILLI, Node, NodeId};

use crate::plan::Strategy;
use crate::scratch::Scratch;

/// Measured load of a node, 0..=1.
pub fn load(n: &Node) -> f64 {
    let cpu = f64::from(n.cpu_util_permille) / 1000.0;
    let gpu = if n.gpus.is_empty() {
        0.0
    } else {
        n.gpus.iter().map(|g| f64::from(g.util_permille)).sum::<f64>() / n.gpus.len() as f64 / 1000.0
    };
    cpu.max(gpu).min(1.0)
}

/// Share of `n`'s load credited to a pod holding `gpu_milli` GPU share and
/// `cpu_milli` CPU.
fn credit(n: &Node, load: f64, gpu_milli: u64, cpu_milli: u64) -> f64 {
    let gpu_alloc: u64 = n.gpus.iter().map(|g| u64::from(GPU_MILLI - g.free_milli.min(GPU_MILLI))).sum();
    let cpu_alloc = n.capacity.cpu_milli - n.free.cpu_milli.min(n.capacity.cpu_milli);
    let frac = if gpu_milli > 0 && gpu_alloc > 0 {
        gpu_milli as f64 / gpu_alloc as f64
    } else if cpu_alloc > 0 {
        cpu_milli as f64 / cpu_alloc as f64
    } else {
        0.0
    };
    load * frac.min(1.0)
}

/// Nodes over `threshold` by the planner's estimate.
pub fn overloaded(loads: &[f64], threshold: f64) -> u64 {
    loads.iter().filter(|&&l| l > threshold).count() as u64
}

/// Relieves overloaded nodes while `budget` moves remain. `loads` holds the
/// estimate per node and is updated with every kept move.
pub(crate) fn run(s: &mut Scratch<'_>, budget: usize, threshold: f64, loads: &mut [f64]) -> usize {
    let start = s.moves.len();
    let mut hot: Vec<NodeId> =
        (0..loads.len() as NodeId).filter(|&n| loads[n as usize] > threshold && s.in_focus(n)).collect();
    hot.sort_by(|&a, &b| loads[b as usize].total_cmp(&loads[a as usize]).then(a.cmp(&b)));
    for node in hot {
        while loads[node as usize] > threshold {
            if s.moves.len() - start >= budget || s.out_of_time() {
                return s.moves.len() - start;
            }
            if !relieve_once(s, node, threshold, loads) {
                break;
            }
        }
    }
    s.moves.len() - start
}

fn relieve_once(s: &mut Scratch<'_>, node: NodeId, threshold: f64, loads: &mut [f64]) -> bool {
    let n = &s.cluster.nodes()[node as usize];
    let l = loads[node as usize];
    // (cost per load taken, load taken, pod)
    let mut options: Vec<(f64, f64, usize)> = s.on_node[node as usize]
        .iter()
        .copied()
        .filter(|&i| s.movable(i))
        .map(|i| {
            let p = s.pod(i);
            let c = credit(n, l, u64::from(p.gpu_count) * u64::from(p.gpu_milli.min(GPU_MILLI)), p.requests.cpu_milli);
            (s.move_cost(i) / c.max(1e-9), c, i)
        })
        .filter(|&(_, c, _)| c > 0.0)
        .collect();
    options.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.2.cmp(&b.2)));
    // Coolest targets first.
    let mut targets: Vec<NodeId> =
        (0..loads.len() as NodeId).filter(|&t| t != node && s.cluster.nodes()[t as usize].ready).collect();
    targets.sort_by(|&a, &b| loads[a as usize].total_cmp(&loads[b as usize]).then(a.cmp(&b)));
    let (src_gpus, src_cpu) = (n.gpus.len(), n.capacity.cpu_milli);
    for (_, taken, i) in options {
        let p = s.pod(i);
        for &t in targets.iter().take(64) {
            let dst = &s.cluster.nodes()[t as usize];
            // The pod's load lands on a node of another size.
            let scale = if p.gpu_count > 0 && !dst.gpus.is_empty() {
                src_gpus as f64 / dst.gpus.len() as f64
            } else {
                src_cpu as f64 / dst.capacity.cpu_milli.max(1) as f64
            };
            let added = taken * scale;
            if loads[t as usize] + added > threshold {
                continue;
            }
            let Some(gpus) = choose_gpus(dst, p, None) else { continue };
            let mark = s.moves.len();
            if !s.try_move(i, t, gpus, Strategy::LoadBalance) {
                continue;
            }
            // Load taken off a hot node, in GPU-equivalents of its capacity.
            let relieved = taken * src_gpus.max(1) as f64 * f64::from(GPU_MILLI);
            let gain = s.weights.gain(relieved);
            if gain - s.cost_since(mark) > s.weights.min_net_gain.max(0.0) {
                s.gain += gain;
                let touched = s.touched_since(mark);
                s.frag_delta(&touched, true);
                loads[node as usize] -= taken;
                loads[t as usize] += added;
                return true;
            }
            s.undo_to(mark);
            return false;
        }
    }
    false
}
