//! What the loop and the API share: the logs of decisions and plans, the
//! metrics, the policy in force, the backend's status, the rollout and
//! the scheduled campaigns as they stand.

use std::collections::VecDeque;
use std::sync::RwLock;
use std::sync::atomic::AtomicBool;

use serde::{Deserialize, Serialize};
use tessera_policy::PolicyDocument;
use tessera_wasm::Member;
use utoipa::ToSchema;

use crate::config::ServeConfig;
use crate::metrics::Metrics;
use crate::record::{DecisionLog, PlanLog};
use crate::rollout::RolloutView;

/// Campaign runs kept for `GET /v1/chaos`.
pub const CAMPAIGN_HISTORY: usize = 50;

/// The policy in force, as the API shows it.
#[derive(Debug, Clone)]
pub struct PolicyView {
    /// Name.
    pub name: String,
    /// Its document.
    pub doc: PolicyDocument,
    /// Its plugins (scorers, then detectors), each in its swappable slot.
    pub members: Vec<Member>,
}

/// A summary of the backend, refreshed every pass.
#[derive(Debug, Clone, Default, serde::Serialize, utoipa::ToSchema)]
pub struct Status {
    /// The backend (`simulator`, `kubernetes`).
    pub backend: String,
    /// Backend time, seconds.
    pub backend_time_s: u64,
    /// Nodes.
    pub nodes: usize,
    /// Pods running.
    pub pods_running: usize,
    /// Pods queued or parked.
    pub pods_waiting: usize,
    /// This replica decides and acts (it leads); a standby only follows.
    pub active: bool,
}

/// State shared by the loop and the API.
#[derive(Debug)]
pub struct Shared {
    /// Recent decisions.
    pub decisions: RwLock<DecisionLog>,
    /// Recent plans.
    pub plans: RwLock<PlanLog>,
    /// Metrics.
    pub metrics: Metrics,
    /// The policy in force.
    pub policy: RwLock<PolicyView>,
    /// The backend at the last pass.
    pub status: RwLock<Status>,
    /// The rollout of a candidate policy.
    pub rollout: RwLock<RolloutView>,
    /// Scheduled chaos campaigns.
    pub chaos: RwLock<ChaosView>,
    /// Scheduled fine-tuning.
    pub learning: RwLock<LearningView>,
    /// The loop mirrored the cluster into the plugins and runs.
    pub ready: AtomicBool,
    /// Shutdown asked.
    pub stopping: AtomicBool,
    /// Decision latency over the last hour, by minute (the console's heatmap).
    pub heat: std::sync::Mutex<crate::heat::LatencyHeat>,
    /// The listener closed: requests in flight drain (event streams end).
    pub draining: AtomicBool,
}

impl Shared {
    /// The state of a service configured by `cfg`, starting with `doc`.
    pub fn new(cfg: &ServeConfig, doc: &PolicyDocument) -> Self {
        let shared = Self {
            decisions: RwLock::new(DecisionLog::new(cfg.history.decisions)),
            plans: RwLock::new(PlanLog::new(cfg.history.plans)),
            metrics: Metrics::new(),
            policy: RwLock::new(PolicyView { name: doc.name.clone(), doc: doc.clone(), members: Vec::new() }),
            status: RwLock::new(Status::default()),
            rollout: RwLock::new(RolloutView::new(&doc.name)),
            chaos: RwLock::new(ChaosView {
                schedule: cfg.chaos.as_ref().map(|c| c.schedule.clone()),
                campaign: cfg.chaos.as_ref().map(|c| c.campaign.display().to_string()),
                ..Default::default()
            }),
            learning: RwLock::new(LearningView {
                schedule: cfg.learning.as_ref().map(|l| l.schedule.clone()),
                plugin: cfg.learning.as_ref().map(|l| l.plugin.clone()),
                ..Default::default()
            }),
            ready: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            heat: Default::default(),
        };
        shared.metrics.zero_known_series(doc);
        shared
    }
}

/// Why a run started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CampaignTrigger {
    /// The cron expression fired.
    Schedule,
    /// `POST /v1/chaos/run`.
    Manual,
}

/// One campaign run, as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CampaignRun {
    /// Sequence number, from 1.
    pub id: u64,
    /// Why it ran.
    pub trigger: CampaignTrigger,
    /// Campaign name.
    pub campaign: String,
    /// The policy proven (the rollout's candidate, or the campaign's own).
    pub candidate: String,
    /// The policy it was compared with.
    pub baseline: String,
    /// On a twin of the live cluster.
    pub live_cluster: bool,
    /// Started, Unix ms.
    pub started_unix_ms: u64,
    /// Ended, Unix ms (none: running).
    pub ended_unix_ms: Option<u64>,
    /// `PROMOTE`, `BLOCK`, or `ERROR` (none: running).
    pub verdict: Option<String>,
    /// The failing gates, or the error.
    pub failing: Vec<String>,
    /// The error, if the campaign could not run.
    pub error: Option<String>,
    /// Recorded as the rollout candidate's verdict (it was still the
    /// candidate when the run ended).
    pub recorded_for_candidate: bool,
    /// The report's gates (candidate, baseline, threshold, margin, pass).
    #[schema(value_type = Object)]
    pub gates: serde_json::Value,
}

/// Scheduled campaigns, as the API shows them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChaosView {
    /// The cron expression (none: not scheduled).
    pub schedule: Option<String>,
    /// The campaign file.
    pub campaign: Option<String>,
    /// Its next scheduled start, Unix ms.
    pub next_run_unix_ms: Option<u64>,
    /// A run is under way.
    pub running: bool,
    /// Ticks skipped because a run was under way.
    pub skipped: u64,
    /// The latest runs, newest last.
    #[schema(value_type = Vec<CampaignRun>)]
    pub runs: VecDeque<CampaignRun>,
}

/// Fine-tuning runs kept for `GET /v1/learning`.
pub const LEARNING_HISTORY: usize = 20;

/// How a fine-tuning run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING-KEBAB-CASE")]
pub enum LearningOutcome {
    /// The tuned model is the rollout's candidate, in shadow.
    Candidate,
    /// The tuned model did not beat the one in use by `min_gain`.
    NoGain,
    /// Not run: too few arrivals, or a candidate already in rollout.
    Skipped,
    /// It could not run or failed.
    Error,
}

impl LearningOutcome {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Candidate => "CANDIDATE",
            Self::NoGain => "NO-GAIN",
            Self::Skipped => "SKIPPED",
            Self::Error => "ERROR",
        }
    }
}

/// One fine-tuning run, as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LearningRun {
    /// Sequence number, from 1.
    pub id: u64,
    /// Why it ran.
    pub trigger: CampaignTrigger,
    /// The active policy it tuned.
    pub policy: String,
    /// Arrivals it learned from.
    pub arrivals: usize,
    /// Started, Unix ms.
    pub started_unix_ms: u64,
    /// Ended, Unix ms (none: running).
    pub ended_unix_ms: Option<u64>,
    /// How it ended (none: running).
    pub outcome: Option<LearningOutcome>,
    /// Why it was skipped, or the error.
    pub reason: Option<String>,
    /// Validation gain over FGD (`1 − ours ÷ FGD`) of the model in use.
    pub current_gain: Option<f64>,
    /// And of the tuned model.
    pub tuned_gain: Option<f64>,
    /// The tuned model's digest.
    pub digest: Option<String>,
    /// The generation kept (0: none beat the model in use).
    pub kept_generation: Option<usize>,
    /// The candidate's name, when one was set.
    pub candidate: Option<String>,
}

/// Scheduled fine-tuning, as the API shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LearningView {
    /// The cron expression (none: not scheduled).
    pub schedule: Option<String>,
    /// The plugin tuned.
    pub plugin: Option<String>,
    /// Its next scheduled start, Unix ms.
    pub next_run_unix_ms: Option<u64>,
    /// A run is under way.
    pub running: bool,
    /// The latest runs, newest last.
    #[schema(value_type = Vec<LearningRun>)]
    pub runs: VecDeque<LearningRun>,
}
