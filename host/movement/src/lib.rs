//! # tessera-movement
//!
//! The Movement Manager: executes a rescheduling plan without taking
//! services down or losing pods.
//!
//! - [`dag::build`] orders the moves: a move into a node that needs room
//!   freed by another move waits for it; a cycle (a swap) is broken by a hop
//!   through a node with room, never by overcommitting; a move that cannot
//!   be ordered safely is dropped with its reason.
//! - [`exec::Executor`] runs the ordered steps in gray-release batches
//!   (batch size, pause, concurrency limit, cooldowns, caps per node,
//!   namespace and workload), reserves room on the target before it
//!   evicts, respects disruption budgets, checks health gates after every
//!   batch and rolls the batch back when one fails.
//! - Every intent and outcome is written to a [`journal::Journal`] (redb)
//!   before it acts; a restarted executor resumes from it and reconciles
//!   with what the cluster shows: no move runs twice, none is forgotten.
//! - It acts through an [`exec::Actuator`]: the simulator's
//!   ([`sim::SimActuator`], with delays and failure rates) now, the
//!   Kubernetes Eviction API later.
//! - [`simulated`] runs a plan to the end on simulated time (the
//!   simulator, the chaos twin, the service on its simulator backend).
//!
//! Deterministic: time is the caller's clock; the only IO is the journal.

use serde::{Deserialize, Serialize};
use tessera_core::cluster::Placement;
use tessera_core::model::{NodeId, Pod};
use tessera_core::sched::PodId;

pub mod config;
pub mod dag;
pub mod exec;
pub mod journal;
pub mod sim;
pub mod simulated;
pub mod step;

pub use config::{Budget, MovementConfig};

/// One move of a plan: `pod` from where it runs to node `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodMove {
    /// The pod.
    pub pod: PodId,
    /// What it requests (and its workload, namespace, tier).
    pub spec: Pod,
    /// Where it runs now.
    pub from: Placement,
    /// The node it should run on.
    pub to: NodeId,
    /// For a pod sharing a GPU: the GPU of `to` the planner chose (else the
    /// best fit there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hint: Option<u8>,
}

impl PodMove {
    /// The GPU hint that puts the pod back where it runs now.
    pub fn home_hint(&self) -> Option<u8> {
        self.from.gpus.indices().next().map(|i| i as u8)
    }
}

impl MovePlan {
    /// The plan with every node id passed through `f` (another replica's
    /// model numbers the same nodes differently).
    pub fn renumbered(mut self, f: impl Fn(NodeId) -> NodeId) -> Self {
        for m in &mut self.moves {
            m.renumber(&f);
        }
        self
    }
}

impl PodMove {
    pub(crate) fn renumber(&mut self, f: &impl Fn(NodeId) -> NodeId) {
        self.from.node = f(self.from.node);
        self.to = f(self.to);
    }
}

/// A plan: moves in the planner's order of preference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovePlan {
    /// Identity (unique per executor journal).
    pub id: u64,
    /// The moves.
    pub moves: Vec<PodMove>,
}
