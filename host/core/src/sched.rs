//! The scheduling loop: pending pods wait in a multi-level feedback queue;
//! each is decided in turn (hard filter, optional node sampling, the
//! placer's plugins, bind); a pod that fits nowhere may preempt cheaper pods
//! on one node, whose victims go back to the queue one level down; a pod
//! that still fits nowhere is parked, one level down, with its reason code,
//! until capacity frees (kube-scheduler's unschedulable pool).
//!
//! Tiers:
//! - **hard**: constraints hold exactly and the GPUs are exclusive: a share
//!   request is served by a whole GPU nobody else shares; never preempted;
//! - **soft** (online services): may preempt opportunistic pods and
//!   lower-priority soft pods; the plugins steer them to low-load nodes;
//! - **opportunistic** (batch): fills what is left (the host's GPU choice
//!   is best fit), preempted first.
//!
//! Deterministic: time is the caller's clock, nothing here reads a clock or
//! does IO.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, FilterReason, Placement};
use crate::framework::{Placer, Why, bind_choice};
use crate::model::{GPU_MILLI, Node, NodeId, Pod, Tier};

pub use config::{Sampling, SchedConfig};
pub use gang::GangStatus;
pub use live::{AdoptError, PlaceError};
pub use queues::QueueStatus;
pub use reserve::ReservationStatus;

pub use crate::model::PodId;

/// A pod the loop cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    /// The id is already in use.
    #[error("pod id {0} is already known")]
    Duplicate(PodId),
}

/// What happened to a pod in a pass of [`Scheduler::schedule`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// Bound after waiting `waited` clock units since submission.
    Bound {
        /// Pod.
        pod: PodId,
        /// Where.
        placement: Placement,
        /// Wait since submission.
        waited: u64,
        /// Feasible nodes the placer chose among.
        candidates: usize,
    },
    /// Bound after evicting `victims` from `placement.node`.
    Preempted {
        /// Pod.
        pod: PodId,
        /// Where.
        placement: Placement,
        /// Evicted pods, back in the queue.
        victims: Vec<PodId>,
        /// Wait since submission.
        waited: u64,
    },
    /// Fits nowhere now; parked until capacity frees.
    Unschedulable {
        /// Pod.
        pod: PodId,
        /// The most common rejection over all nodes.
        reason: Why,
    },
}

/// One decision attempt as the loop saw it, with what came of it: the
/// one record a decision is explained and traced from (see
/// [`Scheduler::record_attempts`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// Pod.
    pub pod: PodId,
    /// Nodes the host's hard filter rejected, by reason (in
    /// [`FilterReason::ALL`] order).
    pub host_rejected: [u32; FilterReason::COUNT],
    /// Nodes that passed the hard filter and went to the placer (none:
    /// the placer was not asked).
    pub candidates: usize,
    /// What came of it.
    pub event: Event,
}

/// Counters of the loop.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedStats {
    /// Decisions attempted.
    pub attempts: u64,
    /// Pods bound (by preemption too).
    pub bound: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Pods evicted by preemption.
    pub evicted: u64,
    /// Failed attempts by reason code.
    pub unschedulable: BTreeMap<String, u64>,
    /// Plugin errors and faults.
    pub plugin_errors: u64,
    /// Decisions past their time budget.
    pub deadline_hits: u64,
    /// Candidates handed to the placer, summed over decisions.
    pub nodes_scored: u64,
    /// Gangs placed together (`min_member` bound at once).
    #[serde(default)]
    pub gangs_admitted: u64,
    /// Gang attempts that could not place `min_member` and released what
    /// they held.
    #[serde(default)]
    pub gang_rollbacks: u64,
    /// Gangs nodes were reserved for (`scheduling.reserve_after_s`).
    #[serde(default)]
    pub reservations: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Queued,
    Parked { level: usize, since: u64 },
    Running { placement: Placement, started_at: u64, level: usize },
}

#[derive(Debug, Clone)]
struct Entry {
    pod: Pod,
    state: State,
    submitted_at: u64,
    last_reason: Option<Why>,
}

/// Whether a parked pod waits for room, which a node's room (or a queue's
/// growing share of it) may end: not a gang waiting for its members
/// (their arrival ends that) nor a pod a queue holds (its use falling
/// does).
fn waits_for_room(e: &Entry) -> bool {
    !matches!(&e.last_reason, Some(Why::Gang(w)) if w.needs_members())
        && e.last_reason.as_ref().is_none_or(|w| w.queue_wait().is_none())
}

/// The loop over one cluster.
#[derive(Debug)]
pub struct Scheduler {
    cluster: Cluster,
    cfg: SchedConfig,
    /// Pending pods by queue, and what each queue uses.
    queues: queues::Queues,
    pods: BTreeMap<PodId, Entry>,
    parked: BTreeSet<PodId>,
    /// Running pods by (tier rank, priority): the least important first,
    /// so a pod that could not preempt it skips the search.
    running_keys: BTreeMap<(u8, i32), u32>,
    /// The running pods' ids: what preemption and reservations walk,
    /// instead of every pod known (a backlog is most of them).
    running: BTreeSet<PodId>,
    /// Nodes changed outside a pass, not yet told to the placer.
    dirty: BTreeSet<NodeId>,
    all_dirty: bool,
    next_start: usize,
    candidates: Vec<NodeId>,
    stats: SchedStats,
    last_rejected: [u32; FilterReason::COUNT],
    attempts: Option<Vec<Attempt>>,
    /// Running pods that may not be preempted now (a disruption budget).
    protected: BTreeSet<PodId>,
    /// Gangs with a member known, by name.
    gangs: BTreeMap<String, gang::GangState>,
    /// Nodes kept for gangs that waited too long for room, oldest first.
    reservations: Vec<reserve::Reservation>,
}

impl Scheduler {
    /// A loop over `nodes` (ids set to positions) with nothing pending.
    pub fn new(nodes: Vec<Node>, cfg: SchedConfig) -> Self {
        Self {
            cluster: Cluster::new(nodes),
            queues: queues::Queues::new(crate::quota::QueueTree::default(), cfg.queue),
            cfg,
            pods: BTreeMap::new(),
            parked: BTreeSet::new(),
            running_keys: BTreeMap::new(),
            running: BTreeSet::new(),
            dirty: BTreeSet::new(),
            all_dirty: true,
            next_start: 0,
            candidates: Vec::new(),
            stats: SchedStats::default(),
            last_rejected: [0; FilterReason::COUNT],
            attempts: None,
            protected: BTreeSet::new(),
            gangs: BTreeMap::new(),
            reservations: Vec::new(),
        }
    }

    /// The placer was replaced (a new policy): every node is told to it
    /// again before the next decision.
    pub fn resync(&mut self) {
        self.all_dirty = true;
    }

    /// Keeps a record of every decision attempt from now on (or stops),
    /// for [`Scheduler::take_attempts`].
    pub fn record_attempts(&mut self, on: bool) {
        self.attempts = on.then(Vec::new);
    }

    /// The attempts recorded since the last call, in the order they ran.
    pub fn take_attempts(&mut self) -> Vec<Attempt> {
        self.attempts.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The cluster as it stands.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Counters so far.
    pub fn stats(&self) -> &SchedStats {
        &self.stats
    }

    /// Pods queued at each level (parked pods not included).
    pub fn queue_depths(&self) -> Vec<usize> {
        self.listed_depths()
    }

    /// Pods parked as unschedulable.
    pub fn parked(&self) -> usize {
        self.parked.len()
    }

    /// Pods waiting (queued or parked) with the reason of their last
    /// failure, if they failed.
    pub fn waiting(&self) -> impl Iterator<Item = (PodId, &Pod, Option<&Why>)> {
        self.pods
            .iter()
            .filter(|(_, e)| !matches!(e.state, State::Running { .. }))
            .map(|(&id, e)| (id, &e.pod, e.last_reason.as_ref()))
    }

    /// Running pods and where.
    pub fn running(&self) -> impl Iterator<Item = (PodId, &Pod, Placement)> {
        self.running_entries().filter_map(|(id, e)| match e.state {
            State::Running { placement, .. } => Some((id, &e.pod, placement)),
            _ => None,
        })
    }

    /// The running pods' entries, by id (the order of `self.pods`). A
    /// lookup costs some ten steps of a walk: where most pods run, walking
    /// them all is cheaper than looking the running ones up.
    fn running_entries(&self) -> impl Iterator<Item = (PodId, &Entry)> {
        debug_assert!(
            self.pods
                .iter()
                .filter(|(_, e)| matches!(e.state, State::Running { .. }))
                .map(|(&id, _)| id)
                .eq(self.running.iter().copied()),
            "the running index holds exactly the running pods"
        );
        // `Either` passes `fold` on: a walk of the map folds faster than it steps.
        if self.running.len() * 8 > self.pods.len() {
            either::Either::Left(
                self.pods.iter().filter(|(_, e)| matches!(e.state, State::Running { .. })).map(|(&id, e)| (id, e)),
            )
        } else {
            either::Either::Right(self.running.iter().filter_map(|&id| Some((id, self.pods.get(&id)?))))
        }
    }

    /// Running pods grouped by node (index = node id), as telemetry
    /// samples them.
    pub fn running_by_node(&self) -> Vec<Vec<(&Pod, Placement)>> {
        let mut by_node = vec![Vec::new(); self.cluster.nodes().len()];
        for (_, pod, at) in self.running() {
            by_node[at.node as usize].push((pod, at));
        }
        by_node
    }

    /// A pod the loop knows (waiting or running), as it keeps it (a
    /// hard-tier GPU pod asks for whole GPUs).
    pub fn pod(&self, id: PodId) -> Option<&Pod> {
        self.pods.get(&id).map(|e| &e.pod)
    }

    /// Where a pod runs, if it does.
    pub fn placement(&self, id: PodId) -> Option<Placement> {
        match self.pods.get(&id)?.state {
            State::Running { placement, .. } => Some(placement),
            _ => None,
        }
    }

    /// Queues a new pod at level 0. A hard-tier pod asking for a share of
    /// a GPU is given the whole GPU (hard-tier GPUs are exclusive).
    pub fn submit(&mut self, id: PodId, mut pod: Pod, now: u64) -> Result<(), SchedError> {
        if self.pods.contains_key(&id) {
            return Err(SchedError::Duplicate(id));
        }
        if pod.tier == Tier::Hard && pod.gpu_count > 0 {
            pod.gpu_milli = GPU_MILLI;
        }
        let priority = pod.priority;
        self.pods.insert(id, Entry { pod, state: State::Queued, submitted_at: now, last_reason: None });
        self.enlist_new(id, priority, now);
        self.join_gang(id, now);
        Ok(())
    }

    /// The pod left (finished, deleted): its capacity frees and parked
    /// pods get another chance. `None` if unknown.
    pub fn remove(&mut self, id: PodId) -> Option<Pod> {
        self.protected.remove(&id);
        let e = self.pods.remove(&id)?;
        self.leave_gang(id, &e.pod);
        match e.state {
            // Popped later and skipped: the queue has no removal by item.
            State::Queued => {}
            State::Parked { .. } => {
                self.parked.remove(&id);
            }
            State::Running { placement, .. } => {
                self.cluster.unbind(&placement, &e.pod);
                self.forget_running(id, &e.pod);
                self.dirty.insert(placement.node);
                self.unpark(placement.node);
            }
        }
        Some(e.pod)
    }

    /// Moves running pod `id` to `to` (a rescheduling move carried out):
    /// its source frees (parked pods that fit there get another chance),
    /// it keeps its start time and level. On error nothing changes.
    pub fn migrate(&mut self, id: PodId, to: Placement) -> Result<Placement, crate::cluster::BindError> {
        let Some(e) = self.pods.get(&id) else { return Err(crate::cluster::BindError::NoSuchNode(to.node)) };
        let State::Running { placement: from, started_at, level } = e.state else {
            return Err(crate::cluster::BindError::NoSuchNode(to.node));
        };
        let pod = e.pod.clone();
        self.cluster.unbind(&from, &pod);
        match self.cluster.bind(to.node, &pod, to.gpus) {
            Ok(at) => {
                if let Some(e) = self.pods.get_mut(&id) {
                    e.state = State::Running { placement: at, started_at, level };
                }
                // Its GPUs may be of another model now.
                self.uncharge(id, false);
                self.charge(id, at.node);
                self.dirty.insert(from.node);
                self.dirty.insert(at.node);
                self.unpark(from.node);
                Ok(at)
            }
            Err(err) => {
                self.cluster.bind(from.node, &pod, from.gpus).expect("the pod was just there");
                Err(err)
            }
        }
    }

    /// Changes a node (readiness, health, capacity); parked pods that now
    /// fit on it get another chance.
    pub fn update_node<R>(&mut self, id: NodeId, f: impl FnOnce(&mut Node) -> R) -> Option<R> {
        let r = self.cluster.update_node(id, f)?;
        self.queues.capacity = None;
        self.dirty.insert(id);
        self.unpark(id);
        Some(r)
    }

    /// Changes what telemetry reports of a node (utilisation): plugins see
    /// it, capacity does not change, so parked pods stay parked.
    pub fn observe_node<R>(&mut self, id: NodeId, f: impl FnOnce(&mut Node) -> R) -> Option<R> {
        let r = self.cluster.update_node(id, f)?;
        self.dirty.insert(id);
        Some(r)
    }

    /// Node `node` gained room or changed: parked pods that fit on it now
    /// go back to the queue (kube-scheduler's queueing hints). Only this
    /// node changed, so a pod that does not fit here still fits nowhere.
    fn unpark(&mut self, node: NodeId) {
        let Some(n) = self.cluster.node(node) else { return };
        let ready: Vec<PodId> = self
            .parked
            .iter()
            .copied()
            .filter(|id| {
                self.pods.get(id).is_some_and(|e| waits_for_room(e) && crate::cluster::check(n, &e.pod).is_ok())
            })
            .collect();
        self.wake(ready);
    }

    /// Parked pods `ids` go back to the queue where they were.
    fn wake(&mut self, ids: Vec<PodId>) {
        for id in ids {
            self.parked.remove(&id);
            if let Some(e) = self.pods.get_mut(&id)
                && let State::Parked { level, since } = e.state
            {
                e.state = State::Queued;
                let priority = e.pod.priority;
                self.enlist(id, priority, level, since);
            }
        }
    }

    /// Running pod `id` stops running: its queue is no longer charged.
    fn forget_running(&mut self, id: PodId, pod: &Pod) {
        self.running.remove(&id);
        self.uncharge(id, true);
        let key = (Tier::rank(pod.tier), pod.priority);
        if let Some(c) = self.running_keys.get_mut(&key) {
            *c -= 1;
            if *c == 0 {
                self.running_keys.remove(&key);
            }
        }
    }

    /// Tells the placer what changed since it last heard (a decision made
    /// outside a pass, e.g. for a scheduler extender, needs it current).
    pub fn sync<P: Placer + ?Sized>(&mut self, placer: &mut P) {
        self.flush(placer);
    }

    /// Tells the placer what changed outside a pass.
    fn flush<P: Placer + ?Sized>(&mut self, placer: &mut P) {
        if std::mem::take(&mut self.all_dirty) {
            placer.nodes_changed(&self.cluster.nodes().iter().collect::<Vec<_>>());
            placer.prime();
        } else if !self.dirty.is_empty() {
            let nodes: Vec<&Node> = self.dirty.iter().filter_map(|&id| self.cluster.node(id)).collect();
            placer.nodes_changed(&nodes);
        }
        self.dirty.clear();
    }

    /// Decides every queued pod once, in queue order (victims of a
    /// preemption in this pass included). A member of a gang that still
    /// needs members placed brings its whole gang to the decision.
    pub fn schedule<P: Placer + ?Sized>(&mut self, placer: &mut P, now: u64) -> Vec<Event> {
        self.flush(placer);
        self.check_reservation(now);
        self.wake_electable(now);
        self.open_gate(now);
        let mut events = Vec::new();
        while let Some(p) = self.next_listed(now) {
            let id = p.item;
            let Some(e) = self.pods.get(&id) else { continue };
            if e.state != State::Queued {
                continue;
            }
            if let Some(gang) = e.pod.gang.as_ref().map(|g| g.name.clone())
                && self.gang_needs(&gang) > 0
            {
                self.schedule_gang(&gang, placer, now, p.level, &mut events);
                continue;
            }
            let pod = e.pod.clone();
            let event = self.decide(id, &pod, placer, now, p.level);
            events.push(event);
        }
        self.close_gate();
        events
    }

    /// One pod's decision: place it, else preempt for it, else park it.
    fn decide<P: Placer + ?Sized>(&mut self, id: PodId, pod: &Pod, placer: &mut P, now: u64, level: usize) -> Event {
        self.stats.attempts += 1;
        let placed = self.try_place(pod, placer);
        let (host_rejected, candidates) = (self.last_rejected, self.candidates.len());
        let event = match placed {
            Ok((placement, candidates)) => {
                let waited = self.bound(id, placement, now, level);
                Event::Bound { pod: id, placement, waited, candidates }
            }
            Err(reason) => {
                // Preemption frees capacity: it helps only against the
                // host's filter, not a plugin's rule.
                let preempted = match reason {
                    Why::Filter(_) => self.try_preempt(id, pod, placer, now, level),
                    Why::Plugin(_) | Why::Gang(_) | Why::Queue(_) => None,
                };
                match preempted {
                    Some(ev) => ev,
                    None => self.park(id, reason, now, level),
                }
            }
        };
        self.record(id, host_rejected, candidates, &event);
        event
    }

    /// Parks waiting pod `id` one level down with `reason`.
    fn park(&mut self, id: PodId, reason: Why, now: u64, level: usize) -> Event {
        *self.stats.unschedulable.entry(reason.code().to_string()).or_insert(0) += 1;
        let level = (level + 1).min(self.cfg.queue.levels.max(1) - 1);
        let e = self.pods.get_mut(&id).expect("a waiting pod");
        e.state = State::Parked { level, since: now };
        e.last_reason = Some(reason.clone());
        self.parked.insert(id);
        self.note_parked(id, &reason);
        Event::Unschedulable { pod: id, reason }
    }

    fn record(&mut self, pod: PodId, host_rejected: [u32; FilterReason::COUNT], candidates: usize, event: &Event) {
        if let Some(log) = self.attempts.as_mut() {
            log.push(Attempt { pod, host_rejected, candidates, event: event.clone() });
        }
    }

    fn bound(&mut self, id: PodId, placement: Placement, now: u64, level: usize) -> u64 {
        let e = self.pods.get_mut(&id).expect("pod being bound");
        e.state = State::Running { placement, started_at: now, level };
        e.last_reason = None;
        *self.running_keys.entry((Tier::rank(e.pod.tier), e.pod.priority)).or_insert(0) += 1;
        self.running.insert(id);
        self.stats.bound += 1;
        let waited = now.saturating_sub(e.submitted_at);
        self.charge(id, placement.node);
        self.note_admitted(id);
        waited
    }

    /// Hard filter (sampled), placer, bind. `Err`: the most common
    /// rejection reason.
    fn try_place<P: Placer + ?Sized>(&mut self, pod: &Pod, placer: &mut P) -> Result<(Placement, usize), Why> {
        let mut rejected = [0u32; FilterReason::COUNT];
        let mut blocked = Vec::new();
        if let Err(w) = self.queue_check(pod, &mut blocked) {
            self.last_rejected = rejected;
            self.candidates.clear();
            return Err(Why::Queue(w));
        }
        let want = self.cfg.sampling.nodes_to_find(self.cluster.nodes().len());
        self.next_start = self.cluster.feasible_from(pod, self.next_start, want, &mut self.candidates, &mut rejected);
        rejected[FilterReason::Reserved as usize] += self.drop_reserved(pod) as u32;
        self.last_rejected = rejected;
        if self.candidates.is_empty() {
            return Err(Why::Filter(FilterReason::main(&rejected)));
        }
        if let Some((_, first)) = blocked.first() {
            // GPU models the queue may not take more of.
            let cluster = &self.cluster;
            let model = |n: &NodeId| cluster.node(*n).map_or("", |n| n.gpu_model.as_str());
            self.candidates.retain(|n| !blocked.iter().any(|(m, _)| m == model(n)));
            if self.candidates.is_empty() {
                return Err(Why::Queue(first.clone()));
            }
        }
        let choice = placer.place(pod, &self.candidates);
        self.stats.plugin_errors += u64::from(choice.plugin_errors);
        self.stats.deadline_hits += u64::from(choice.deadline_hit);
        self.stats.nodes_scored += self.candidates.len() as u64;
        let placement = bind_choice(&mut self.cluster, pod, &self.candidates, &choice)?;
        placer.nodes_changed(&[self.cluster.node(placement.node).expect("just bound")]);
        Ok((placement, self.candidates.len()))
    }

    fn try_preempt<P: Placer + ?Sized>(
        &mut self,
        id: PodId,
        pod: &Pod,
        placer: &mut P,
        now: u64,
        level: usize,
    ) -> Option<Event> {
        let (node, victims) = self.choose_victims(pod, now, pod.gang.as_ref().map(|g| g.name.as_str()))?;
        let evicted = self.evict(&victims);
        let placement = self.bind_preemptor(node, pod);
        self.requeue_victims(&evicted, now);
        self.tell_evicted(placer, &evicted, node);
        let waited = self.bound(id, placement, now, level);
        Some(Event::Preempted { pod: id, placement, victims, waited })
    }
}

mod config;
mod evict;
mod gang;
mod live;
mod queues;
mod reserve;
#[cfg(test)]
mod tests;
