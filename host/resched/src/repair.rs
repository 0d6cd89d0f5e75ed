//! Re-pairing (`fragment_merge`): move a sharing pod to the GPU where it
//! completes a tight packing, when that leaves less share stranded for good.
//!
//! Online placement pairs what is there: a 0.47 pod lands beside a 0.32
//! one (0.21 left, which almost nothing the workload asks for can use)
//! because no better gap was open at the time. Later a GPU holding a lone
//! 0.47 opens; moving the first 0.47 there makes 0.47 + 0.47 (0.06 left)
//! and leaves the 0.32 with 0.68 free, which a 0.65 pod fills. The drains
//! ([`crate::defrag`]) never see this move: it empties no GPU.
//!
//! The measure is a gap's *residue*: of `g` free, what no sum of the
//! workload's common sharing sizes can fill (`g − max Σ ≤ g`); an entirely
//! free GPU has none (whole-GPU pods take it). A move of share `s` from a
//! GPU with `a` free to one with `b` free gains
//! `R(a) + R(b) − R(a + s) − R(b − s)`; moves are taken best net gain
//! (`γ·gain − cost`) first while they still gain as the cluster stands, in
//! up to [`PASSES`] rounds (a move opens gaps the next round can use). A
//! gap on a node with less CPU free than any common sharing pod asks for
//! counts whole: nothing will fill it.

use tessera_core::cluster::GpuSet;
use tessera_core::metrics::TargetWorkload;
use tessera_core::model::{GPU_MILLI, NodeId};
use tessera_sdk::residue;

use crate::plan::Strategy;
use crate::scratch::Scratch;

/// Destination GPUs tried per distinct free share.
const TRIES: usize = 16;

/// Most rounds of candidates per plan.
const PASSES: usize = 3;

/// Residues of gaps under a workload.
pub(crate) struct Residues {
    /// `R(g)` for `g` in `0..=1000`.
    by_gap: Vec<u16>,
    /// The least CPU a common sharing pod asks for: a node with less free
    /// has nothing that fills its gaps.
    min_cpu: u64,
}

impl Residues {
    /// The residue of a gap of `gap` on a node with `cpu_free` millicores.
    pub(crate) fn of(&self, gap: u32, cpu_free: u64) -> u32 {
        match gap {
            0 => 0,
            g if g >= GPU_MILLI => 0,
            g if cpu_free < self.min_cpu => g,
            g => u32::from(self.by_gap[g as usize]),
        }
    }

    /// What moving a pod of `share` and `cpu` from a GPU with `a` free (on
    /// a node with `here` CPU free) to one with `b` free (`there` CPU free)
    /// takes off the residues; the pod must fit at `b`.
    fn move_gain(&self, share: u32, cpu: u64, (a, here): (u32, u64), (b, there): (u32, u64)) -> i64 {
        i64::from(self.of(a, here)) + i64::from(self.of(b, there))
            - i64::from(self.of(a + share, here + cpu))
            - i64::from(self.of(b - share, there - cpu))
    }
}

/// `R(g)` for `g` in `0..=1000`: what of a gap of `g` no sum of the common
/// sharing sizes of `workload` fills — the `fgd` plugin's rule
/// ([`tessera_sdk::residue`]).
pub(crate) fn residues(workload: &TargetWorkload) -> Residues {
    let gpu_weight: f64 = workload.shapes.iter().filter(|(s, _)| s.gpu_count > 0).map(|(_, w)| w).sum();
    let sharing = workload.shapes.iter().filter(|(s, _)| s.gpu_count == 1).map(|(s, w)| (s.gpu_milli, *w));
    let common = residue::common_sizes(sharing, gpu_weight);
    let min_cpu = workload
        .shapes
        .iter()
        .filter(|(s, _)| s.gpu_count == 1 && common.iter().any(|&(c, _)| c == s.gpu_milli))
        .map(|(s, _)| s.cpu_milli)
        .min()
        .unwrap_or(0);
    Residues { by_gap: residue::gap_residues(&common), min_cpu }
}

/// One candidate move: net gain, pod, destination.
type Candidate = (f64, usize, NodeId, u8);

/// Re-pairs while `budget` moves remain; returns the moves made.
pub(crate) fn run(s: &mut Scratch<'_>, budget: usize) -> usize {
    let start = s.moves.len();
    if budget == 0 {
        return 0;
    }
    let r = residues(s.workload);
    // A move opens gaps another move can then use: pass again while one
    // moves anything.
    for _ in 0..PASSES {
        let before = s.moves.len();
        pass(s, budget - (before - start), &r);
        if s.moves.len() == before || s.moves.len() - start >= budget || s.timed_out {
            break;
        }
    }
    s.moves.len() - start
}

/// One round of candidates, judged on the cluster as it stands.
fn pass(s: &mut Scratch<'_>, budget: usize, r: &Residues) {
    let start = s.moves.len();
    let cpu = |s: &Scratch<'_>, n: NodeId| s.cluster.nodes()[n as usize].free.cpu_milli;
    let mut candidates: Vec<Candidate> = Vec::new();
    // Distinct free shares of partially used GPUs, ascending.
    let mut frees: Vec<u32> = s.partial.iter().map(|&(f, _, _)| f).collect();
    frees.dedup();
    for i in 0..s.running.len() {
        let p = s.pod(i);
        let at = s.at[i];
        if !s.movable(i) || p.gpu_count != 1 || p.gpu_milli == 0 || p.gpu_milli >= GPU_MILLI || !s.in_focus(at.node) {
            continue;
        }
        let Some(g) = at.gpus.indices().next() else { continue };
        let a = s.cluster.nodes()[at.node as usize].gpus[g].free_milli;
        let (share, need) = (p.gpu_milli, p.requests.cpu_milli);
        let here = cpu(s, at.node);
        let freed = i64::from(r.of(a, here)) - i64::from(r.of(a + share, here + need));
        let cost = s.move_cost(i);
        // Destinations by free share, best first (as if CPU were no
        // object); the first GPU with that share that takes the pod.
        let mut by: Vec<(i64, u32)> = frees
            .iter()
            .filter(|&&b| b >= share)
            .map(|&b| (freed + i64::from(r.by_gap[b as usize]) - i64::from(r.by_gap[(b - share) as usize]), b))
            .filter(|&(gain, _)| gain > 0)
            .collect();
        by.sort_unstable_by(|x, y| y.cmp(x));
        for (_, b) in by.into_iter().take(TRIES) {
            let found = s
                .partial
                .range((b, 0, 0)..(b + 1, 0, 0))
                .filter(|&&(_, n, _)| n != at.node)
                .take(TRIES)
                .find(|&&(_, n, _)| tessera_core::cluster::check(&s.cluster.nodes()[n as usize], p).is_ok())
                .map(|&(_, n, gpu)| (n, gpu));
            let Some((n, gpu)) = found else { continue };
            let gain = r.move_gain(share, need, (a, here), (b, cpu(s, n)));
            let net = s.weights.gain(gain as f64) - cost;
            if net > s.weights.min_net_gain.max(0.0) {
                candidates.push((net, i, n, gpu));
                break;
            }
        }
    }
    candidates.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut gained = 0i64;
    for (_, i, node, gpu) in candidates {
        if s.moves.len() - start >= budget || s.out_of_time() {
            break;
        }
        // Earlier moves may have changed either GPU: judge it again.
        let at = s.at[i];
        let Some(g) = at.gpus.indices().next() else { continue };
        let share = s.pod(i).gpu_milli;
        let need = s.pod(i).requests.cpu_milli;
        let a = s.cluster.nodes()[at.node as usize].gpus[g].free_milli;
        let b = s.cluster.nodes()[node as usize].gpus[usize::from(gpu)].free_milli;
        let (here, there) = (cpu(s, at.node), cpu(s, node));
        if b < share || there < need || s.moved[i] {
            continue;
        }
        let gain = r.move_gain(share, need, (a, here), (b, there));
        if s.weights.gain(gain as f64) - s.move_cost(i) <= s.weights.min_net_gain.max(0.0) {
            continue;
        }
        if s.try_move(i, node, GpuSet(1 << gpu), Strategy::FragmentMerge) {
            gained += gain;
        }
    }
    let touched = s.touched_since(start);
    s.frag_delta(&touched, true);
    s.gain += s.weights.gain(gained as f64);
}

#[cfg(test)]
mod tests {
    use tessera_core::metrics::Shape;

    use super::*;

    fn workload(shares: &[(u32, f64)]) -> TargetWorkload {
        TargetWorkload {
            shapes: shares
                .iter()
                .map(|&(s, w)| {
                    let shape = Shape { cpu_milli: 1000, gpu_count: 1, gpu_milli: s, allowed_models: Vec::new() };
                    (shape, w)
                })
                .collect(),
        }
    }

    #[test]
    fn residue_is_what_common_sizes_cannot_fill() {
        // 0.47 and 0.65 common, 0.16 rare.
        let r = residues(&workload(&[(1000, 0.5), (470, 0.3), (650, 0.19), (160, 0.01)]));
        let cpu = 64_000;
        assert_eq!(r.of(1000, cpu), 0, "an empty GPU takes a whole pod");
        assert_eq!(r.of(210, cpu), 210, "0.21: only the rare 0.16 fits");
        assert_eq!(r.of(530, cpu), 60, "0.53 holds a 0.47");
        assert_eq!(r.of(680, cpu), 30, "0.68 holds a 0.65");
        assert_eq!(r.of(940, cpu), 0, "0.94 holds two 0.47s");
        assert_eq!(r.of(530, 999), 530, "no CPU left for a sharing pod: nothing fills it");
        // 0.55 is common but eight times rarer than 0.45, which also fits
        // a 0.55 gap: the gap is counted as what a 0.45 leaves.
        let r = residues(&workload(&[(1000, 0.5), (450, 0.4), (550, 0.05)]));
        assert_eq!((r.of(550, cpu), r.of(1000, cpu), r.of(900, cpu)), (100, 0, 0));
        let r = residues(&workload(&[(1000, 0.5), (450, 0.4), (550, 0.1)]));
        assert_eq!(r.of(550, cpu), 0);
    }
}
