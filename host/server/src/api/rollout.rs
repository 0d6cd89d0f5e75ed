//! The rollout routes: the candidate in shadow or canary, its chaos
//! verdict, promotion and rollback. The rules are [`crate::rollout`]'s.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use serde::Deserialize;
use utoipa::IntoParams;

use super::app::{AppState, authorize, content_type, not_stopping};
use super::error::{ApiError, Code};
use super::policies::load_policy_body;
use crate::control::Control;
use crate::rollout::{RolloutError, RolloutView, Stage};
use crate::wall::now_unix_ms;

/// The rollout routes.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/rollout", get(view))
        .route("/v1/rollout/candidate", post(set_candidate))
        .route("/v1/rollout/stage", post(set_stage))
        .route("/v1/rollout/verdict", post(record_verdict))
        .route("/v1/rollout/promote", post(promote))
        .route("/v1/rollout/rollback", post(rollback))
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
    let (policy, doc) = load_policy_body(&s, &headers, body).await?;
    not_stopping(&s)?;
    s.control
        .ask(|done| Control::SetCandidate { candidate: Some((policy, Box::new(doc))), only_if_none: false, done })
        .await?;
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
    let bad = |m: String| ApiError::new(Code::ApiBadQuery, m);
    let stage = match (q.stage.as_str(), q.share) {
        ("shadow", None) => Stage::Shadow,
        ("canary", Some(share)) if share > 0.0 && share <= 1.0 => Stage::Canary { share },
        ("canary", Some(share)) => return Err(bad(format!("share {share} is not in (0, 1]"))),
        ("canary", None) => return Err(bad("a canary needs share=".into())),
        ("shadow", Some(_)) => return Err(bad("a shadow takes no share".into())),
        (other, _) => return Err(bad(format!("stage {other:?} is not shadow or canary"))),
    };
    if s.shared.rollout.read().unwrap_or_else(|p| p.into_inner()).candidate.is_none() {
        return Err(RolloutError::NoCandidate.into());
    }
    not_stopping(&s)?;
    s.control.ask(|done| Control::SetStage { stage, done }).await??;
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
        ApiError::new(Code::ApiBadBody, format!("not a chaos report (tessera chaos verify --format json): {e}"))
    })?;
    if r.verdict != "PROMOTE" && r.verdict != "BLOCK" {
        return Err(ApiError::new(Code::ApiBadBody, format!("verdict {:?} is not PROMOTE or BLOCK", r.verdict)));
    }
    if !s.shared.rollout.write().unwrap_or_else(|p| p.into_inner()).record(r.verdict, r.campaign, r.failing) {
        return Err(ApiError::new(Code::RolloutNoCandidate, "no candidate to record a verdict for"));
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
    s.shared.rollout.read().unwrap_or_else(|p| p.into_inner()).may_promote(&s.rollout, now_unix_ms())?;
    not_stopping(&s)?;
    s.control.ask(|done| Control::Promote { done }).await??;
    Ok(view(State(s)).await)
}

/// Drops the candidate; the active policy alone decides.
#[utoipa::path(post, path = "/v1/rollout/rollback", security(("bearer" = [])), responses(
    (status = 200, body = RolloutView), (status = 401, body = ApiError),
))]
pub async fn rollback(State(s): State<AppState>, headers: HeaderMap) -> Result<Json<RolloutView>, ApiError> {
    authorize(&s, &headers)?;
    not_stopping(&s)?;
    s.control.ask(|done| Control::SetCandidate { candidate: None, only_if_none: false, done }).await?;
    Ok(view(State(s)).await)
}
