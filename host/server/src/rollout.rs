//! Policy rollout: a candidate policy moves candidate → shadow (it decides
//! beside the active policy for every pod without acting; disagreements
//! are counted and explained) → canary (it acts for a configurable share of
//! pods) → active, and back on rollback. Promotion requires a passing
//! chaos verdict (`tessera chaos verify --format json`) no older than
//! `rollout.max_verdict_age_s`.

use std::collections::VecDeque;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::{ApiError, AppState, authorize, content_type, send, wait};
use crate::engine::Control;

/// Disagreements kept for explanation.
pub const RECENT: usize = 100;

/// Where the candidate stands.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case", tag = "stage")]
pub enum Stage {
    /// Decides beside the active policy; never acts.
    Shadow,
    /// Acts for `share` of the pods (chosen by a hash of the pod's name).
    Canary {
        /// Share of pods, (0, 1].
        share: f64,
    },
}

/// Whether the canary takes pod `name` at `share`: a stable hash of the
/// name, so a pod's lot does not change between retries.
pub fn canary_pick(name: &str, share: f64) -> bool {
    // FNV-1a: stable across processes and versions.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h as f64 / u64::MAX as f64) < share
}

/// A pod the two policies placed differently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Disagreement {
    /// Pod.
    pub pod: String,
    /// The active policy's node.
    pub active: Option<String>,
    /// The candidate's node.
    pub candidate: Option<String>,
    /// Whose choice was carried out.
    pub acted: String,
    /// The pod's decision, explained (`/v1/decisions/{pod}`).
    pub at_unix_ms: u64,
}

/// A chaos verdict as recorded for the candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VerdictRecord {
    /// `PROMOTE` or `BLOCK`.
    pub verdict: String,
    /// Campaign name.
    pub campaign: String,
    /// The gates that failed.
    pub failing: Vec<String>,
    /// The candidate it was recorded for.
    pub for_candidate: String,
    /// When it was recorded, Unix ms.
    pub recorded_unix_ms: u64,
}

/// The rollout, as the API shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RolloutView {
    /// The active policy.
    pub active: String,
    /// The candidate, if one is being rolled out.
    pub candidate: Option<String>,
    /// Changes whenever a candidate is set or dropped: a verdict is
    /// recorded for one candidate (a new one of the same name is another).
    pub candidate_id: u64,
    /// Its stage.
    pub stage: Option<Stage>,
    /// Since when, Unix ms.
    pub since_unix_ms: u64,
    /// Pods both policies decided since the candidate was set.
    pub compared: u64,
    /// Of those, pods they placed differently.
    pub disagreements: u64,
    /// Pods the candidate's choice was carried out for (canary).
    pub candidate_acted: u64,
    /// The latest disagreements, newest last.
    #[schema(value_type = Vec<Disagreement>)]
    pub recent: VecDeque<Disagreement>,
    /// The chaos verdict recorded for the candidate.
    pub verdict: Option<VerdictRecord>,
    /// Promotions so far.
    pub promotions: u64,
}

impl RolloutView {
    /// Records a chaos verdict for the current candidate; false when there
    /// is none.
    pub fn record(&mut self, verdict: String, campaign: String, failing: Vec<String>) -> bool {
        let Some(candidate) = self.candidate.clone() else { return false };
        self.verdict = Some(VerdictRecord {
            verdict,
            campaign,
            failing,
            for_candidate: candidate,
            recorded_unix_ms: crate::now_unix_ms(),
        });
        true
    }
}

/// Rollout settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutConfig {
    /// Oldest chaos verdict a promotion accepts, seconds.
    pub max_verdict_age_s: u64,
}

impl Default for RolloutConfig {
    fn default() -> Self {
        Self { max_verdict_age_s: 86_400 }
    }
}

/// The rollout routes.
pub(crate) fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/rollout", get(view))
        .route("/v1/rollout/candidate", post(set_candidate))
        .route("/v1/rollout/stage", post(set_stage))
        .route("/v1/rollout/verdict", post(record_verdict))
        .route("/v1/rollout/promote", post(promote))
        .route("/v1/rollout/rollback", post(rollback))
}

fn conflict(code: &str, message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, code, message)
}

/// The rollout: stage, agreement, recent disagreements, verdict.
#[utoipa::path(get, path = "/v1/rollout", responses((status = 200, body = RolloutView)))]
pub async fn view(State(s): State<AppState>) -> Json<RolloutView> {
    Json(s.shared.rollout.read().unwrap_or_else(|p| p.into_inner()).clone())
}

/// Sets a candidate policy (a policy document) in shadow: all its plugins
/// load first; it then decides beside the active policy without acting.
#[utoipa::path(post, path = "/v1/rollout/candidate", request_body(content = String, content_type = "application/yaml"),
    security(("bearer" = [])), responses(
    (status = 200, body = RolloutView),
    (status = 400, body = ApiError), (status = 401, body = ApiError), (status = 422, body = ApiError),
))]
pub async fn set_candidate(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RolloutView>, ApiError> {
    let (policy, doc) = crate::api::load_policy_body(&s, &headers, body).await?;
    let (tx, rx) = std::sync::mpsc::channel();
    send(&s, Control::SetCandidate { candidate: Some((policy, Box::new(doc))), done: tx })?;
    wait(rx).await?;
    Ok(view(State(s)).await)
}

/// `?stage=shadow|canary&share=`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct StageQuery {
    /// `shadow` or `canary`.
    pub stage: String,
    /// Share of pods for a canary, (0, 1].
    pub share: Option<f64>,
}

/// Moves the candidate to shadow or canary.
#[utoipa::path(post, path = "/v1/rollout/stage", params(StageQuery), security(("bearer" = [])), responses(
    (status = 200, body = RolloutView),
    (status = 400, body = ApiError), (status = 401, body = ApiError), (status = 409, body = ApiError),
))]
pub async fn set_stage(
    State(s): State<AppState>,
    headers: HeaderMap,
    q: Result<Query<StageQuery>, QueryRejection>,
) -> Result<Json<RolloutView>, ApiError> {
    authorize(&s, &headers)?;
    let Query(q) = q?;
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "API-BAD-QUERY", m);
    let stage = match (q.stage.as_str(), q.share) {
        ("shadow", None) => Stage::Shadow,
        ("canary", Some(share)) if share > 0.0 && share <= 1.0 => Stage::Canary { share },
        ("canary", Some(share)) => return Err(bad(format!("share {share} is not in (0, 1]"))),
        ("canary", None) => return Err(bad("a canary needs share=".into())),
        ("shadow", Some(_)) => return Err(bad("a shadow takes no share".into())),
        (other, _) => return Err(bad(format!("stage {other:?} is not shadow or canary"))),
    };
    if s.shared.rollout.read().unwrap_or_else(|p| p.into_inner()).candidate.is_none() {
        return Err(conflict("ROLLOUT-NO-CANDIDATE", "no candidate: POST /v1/rollout/candidate first"));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    send(&s, Control::SetStage { stage, done: tx })?;
    wait(rx).await?.map_err(|m| conflict("ROLLOUT-NO-CANDIDATE", m))?;
    Ok(view(State(s)).await)
}

/// The part of a chaos report a verdict needs.
#[derive(Debug, Deserialize)]
struct ReportDoc {
    campaign: String,
    verdict: String,
    #[serde(default)]
    failing: Vec<String>,
}

/// Records a chaos verdict (`tessera chaos verify --format json`) for the
/// current candidate.
#[utoipa::path(post, path = "/v1/rollout/verdict", request_body(content = Object, content_type = "application/json"),
    security(("bearer" = [])), responses(
    (status = 200, body = RolloutView),
    (status = 400, body = ApiError), (status = 401, body = ApiError), (status = 409, body = ApiError),
))]
pub async fn record_verdict(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RolloutView>, ApiError> {
    authorize(&s, &headers)?;
    content_type(&headers, &["application/json"])?;
    let body = body?;
    let r: ReportDoc = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "API-BAD-BODY",
            format!("not a chaos report (tessera chaos verify --format json): {e}"),
        )
    })?;
    if r.verdict != "PROMOTE" && r.verdict != "BLOCK" {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "API-BAD-BODY",
            format!("verdict {:?} is not PROMOTE or BLOCK", r.verdict),
        ));
    }
    if !s.shared.rollout.write().unwrap_or_else(|p| p.into_inner()).record(r.verdict, r.campaign, r.failing) {
        return Err(conflict("ROLLOUT-NO-CANDIDATE", "no candidate to record a verdict for"));
    }
    Ok(view(State(s)).await)
}

/// Makes the candidate the active policy: it must be in canary and have a
/// `PROMOTE` verdict no older than `rollout.max_verdict_age_s`.
#[utoipa::path(post, path = "/v1/rollout/promote", security(("bearer" = [])), responses(
    (status = 200, body = RolloutView),
    (status = 401, body = ApiError),
    (status = 409, description = "No candidate, not in canary, no verdict, a BLOCK verdict or a stale one", body = ApiError),
))]
pub async fn promote(State(s): State<AppState>, headers: HeaderMap) -> Result<Json<RolloutView>, ApiError> {
    authorize(&s, &headers)?;
    {
        let v = s.shared.rollout.read().unwrap_or_else(|p| p.into_inner());
        let Some(candidate) = &v.candidate else {
            return Err(conflict("ROLLOUT-NO-CANDIDATE", "no candidate to promote"));
        };
        if !matches!(v.stage, Some(Stage::Canary { .. })) {
            return Err(conflict(
                "ROLLOUT-STAGE",
                format!("{candidate} is in shadow: run it as a canary before promoting"),
            ));
        }
        let Some(verdict) = &v.verdict else {
            return Err(conflict(
                "ROLLOUT-NO-VERDICT",
                format!("no chaos verdict for {candidate}: POST /v1/rollout/verdict"),
            ));
        };
        if verdict.verdict != "PROMOTE" {
            return Err(conflict(
                "ROLLOUT-BLOCKED",
                format!(
                    "campaign {} blocked {candidate}: failing gates {}",
                    verdict.campaign,
                    verdict.failing.join(", ")
                ),
            ));
        }
        let age_s = crate::now_unix_ms().saturating_sub(verdict.recorded_unix_ms) / 1000;
        if age_s > s.rollout.max_verdict_age_s {
            return Err(conflict(
                "ROLLOUT-VERDICT-STALE",
                format!("the verdict is {age_s} s old; promotions accept at most {} s", s.rollout.max_verdict_age_s),
            ));
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    send(&s, Control::Promote { done: tx })?;
    wait(rx).await?.map_err(|m| conflict("ROLLOUT-NO-CANDIDATE", m))?;
    Ok(view(State(s)).await)
}

/// Drops the candidate; the active policy alone decides.
#[utoipa::path(post, path = "/v1/rollout/rollback", security(("bearer" = [])), responses(
    (status = 200, body = RolloutView), (status = 401, body = ApiError),
))]
pub async fn rollback(State(s): State<AppState>, headers: HeaderMap) -> Result<Json<RolloutView>, ApiError> {
    authorize(&s, &headers)?;
    let (tx, rx) = std::sync::mpsc::channel();
    send(&s, Control::SetCandidate { candidate: None, done: tx })?;
    wait(rx).await?;
    Ok(view(State(s)).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canary_takes_about_its_share_and_always_the_same_pods() {
        let taken = (0..10_000).filter(|i| canary_pick(&format!("pod-{i}"), 0.2)).count();
        assert!((1_700..2_300).contains(&taken), "{taken}");
        assert_eq!(canary_pick("pod-42", 0.2), canary_pick("pod-42", 0.2));
        assert!((0..1000).all(|i| canary_pick(&format!("p{i}"), 1.0)));
        assert!(!(0..1000).any(|i| canary_pick(&format!("p{i}"), 0.0)));
    }
}
