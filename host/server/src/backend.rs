//! The cluster the service schedules, behind one trait: the embedded
//! simulator ([`SimBackend`]) now, Kubernetes through the same trait later.
//!
//! The loop owns the scheduling state (queue, cluster model, decisions);
//! a backend tells it what happened in the cluster (pods submitted and
//! gone), reports node telemetry, carries out the loop's decisions (binds,
//! evictions of preemption victims) and hands the Movement Manager an
//! actuator for rescheduling moves.

mod sim;
mod stream;

use std::collections::BTreeMap;
use std::time::Duration;

use tessera_core::cluster::{Cluster, GpuSet, Placement};
use tessera_core::metrics::TargetWorkload;
use tessera_core::model::{Node, Pod};
use tessera_core::sched::PodId;
use tessera_core::telemetry::NodeSample;
use tessera_movement::exec::Actuator;
use tessera_movement::journal::Journal;

pub use sim::SimBackend;
pub use stream::ArrivalStream;

/// What happened in the cluster since the last pass.
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

/// The backend could not carry out a decision. The loop counts it and
/// carries on; the pod stays as the loop placed it until the backend says
/// otherwise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op} of pod {pod}: {reason}")]
pub struct BackendError {
    /// `bind` or `evict`.
    pub op: &'static str,
    /// The pod.
    pub pod: PodId,
    /// Why.
    pub reason: String,
}

/// An actuator for one plan's moves that can tell, once the plan is over,
/// where each pod ended up (node and GPUs) so the loop can follow.
pub trait MoveActuator: Actuator + Send {
    /// Where every pod it was given runs now (`None`: nowhere).
    fn placements(&self) -> BTreeMap<PodId, Option<Placement>>;
}

impl MoveActuator for tessera_movement::sim::SimActuator {
    fn placements(&self) -> BTreeMap<PodId, Option<Placement>> {
        tessera_movement::sim::SimActuator::placements(self)
    }
}

/// A cluster to schedule.
pub trait Backend: Send + 'static {
    /// Short name (`simulator`, `kubernetes`), for status and logs.
    fn name(&self) -> &'static str;

    /// Whether this replica decides and acts (it holds the leader lease).
    /// A standby keeps its model in step with the events but neither binds
    /// nor moves.
    fn active(&self) -> bool {
        true
    }

    /// The loop stopped: let go of what the backend holds (a leader lease).
    fn shutdown(&mut self) {}

    /// The nodes at start.
    fn nodes(&self) -> &[Node];

    /// The workload fragmentation is measured against.
    fn workload(&self) -> &TargetWorkload;

    /// Advances the backend's clock by one pass of `tick` wall time and
    /// returns its time now, in seconds (the simulator runs faster than the
    /// wall clock; a real cluster reads it).
    fn advance(&mut self, tick: Duration) -> u64;

    /// What happened up to `now`, in order.
    fn events(&mut self, now: u64) -> Vec<ClusterEvent>;

    /// The telemetry interval ending at `t` for `node`, which runs `pods`.
    fn sample(&mut self, node: &Node, pods: &[(&Pod, Placement)], t: u64) -> NodeSample;

    /// Carbon intensity of `zone` at `t`, gCO₂/kWh.
    fn zone_carbon(&mut self, zone: &str, t: u64) -> u32;

    /// The loop bound pod `id` at `at`: make it so. On error the loop
    /// queues the pod again.
    fn bind(&mut self, id: PodId, at: Placement) -> Result<(), BackendError>;

    /// Carries out several binds of one pass (a backend may run them
    /// concurrently); the results in order.
    fn bind_all(&mut self, binds: &[(PodId, Placement)]) -> Vec<Result<(), BackendError>> {
        binds.iter().map(|&(id, at)| self.bind(id, at)).collect()
    }

    /// The loop preempted pod `id` (it goes back to the queue): stop it.
    /// On error the pod still runs: the backend announces it again
    /// (`Deleted`, then `Running` where it is), and the loop does not bind
    /// the preemptor.
    fn evict(&mut self, id: PodId) -> Result<(), BackendError>;

    /// The loop could not place pod `id` (`code`, e.g.
    /// `SCHED-GPU-INSUFFICIENT`); it waits. A backend tells whoever watches
    /// (on Kubernetes: the pod's `PodScheduled` condition, which cluster
    /// autoscalers read, and an event).
    fn unschedulable(&mut self, id: PodId, code: &str) {
        let _ = (id, code);
    }

    /// Binds a pod another scheduler decided (a scheduler extender's
    /// bind): `namespace/name` (`uid`) to `node` on `gpus`.
    fn bind_named(&mut self, namespace: &str, name: &str, uid: &str, node: &str, gpus: GpuSet) -> Result<(), String> {
        let _ = (namespace, name, uid, node, gpus);
        Err(format!("the {} backend binds only the pods it schedules", self.name()))
    }

    /// The pod with API uid `uid`, as the loop models it, if the backend
    /// knows it.
    fn pod_by_uid(&self, uid: &str) -> Option<Pod> {
        let _ = uid;
        None
    }

    /// How plan `plan`'s moves over the pods running now on `cluster` are
    /// carried out.
    fn actuator(&mut self, cluster: &Cluster, pods: Vec<(PodId, Pod, Placement)>, plan: u64) -> Moves;

    /// Whether running pod `id` may be moved by evicting it (live moves):
    /// something recreates it. `Err` says why not; nothing is evicted.
    fn movable(&self, id: PodId) -> Result<(), String> {
        let _ = id;
        Ok(())
    }

    /// Whether pod `id` is ready (serves), as the cluster reports it.
    fn ready(&self, id: PodId) -> bool {
        let _ = id;
        true
    }

    /// The movement journal live moves are written to before each step
    /// (a new leader resumes the plan from it). Opened when this replica
    /// starts leading; an error leaves moves off until the next attempt.
    fn journal(&mut self) -> Result<Box<dyn Journal + Send>, String> {
        Ok(Box::new(tessera_movement::journal::MemJournal::default()))
    }
}

/// How a backend carries out a rescheduling plan.
pub enum Moves {
    /// Within one pass, on the actuator's own (simulated) time: the
    /// simulator, where a moved pod keeps its identity.
    Simulated(Box<dyn MoveActuator>),
    /// In real time, across passes: the loop holds the target's room in
    /// its model, evicts through [`Backend::evict`], and binds the
    /// replacement the pod's owner creates (a pod of the same workload
    /// and shape) onto the held room; a step is done once the replacement
    /// is [`Backend::ready`]. Every step is journaled first in
    /// [`Backend::journal`]. Kubernetes, where an evicted pod is recreated
    /// by its controller under a new identity.
    Live,
}
