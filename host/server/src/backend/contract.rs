//! The cluster the service schedules, behind one trait: the embedded
//! simulator, or Kubernetes (`tessera-kube`).
//!
//! The loop owns the scheduling state (queue, cluster model, decisions);
//! a backend tells it what happened in the cluster (pods submitted and
//! gone), reports node telemetry, carries out the loop's decisions (binds,
//! evictions of preemption victims) and hands the Movement Manager an
//! actuator for rescheduling moves.

use std::time::Duration;

use tessera_core::cluster::{GpuSet, Placement};
pub use tessera_core::driver::ClusterEvent;
use tessera_core::metrics::TargetWorkload;
use tessera_core::model::{Node, Pod};
use tessera_core::sched::PodId;
use tessera_core::telemetry::NodeSample;
use tessera_movement::journal::Journal;
use tessera_movement::sim::SimActuatorConfig;

/// The backend could not carry out a decision. The loop counts it and
/// carries on; the pod stays as the loop placed it until the backend says
/// otherwise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op} of pod {pod}: {reason}")]
pub struct BackendError {
    /// What the loop asked.
    pub op: BackendOp,
    /// The pod.
    pub pod: PodId,
    /// Why.
    pub reason: String,
    /// How long the cluster asked not to try again (an API server's
    /// `Retry-After`); the loop waits at least that long.
    pub retry_after: Option<std::time::Duration>,
}

/// What a backend was asked to carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendOp {
    /// Bind a pod where the loop placed it.
    Bind,
    /// Evict a preemption victim.
    Evict,
}

impl BackendOp {
    /// The code a refusal is counted under.
    pub fn code(self) -> &'static str {
        match self {
            BackendOp::Bind => "BACKEND-BIND",
            BackendOp::Evict => "BACKEND-EVICT",
        }
    }
}

impl std::fmt::Display for BackendOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackendOp::Bind => "bind",
            BackendOp::Evict => "evict",
        })
    }
}

/// The movement journal of live moves could not be opened, read or
/// written: counted under this code.
pub const JOURNAL_ERROR: &str = "BACKEND-JOURNAL";

impl BackendError {
    /// `op` of `pod` failed, for `reason`.
    pub fn new(op: BackendOp, pod: PodId, reason: impl Into<String>) -> Self {
        Self { op, pod, reason: reason.into(), retry_after: None }
    }

    /// The same, with the wait the cluster asked for.
    pub fn retry_after(mut self, wait: Option<std::time::Duration>) -> Self {
        self.retry_after = wait;
        self
    }

    /// Every code a backend error is counted under (with
    /// [`tessera_core::driver::EventError`]'s for events it reported).
    pub const CODES: [&'static str; 3] = ["BACKEND-BIND", "BACKEND-EVICT", JOURNAL_ERROR];

    /// The code it is counted under.
    pub fn code(&self) -> &'static str {
        self.op.code()
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

    /// What happened up to `now`, each with its time (at most `now`), in
    /// time order. A live cluster stamps everything `now`; the simulator
    /// says when each pod arrived and left, so the loop sees them in the
    /// order they happened, whatever the pass length.
    fn events(&mut self, now: u64) -> Vec<(u64, ClusterEvent)>;

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

    /// How rescheduling moves are carried out.
    fn moves(&self) -> Moves;

    /// Whether pod `id`, which the loop let go (an evicted preemption
    /// victim), still holds its resources on its node (it is still
    /// terminating). A preemptor is bound only once its victims hold
    /// nothing, as kube-scheduler binds to a nominated node only when the
    /// victims are gone. Default: no (evictions take effect at once).
    fn still_holds(&self, id: PodId) -> bool {
        let _ = id;
        false
    }

    /// Live moves' side of it, if its moves run live ([`Moves::Live`]).
    fn live(&self) -> Option<&dyn LiveBackend> {
        None
    }

    /// The scheduler extender's side of it, if it binds pods another
    /// scheduler decided.
    fn extender(&self) -> Option<&dyn ExtenderBackend> {
        None
    }
}

/// What a backend said when it refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Refusal {
    /// Its words.
    pub reason: String,
}

impl Refusal {
    /// A refusal saying `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        Self { reason: reason.into() }
    }
}

/// A backend whose rescheduling moves run live, across passes: a moved pod
/// is evicted and its owner recreates it under a new identity
/// (Kubernetes).
pub trait LiveBackend {
    /// Whether running pod `id` may be moved by evicting it: something
    /// recreates it, no disruption budget forbids it now. Nothing is
    /// evicted.
    fn movable(&self, id: PodId) -> Result<(), Refusal>;

    /// Whether pod `id` is ready (serves), as the cluster reports it.
    fn ready(&self, id: PodId) -> bool;

    /// The movement journal live moves are written to before each step (a
    /// new leader resumes the plan from it). Opened when this replica
    /// starts leading; an error leaves moves off until the next attempt.
    fn journal(&self) -> Result<Box<dyn Journal + Send>, Refusal> {
        Ok(Box::new(tessera_movement::journal::MemJournal::default()))
    }
}

/// A backend that binds pods another scheduler decided (a scheduler
/// extender's bind).
pub trait ExtenderBackend {
    /// Binds `namespace/name` (`uid`) to `node` on `gpus`.
    fn bind_named(&self, namespace: &str, name: &str, uid: &str, node: &str, gpus: GpuSet) -> Result<(), Refusal>;

    /// The pod with API uid `uid`, as the loop models it, if known.
    fn pod_by_uid(&self, uid: &str) -> Option<Pod>;
}

/// How a backend carries out a rescheduling plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Moves {
    /// Within one pass, on simulated time
    /// ([`tessera_movement::simulated`]), through a simulated actuator with
    /// these delays and failure rates (each plan's draws seeded by the
    /// seed and the plan's number): the simulator, where a moved pod
    /// keeps its identity.
    Simulated(SimActuatorConfig),
    /// In real time, across passes: the loop holds the target's room in
    /// its model, evicts through [`Backend::evict`], and binds the
    /// replacement the pod's owner creates (a pod of the same workload
    /// and shape) onto the held room; a step is done once the replacement
    /// is [`LiveBackend::ready`]. Every step is journaled first in
    /// [`LiveBackend::journal`]. Kubernetes, where an evicted pod is recreated
    /// by its controller under a new identity.
    Live,
}
