//! What the loop is asked between passes, and the one way to ask it: a
//! [`Control`] message with a oneshot reply, sent through [`LoopHandle`]
//! and waited for at most `engine.reply_timeout_ms`. The API, the
//! Kubernetes policy controller, the scheduler extender and the campaign
//! scheduler all ask through it; the loop answers from its own thread.

use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Duration;

use tessera_policy::PolicyDocument;
use tessera_wasm::{PluginVersion, Policy};
use tokio::sync::oneshot;

use crate::extend::{ExtenderAnswer, ExtenderCall};
use crate::loader::{LoadError, Loader};
use crate::rollout::{RolloutError, Stage};

/// Where the loop sends its answer.
pub type Reply<T> = oneshot::Sender<T>;

/// What the loop hands a campaign: the policies and the cluster of one
/// instant.
#[derive(Debug)]
pub struct ChaosInputs {
    /// The active policy.
    pub active: PolicyDocument,
    /// The candidate and its id (`RolloutView::candidate_id`: a new
    /// candidate of the same name is a different one).
    pub candidate: Option<(PolicyDocument, u64)>,
    /// The cluster.
    pub snapshot: tessera_core::snapshot::Snapshot,
}

/// What the loop hands fine-tuning: the active policy, the cluster and
/// the record of arrivals of one instant.
#[derive(Debug)]
pub struct LearningInputs {
    /// The active policy.
    pub active: PolicyDocument,
    /// A candidate is in rollout (shadow or canary).
    pub candidate: bool,
    /// The cluster's nodes.
    pub nodes: Vec<tessera_core::model::Node>,
    /// The pods that arrived, oldest first (at most `learning.record`).
    pub arrivals: Vec<tessera_core::model::Pod>,
}

/// What the loop is asked to do between passes.
pub enum Control {
    /// Replace the running policy (already loaded and checked).
    SwapPolicy {
        /// The new policy.
        policy: Policy,
        /// Its document.
        doc: Box<PolicyDocument>,
        /// Told once the next pass uses it.
        done: Reply<()>,
    },
    /// Hot-swap one plugin of the running policy to a checked new version.
    SwapPlugin {
        /// Plugin name in the policy.
        name: String,
        /// The new version.
        version: Arc<PluginVersion>,
        /// Told the version it replaced (none: no such plugin).
        done: Reply<Option<Arc<PluginVersion>>>,
    },
    /// Set (or, with none, drop) the candidate policy; it starts in shadow.
    SetCandidate {
        /// The candidate, loaded and checked, and its document.
        candidate: Option<(Policy, Box<PolicyDocument>)>,
        /// Only when there is no candidate (fine-tuning never replaces an
        /// operator's).
        only_if_none: bool,
        /// Told once handled: whether it was set.
        done: Reply<bool>,
    },
    /// Move the candidate to another stage.
    SetStage {
        /// The stage.
        stage: Stage,
        /// Told once set, or why not.
        done: Reply<Result<(), RolloutError>>,
    },
    /// Make the candidate the active policy.
    Promote {
        /// Told once it is, or why not.
        done: Reply<Result<(), RolloutError>>,
    },
    /// The cluster as the loop sees it between passes.
    Snapshot {
        /// Told the snapshot.
        done: Reply<tessera_core::snapshot::Snapshot>,
    },
    /// What would have to move for a waiting pod to fit.
    Room {
        /// The pod's name.
        pod: String,
        /// Most pods moved.
        max_moves: usize,
        /// Told the answer.
        done: Reply<crate::record::RoomAnswer>,
    },
    /// A scheduler extender's call, answered from the model.
    Extender {
        /// The call.
        call: Box<ExtenderCall>,
        /// Told the answer.
        done: Reply<ExtenderAnswer>,
    },
    /// The active policy, the candidate and the cluster of one instant,
    /// for a scheduled chaos campaign.
    ChaosInputs {
        /// Told them.
        done: Reply<ChaosInputs>,
    },
    /// The active policy, whether a candidate is in rollout, the cluster
    /// and the pods that arrived lately, for fine-tuning.
    LearningInputs {
        /// Told them.
        done: Reply<LearningInputs>,
    },
    /// Queues from outside the policy (the Kubernetes `TesseraQueue`
    /// objects) replace the policy's `queues:`, across policy changes;
    /// none: the policy's own again.
    SetQueues {
        /// The queues, checked by the loop.
        queues: Option<tessera_core::quota::QueuesConfig>,
        /// Told once in use, or why they were refused (nothing changed).
        done: Reply<Result<(), tessera_core::quota::QueuesError>>,
    },
    /// The queues as the loop sees them now.
    Queues {
        /// Told them.
        done: Reply<Vec<tessera_core::sched::QueueStatus>>,
    },
}

/// The loop did not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// It has stopped (the service is shutting down).
    #[error("the scheduling loop has stopped")]
    Stopped,
    /// No answer within `engine.reply_timeout_ms`.
    #[error("the scheduling loop did not answer within {0:?}")]
    Timeout(Duration),
}

/// Asks the loop.
#[derive(Debug, Clone)]
pub struct LoopHandle {
    tx: Sender<Control>,
    timeout: Duration,
}

impl LoopHandle {
    /// A handle sending to `tx`, waiting at most `timeout` for answers.
    pub fn new(tx: Sender<Control>, timeout: Duration) -> Self {
        Self { tx, timeout }
    }

    /// Sends the message `make` builds around a reply, and waits for the
    /// answer.
    pub async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Control) -> Result<T, ControlError> {
        let (done, answer) = oneshot::channel();
        self.tx.send(make(done)).map_err(|_| ControlError::Stopped)?;
        match tokio::time::timeout(self.timeout, answer).await {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(_)) => Err(ControlError::Stopped),
            Err(_) => Err(ControlError::Timeout(self.timeout)),
        }
    }
}

/// A policy document could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A plugin of it did not load.
    #[error("policy {policy}: {source}")]
    Load {
        /// The policy.
        policy: String,
        /// What failed.
        source: LoadError,
    },
    /// The loop did not take it.
    #[error(transparent)]
    Loop(#[from] ControlError),
}

/// Loads policy documents and hands them to the loop: as the rollout's
/// candidate (shadow) or as the active policy. The API and the Kubernetes
/// `TesseraPolicy` controller apply documents through it.
#[derive(Clone)]
pub struct PolicyHandle {
    /// The loop.
    pub handle: LoopHandle,
    /// Turns documents into policies.
    pub loader: Arc<dyn Loader>,
}

impl std::fmt::Debug for PolicyHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyHandle").finish_non_exhaustive()
    }
}

impl PolicyHandle {
    /// Loads every plugin of `doc` (on a blocking thread: components may
    /// compile).
    pub async fn load(&self, doc: &PolicyDocument) -> Result<Policy, ApplyError> {
        let (loader, d) = (self.loader.clone(), doc.clone());
        let load = |source: LoadError| ApplyError::Load { policy: doc.name.clone(), source };
        tokio::task::spawn_blocking(move || loader.load_policy(&d))
            .await
            .map_err(|e| load(LoadError::Loader(e.to_string())))?
            .map_err(load)
    }

    /// Loads `doc` (every plugin, or nothing changes) and makes it the
    /// rollout's candidate, in shadow.
    pub async fn set_candidate(&self, doc: PolicyDocument) -> Result<(), ApplyError> {
        let policy = self.load(&doc).await?;
        self.handle
            .ask(|done| Control::SetCandidate { candidate: Some((policy, Box::new(doc))), only_if_none: false, done })
            .await?;
        Ok(())
    }

    /// Loads `doc` and makes it the active policy at once.
    pub async fn replace(&self, doc: PolicyDocument) -> Result<(), ApplyError> {
        let policy = self.load(&doc).await?;
        Ok(self.handle.ask(|done| Control::SwapPolicy { policy, doc: Box::new(doc), done }).await?)
    }
}

/// Sets and reads the loop's queues from outside the API (the Kubernetes
/// `TesseraQueue` controller).
#[derive(Debug, Clone)]
pub struct QueueHandle {
    /// The loop.
    pub handle: LoopHandle,
}

impl QueueHandle {
    /// Makes `queues` the loop's queues (none: the policy's own again);
    /// refused with the field at fault, nothing changed.
    pub async fn set(
        &self,
        queues: Option<tessera_core::quota::QueuesConfig>,
    ) -> Result<Result<(), tessera_core::quota::QueuesError>, ControlError> {
        self.handle.ask(|done| Control::SetQueues { queues, done }).await
    }

    /// Each queue's use, guarantee, limit and fair share now.
    pub async fn status(&self) -> Result<Vec<tessera_core::sched::QueueStatus>, ControlError> {
        self.handle.ask(|done| Control::Queues { done }).await
    }
}

/// Sends scheduler-extender calls to the loop.
#[derive(Debug, Clone)]
pub struct ExtenderHandle {
    /// The loop.
    pub handle: LoopHandle,
}

impl ExtenderHandle {
    /// Asks the loop; its answer, or why there is none.
    pub async fn call(&self, call: ExtenderCall) -> Result<ExtenderAnswer, ControlError> {
        self.handle.ask(|done| Control::Extender { call: Box::new(call), done }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_arrives_a_silent_loop_times_out_and_a_stopped_one_says_so() {
        let (tx, rx) = std::sync::mpsc::channel::<Control>();
        let h = LoopHandle::new(tx, Duration::from_millis(200));
        let answering = std::thread::spawn(move || {
            // Answers the first snapshot, ignores the second, then stops.
            let first = rx.recv().unwrap();
            if let Control::Snapshot { done } = first {
                let _ = done.send(tessera_core::snapshot::Snapshot::default());
            }
            let second = rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(400));
            drop(second);
        });
        assert!(h.ask(|done| Control::Snapshot { done }).await.is_ok());
        assert_eq!(
            h.ask(|done| Control::Snapshot { done }).await.unwrap_err(),
            ControlError::Timeout(Duration::from_millis(200))
        );
        answering.join().unwrap();
        assert_eq!(h.ask(|done| Control::Snapshot { done }).await.unwrap_err(), ControlError::Stopped);
    }
}
