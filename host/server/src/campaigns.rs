//! Scheduled chaos campaigns: `tessera serve` runs a campaign on a cron
//! expression (and on demand, `POST /v1/chaos/run`) on a twin of the live
//! cluster, with the rollout's candidate against the active policy, and
//! records the verdict for that candidate, so that a promotion needs no
//! outside job. The binary supplies the [`CampaignRunner`] (it owns the
//! chaos crate and the Wasm runtime), as it supplies the [`crate::Loader`].
//!
//! One campaign runs at a time: a tick that finds one running is skipped
//! and counted (Kubernetes CronJob's `concurrencyPolicy: Forbid`).

use std::path::PathBuf;
use std::sync::Arc;

use tessera_policy::PolicyDocument;

use crate::config::ChaosConfig;
use crate::control::{ChaosInputs, Control, LoopHandle};
use crate::cron::Schedule;
use crate::metrics::Metrics;
use crate::state::{CAMPAIGN_HISTORY, CampaignRun, CampaignTrigger, ChaosView, Shared};
use crate::wall::now_unix_ms;

/// What a scheduled run proves.
#[derive(Debug, Clone)]
pub struct CampaignJob {
    /// The campaign file.
    pub campaign: PathBuf,
    /// Replaces the campaign's candidate: the rollout's candidate.
    pub candidate: Option<PolicyDocument>,
    /// Replaces the campaign's baseline: the active policy (set with a
    /// candidate).
    pub baseline: Option<PolicyDocument>,
    /// Replaces the campaign's cluster: the live cluster, its running and
    /// waiting pods included.
    pub snapshot: Option<tessera_core::snapshot::Snapshot>,
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct CampaignOutcome {
    /// Campaign name.
    pub campaign: String,
    /// `PROMOTE` or `BLOCK`.
    pub verdict: String,
    /// The failing gates.
    pub failing: Vec<String>,
    /// Scenario × seed × policy runs.
    pub runs: usize,
    /// The whole report (`tessera chaos verify --format json`, without
    /// the per-run detail).
    pub report: serde_json::Value,
}

/// Why a campaign could not be checked or gave no verdict.
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    /// The campaign file cannot be used: unreadable, or not a valid
    /// campaign (the runner's words name the field).
    #[error("{0}")]
    Invalid(String),
    /// A run stopped before its verdict: a policy did not load, a trace
    /// could not be read.
    #[error("{0}")]
    Failed(String),
    /// The runner panicked (a bug: the service goes on).
    #[error("the campaign runner panicked")]
    Panicked,
    /// This binary has no runner.
    #[error("this binary cannot run campaigns")]
    Unsupported,
}

/// Runs campaigns. Blocking: the service calls it on a thread of its own.
pub trait CampaignRunner: Send + Sync + 'static {
    /// Reads and checks the campaign file; its name.
    fn check(&self, campaign: &std::path::Path) -> Result<String, CampaignError>;
    /// Runs every scenario × seed of `job` and judges them.
    fn run(&self, job: &CampaignJob) -> Result<CampaignOutcome, CampaignError>;
}

/// Runs the configured campaign on its schedule and on demand.
pub struct CampaignScheduler {
    /// What and when.
    pub cfg: ChaosConfig,
    /// `cfg.schedule`, parsed.
    pub schedule: Schedule,
    /// Runs it.
    pub runner: Arc<dyn CampaignRunner>,
    /// Where runs and verdicts are recorded.
    pub shared: Arc<Shared>,
    /// Asks the loop for the policies and the cluster.
    pub control: LoopHandle,
    /// Woken for a run now.
    pub manual: Arc<tokio::sync::Notify>,
}

impl CampaignScheduler {
    /// Runs until the service stops: waits for the next tick or a manual
    /// trigger, runs the campaign (one at a time), records what it found.
    pub async fn run(self) {
        let me = Arc::new(self);
        loop {
            let manual = me.schedule.wait(&me.manual, |next| me.view(|v| v.next_run_unix_ms = next)).await;
            let trigger = if manual { CampaignTrigger::Manual } else { CampaignTrigger::Schedule };
            if me.shared.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            let busy = {
                let mut v = me.shared.chaos.write().unwrap_or_else(|p| p.into_inner());
                if v.running {
                    v.skipped += 1;
                }
                std::mem::replace(&mut v.running, true)
            };
            if busy {
                me.shared.metrics.chaos_campaigns.get_or_create(&verdict_label("SKIPPED")).inc();
                continue;
            }
            // The policies and the cluster, from the loop between two passes.
            let inputs = match me.control.ask(|done| Control::ChaosInputs { done }).await {
                Ok(inputs) => inputs,
                Err(e) => {
                    tracing::warn!("chaos campaign {}: {e}", me.cfg.campaign.display());
                    me.view(|v| v.running = false);
                    continue;
                }
            };
            let job = me.clone();
            // A thread of its own: a campaign keeps cores busy for minutes
            // and must not hold a runtime worker or delay shutdown.
            let spawned =
                std::thread::Builder::new().name("tessera-chaos".into()).spawn(move || job.once(trigger, inputs));
            if let Err(e) = spawned {
                tracing::error!("cannot start a chaos campaign: {e}");
                me.view(|v| v.running = false);
            }
        }
    }

    fn view(&self, f: impl FnOnce(&mut ChaosView)) {
        f(&mut self.shared.chaos.write().unwrap_or_else(|p| p.into_inner()));
    }

    /// One run, start to record; `running` is set, and cleared here.
    fn once(&self, trigger: CampaignTrigger, inputs: ChaosInputs) {
        let candidate = inputs.candidate.as_ref().map(|(d, id)| (d.name.clone(), *id));
        let job = CampaignJob {
            campaign: self.cfg.campaign.clone(),
            candidate: inputs.candidate.as_ref().map(|(d, _)| d.clone()),
            baseline: candidate.is_some().then(|| inputs.active.clone()),
            snapshot: self.cfg.live_cluster.then_some(inputs.snapshot),
        };
        let started = now_unix_ms();
        let id = {
            let mut v = self.shared.chaos.write().unwrap_or_else(|p| p.into_inner());
            let id = v.runs.back().map_or(1, |r| r.id + 1);
            v.runs.push_back(CampaignRun {
                id,
                trigger,
                campaign: self.cfg.campaign.display().to_string(),
                candidate: candidate.as_ref().map_or_else(|| "(the campaign's)".into(), |c| c.0.clone()),
                baseline: job.baseline.as_ref().map_or_else(|| "(the campaign's)".into(), |d| d.name.clone()),
                live_cluster: self.cfg.live_cluster,
                started_unix_ms: started,
                ended_unix_ms: None,
                verdict: None,
                failing: Vec::new(),
                error: None,
                recorded_for_candidate: false,
                gates: serde_json::Value::Null,
            });
            if v.runs.len() > CAMPAIGN_HISTORY {
                v.runs.pop_front();
            }
            id
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.runner.run(&job)))
            .unwrap_or(Err(CampaignError::Panicked));
        let seconds = (now_unix_ms().saturating_sub(started)) as f64 / 1000.0;
        let recorded = match &outcome {
            Ok(o) => candidate.as_ref().is_some_and(|(name, cid)| {
                self.shared.rollout.write().unwrap_or_else(|p| p.into_inner()).record_for(
                    name,
                    *cid,
                    o.verdict.clone(),
                    o.campaign.clone(),
                    o.failing.clone(),
                )
            }),
            Err(_) => false,
        };
        let word = outcome.as_ref().map_or("ERROR", |o| o.verdict.as_str()).to_string();
        record_metrics(&self.shared.metrics, &word, seconds);
        let mut v = self.shared.chaos.write().unwrap_or_else(|p| p.into_inner());
        v.running = false;
        if let Some(r) = v.runs.iter_mut().find(|r| r.id == id) {
            r.ended_unix_ms = Some(now_unix_ms());
            r.verdict = Some(word);
            r.recorded_for_candidate = recorded;
            match outcome {
                Ok(o) => {
                    r.campaign = o.campaign;
                    r.failing = o.failing;
                    r.gates = o.report.get("gates").cloned().unwrap_or_default();
                }
                Err(e) => {
                    tracing::warn!("chaos campaign {}: {e}", self.cfg.campaign.display());
                    r.error = Some(e.to_string());
                }
            }
        }
    }
}

fn verdict_label(v: &str) -> crate::metrics::VerdictLabel {
    crate::metrics::VerdictLabel { verdict: v.into() }
}

fn record_metrics(m: &Metrics, verdict: &str, seconds: f64) {
    m.chaos_campaigns.get_or_create(&verdict_label(verdict)).inc();
    m.chaos_campaign_duration.observe(seconds);
}
