//! Room kept for a gang that does not fit (`scheduling.reserve_after_s`;
//! Volcano's `elect` and `reserve`, Slurm's backfill reservation).
//!
//! A wide gang — eight 8-GPU members — needs eight nodes free at once.
//! While smaller pods keep taking whatever frees, that moment may never
//! come: the gang waits for ever although it is first in line. Once a gang
//! has waited `reserve_after_s` for room (its members parked because the
//! host's filter found too little, not for a queue or a missing member),
//! it is elected when it is next decided — a pass decides it again once it
//! has waited that long, if it could be elected then (`wake_electable`),
//! as a node freeing room for a member does — one gang at a time, the first
//! to qualify in queue order (with `reserve_per_queue`, one per leaf
//! queue) — and the nodes it needs are reserved for it: those whose pods
//! all declare when they end, the earliest free first, then the least in
//! use. No other pod is placed on them or preempts onto them, so they
//! empty as what runs there ends, and the gang fits. The reservation ends
//! when the gang runs, leaves, waits for something other than room, or a
//! reserved node stops being ready.
//!
//! **The kept nodes are taken afresh at each pass** (`refresh`): nothing
//! says which pod ends first, and one that runs for weeks on a node kept
//! at the election holds the others idle as long (Philly jobs resampled
//! onto a 96-GPU cluster: a 64-GPU gang kept eight of its twelve nodes for
//! 73 days). A node kept for no one where a member fits now replaces a
//! kept node still draining, and the one furthest from free goes back to
//! the other pods. Where the nodes it does not keep are refilled as soon
//! as anything ends, none ever empties: then, at most once per
//! `reserve_after_s`, the kept node whose oldest pod has run longest (at
//! least `reserve_after_s`, nothing there declaring its end) goes back for
//! a node kept for no one whose pods all started at most half as long ago
//! (`trade_oldest`): training jobs' run times are heavy-tailed, so the time
//! a pod has run is the one sign of how long it still runs.
//!
//! **Backfill** (Slurm's, with declared limits): when every pod running
//! on the kept nodes declares the most it runs (`Pod::run_limit_s`), the
//! moment they will all be free is known — the reservation's `ready_at`.
//! A pod of the gang's own leaf queue that declares a limit and will have
//! ended by then may use a kept node: the gang starts no later for it, and
//! the drain is not idle time. A pod without a limit, one that would run
//! past `ready_at`, and a pod of another queue are kept off as before.
//! `ready_at` is taken afresh at every pass (pods end early, or run past
//! what they declared: then it is unknown until they end). Preemptors
//! never backfill.
//!
//! Why the gang's own queue only: the reservation exists because that
//! queue waited; the drain is its turn. Backfill open to every queue gives
//! the drain to whichever queue has short jobs, and on the Philly traces
//! it took a queue of long one-GPU jobs from 0.97 of its fair share to
//! 0.83–0.89 (docs/BENCHMARKS.md §12, "Backfill"). Without queues every
//! pod is in the default leaf, and this is plain backfill.
//!
//! Deterministic: nodes are chosen by declared end, then use, ties by id;
//! traded by the start of their oldest pod, then use, then id. While nodes
//! are kept, each pass reads every pod once to take their `ready_at`
//! afresh (twice when a trade by age is due), and every node once per
//! waiting member to find the nodes a member fits now.

use std::collections::BTreeSet;

use super::{Scheduler, State};
use crate::cluster::check;
use crate::framework::Why;
use crate::model::{GPU_MILLI, GpuHealth, Node, NodeId, Pod, PodId};

/// Nodes kept for one gang.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Reservation {
    /// The gang's name.
    pub(super) gang: String,
    /// The nodes kept for it.
    pub(super) nodes: BTreeSet<NodeId>,
    /// When every pod running on them will have ended by what each
    /// declares; None if one declares nothing (or ran past it).
    pub(super) ready_at: Option<u64>,
    /// The loop's time at the pass that last took `ready_at`.
    pub(super) now: u64,
    /// The leaf queue of the gang it is kept for.
    pub(super) leaf: usize,
    /// When it last gave back a node for running the oldest pods (its
    /// election, until then): at most one such trade per
    /// `reserve_after_s`.
    pub(super) aged_at: u64,
}

impl Reservation {
    /// Whether it keeps its nodes from `pod` (not a member of its gang).
    fn against(&self, pod: &Pod) -> bool {
        pod.gang.as_ref().is_none_or(|g| g.name != self.gang)
    }

    /// Whether `pod`, of leaf queue `leaf`, may run on the kept nodes: it
    /// waits in the gang's queue, declares a limit and will have ended by
    /// the time they are all free.
    fn backfills(&self, pod: &Pod, leaf: Option<usize>) -> bool {
        if leaf != Some(self.leaf) {
            return false;
        }
        match (pod.run_limit_s, self.ready_at) {
            (Some(limit), Some(ready)) => self.now.saturating_add(limit) <= ready,
            _ => false,
        }
    }
}

/// A gang's reservation as the loop reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationStatus {
    /// The gang it is kept for.
    pub gang: String,
    /// The nodes kept, by name.
    pub nodes: Vec<String>,
    /// When they will all be free by what the pods on them declare (None:
    /// one declares nothing); pods that end by then may use them.
    pub ready_at: Option<u64>,
}

impl Scheduler {
    /// Whether node `n` is kept for a gang other than `pod`'s.
    pub(super) fn reserved_against(&self, pod: &Pod, n: NodeId) -> bool {
        self.reservations.iter().any(|r| r.nodes.contains(&n) && r.against(pod))
    }

    /// Whether node `n` is kept for any gang.
    fn kept(&self, n: NodeId) -> bool {
        self.reservations.iter().any(|r| r.nodes.contains(&n))
    }

    /// Takes the nodes kept for another gang out of `pod`'s candidates,
    /// unless it backfills them; how many were taken.
    pub(super) fn drop_reserved(&mut self, pod: &Pod) -> usize {
        if self.reservations.is_empty() {
            return 0;
        }
        let leaf = self.queues.tree.leaf_of(pod).ok();
        let closed: Vec<&Reservation> =
            self.reservations.iter().filter(|r| r.against(pod) && !r.backfills(pod, leaf)).collect();
        if closed.is_empty() {
            return 0;
        }
        let before = self.candidates.len();
        self.candidates.retain(|n| !closed.iter().any(|r| r.nodes.contains(n)));
        before - self.candidates.len()
    }

    /// Gang `name`, whose members `members` are waiting since `since`,
    /// could not be placed at `now` for want of room: it is elected if no
    /// gang is (of its leaf queue, with `reserve_per_queue`) and it has
    /// waited long enough, and the nodes it needs are kept for it, the
    /// earliest free by declared limits first, then the least in use
    /// (none if even an empty cluster, less nodes kept for others, could
    /// not hold it).
    pub(super) fn maybe_reserve(&mut self, name: &str, members: &[PodId], since: u64, now: u64) {
        let Some(after) = self.cfg.reserve_after_s else { return };
        if now.saturating_sub(since) < after || self.reservations.iter().any(|r| r.gang == name) {
            return;
        }
        let mut pods: Vec<&Pod> = members.iter().filter_map(|m| self.pods.get(m).map(|e| &e.pod)).collect();
        let tree = &self.queues.tree;
        let leaf = pods.first().map_or(tree.default_leaf(), |p| tree.leaf_of(p).unwrap_or(tree.default_leaf()));
        // One gang in the cluster, or with `reserve_per_queue` one per leaf.
        let taken = |r: &Reservation| !self.cfg.reserve_per_queue || r.leaf == leaf;
        if self.reservations.iter().any(taken) {
            return;
        }
        let kept: BTreeSet<NodeId> = self.reservations.iter().flat_map(|r| r.nodes.iter().copied()).collect();
        widest_first(&mut pods);
        // Each node as it would be with nothing running, for the host's
        // own filter ([`check`]) to judge.
        let empty: Vec<Node> = self.cluster.nodes().iter().map(emptied).collect();
        let free_at = self.free_at(now);
        let mut nodes = BTreeSet::new();
        for pod in pods {
            let best = self
                .cluster
                .nodes()
                .iter()
                .zip(&empty)
                .filter(|(n, e)| !nodes.contains(&n.id) && !kept.contains(&n.id) && check(e, pod).is_ok())
                .map(|(n, _)| n)
                .min_by_key(|n| nearest_free(&free_at, n));
            match best {
                Some(n) => nodes.insert(n.id),
                None => return,
            };
        }
        if !nodes.is_empty() {
            self.stats.reservations += 1;
            let ready_at = ready_at(&free_at, &nodes, now);
            let r = Reservation { gang: name.to_string(), nodes, ready_at, now, leaf, aged_at: now };
            self.reservations.push(r);
        }
    }

    /// With `reserve_after_s`, at a pass's start (at `now`): gangs that
    /// have waited that long for room are decided again where one could
    /// be elected (no gang holds nodes, or with `reserve_per_queue` none
    /// of its queue). A gang parked for room is otherwise decided again
    /// only when a node frees enough for a member, which in a full cluster
    /// may be never, and only a gang being decided is elected. At most
    /// once per `reserve_after_s` each.
    pub(super) fn wake_electable(&mut self, now: u64) {
        let Some(after) = self.cfg.reserve_after_s else { return };
        if !self.cfg.reserve_per_queue && !self.reservations.is_empty() {
            return;
        }
        let (parked, pods, tree) = (&self.parked, &self.pods, &self.queues.tree);
        let waits_for_room = |e: &super::Entry| matches!(&e.last_reason, Some(Why::Gang(w)) if w.short_of_room());
        let short_of_room = |m: &PodId| parked.contains(m) && pods.get(m).is_some_and(waits_for_room);
        // The gangs with a member parked for room, found from the parked
        // pods rather than from every gang's members (running gangs too):
        // one lookup each.
        let names: BTreeSet<&str> = parked
            .iter()
            .filter_map(|m| pods.get(m).filter(|e| waits_for_room(e)))
            .filter_map(|e| e.pod.gang.as_ref().map(|g| g.name.as_str()))
            .collect();
        let mut ready = Vec::new();
        for name in names {
            let Some(st) = self.gangs.get_mut(name) else { continue };
            if now.saturating_sub(st.since) < after || st.woken_at.is_some_and(|t| now < t.saturating_add(after)) {
                continue;
            }
            let waiting: Vec<PodId> = st.members.iter().copied().filter(short_of_room).collect();
            let Some(first) = waiting.first().and_then(|m| pods.get(m)) else { continue };
            let leaf = tree.leaf_of(&first.pod).unwrap_or(tree.default_leaf());
            if self.cfg.reserve_per_queue && self.reservations.iter().any(|r| r.leaf == leaf) {
                continue;
            }
            st.woken_at = Some(now);
            ready.extend(waiting);
        }
        self.wake(ready);
    }

    /// Ends the reservation of gang `name`, if it has one (it runs, or
    /// waits for something other than room).
    pub(super) fn unreserve(&mut self, name: &str) {
        if let Some(i) = self.reservations.iter().position(|r| r.gang == name) {
            self.end_reservation(i);
        }
    }

    /// At a pass's start (at `now`): a reservation whose gang left or
    /// runs, or one of whose nodes stopped being ready, ends; the others
    /// take their `ready_at` afresh.
    pub(super) fn check_reservation(&mut self, now: u64) {
        let mut i = 0;
        while let Some(r) = self.reservations.get(i) {
            let gone = self.gang_needs(&r.gang) == 0;
            let lost = r.nodes.iter().any(|&n| self.cluster.node(n).is_none_or(|n| !n.ready));
            if gone || lost {
                self.end_reservation(i);
            } else {
                i += 1;
            }
        }
        if self.reservations.is_empty() {
            return;
        }
        let free_at = self.free_at(now);
        for i in 0..self.reservations.len() {
            if !self.refresh(i, &free_at) {
                self.trade_oldest(i, &free_at, now);
            }
        }
        for r in &mut self.reservations {
            r.ready_at = ready_at(&free_at, &r.nodes, now);
            r.now = now;
        }
    }

    /// Reservation `i` at a pass's start keeps the nodes that free first
    /// in fact, not only those chosen when its gang was elected: a node
    /// kept for no one where a member fits now replaces a kept node still
    /// draining, the one furthest from free (by `free_at`, then use) going
    /// back (it takes other pods again). A node where a member fits now is
    /// never given back for one where none does, so nodes do not go back
    /// and forth. Whether it changed the kept nodes.
    fn refresh(&mut self, i: usize, free_at: &[Option<u64>]) -> bool {
        let r = &self.reservations[i];
        let Some(mut pods) = self.members_not_running(&r.gang) else { return false };
        widest_first(&mut pods);
        let open: Vec<&Node> = self.cluster.nodes().iter().filter(|n| n.ready && !self.kept(n.id)).collect();
        let node = |id: NodeId| self.cluster.node(id);
        // A node per member where it fits now, its own kept nodes first.
        let mut keep: BTreeSet<NodeId> = BTreeSet::new();
        for pod in &pods {
            let best = r
                .nodes
                .iter()
                .filter_map(|&id| node(id))
                .chain(open.iter().copied())
                .filter(|n| !keep.contains(&n.id) && check(n, pod).is_ok())
                .min_by_key(|n| (!r.nodes.contains(&n.id), n.id));
            if let Some(n) = best {
                keep.insert(n.id);
            }
        }
        if keep.is_subset(&r.nodes) {
            return false;
        }
        // Then the kept nodes still draining, the nearest to free first.
        let mut draining: Vec<&Node> =
            r.nodes.iter().filter(|id| !keep.contains(id)).filter_map(|&id| node(id)).collect();
        draining.sort_by_key(|n| nearest_free(free_at, n));
        let size = r.nodes.len();
        for n in draining {
            if keep.len() >= size {
                break;
            }
            keep.insert(n.id);
        }
        let given_back: Vec<NodeId> = r.nodes.difference(&keep).copied().collect();
        self.reservations[i].nodes = keep;
        for n in given_back {
            self.unpark(n);
        }
        true
    }

    /// Reservation `i` at a pass's start (at `now`), when no node where a
    /// member fits came to replace a draining one: once it has waited
    /// `reserve_after_s` since its election or its last such trade, the
    /// kept node whose oldest pod has run longest — at least
    /// `reserve_after_s`, and none of whose pods declares when it ends —
    /// goes back for a node kept for no one whose pods all started at
    /// most half as long ago, where every member the given-back node
    /// could hold would fit once it empties.
    ///
    /// Why the age of a pod: run times of training jobs are heavy-tailed
    /// (the Philly traces span minutes to months), so a job's expected
    /// time left grows with the time it has run, and a node held by a pod
    /// that has run for weeks is the one least likely to free soon. With
    /// nothing declared it is the only sign; the halving and one trade
    /// per `reserve_after_s` keep a reservation from chasing fresh nodes.
    fn trade_oldest(&mut self, i: usize, free_at: &[Option<u64>], now: u64) {
        let Some(after) = self.cfg.reserve_after_s else { return };
        let r = &self.reservations[i];
        if now.saturating_sub(r.aged_at) < after {
            return;
        }
        let Some(pods) = self.members_not_running(&r.gang) else { return };
        let oldest = self.oldest_start();
        let age = |id: NodeId| oldest.get(id as usize).copied().flatten().map(|t| now.saturating_sub(t));
        // The kept node with the longest-running pod, if nothing there
        // declares its end and it has run at least `reserve_after_s`.
        let Some((x, x_age)) = r
            .nodes
            .iter()
            .filter(|&&id| free_at.get(id as usize).copied().flatten().is_none())
            .filter_map(|&id| Some((id, age(id)?)))
            .max_by_key(|&(id, a)| (a, std::cmp::Reverse(id)))
        else {
            return;
        };
        if x_age < after {
            return;
        }
        let Some(x_node) = self.cluster.node(x) else { return };
        let x_empty = emptied(x_node);
        let holds: Vec<&Pod> = pods.iter().copied().filter(|p| check(&x_empty, p).is_ok()).collect();
        if holds.is_empty() {
            return;
        }
        let y = self
            .cluster
            .nodes()
            .iter()
            .filter(|n| n.ready && !self.kept(n.id))
            .map(|n| (n, age(n.id).unwrap_or(0)))
            .filter(|&(_, a)| a.saturating_mul(2) <= x_age)
            .filter(|(n, _)| {
                let e = emptied(n);
                holds.iter().all(|p| check(&e, p).is_ok())
            })
            .min_by_key(|&(n, a)| (a, in_use(n), n.id))
            .map(|(n, _)| n.id);
        let Some(y) = y else { return };
        let r = &mut self.reservations[i];
        r.nodes.remove(&x);
        r.nodes.insert(y);
        r.aged_at = now;
        self.unpark(x);
    }

    /// The members of gang `name` not running (None: no such gang).
    fn members_not_running(&self, name: &str) -> Option<Vec<&Pod>> {
        let st = self.gangs.get(name)?;
        let pods = st
            .members
            .iter()
            .filter_map(|m| self.pods.get(m))
            .filter(|e| !matches!(e.state, State::Running { .. }))
            .map(|e| &e.pod)
            .collect();
        Some(pods)
    }

    /// Per node (by id): when its longest-running pod started (None where
    /// nothing runs).
    fn oldest_start(&self) -> Vec<Option<u64>> {
        let mut oldest: Vec<Option<u64>> = vec![None; self.cluster.nodes().len()];
        self.running_entries().for_each(|(_, e)| {
            let State::Running { placement, started_at, .. } = e.state else { return };
            if let Some(slot) = oldest.get_mut(placement.node as usize) {
                *slot = Some(slot.map_or(started_at, |t| t.min(started_at)));
            }
        });
        oldest
    }

    /// Per node (by id): when every pod running there will have ended by
    /// its declared limit (`now` if none runs there); None where one
    /// declares none or has run past it.
    fn free_at(&self, now: u64) -> Vec<Option<u64>> {
        let mut free = vec![Some(now); self.cluster.nodes().len()];
        self.running_entries().for_each(|(_, e)| {
            let State::Running { placement, started_at, .. } = e.state else { return };
            let Some(slot) = free.get_mut(placement.node as usize) else { return };
            let end = e.pod.run_limit_s.map(|l| started_at.saturating_add(l)).filter(|&end| end >= now);
            *slot = match (*slot, end) {
                (Some(t), Some(end)) => Some(t.max(end)),
                _ => None,
            };
        });
        free
    }

    /// Ends reservation `i`: pods kept off its nodes get another chance
    /// at them.
    fn end_reservation(&mut self, i: usize) {
        let r = self.reservations.remove(i);
        for n in r.nodes {
            self.unpark(n);
        }
    }

    /// The reservations now, oldest first.
    pub fn reservations(&self) -> Vec<ReservationStatus> {
        self.reservations
            .iter()
            .map(|r| ReservationStatus {
                gang: r.gang.clone(),
                nodes: r.nodes.iter().filter_map(|&n| self.cluster.node(n)).map(|n| n.name.clone()).collect(),
                ready_at: r.ready_at,
            })
            .collect()
    }
}

/// A gang's members, the widest first: they have the fewest nodes to
/// choose from.
fn widest_first(pods: &mut [&Pod]) {
    pods.sort_by_key(|p| std::cmp::Reverse((p.gpu_count, p.requests.cpu_milli, p.requests.memory_mib)));
}

/// The order nodes are kept in (smallest first), from [`Scheduler::free_at`]'s
/// answer: those whose pods all declare when they end, the earliest free
/// first (a gang starts when the last of its nodes frees); then, and where
/// nothing is declared, the least in use; ties by id.
fn nearest_free(free_at: &[Option<u64>], n: &Node) -> ((u8, u64), (u32, u64), NodeId) {
    let declared = free_at.get(n.id as usize).copied().flatten().map_or((1, 0), |t| (0, t));
    (declared, in_use(n), n.id)
}

/// `node` with nothing running on it: all it has is free.
fn emptied(node: &Node) -> Node {
    let mut n = node.clone();
    n.free = n.capacity;
    for g in &mut n.gpus {
        g.free_milli = GPU_MILLI;
    }
    n
}

/// What runs on `node`: GPU share in use, then CPU.
fn in_use(node: &Node) -> (u32, u64) {
    let gpu = node.gpus.iter().filter(|g| g.health != GpuHealth::Failed).map(|g| GPU_MILLI - g.free_milli).sum();
    (gpu, node.capacity.cpu_milli.saturating_sub(node.free.cpu_milli))
}

/// When every pod running on `nodes` will have ended by its declared
/// limit (`now` if none runs there), from [`Scheduler::free_at`]'s answer
/// per node; None if that is unknown for one of them.
fn ready_at(free_at: &[Option<u64>], nodes: &BTreeSet<NodeId>, now: u64) -> Option<u64> {
    nodes.iter().try_fold(now, |ready, &n| Some(ready.max(free_at.get(n as usize).copied().flatten()?)))
}

#[cfg(test)]
mod tests;
