//! Where each target packing goes: the fewest moves that reach it.
//!
//! First-fit decreasing decides *what* the GPUs of a model hold after the
//! re-packing (a multiset of shares per GPU), and puts each packing on
//! some GPU with a preference for pods' own GPUs. Which GPU takes which
//! packing is a transportation problem: a GPU holding shares `a` that is
//! given packing `b` sends `Σ_c max(0, a_c − b_c)` pods away. GPUs with the
//! same content are one supply group, packings with the same content one
//! demand group (equivalent pods grouped: a few hundred groups for a
//! hundred thousand pods), and the min-cost flow of [`crate::flow`] gives
//! the assignment with the fewest moves. Pods of a share that stays are
//! kept; the others leave for GPUs short of that share, on another node
//! with room for their CPU and memory.
//!
//! GPUs beside a pod that cannot move (and GPUs where a candidate got no
//! target) keep the packing FFD gave them; only the share-level matching
//! applies there.

use std::collections::BTreeMap;

use tessera_core::model::NodeId;

use super::Bin;
use crate::flow;
use crate::scratch::Scratch;

/// Leaving pods looked at per open slot before the slot is left empty.
const TRIES: usize = 64;

/// The model's re-packing: its bins, the candidate pods on them, the room
/// of each node with every candidate lifted, and FFD's `target` per pod
/// (rewritten in place).
pub(super) struct Packing<'p> {
    pub bins: &'p [Bin],
    /// Bins beside a pod that does not move.
    pub pinned: &'p [bool],
    pub index: &'p BTreeMap<(NodeId, u8), usize>,
    pub pods: &'p [usize],
    pub cpu: &'p [u64],
    pub mem: &'p [u64],
}

/// Re-targets the pods of `p` so that FFD's packings are reached with the
/// fewest moves; returns the moves the new targets make and the places in
/// the packings no pod could be found for.
pub(super) fn fewest_moves(s: &Scratch<'_>, p: &Packing<'_>, target: &mut [Option<(NodeId, u8)>]) -> (usize, usize) {
    let nb = p.bins.len();
    let home = |i: usize| super::home_of(s, i).and_then(|h| p.index.get(&h).copied());
    // Current and target content of each bin (shares, sorted), and which
    // bins may take any packing: no unmovable pod, no candidate left out.
    let mut cur: Vec<Vec<u32>> = vec![Vec::new(); nb];
    let mut tgt: Vec<Vec<u32>> = vec![Vec::new(); nb];
    let mut free_to_take: Vec<bool> = p.pinned.iter().map(|&x| !x).collect();
    for &i in p.pods {
        let share = s.pod(i).gpu_milli;
        let h = home(i);
        match (h, target[i].and_then(|t| p.index.get(&t).copied())) {
            (Some(h), Some(t)) => {
                cur[h].push(share);
                tgt[t].push(share);
            }
            (None, Some(t)) => tgt[t].push(share),
            (Some(h), None) => free_to_take[h] = false,
            (None, None) => {}
        }
    }
    for v in cur.iter_mut().chain(tgt.iter_mut()) {
        v.sort_unstable();
    }
    // Supply: free bins by current content; demand: their packings.
    let free: Vec<usize> = (0..nb).filter(|&b| free_to_take[b]).collect();
    let mut supply_of: BTreeMap<&[u32], Vec<usize>> = BTreeMap::new();
    let mut demand_of: BTreeMap<Vec<u32>, u64> = BTreeMap::new();
    for &b in &free {
        supply_of.entry(&cur[b]).or_default().push(b);
        *demand_of.entry(std::mem::take(&mut tgt[b])).or_insert(0) += 1;
    }
    let supplies: Vec<(&[u32], Vec<usize>)> = supply_of.into_iter().collect();
    let demands: Vec<(Vec<u32>, u64)> = demand_of.into_iter().collect();
    let counts: Vec<u64> = supplies.iter().map(|(_, b)| b.len() as u64).collect();
    let wanted: Vec<u64> = demands.iter().map(|&(_, n)| n).collect();
    let (routes, _) = flow::transport(&counts, &wanted, |i, j| Some(leaving(supplies[i].0, &demands[j].0) as i64));
    // The free bins' packings as the flow places them (the others' stay).
    let mut next: Vec<usize> = vec![0; supplies.len()];
    let mut placed: Vec<(usize, usize)> = Vec::with_capacity(free.len());
    for (i, j, units) in routes {
        for _ in 0..units {
            placed.push((supplies[i].1[next[i]], j));
            next[i] += 1;
        }
    }
    for (b, j) in placed {
        tgt[b].clone_from(&demands[j].0);
    }

    // Stayers: per bin and share, the pods that cost most to move stay.
    let mut by_bin: Vec<Vec<usize>> = vec![Vec::new(); nb];
    let mut homeless: Vec<usize> = Vec::new();
    for &i in p.pods.iter().filter(|&&i| target[i].is_some()) {
        match home(i) {
            Some(h) => by_bin[h].push(i),
            None => homeless.push(i),
        }
    }
    let (mut cpu, mut mem) = (p.cpu.to_vec(), p.mem.to_vec());
    // Leaving pods by share; open slots (bin, share).
    let mut leaving_pods: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    let mut slots: Vec<(usize, u32)> = Vec::new();
    for b in 0..nb {
        let mut want = std::mem::take(&mut tgt[b]);
        let mut here = std::mem::take(&mut by_bin[b]);
        here.sort_by(|&x, &y| s.move_cost(y).total_cmp(&s.move_cost(x)).then(x.cmp(&y)));
        for i in here {
            let share = s.pod(i).gpu_milli;
            if let Some(k) = want.iter().position(|&w| w == share) {
                want.swap_remove(k);
                target[i] = Some((p.bins[b].node, p.bins[b].gpu));
                let n = p.bins[b].node as usize;
                cpu[n] -= s.pod(i).requests.cpu_milli;
                mem[n] -= s.pod(i).requests.memory_mib;
            } else {
                target[i] = None;
                leaving_pods.entry(share).or_default().push(i);
            }
        }
        slots.extend(want.into_iter().map(|w| (b, w)));
    }
    for i in homeless {
        target[i] = None;
        leaving_pods.entry(s.pod(i).gpu_milli).or_default().push(i);
    }
    // Fill the slots, largest share first, with a leaving pod of that share
    // from another node that the slot's node has room for.
    slots.sort_by_key(|&(b, w)| (std::cmp::Reverse(w), b));
    let (mut moves, mut unfilled) = (0, 0);
    for (b, w) in slots {
        let Some(pool) = leaving_pods.get_mut(&w) else {
            unfilled += 1;
            continue;
        };
        let bin = p.bins[b];
        let n = bin.node as usize;
        let pick = pool.iter().take(TRIES).position(|&i| {
            let q = s.pod(i);
            s.at[i].node != bin.node
                && q.requests.cpu_milli <= cpu[n]
                && q.requests.memory_mib <= mem[n]
                && s.cluster.nodes()[n].admits(q)
        });
        let Some(k) = pick else {
            unfilled += 1;
            continue;
        };
        let i = pool.remove(k);
        cpu[n] -= s.pod(i).requests.cpu_milli;
        mem[n] -= s.pod(i).requests.memory_mib;
        target[i] = Some((bin.node, bin.gpu));
        moves += 1;
    }
    (moves, unfilled)
}

/// Pods a GPU holding `have` sends away when it is to hold `want` (both
/// sorted).
fn leaving(have: &[u32], want: &[u32]) -> usize {
    let (mut i, mut j, mut kept) = (0, 0, 0);
    while i < have.len() && j < want.len() {
        match have[i].cmp(&want[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                kept += 1;
                i += 1;
                j += 1;
            }
        }
    }
    have.len() - kept
}

#[cfg(test)]
mod tests {
    use super::leaving;

    #[test]
    fn leaving_counts_the_shares_the_packing_has_no_place_for() {
        assert_eq!(leaving(&[250, 250, 500], &[250, 750]), 2);
        assert_eq!(leaving(&[250, 500], &[250, 500]), 0);
        assert_eq!(leaving(&[], &[1000]), 0);
        assert_eq!(leaving(&[100, 200], &[]), 2);
    }
}
