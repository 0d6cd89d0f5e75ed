//! Scheduled chaos campaigns: `tessera serve` runs a campaign on a cron
//! expression (and on demand, `POST /v1/chaos/run`) on a twin of the live
//! cluster, with the rollout's candidate against the active policy, and
//! records the verdict for that candidate, so that a promotion needs no
//! outside job. The binary supplies the [`CampaignRunner`] (it owns the
//! chaos crate and the Wasm runtime), as it supplies the [`crate::Loader`].
//!
//! One campaign runs at a time: a tick that finds one running is skipped
//! and counted (Kubernetes CronJob's `concurrencyPolicy: Forbid`).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::Sender;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use tessera_policy::PolicyDocument;
use utoipa::ToSchema;

use crate::api::{ApiError, AppState, authorize};
use crate::engine::Control;
use crate::metrics::Metrics;
use crate::{Shared, now_unix_ms};

/// Campaign runs kept for `GET /v1/chaos`.
pub const HISTORY: usize = 50;

/// A cron expression (5 fields, or 6 with seconds first; `@daily` and the
/// other aliases), evaluated in UTC.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: croner::Cron,
}

impl Schedule {
    /// Parses `expr`, or says why it is not a cron expression.
    pub fn parse(expr: &str) -> Result<Self, String> {
        croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .build()
            .parse(expr)
            .map(|cron| Self { cron })
            .map_err(|e| format!("`{expr}` is not a cron expression: {e}"))
    }

    /// The first time strictly after `after_unix_ms` it fires, Unix ms
    /// (none: never again).
    pub fn next_after(&self, after_unix_ms: u64) -> Option<u64> {
        let t = jiff::Timestamp::from_millisecond(i64::try_from(after_unix_ms).ok()?).ok()?;
        let next = self.cron.find_next_occurrence(&t.to_zoned(jiff::tz::TimeZone::UTC), false).ok()?;
        u64::try_from(next.timestamp().as_millisecond()).ok()
    }
}

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

/// Runs campaigns. Blocking: the service calls it on a thread of its own.
pub trait CampaignRunner: Send + Sync + 'static {
    /// Reads and checks the campaign file; its name.
    fn check(&self, campaign: &std::path::Path) -> Result<String, String>;
    /// Runs every scenario × seed of `job` and judges them.
    fn run(&self, job: &CampaignJob) -> Result<CampaignOutcome, String>;
}

/// Scheduled campaigns, as configured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChaosConfig {
    /// Cron expression, UTC (`0 3 * * *`: every night at 03:00; 6 fields
    /// when the first is seconds).
    pub schedule: String,
    /// The campaign file.
    pub campaign: PathBuf,
    /// Run on a twin of the live cluster (its nodes, running and waiting
    /// pods) instead of the campaign's cluster.
    #[serde(default = "yes")]
    pub live_cluster: bool,
}

fn yes() -> bool {
    true
}

/// Why a run started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
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
    pub trigger: Trigger,
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

/// What the scheduler task needs.
pub(crate) struct Scheduler {
    pub cfg: ChaosConfig,
    pub schedule: Schedule,
    pub runner: Arc<dyn CampaignRunner>,
    pub shared: Arc<Shared>,
    pub control: Sender<Control>,
    pub manual: Arc<tokio::sync::Notify>,
}

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

impl Scheduler {
    /// Runs until the service stops: waits for the next tick or a manual
    /// trigger, runs the campaign (one at a time), records what it found.
    pub async fn run(self) {
        let me = Arc::new(self);
        loop {
            let now = now_unix_ms();
            let next = me.schedule.next_after(now);
            me.view(|v| v.next_run_unix_ms = next);
            let sleep = next.map_or(std::time::Duration::from_secs(86_400 * 365), |n| {
                std::time::Duration::from_millis(n.saturating_sub(now))
            });
            let trigger = tokio::select! {
                () = tokio::time::sleep(sleep) => Trigger::Schedule,
                () = me.manual.notified() => Trigger::Manual,
            };
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
            let job = me.clone();
            // A thread of its own: a campaign keeps cores busy for minutes
            // and must not hold a runtime worker or delay shutdown.
            let spawned = std::thread::Builder::new().name("tessera-chaos".into()).spawn(move || job.once(trigger));
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
    fn once(&self, trigger: Trigger) {
        let Some(inputs) = self.inputs() else {
            self.view(|v| v.running = false);
            return;
        };
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
            if v.runs.len() > HISTORY {
                v.runs.pop_front();
            }
            id
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.runner.run(&job)))
            .unwrap_or_else(|_| Err("the campaign runner panicked".into()));
        let seconds = (now_unix_ms().saturating_sub(started)) as f64 / 1000.0;
        let recorded = match &outcome {
            Ok(o) => candidate.as_ref().is_some_and(|(name, cid)| record_for(&self.shared, o, name, *cid)),
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
                    r.error = Some(e);
                }
            }
        }
    }

    /// The policies and the cluster, from the loop between two passes.
    fn inputs(&self) -> Option<ChaosInputs> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.control.send(Control::ChaosInputs { done: tx }).ok()?;
        rx.recv_timeout(std::time::Duration::from_secs(30)).ok()
    }
}

fn verdict_label(v: &str) -> crate::metrics::VerdictLabel {
    crate::metrics::VerdictLabel { verdict: v.into() }
}

fn record_metrics(m: &Metrics, verdict: &str, seconds: f64) {
    m.chaos_campaigns.get_or_create(&verdict_label(verdict)).inc();
    m.chaos_campaign_duration.observe(seconds);
}

/// Records `o` as the verdict of candidate `name` (id `candidate_id`), if
/// it is still the candidate.
fn record_for(shared: &Shared, o: &CampaignOutcome, name: &str, candidate_id: u64) -> bool {
    let mut v = shared.rollout.write().unwrap_or_else(|p| p.into_inner());
    if v.candidate.as_deref() != Some(name) || v.candidate_id != candidate_id {
        return false;
    }
    v.record(o.verdict.clone(), o.campaign.clone(), o.failing.clone())
}

/// The chaos routes.
pub(crate) fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/v1/chaos", get(view)).route("/v1/chaos/run", post(run_now))
}

/// Scheduled campaigns: the schedule, the next start, the latest runs.
#[utoipa::path(get, path = "/v1/chaos", responses((status = 200, body = ChaosView)))]
pub async fn view(State(s): State<AppState>) -> Json<ChaosView> {
    Json(s.shared.chaos.read().unwrap_or_else(|p| p.into_inner()).clone())
}

/// Runs the scheduled campaign now (202; follow it on `GET /v1/chaos`).
#[utoipa::path(post, path = "/v1/chaos/run", security(("bearer" = [])), responses(
    (status = 202, body = ChaosView),
    (status = 401, body = ApiError),
    (status = 409, description = "No campaign is scheduled, or one is running", body = ApiError),
))]
pub async fn run_now(State(s): State<AppState>, headers: HeaderMap) -> Result<(StatusCode, Json<ChaosView>), ApiError> {
    authorize(&s, &headers)?;
    let Some(manual) = &s.chaos else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "CHAOS-NOT-SCHEDULED",
            "no campaign is configured: set chaos.schedule and chaos.campaign",
        ));
    };
    if s.shared.chaos.read().unwrap_or_else(|p| p.into_inner()).running {
        return Err(ApiError::new(StatusCode::CONFLICT, "CHAOS-RUNNING", "a campaign is running; try when it ends"));
    }
    manual.notify_one();
    Ok((StatusCode::ACCEPTED, view(State(s)).await))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    #[test]
    fn five_and_six_field_expressions_fire_when_they_say_in_utc() {
        // 2026-12-01T05:27:00Z.
        let t0 = jiff::Timestamp::from_second(1_796_102_820).unwrap().as_millisecond() as u64;
        let nightly = Schedule::parse("0 3 * * *").unwrap();
        let next = nightly.next_after(t0).unwrap();
        let z = jiff::Timestamp::from_millisecond(next as i64).unwrap().to_zoned(jiff::tz::TimeZone::UTC);
        assert_eq!((z.day(), z.hour(), z.minute()), (2, 3, 0), "{z}");
        let every_15 = Schedule::parse("*/15 * * * *").unwrap();
        assert_eq!(every_15.next_after(t0), Some(t0 - 12 * MIN + 15 * MIN));
        let every_second = Schedule::parse("* * * * * *").unwrap();
        assert_eq!(every_second.next_after(t0), Some(t0 + 1000));
        assert!(Schedule::parse("@daily").is_ok());
        for bad in ["", "61 * * * *", "* * *", "every night"] {
            let e = Schedule::parse(bad).unwrap_err();
            assert!(e.contains("not a cron expression"), "{e}");
        }
    }
}
