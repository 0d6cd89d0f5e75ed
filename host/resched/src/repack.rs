//! Global re-packing: first-fit decreasing over every movable sharing pod
//! at once, for when the move budget allows a thorough plan.
//!
//! The greedy drains ([`crate::defrag`]) empty GPUs one at a time and never
//! touch a GPU they do not empty, so pods that would pair well elsewhere
//! stay put. Here the pods of each GPU model are packed from scratch,
//! largest share first, into as few GPUs as first-fit decreasing needs
//! (which on the bench's mix reaches the configuration LP's bound), with
//! two preferences that keep moves few: a pod stays on its own GPU when
//! that GPU is already in use by the packing and has room, and a new GPU is
//! opened on the pod's own GPU when that is still unused. Node CPU and
//! memory are respected in the target state; the moves are then carried out
//! in an order in which each fits (a move waiting on room another frees
//! comes after it), and those that never fit are left out.
//!
//! Which GPU ends up with which packing is then chosen again by a
//! min-cost flow over groups of GPUs with the same content ([`assign`]),
//! and kept when it needs fewer moves than FFD's own choice.

mod assign;

use std::collections::{BTreeMap, BTreeSet};

use tessera_core::cluster::GpuSet;
use tessera_core::model::{GPU_MILLI, GpuHealth, NodeId, Tier};

use crate::plan::Strategy;
use crate::scratch::Scratch;

/// Best-fit candidates looked at per pod before giving up on a set.
const BEST_FIT_TRIES: usize = 256;

/// A GPU the packing may use: its node, index, and the share it has free
/// once every candidate pod is lifted off it.
#[derive(Debug, Clone, Copy)]
struct Bin {
    node: NodeId,
    gpu: u8,
    free: u32,
    open: bool,
}

/// The GPU pod `i` runs on.
fn home_of(s: &Scratch<'_>, i: usize) -> Option<(NodeId, u8)> {
    Some((s.at[i].node, s.at[i].gpus.indices().next()? as u8))
}

/// Plans the re-packing on `s` (which must have no moves yet) with at most
/// `budget` moves; returns the moves made.
pub(crate) fn run(s: &mut Scratch<'_>, budget: usize) -> usize {
    let start = s.moves.len();
    // Candidates: movable sharing pods, by the GPU model they run on.
    let mut by_model: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for i in 0..s.running.len() {
        let p = s.pod(i);
        if s.movable(i) && p.gpu_count == 1 && p.gpu_milli < GPU_MILLI && s.in_focus(s.at[i].node) {
            let model = s.cluster.nodes()[s.at[i].node as usize].gpu_model.clone();
            by_model.entry(model).or_default().push(i);
        }
    }
    // Node room once every candidate is lifted.
    let mut cpu: Vec<u64> = s.cluster.nodes().iter().map(|n| n.free.cpu_milli).collect();
    let mut mem: Vec<u64> = s.cluster.nodes().iter().map(|n| n.free.memory_mib).collect();
    let mut target: Vec<Option<(NodeId, u8)>> = vec![None; s.running.len()];
    for pods in by_model.values() {
        for &i in pods {
            let (p, n) = (s.pod(i), s.at[i].node as usize);
            cpu[n] += p.requests.cpu_milli;
            mem[n] += p.requests.memory_mib;
        }
    }
    let (lifted_cpu, lifted_mem) = (cpu.clone(), mem.clone());
    for (model, pods) in &by_model {
        // Bins: usable GPUs of ready nodes of this model, their free share
        // with the candidates lifted.
        let mut bins: Vec<Bin> = Vec::new();
        let mut index: BTreeMap<(NodeId, u8), usize> = BTreeMap::new();
        for n in s.cluster.nodes().iter().filter(|n| n.ready && &n.gpu_model == model) {
            for (g, gpu) in n.gpus.iter().enumerate() {
                if gpu.health != GpuHealth::Failed {
                    index.insert((n.id, g as u8), bins.len());
                    bins.push(Bin { node: n.id, gpu: g as u8, free: gpu.free_milli, open: false });
                }
            }
        }
        for &i in pods {
            let g = s.at[i].gpus.indices().next().expect("a sharing pod holds a GPU") as u8;
            if let Some(&b) = index.get(&(s.at[i].node, g)) {
                bins[b].free += s.pod(i).gpu_milli;
            }
        }
        // A GPU that keeps an unmovable pod is in use whatever happens.
        // Open and unopened bins by free share, for best-fit lookups.
        let (mut open, mut closed) = (BTreeSet::new(), BTreeSet::new());
        for (b, bin) in bins.iter_mut().enumerate() {
            bin.open = bin.free < GPU_MILLI;
            if bin.open {
                open.insert((bin.free, b));
            } else {
                closed.insert((bin.free, b));
            }
        }
        let pinned: Vec<bool> = bins.iter().map(|b| b.open).collect();
        let mut order = pods.clone();
        order.sort_by_key(|&i| (std::cmp::Reverse(s.pod(i).gpu_milli), i));
        for i in order {
            let p = s.pod(i);
            if !(p.allowed_models.is_empty() || p.allowed_models.contains(model)) {
                continue;
            }
            let fits = |b: &Bin| {
                b.free >= p.gpu_milli
                    && cpu[b.node as usize] >= p.requests.cpu_milli
                    && mem[b.node as usize] >= p.requests.memory_mib
                    && s.cluster.nodes()[b.node as usize].admits(p)
            };
            let best_in = |set: &BTreeSet<(u32, usize)>| {
                set.range((p.gpu_milli, 0)..).take(BEST_FIT_TRIES).map(|&(_, b)| b).find(|&b| fits(&bins[b]))
            };
            let home = s.at[i].gpus.indices().next().map(|g| (s.at[i].node, g as u8));
            let home_bin = home.and_then(|h| index.get(&h).copied());
            // Stay if home is in use and has room; else the fullest open bin
            // that fits; else open home; else open the fullest unopened bin.
            let choice = home_bin
                .filter(|&b| bins[b].open && fits(&bins[b]))
                .or_else(|| best_in(&open))
                .or_else(|| home_bin.filter(|&b| fits(&bins[b])))
                .or_else(|| best_in(&closed));
            let Some(b) = choice else { continue };
            if bins[b].open {
                open.remove(&(bins[b].free, b));
            } else {
                closed.remove(&(bins[b].free, b));
            }
            bins[b].free -= p.gpu_milli;
            bins[b].open = true;
            open.insert((bins[b].free, b));
            cpu[bins[b].node as usize] -= p.requests.cpu_milli;
            mem[bins[b].node as usize] -= p.requests.memory_mib;
            target[i] = Some((bins[b].node, bins[b].gpu));
        }
        // The same packings, placed with the fewest moves.
        let mut fewer = target.clone();
        let packing =
            assign::Packing { bins: &bins, pinned: &pinned, index: &index, pods, cpu: &lifted_cpu, mem: &lifted_mem };
        let (by_flow, unfilled) = assign::fewest_moves(s, &packing, &mut fewer);
        let by_ffd = pods.iter().filter(|&&i| target[i].is_some_and(|t| Some(t) != home_of(s, i))).count();
        if unfilled == 0 && by_flow < by_ffd {
            for &i in pods {
                target[i] = fewer[i];
            }
        }
    }
    // Carry the moves out in an order in which each fits.
    let mut left: Vec<(usize, NodeId, u8)> = target
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let (node, gpu) = (*t)?;
            let home = (s.at[i].node, s.at[i].gpus.indices().next()? as u8);
            (home != (node, gpu) && s.running[i].0.tier != Tier::Hard).then_some((i, node, gpu))
        })
        .collect();
    loop {
        let before = left.len();
        left.retain(|&(i, node, gpu)| {
            if s.moves.len() - start >= budget || s.out_of_time() {
                return false;
            }
            // Within a node a pod only changes GPU through another node.
            node == s.at[i].node || !s.try_move(i, node, GpuSet(1 << gpu), Strategy::FragmentMerge)
        });
        if left.is_empty() || left.len() == before {
            break;
        }
    }
    let touched = s.touched_since(start);
    let removed = -s.frag_delta(&touched, true);
    s.gain += s.weights.gain(removed.max(0.0));
    s.moves.len() - start
}
