//! Online fine-tuning (the feedback loop): the loop records the pods that
//! arrive (`learning.record` of them, newest); on a cron expression (and
//! on demand, `POST /v1/learning/run`) the service fine-tunes the active
//! policy's learned plugin on episodes drawn from that record and its own
//! cluster, and a tuned model that beats the one in use becomes the
//! rollout's **candidate, in shadow** — from there the existing path
//! applies: canary, a chaos verdict, promotion. Never straight to live.
//!
//! The binary supplies the [`FineTuner`] (it owns the trainer and the
//! simulator), as it supplies the [`crate::CampaignRunner`]. One run at a
//! time; a run is skipped while a candidate is in rollout (it would
//! replace what an operator or an earlier run is proving) or while the
//! record is short.

use std::sync::Arc;

use tessera_core::model::{Node, Pod};
use tessera_policy::PolicyDocument;

use crate::config::{LearningConfig, TrainingConfig};
use crate::control::{Control, LearningInputs, LoopHandle};
use crate::cron::Schedule;
use crate::loader::Loader;
use crate::metrics::OutcomeLabel;
use crate::state::{CampaignTrigger, LEARNING_HISTORY, LearningOutcome, LearningRun, LearningView, Shared};
use crate::wall::now_unix_ms;

/// What a run tunes, and on what.
#[derive(Debug, Clone)]
pub struct FineTuneJob {
    /// The active policy.
    pub active: PolicyDocument,
    /// The plugin of `active` whose model is tuned.
    pub plugin: String,
    /// The cluster's nodes.
    pub nodes: Vec<Node>,
    /// The pods that arrived, oldest first.
    pub arrivals: Vec<Pod>,
    /// The optimiser's settings.
    pub training: TrainingConfig,
    /// Gain the tuned model must add.
    pub min_gain: f64,
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct FineTuneOutcome {
    /// `active` with the tuned model, when it beat the one in use by
    /// `min_gain`; none otherwise.
    pub candidate: Option<PolicyDocument>,
    /// Validation gain over FGD of the model in use.
    pub current_gain: f64,
    /// And of the tuned one.
    pub tuned_gain: f64,
    /// The tuned model's digest.
    pub digest: String,
    /// The generation kept (0: the model in use).
    pub kept_generation: usize,
}

/// Why a run gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum FineTuneError {
    /// The job cannot be tuned: no such plugin, not a learned one, no GPU
    /// pod in the record (the words name which).
    #[error("{0}")]
    Invalid(String),
    /// Training stopped.
    #[error("{0}")]
    Failed(String),
    /// The tuner panicked (a bug: the service goes on).
    #[error("the fine-tuner panicked")]
    Panicked,
}

/// Fine-tunes. Blocking: the service calls it on a thread of its own.
pub trait FineTuner: Send + Sync + 'static {
    /// Runs `job`.
    fn fine_tune(&self, job: &FineTuneJob) -> Result<FineTuneOutcome, FineTuneError>;
}

/// Runs fine-tuning on its schedule and on demand.
pub struct LearningScheduler {
    /// What and when.
    pub cfg: LearningConfig,
    /// `cfg.schedule`, parsed.
    pub schedule: Schedule,
    /// Tunes.
    pub tuner: Arc<dyn FineTuner>,
    /// Loads the candidate's plugins.
    pub loader: Arc<dyn Loader>,
    /// Where runs are recorded.
    pub shared: Arc<Shared>,
    /// Asks the loop for its record and sets the candidate.
    pub control: LoopHandle,
    /// Woken for a run now.
    pub manual: Arc<tokio::sync::Notify>,
}

impl LearningScheduler {
    /// Runs until the service stops.
    pub async fn run(self) {
        let me = Arc::new(self);
        let runtime = tokio::runtime::Handle::current();
        loop {
            let manual = me.schedule.wait(&me.manual, |next| me.view(|v| v.next_run_unix_ms = next)).await;
            let trigger = if manual { CampaignTrigger::Manual } else { CampaignTrigger::Schedule };
            if me.shared.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            if std::mem::replace(&mut me.shared.learning.write().unwrap_or_else(|p| p.into_inner()).running, true) {
                continue;
            }
            let inputs = match me.control.ask(|done| Control::LearningInputs { done }).await {
                Ok(inputs) => inputs,
                Err(e) => {
                    me.finish(me.begin(trigger, "(unknown)", 0), LearningOutcome::Error, Some(e.to_string()), None);
                    continue;
                }
            };
            let id = me.begin(trigger, &inputs.active.name, inputs.arrivals.len());
            if let Some(reason) = me.skip(&inputs) {
                me.finish(id, LearningOutcome::Skipped, Some(reason), None);
                continue;
            }
            let job = me.clone();
            let rt = runtime.clone();
            // A thread of its own: training keeps cores busy for minutes.
            let spawned =
                std::thread::Builder::new().name("tessera-learning".into()).spawn(move || job.once(id, inputs, &rt));
            if let Err(e) = spawned {
                me.finish(id, LearningOutcome::Error, Some(format!("cannot start fine-tuning: {e}")), None);
            }
        }
    }

    fn view(&self, f: impl FnOnce(&mut LearningView)) {
        f(&mut self.shared.learning.write().unwrap_or_else(|p| p.into_inner()));
    }

    /// Why `inputs` are not worth a run, if they are not.
    fn skip(&self, inputs: &LearningInputs) -> Option<String> {
        if inputs.candidate {
            return Some("a candidate is in rollout; its verdict and promotion come first".into());
        }
        (inputs.arrivals.len() < self.cfg.min_arrivals).then(|| {
            format!("{} arrivals recorded, learning.min_arrivals is {}", inputs.arrivals.len(), self.cfg.min_arrivals)
        })
    }

    /// Records a run as started; its id.
    fn begin(&self, trigger: CampaignTrigger, policy: &str, arrivals: usize) -> u64 {
        let mut v = self.shared.learning.write().unwrap_or_else(|p| p.into_inner());
        let id = v.runs.back().map_or(1, |r| r.id + 1);
        v.runs.push_back(LearningRun {
            id,
            trigger,
            policy: policy.into(),
            arrivals,
            started_unix_ms: now_unix_ms(),
            ended_unix_ms: None,
            outcome: None,
            reason: None,
            current_gain: None,
            tuned_gain: None,
            digest: None,
            kept_generation: None,
            candidate: None,
        });
        if v.runs.len() > LEARNING_HISTORY {
            v.runs.pop_front();
        }
        id
    }

    /// Records how run `id` ended, and that none is running.
    fn finish(&self, id: u64, outcome: LearningOutcome, reason: Option<String>, found: Option<&FineTuneOutcome>) {
        if let Some(r) = &reason
            && outcome == LearningOutcome::Error
        {
            tracing::warn!("fine-tuning: {r}");
        }
        self.shared.metrics.learning_runs.get_or_create(&OutcomeLabel { outcome: outcome.label().into() }).inc();
        let mut v = self.shared.learning.write().unwrap_or_else(|p| p.into_inner());
        v.running = false;
        if let Some(r) = v.runs.iter_mut().find(|r| r.id == id) {
            r.ended_unix_ms = Some(now_unix_ms());
            r.outcome = Some(outcome);
            r.reason = reason;
            if let Some(f) = found {
                r.current_gain = Some(f.current_gain);
                r.tuned_gain = Some(f.tuned_gain);
                r.digest = Some(f.digest.clone());
                r.kept_generation = Some(f.kept_generation);
                r.candidate = (outcome == LearningOutcome::Candidate)
                    .then(|| f.candidate.as_ref().map(|d| d.name.clone()))
                    .flatten();
            }
        }
    }

    /// One run, from the record to the candidate; `running` is cleared.
    fn once(&self, id: u64, inputs: LearningInputs, rt: &tokio::runtime::Handle) {
        let job = FineTuneJob {
            active: inputs.active,
            plugin: self.cfg.plugin.clone(),
            nodes: inputs.nodes,
            arrivals: inputs.arrivals,
            training: self.cfg.training,
            min_gain: self.cfg.min_gain,
        };
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.tuner.fine_tune(&job)))
            .unwrap_or(Err(FineTuneError::Panicked));
        let found = match found {
            Ok(f) => f,
            Err(e) => return self.finish(id, LearningOutcome::Error, Some(e.to_string()), None),
        };
        let Some(doc) = found.candidate.clone() else {
            let reason = format!(
                "tuned gain over FGD {:+.4} against {:+.4} in use; learning.min_gain is {}",
                found.tuned_gain, found.current_gain, self.cfg.min_gain
            );
            return self.finish(id, LearningOutcome::NoGain, Some(reason), Some(&found));
        };
        // Loaded and checked like any posted candidate; set only if no
        // candidate arrived meanwhile.
        let policy = match self.loader.load_policy(&doc) {
            Ok(p) => p,
            Err(e) => {
                let reason = format!("the tuned policy did not load: {e}");
                return self.finish(id, LearningOutcome::Error, Some(reason), Some(&found));
            }
        };
        let set = rt.block_on(self.control.ask(|done| Control::SetCandidate {
            candidate: Some((policy, Box::new(doc))),
            only_if_none: true,
            done,
        }));
        match set {
            Ok(true) => self.finish(id, LearningOutcome::Candidate, None, Some(&found)),
            Ok(false) => {
                let reason = "a candidate was set while tuning; the tuned model was dropped".to_string();
                self.finish(id, LearningOutcome::Skipped, Some(reason), Some(&found));
            }
            Err(e) => self.finish(id, LearningOutcome::Error, Some(e.to_string()), Some(&found)),
        }
    }
}
