//! The loop's model of the cluster: the scheduling state (queue, pods,
//! nodes) with the fragmentation measure kept in step with it, nodes by
//! name, and what the cluster says happened ([`ClusterEvent`]) folded in.
//!
//! Every change goes through here, so no caller re-measures a node by
//! hand after a bind, a departure or a move.

use std::collections::HashMap;

use crate::cluster::{BindError, Cluster, GpuSet, Placement};
use crate::framework::{Cycle, Placer, Reschedule, Why, apply_in_passes};
use crate::metrics::{FragmentationTracker, TargetWorkload};
use crate::model::{Node, NodeId, Pod, PodId, Tier};
use crate::sched::{AdoptError, Attempt, Event, PlaceError, SchedConfig, SchedError, SchedStats, Scheduler};

/// What happened in the cluster, in the words a backend uses.
#[derive(Debug, Clone, PartialEq)]
pub enum ClusterEvent {
    /// A pod asks to be scheduled (its name is how the API finds it).
    Submitted {
        /// Backend-assigned identity, unique for the backend's lifetime.
        id: PodId,
        /// The pod.
        pod: Pod,
    },
    /// A pod ended or was deleted, wherever it was (queued or running).
    Deleted {
        /// Its identity.
        id: PodId,
    },
    /// A pod already runs on `node` (bound before the loop started, or by
    /// another scheduler): it joins the model there.
    Running {
        /// Backend-assigned identity.
        id: PodId,
        /// The pod.
        pod: Pod,
        /// The node's name.
        node: String,
        /// Its GPUs there, when the backend knows them.
        gpus: Option<GpuSet>,
    },
    /// A node joined, or changed (readiness, zone, capacity, GPU health):
    /// matched by name.
    NodeUpsert {
        /// The node as the backend sees it (its id is ignored; pods bound
        /// to it are not counted in its free capacity).
        node: Node,
    },
    /// The pod is going for good (evicted, being deleted; its controller,
    /// if any, makes a new one): it is never queued again, and if it runs
    /// it keeps its room, and is no preemption victim, until its
    /// `Deleted` (a terminating pod's resources are held until it is gone).
    Leaving {
        /// The pod.
        id: PodId,
    },
    /// A running pod may (or may no longer) not be preempted: a
    /// disruption budget covering it allows no disruption now.
    Protected {
        /// The pod.
        id: PodId,
        /// Protected from preemption.
        protected: bool,
    },
    /// A node left: it takes no more pods (its pods leave by their own
    /// events).
    NodeRemoved {
        /// Its name.
        name: String,
    },
}

/// An event the model could not take as told. Whatever else the event
/// said was taken; nothing already in the model is lost.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// A pod was submitted under an id already in use.
    #[error("pod {name}: {source}; ignored")]
    Duplicate {
        /// The pod's name.
        name: String,
        /// The loop's refusal.
        source: SchedError,
    },
    /// A pod runs on a node the model does not know.
    #[error("pod {pod} runs on node {node}, which is not known; not counted")]
    UnknownNode {
        /// The pod's name.
        pod: String,
        /// The node's name.
        node: String,
    },
    /// A pod runs where, as the model sees the node, it does not fit.
    #[error("pod {pod} running on {node} does not fit the model: {source}")]
    Unfit {
        /// The pod's name.
        pod: String,
        /// The node's name.
        node: String,
        /// Why.
        source: AdoptError,
    },
    /// A known node reports another number of GPUs; everything else it
    /// reports was taken.
    #[error("node {node}: {now} GPUs now, {before} before; the change is ignored until the node rejoins")]
    GpusChanged {
        /// The node.
        node: String,
        /// GPUs reported now.
        now: usize,
        /// GPUs the model has.
        before: usize,
    },
}

impl EventError {
    /// Every code [`EventError::code`] gives.
    pub const CODES: [&'static str; 4] =
        ["BACKEND-DUPLICATE-POD", "BACKEND-UNKNOWN-NODE", "BACKEND-ADOPT-UNFIT", "BACKEND-NODE-GPUS-CHANGED"];

    /// The stable code the service counts it under.
    pub fn code(&self) -> &'static str {
        match self {
            EventError::Duplicate { .. } => "BACKEND-DUPLICATE-POD",
            EventError::UnknownNode { .. } => "BACKEND-UNKNOWN-NODE",
            EventError::Unfit { .. } => "BACKEND-ADOPT-UNFIT",
            EventError::GpusChanged { .. } => "BACKEND-NODE-GPUS-CHANGED",
        }
    }
}

/// Pods that came and went, as the model counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Pods submitted (a pod put back in the queue is not counted again).
    pub submitted: u64,
    /// Pods that left after running.
    pub departed: u64,
    /// Pods that left before they could run.
    pub abandoned: u64,
}

/// The loop's model of the cluster.
#[derive(Debug)]
pub struct Model {
    sched: Scheduler,
    tracker: FragmentationTracker,
    workload: TargetWorkload,
    names: HashMap<String, NodeId>,
    zones: Vec<String>,
    tally: Tally,
}

impl Model {
    /// A model of `nodes` (ids set to positions) with no pods;
    /// fragmentation is measured against `workload`.
    pub fn new(nodes: Vec<Node>, workload: TargetWorkload, sched: SchedConfig) -> Self {
        let sched = Scheduler::new(nodes, sched);
        let tracker = FragmentationTracker::new(sched.cluster().nodes(), &workload);
        let names = sched.cluster().nodes().iter().map(|n| (n.name.clone(), n.id)).collect();
        let mut m = Self { sched, tracker, workload, names, zones: Vec::new(), tally: Tally::default() };
        m.index_zones();
        m
    }

    fn index_zones(&mut self) {
        let mut zones: Vec<String> = self.sched.cluster().nodes().iter().map(|n| n.zone.clone()).collect();
        zones.sort();
        zones.dedup();
        self.zones = zones;
    }

    fn measure(&mut self, node: NodeId) {
        if let Some(n) = self.sched.cluster().node(node) {
            self.tracker.update(n, &self.workload);
        }
    }

    /// The scheduling state.
    pub fn sched(&self) -> &Scheduler {
        &self.sched
    }

    /// The cluster as it stands.
    pub fn cluster(&self) -> &Cluster {
        self.sched.cluster()
    }

    /// Allocation and fragmentation, node by node.
    pub fn tracker(&self) -> &FragmentationTracker {
        &self.tracker
    }

    /// The workload fragmentation is measured against.
    pub fn workload(&self) -> &TargetWorkload {
        &self.workload
    }

    /// The zones of the nodes, sorted, each once.
    pub fn zones(&self) -> &[String] {
        &self.zones
    }

    /// A node's id by name.
    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.names.get(name).copied()
    }

    /// Pods counted in and out.
    pub fn tally(&self) -> Tally {
        self.tally
    }

    /// The loop's counters.
    pub fn stats(&self) -> &SchedStats {
        self.sched.stats()
    }

    /// Running pods and where.
    pub fn running(&self) -> impl Iterator<Item = (PodId, &Pod, Placement)> {
        self.sched.running()
    }

    /// Pods waiting, with the reason of their last failure.
    pub fn waiting(&self) -> impl Iterator<Item = (PodId, &Pod, Option<&Why>)> {
        self.sched.waiting()
    }

    /// Where a pod runs, if it does.
    pub fn placement(&self, id: PodId) -> Option<Placement> {
        self.sched.placement(id)
    }

    /// A new pod asks to be scheduled.
    pub fn submit(&mut self, id: PodId, pod: Pod, now: u64) -> Result<(), SchedError> {
        self.sched.submit(id, pod, now)?;
        self.tally.submitted += 1;
        Ok(())
    }

    /// A pod taken out of the model earlier ([`Model::take`]) waits again,
    /// not counted as a new one: a pod displaced from a failed node, a
    /// pod whose bind the cluster refused.
    pub fn resubmit(&mut self, id: PodId, pod: Pod, now: u64) -> Result<(), SchedError> {
        self.sched.submit(id, pod, now)
    }

    /// The pod left the cluster (it ended, or was deleted): counted as
    /// departed if it ran, else as abandoned. What it was and where it
    /// ran; `None` if unknown.
    pub fn depart(&mut self, id: PodId) -> Option<(Pod, Option<Placement>)> {
        let (pod, at) = self.take(id)?;
        match at {
            Some(_) => self.tally.departed += 1,
            None => self.tally.abandoned += 1,
        }
        Some((pod, at))
    }

    /// Takes a pod out of the model without counting it as gone (it comes
    /// back through [`Model::resubmit`], or never existed for the cluster,
    /// like a stand-in holding room).
    pub fn take(&mut self, id: PodId) -> Option<(Pod, Option<Placement>)> {
        let at = self.sched.placement(id);
        let pod = self.sched.remove(id)?;
        if let Some(p) = at {
            self.measure(p.node);
        }
        Some((pod, at))
    }

    /// A pod already running on `node` joins the model there.
    pub fn adopt(
        &mut self,
        id: PodId,
        pod: Pod,
        node: NodeId,
        gpus: Option<GpuSet>,
        now: u64,
    ) -> Result<Placement, AdoptError> {
        let at = self.sched.adopt(id, pod, node, gpus, now)?;
        self.measure(at.node);
        Ok(at)
    }

    /// Binds waiting pod `id` at `to`, decided outside the placer.
    pub fn place_at(&mut self, id: PodId, to: Placement, now: u64) -> Result<Placement, PlaceError> {
        let at = self.sched.place_at(id, to, now)?;
        self.measure(at.node);
        Ok(at)
    }

    /// Moves running pod `id` to `to` (a rescheduling move carried out).
    pub fn migrate(&mut self, id: PodId, to: Placement) -> Result<Placement, BindError> {
        let from = self.sched.placement(id);
        let at = self.sched.migrate(id, to)?;
        if let Some(f) = from {
            self.measure(f.node);
        }
        self.measure(at.node);
        Ok(at)
    }

    /// Carries out a plan's moves done (pod, where it runs now) in order,
    /// each retried after the others while it needs room a later one
    /// frees; the pods moved.
    pub fn carry_out(&mut self, moves: Vec<(PodId, Placement)>) -> u64 {
        let mut moved = 0;
        apply_in_passes(moves, |id, to| match self.placement(id) {
            Some(at) if at == to => true,
            Some(_) => {
                let ok = self.migrate(id, to).is_ok();
                moved += u64::from(ok);
                ok
            }
            None => true,
        });
        moved
    }

    /// The running pods as a planner sees them, with their ids. A gang's
    /// members are pinned (shown as hard-tier, which no planner moves):
    /// moving one member restarts the whole job, and the planner's moves
    /// are made one pod at a time.
    pub fn for_planner(&self) -> (Vec<PodId>, Vec<(Pod, Placement)>) {
        self.running()
            .map(|(id, p, at)| {
                let mut p = p.clone();
                if p.gang.is_some() {
                    p.tier = Tier::Hard;
                }
                (id, (p, at))
            })
            .unzip()
    }

    /// A cycle planned and executed by `rs` over the pods running now: the
    /// moves done, by pod id (for [`Model::carry_out`]).
    pub fn reschedule_with(&self, rs: &mut dyn Reschedule, cycle: &Cycle<'_>) -> Vec<(PodId, Placement)> {
        let (ids, running) = self.for_planner();
        rs.reschedule(self.cluster(), &running, &ids, cycle).into_iter().map(|(i, to)| (ids[i], to)).collect()
    }

    /// Changes a node (readiness, health, capacity); parked pods that now
    /// fit on it get another chance.
    pub fn update_node<R>(&mut self, id: NodeId, f: impl FnOnce(&mut Node) -> R) -> Option<R> {
        let r = self.sched.update_node(id, f)?;
        self.measure(id);
        Some(r)
    }

    /// Changes what telemetry reports of a node (utilisation).
    pub fn observe_node<R>(&mut self, id: NodeId, f: impl FnOnce(&mut Node) -> R) -> Option<R> {
        self.sched.observe_node(id, f)
    }

    /// A node joins; its id.
    pub fn add_node(&mut self, node: Node) -> NodeId {
        let name = node.name.clone();
        let id = self.sched.add_node(node);
        self.names.insert(name, id);
        let n = &self.sched.cluster().nodes()[id as usize];
        self.tracker.add_node(n, &self.workload);
        self.index_zones();
        id
    }

    /// Whether running pod `id` may be chosen as a preemption victim.
    pub fn protect(&mut self, id: PodId, protected: bool) {
        self.sched.protect(id, protected);
    }

    /// Folds what the cluster says happened into the model. On error the
    /// rest of the event was taken (see [`EventError`]).
    pub fn apply(&mut self, event: ClusterEvent, now: u64) -> Result<(), EventError> {
        match event {
            ClusterEvent::Submitted { id, pod } => {
                let name = pod.name.clone();
                self.submit(id, pod, now).map_err(|source| EventError::Duplicate { name, source })
            }
            ClusterEvent::Deleted { id } => {
                self.depart(id);
                Ok(())
            }
            ClusterEvent::Running { id, pod, node, gpus } => {
                let Some(n) = self.node_id(&node) else {
                    return Err(EventError::UnknownNode { pod: pod.name, node });
                };
                let name = pod.name.clone();
                self.adopt(id, pod, n, gpus, now).map(drop).map_err(|source| EventError::Unfit {
                    pod: name,
                    node,
                    source,
                })
            }
            ClusterEvent::NodeUpsert { node } => self.upsert_node(node),
            ClusterEvent::Leaving { id } => {
                if self.placement(id).is_some() {
                    self.protect(id, true);
                } else {
                    self.depart(id);
                }
                Ok(())
            }
            ClusterEvent::Protected { id, protected } => {
                self.protect(id, protected);
                Ok(())
            }
            ClusterEvent::NodeRemoved { name } => {
                if let Some(id) = self.node_id(&name) {
                    self.update_node(id, |n| n.ready = false);
                }
                Ok(())
            }
        }
    }

    /// A node joins, or what the cluster says of a known one changes:
    /// readiness, zone, GPU health, capacity (its free room moves by the
    /// same amount; a changed GPU count is refused).
    fn upsert_node(&mut self, node: Node) -> Result<(), EventError> {
        let Some(id) = self.node_id(&node.name) else {
            self.add_node(node);
            return Ok(());
        };
        let before = self.cluster().nodes()[id as usize].gpus.len();
        let zone_changed = self.cluster().nodes()[id as usize].zone != node.zone;
        self.update_node(id, |n| merge(n, &node));
        if zone_changed {
            self.index_zones();
        }
        if before != node.gpus.len() {
            return Err(EventError::GpusChanged { node: node.name, now: node.gpus.len(), before });
        }
        Ok(())
    }

    /// Decides every queued pod once; the fragmentation measure follows
    /// each bind.
    pub fn schedule<P: Placer + ?Sized>(&mut self, placer: &mut P, now: u64) -> Vec<Event> {
        let events = self.sched.schedule(placer, now);
        for ev in &events {
            if let Event::Bound { placement, .. } | Event::Preempted { placement, .. } = ev {
                self.measure(placement.node);
            }
        }
        events
    }

    /// Tells the placer what changed since it last heard.
    pub fn sync<P: Placer + ?Sized>(&mut self, placer: &mut P) {
        self.sched.sync(placer);
    }

    /// The placer was replaced: every node is told to it again.
    pub fn resync(&mut self) {
        self.sched.resync();
    }

    /// Replaces the queues (a new policy's `queues:`).
    pub fn set_queues(&mut self, tree: crate::quota::QueueTree) {
        self.sched.set_queues(tree);
    }

    /// Keeps a record of every decision attempt from now on (or stops).
    pub fn record_attempts(&mut self, on: bool) {
        self.sched.record_attempts(on);
    }

    /// The attempts recorded since the last call.
    pub fn take_attempts(&mut self) -> Vec<Attempt> {
        self.sched.take_attempts()
    }
}

/// What the cluster says of a node, onto the model's node (which keeps
/// what its bound pods hold).
fn merge(n: &mut Node, from: &Node) {
    n.ready = from.ready;
    n.zone.clone_from(&from.zone);
    n.labels.clone_from(&from.labels);
    n.taints.clone_from(&from.taints);
    let grow = |free: u64, old: u64, new: u64| (free + new).saturating_sub(old);
    n.free.cpu_milli = grow(n.free.cpu_milli, n.capacity.cpu_milli, from.capacity.cpu_milli);
    n.free.memory_mib = grow(n.free.memory_mib, n.capacity.memory_mib, from.capacity.memory_mib);
    n.capacity = from.capacity;
    if n.gpus.len() == from.gpus.len() {
        for (g, f) in n.gpus.iter_mut().zip(&from.gpus) {
            g.health = f.health;
            if f.memory_mib > 0 {
                g.memory_mib = f.memory_mib;
            }
        }
    }
    if !from.gpu_model.is_empty() {
        n.gpu_model.clone_from(&from.gpu_model);
    }
}
