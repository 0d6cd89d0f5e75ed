//! What the executor acts through ([`Actuator`]) and what it records:
//! each step's state and the plan's report.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tessera_core::model::{NodeId, Pod};
use tessera_core::sched::PodId;

/// Where a pod is, as the cluster shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Location {
    /// Running on `node`; `ready` once it serves.
    Running {
        /// Node.
        node: NodeId,
        /// Ready.
        ready: bool,
    },
    /// Not running anywhere (evicted, not yet started).
    Nowhere,
}

/// Health signals read after a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// Share of failed requests, 0..1.
    pub error_rate: f64,
    /// p99 latency, ms.
    pub latency_p99_ms: f64,
}

/// An actuator refused or failed an operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op} of pod {pod} failed: {reason}")]
pub struct ActError {
    /// The operation.
    pub op: &'static str,
    /// The pod.
    pub pod: PodId,
    /// Why.
    pub reason: String,
}

/// What the executor acts through: the simulator now, the Kubernetes
/// Eviction API later.
pub trait Actuator {
    /// Reserves room for `spec` on `node` (placement cannot take it).
    /// `gpu_hint`: the GPU a sharing pod should get there, if it fits.
    fn reserve(&mut self, pod: PodId, spec: &Pod, node: NodeId, gpu_hint: Option<u8>, now: u64)
    -> Result<(), ActError>;
    /// Drops the pod's reservation, if any.
    fn unreserve(&mut self, pod: PodId);
    /// The node the pod holds a reservation on.
    fn reservation(&self, pod: PodId) -> Option<NodeId>;
    /// Evicts the pod from where it runs.
    fn evict(&mut self, pod: PodId, now: u64) -> Result<(), ActError>;
    /// Starts the pod on the node it holds a reservation on.
    fn start(&mut self, pod: PodId, now: u64) -> Result<(), ActError>;
    /// Where the pod is now.
    fn locate(&self, pod: PodId, now: u64) -> Location;
    /// Pods of `workload` that exist (running or being moved).
    fn workload_size(&self, workload: &str) -> u32;
    /// Pods running on `node`.
    fn pods_on(&self, node: NodeId) -> u32;
    /// Health after the last batch.
    fn health(&mut self, now: u64) -> Health;
}

/// State of one step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepState {
    /// Not started.
    Pending,
    /// About to reserve (journaled intent).
    Reserving,
    /// Room on the target is held.
    Reserved {
        /// When.
        at: u64,
    },
    /// About to evict.
    Evicting,
    /// Off its source.
    Evicted,
    /// About to start on the target.
    Starting,
    /// Started on the target at `at`.
    Started {
        /// When.
        at: u64,
    },
    /// Ready on the target.
    Done,
    /// Did not happen; the pod is where it was (or put back).
    Failed {
        /// Why.
        reason: String,
    },
    /// Off its source and not running: a start on the target (or a
    /// rollback) failed and putting it back failed too. Retried every tick
    /// until the pod runs on its source again; the plan is not over before.
    Restoring {
        /// What failed.
        reason: String,
        /// It was being rolled back (ends `RolledBack`, else `Failed`).
        rollback: bool,
    },
    /// Done, then moved back by a rollback.
    RolledBack {
        /// Why.
        reason: String,
    },
    /// Never attempted.
    Dropped {
        /// Why.
        reason: String,
    },
}

impl StepState {
    /// Whether the step is over (done, failed, rolled back or dropped).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            StepState::Done | StepState::Failed { .. } | StepState::RolledBack { .. } | StepState::Dropped { .. }
        )
    }

    pub(crate) fn in_flight(&self) -> bool {
        !self.is_terminal() && *self != StepState::Pending
    }

    /// The pod is off its source and not yet ready on its target.
    pub(crate) fn unavailable(&self) -> bool {
        matches!(
            self,
            StepState::Evicting
                | StepState::Evicted
                | StepState::Starting
                | StepState::Started { .. }
                | StepState::Restoring { .. }
        )
    }
}

/// What was never attempted, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dropped {
    /// A step of the DAG (cooldown, caps, budgets, the plan stopped).
    Step {
        /// The step.
        step: usize,
        /// Why.
        reason: String,
    },
    /// A move the DAG could not order safely (it has no step).
    Unordered {
        /// The move's index in the plan.
        move_index: usize,
        /// Why.
        reason: String,
    },
}

impl Dropped {
    /// Why it was dropped.
    pub fn reason(&self) -> &str {
        match self {
            Dropped::Step { reason, .. } | Dropped::Unordered { reason, .. } => reason,
        }
    }
}

/// The outcome of a plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MovementReport {
    /// Steps done.
    pub executed: u32,
    /// Steps failed.
    pub failed: u32,
    /// Steps rolled back.
    pub rolled_back: u32,
    /// Steps and moves dropped, with why.
    pub dropped: Vec<Dropped>,
    /// Batches run.
    pub batches: u32,
    /// Most pods of each workload unavailable at once.
    pub peak_unavailable: BTreeMap<String, u32>,
    /// Why the plan stopped early, if it did.
    pub stopped: Option<String>,
}
