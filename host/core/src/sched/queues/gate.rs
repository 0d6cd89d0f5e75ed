//! The fair-share gate (`queues.fair_share_gate`): at each pass's start
//! every queue's fair share of GPUs (moved by remembered use with
//! `usage_half_life_s`, see `usage`), the verdict on a pod or gang of a
//! queue at its share (`SCHED-QUEUE-FAIR-SHARE`), held pods woken as
//! their queue falls below it, and with `fairness_target` no holding while
//! remembered fairness is at or above the target.

use super::Tally;
use crate::framework::QueueWait;
use crate::model::Pod;
use crate::quota::{Amounts, Dim};
use crate::sched::Scheduler;

/// What the fair-share gate holds each queue to this pass.
#[derive(Debug, Clone)]
pub(in crate::sched) struct GateShares {
    /// GPUs (thousandths): its fair share, moved by remembered use.
    share: Vec<u64>,
    /// Whether remembered use moved it below its fair share (the queue
    /// owes): then even a queue using nothing starts nothing new.
    owes: Vec<bool>,
}

impl Scheduler {
    /// Whether the gate acts at all: `fair_share_gate` over more than the
    /// one implicit queue.
    fn gate_on(&self) -> bool {
        self.queues.tree.fair_share_gate() && !self.queues.tree.is_trivial()
    }

    /// With `reclaim_to_fair_share`, while the gate holds queues this pass:
    /// the share of GPUs (thousandths) queue `q` may reclaim up to and
    /// keeps from reclaim.
    pub(in crate::sched) fn reclaim_share(&self, q: usize) -> Option<u64> {
        let gate = self.queues.share.as_ref().filter(|_| self.queues.tree.reclaim_to_fair_share())?;
        gate.share.get(q).copied()
    }

    /// With `usage_half_life_s`: fairness across the leaf queues as the
    /// gate remembers it (Jain over held ÷ fair-share GPU-seconds; see
    /// `fairness_target`). `None` without remembered use.
    pub fn remembered_fairness(&self) -> Option<f64> {
        self.queues.usage.as_ref().map(|u| u.fairness(&self.queues.tree))
    }

    /// With `fair_share_gate`, at the start of the pass at `now`: each
    /// queue's fair share of GPUs (demand-aware, so it grows when another
    /// queue's demand ends; moved by what each held before, with
    /// `usage_half_life_s`), and the pods the gate parked woken where their
    /// queue is now below it.
    pub(in crate::sched) fn open_gate(&mut self, now: u64) {
        if !self.gate_on() {
            self.queues.share = None;
            return;
        }
        let capacity = self.capacity();
        let Tally { demand, fair, .. } = self.tally(&capacity);
        let gpus = |a: &[Amounts]| a.iter().map(|x| x.get(&Dim::Gpu)).collect::<Vec<u64>>();
        let (demand, fair) = (gpus(&demand), gpus(&fair));
        let share = match &mut self.queues.usage {
            Some(u) => {
                let tree = &self.queues.tree;
                let asked: u64 = tree.roots().iter().map(|&r| demand[r]).sum();
                u.begin(now, fair.clone(), asked > capacity.get(&Dim::Gpu));
                // Fair enough, as remembered: this pass holds no one.
                let relaxed = tree.fairness_target().is_some_and(|t| u.fairness(tree) >= t);
                (!relaxed).then(|| {
                    let share = u.shares(tree, &demand);
                    let owes = share.iter().zip(&fair).map(|(s, f)| s < f).collect();
                    GateShares { share, owes }
                })
            }
            None => Some(GateShares { owes: vec![false; fair.len()], share: fair }),
        };
        let mut gated = std::mem::take(&mut self.queues.gated);
        let mut ready = Vec::new();
        gated.retain(|&q, held| {
            let open = share.as_ref().is_none_or(|share| !self.over_share(q, share, 0));
            if open {
                ready.extend(held.iter().copied());
            }
            !open
        });
        self.queues.gated = gated;
        if let Some(share) = &share {
            ready.extend(self.may_reclaim_now(share, &demand, now));
        }
        ready.retain(|p| self.parked.contains(p));
        self.queues.share = share;
        self.wake(ready);
    }

    /// With `reclaim_to_fair_share`: parked pods of the leaf queues below
    /// their share whose share grew by a GPU or more (or to all the queue
    /// asks for) since their pods were last woken for it, or, with
    /// `reclaim_min_runtime_s`, that long ago (victims may have come of
    /// age). Room is what wakes a parked pod; a share that grows
    /// (time-based fair share, as the queue waits) may let it reclaim
    /// where nothing freed.
    fn may_reclaim_now(&mut self, gate: &GateShares, demand: &[u64], now: u64) -> Vec<crate::model::PodId> {
        if !self.queues.tree.reclaim_to_fair_share() {
            return Vec::new();
        }
        let tree = &self.queues.tree;
        let again = tree.reclaim_min_runtime_s();
        let mut leaves = std::collections::BTreeSet::new();
        for (l, &share) in gate.share.iter().enumerate() {
            let (woken, at) = &mut self.queues.reclaim_woken[l];
            *woken = (*woken).min(share);
            let grew = share > *woken && (share >= *woken + u64::from(crate::model::GPU_MILLI) || share >= demand[l]);
            let aged = again > 0 && now >= *at + again;
            if tree.nodes()[l].is_leaf() && self.queues.used[l].get(&Dim::Gpu) < share && (grew || aged) {
                (*woken, *at) = (share, now);
                leaves.insert(l);
            }
        }
        if leaves.is_empty() {
            return Vec::new();
        }
        self.parked
            .iter()
            .copied()
            .filter(|id| {
                self.pods.get(id).is_some_and(|e| {
                    crate::sched::waits_for_room(e) && tree.leaf_of(&e.pod).is_ok_and(|l| leaves.contains(&l))
                })
            })
            .collect()
    }

    /// At the end of a pass: what each queue uses, for the time until the
    /// next (`usage_half_life_s`).
    pub(in crate::sched) fn close_gate(&mut self) {
        // As open_gate began the pass (the gate held anyone or not).
        if self.gate_on()
            && let Some(u) = &mut self.queues.usage
        {
            u.end(self.queues.used.iter().map(|a| a.get(&Dim::Gpu)).collect());
        }
    }

    /// Whether queue `q` is held by the gate: it uses GPUs (or owes use,
    /// with `usage_half_life_s`) and would be at or past its share with
    /// `need` more, while a leaf queue outside it is below its own share
    /// (wants room it is entitled to).
    fn over_share(&self, q: usize, gate: &GateShares, need: u64) -> bool {
        let tree = &self.queues.tree;
        let share = &gate.share;
        let gpus = |q: usize| self.queues.used[q].get(&Dim::Gpu);
        let used = gpus(q);
        let past = if need == 0 { used >= share[q] } else { used + need > share[q] };
        (used > 0 || gate.owes[q])
            && past
            && (0..tree.nodes().len()).any(|l| tree.nodes()[l].is_leaf() && !tree.contains(q, l) && gpus(l) < share[l])
    }

    /// The gate's verdict on GPU pods `pods` of one queue (a pod, or a
    /// gang's waiting members, which pass as one): held if its queue or an
    /// ancestor is over its share ([`Self::over_share`]). Remembering use,
    /// they must also fit within the share: a queue that owes does not
    /// start work past what it is entitled to now.
    pub(in crate::sched) fn fair_share_wait<'a>(&self, pods: impl IntoIterator<Item = &'a Pod>) -> Option<QueueWait> {
        let gate = self.queues.share.as_ref()?;
        if self.queues.gate_off {
            return None;
        }
        let mut pods = pods.into_iter().filter(|p| p.gpu_count > 0).peekable();
        let first = *pods.peek()?;
        let need: u64 = match self.queues.usage {
            Some(_) => pods.map(|p| Amounts::anywhere(p).get(&Dim::Gpu)).sum(),
            None => 0,
        };
        let tree = &self.queues.tree;
        let leaf = tree.leaf_of(first).ok()?;
        tree.path(leaf).find(|&q| self.over_share(q, gate, need)).map(|q| QueueWait::FairShare {
            queue: tree.nodes()[q].name.clone(),
            used: Dim::Gpu.show(self.queues.used[q].get(&Dim::Gpu)),
            share: Dim::Gpu.show(gate.share[q]),
        })
    }
}
