//! Defragmentation (`fragment_merge`): re-pack pods that share GPUs so that
//! free share scattered over many GPUs merges into whole GPUs.
//!
//! A *donor* is a partially used GPU whose pods are all movable sharing
//! pods; draining it frees the whole GPU. Donors are taken cheapest first
//! (fewest pods, least share used); each of their pods goes to the
//! best-fitting partially used GPU on another node (least free share that
//! holds it, with room for its CPU and memory), so the GPUs that are
//! fullest fill up and the emptiest empty. A drain is kept only when it
//! pays: the fragmentation it removes (weighted by the target workload, the
//! FGD measure) times `γ` exceeds what its moves cost.

use tessera_core::cluster::GpuSet;
use tessera_core::model::{GPU_MILLI, NodeId};

use crate::plan::Strategy;
use crate::scratch::Scratch;

/// Most passes over the donors.
const MAX_PASSES: usize = 4;

/// Best-fit GPUs looked at per pod.
const TRIES: usize = 64;

/// A GPU that could be drained: (pods on it, share used, node, GPU).
type Donor = (usize, u32, NodeId, u8);

fn donors(s: &Scratch<'_>) -> Vec<Donor> {
    let mut out = Vec::new();
    for n in s.cluster.nodes() {
        if !n.ready || !s.in_focus(n.id) {
            continue;
        }
        for (gi, g) in n.gpus.iter().enumerate() {
            if g.free_milli == 0 || g.free_milli >= GPU_MILLI {
                continue;
            }
            let mut count = 0;
            let mut ok = true;
            for &i in &s.on_node[n.id as usize] {
                if s.at[i].gpus.0 & (1 << gi) == 0 {
                    continue;
                }
                let p = s.pod(i);
                ok &= s.movable(i) && p.gpu_count == 1 && p.gpu_milli < GPU_MILLI;
                count += 1;
            }
            if ok && count > 0 {
                out.push((count, GPU_MILLI - g.free_milli, n.id, gi as u8));
            }
        }
    }
    out.sort_unstable();
    out
}

/// Frees CPU where GPUs wait for it, drains donors, then fills the holes
/// best fit left, while `budget` moves remain; returns the moves made.
pub(crate) fn run(s: &mut Scratch<'_>, budget: usize) -> usize {
    let start = s.moves.len();
    crate::relief::relieve_cpu(s, budget);
    crate::relief::relieve_gpu_pods(s, budget.saturating_sub(s.moves.len() - start));
    // Drains change what fits where: pass again while a pass drains any.
    for _ in 0..MAX_PASSES {
        let before = s.moves.len();
        for (_, _, node, gpu) in donors(s) {
            let used = s.moves.len() - start;
            if used >= budget || s.out_of_time() {
                break;
            }
            drain_gpu(s, node, gpu, budget - used);
        }
        if s.moves.len() == before || s.moves.len() - start >= budget || s.timed_out {
            break;
        }
    }
    let used = s.moves.len() - start;
    if used < budget {
        fill(s, budget - used);
    }
    s.moves.len() - start
}

/// Most candidate pods offered to the knapsack per hole.
const FILL_CANDIDATES: usize = 48;

/// Knapsack granularity: shares are weighed in units of this many
/// thousandths (rounded up, so a chosen set always fits).
const UNIT: u32 = 10;

/// Fills holes of GPUs that are mostly used with pods that sit alone on a
/// GPU elsewhere, choosing the set by the knapsack DP: each pod moved frees
/// its GPU, and the set that fits the hole best is taken where best fit,
/// one pod at a time, would strand the rest of the hole.
fn fill(s: &mut Scratch<'_>, budget: usize) -> usize {
    let start = s.moves.len();
    let alone = |s: &Scratch<'_>| -> Vec<(u32, usize)> {
        let mut v: Vec<(u32, usize)> = donors(s)
            .into_iter()
            .filter(|d| d.0 == 1)
            .filter_map(|(_, _, node, gpu)| {
                let i = s.on_node[node as usize].iter().copied().find(|&i| s.at[i].gpus.0 & (1 << gpu) != 0)?;
                Some((s.pod(i).gpu_milli, i))
            })
            .collect();
        v.sort_unstable();
        v
    };
    let holes: Vec<(u32, NodeId, u8)> = s
        .partial
        .iter()
        .copied()
        .filter(|&(free, n, _)| (100..=GPU_MILLI / 2).contains(&free) && s.in_focus(n))
        .collect();
    let mut singles = alone(s);
    for (free, node, gpu) in holes {
        let used = s.moves.len() - start;
        if used >= budget || s.out_of_time() {
            break;
        }
        let now = s.cluster.nodes()[node as usize].gpus[gpu as usize].free_milli;
        if now != free {
            continue;
        }
        // The largest shares that fit, from other nodes.
        let upto = singles.partition_point(|&(share, _)| share <= free);
        let cands: Vec<usize> = singles[..upto]
            .iter()
            .rev()
            .filter(|&&(_, i)| s.movable(i) && s.at[i].node != node)
            .take(FILL_CANDIDATES.min(budget - used))
            .map(|&(_, i)| i)
            .collect();
        if cands.len() < 2 {
            continue;
        }
        let items: Vec<(u32, f64)> = cands
            .iter()
            .map(|&i| {
                let share = s.pod(i).gpu_milli;
                (share.div_ceil(UNIT), f64::from(GPU_MILLI) + f64::from(share) - s.move_cost(i))
            })
            .collect();
        let chosen = crate::knapsack::best_subset(free / UNIT, &items);
        if chosen.len() < 2 {
            continue;
        }
        let mark = s.moves.len();
        for k in chosen {
            s.try_move(cands[k], node, GpuSet(1 << gpu), Strategy::FragmentMerge);
        }
        if s.moves.len() > mark && s.keep_if_it_pays(mark, 0.0) {
            singles = alone(s);
        }
    }
    s.moves.len() - start
}

/// Tries to empty GPU `gpu` of `node` with at most `budget` moves; keeps
/// the moves if they pay.
pub(crate) fn drain_gpu(s: &mut Scratch<'_>, node: NodeId, gpu: u8, budget: usize) -> bool {
    let mut pods: Vec<usize> =
        s.on_node[node as usize].iter().copied().filter(|&i| s.at[i].gpus.0 & (1 << gpu) != 0).collect();
    if pods.is_empty() || pods.len() > budget || pods.iter().any(|&i| !s.movable(i) || s.pod(i).gpu_milli >= GPU_MILLI)
    {
        return false;
    }
    // Largest share first: it has the fewest places to go.
    pods.sort_by_key(|&i| (std::cmp::Reverse(s.pod(i).gpu_milli), i));
    let mark = s.moves.len();
    for i in pods {
        let Some((to, g)) = s.best_fit_share(i, &[node], TRIES) else {
            s.undo_to(mark);
            return false;
        };
        if !s.try_move(i, to, GpuSet(1 << g), Strategy::FragmentMerge) {
            s.undo_to(mark);
            return false;
        }
    }
    s.keep_if_it_pays(mark, 0.0)
}
