//! The read side of the API: health and readiness, metrics, status, the
//! decision and plan logs, attribution, the cluster snapshot.

use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::IntoResponse;
use serde::Deserialize;
use utoipa::IntoParams;

use super::app::AppState;
use super::error::{ApiError, Code};
use crate::attribution::{self, Attribution, Metric};
use crate::control::Control;
use crate::record::{DecisionRecord, PlanRecord, RoomAnswer};
use crate::state::Status;
use crate::wall::now_unix_ms;

/// The OpenMetrics content type `/metrics` answers with.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type ApiResult<T> = Result<Json<T>, ApiError>;

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "Alive", body = String)))]
pub async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: the loop mirrored the cluster into the plugins and runs.
#[utoipa::path(get, path = "/readyz", responses(
    (status = 200, description = "Ready", body = Status),
    (status = 503, description = "Starting or stopping", body = ApiError),
))]
pub async fn readyz(State(s): State<AppState>) -> Result<Json<Status>, ApiError> {
    if s.shared.ready.load(Ordering::SeqCst) && !s.shared.stopping.load(Ordering::SeqCst) {
        Ok(Json(s.shared.status.read().unwrap_or_else(|p| p.into_inner()).clone()))
    } else {
        Err(ApiError::new(Code::ApiNotReady, "the scheduling loop is not running"))
    }
}

/// Metrics in the OpenMetrics text format, with exemplars.
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String)))]
pub async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, OPENMETRICS)], s.shared.metrics.encode())
}

/// The backend at the last pass.
#[utoipa::path(get, path = "/v1/status", responses((status = 200, body = Status)))]
pub async fn status(State(s): State<AppState>) -> Json<Status> {
    Json(s.shared.status.read().unwrap_or_else(|p| p.into_inner()).clone())
}

/// `?limit=`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    /// Entries at most (default 20, at most 1000).
    pub limit: Option<usize>,
}

impl Limit {
    fn get(&self) -> Result<usize, ApiError> {
        match self.limit {
            None => Ok(20),
            Some(n @ 1..=1000) => Ok(n),
            Some(n) => Err(ApiError::new(Code::ApiBadQuery, format!("limit {n} is not in 1..=1000"))),
        }
    }
}

/// The latest decisions, newest first.
#[utoipa::path(get, path = "/v1/decisions", params(Limit), responses(
    (status = 200, body = Vec<DecisionRecord>),
    (status = 400, body = ApiError),
))]
pub async fn list_decisions(
    State(s): State<AppState>,
    q: Result<Query<Limit>, QueryRejection>,
) -> ApiResult<Vec<DecisionRecord>> {
    let n = q?.get()?;
    let log = s.shared.decisions.read().unwrap_or_else(|p| p.into_inner());
    Ok(Json(log.newest_first().take(n).cloned().collect()))
}

/// Explains the latest decision about a pod: candidates, per-plugin
/// scores, filter reasons, the chosen node and the trace id.
#[utoipa::path(get, path = "/v1/decisions/{pod}", params(("pod" = String, Path, description = "Pod name")), responses(
    (status = 200, body = DecisionRecord),
    (status = 404, description = "No decision about this pod is held", body = ApiError),
))]
pub async fn explain(State(s): State<AppState>, pod: Result<Path<String>, PathRejection>) -> ApiResult<DecisionRecord> {
    let Path(pod) = pod?;
    let log = s.shared.decisions.read().unwrap_or_else(|p| p.into_inner());
    log.get(&pod).cloned().map(Json).ok_or_else(|| {
        ApiError::new(
            Code::DecisionNotFound,
            format!("no decision about pod {pod:?} is held (the last {} are)", log.cap()),
        )
    })
}

/// `?max_moves=`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct RoomQuery {
    /// Most pods moved (1..=8, default 4).
    pub max_moves: Option<usize>,
}

/// For a waiting pod: what it waits for (its last failure's code) and
/// what would have to move for it to fit — the planner's room-making
/// search on the cluster as it stands (hard-tier pods never move).
#[utoipa::path(get, path = "/v1/decisions/{pod}/room", params(("pod" = String, Path, description = "Pod name"), RoomQuery), responses(
    (status = 200, body = RoomAnswer),
    (status = 400, body = ApiError),
    (status = 503, body = ApiError),
))]
pub async fn room(
    State(s): State<AppState>,
    pod: Result<Path<String>, PathRejection>,
    q: Result<Query<RoomQuery>, QueryRejection>,
) -> ApiResult<RoomAnswer> {
    let Path(pod) = pod?;
    let max_moves = match q?.max_moves {
        None => 4,
        Some(n @ 1..=8) => n,
        Some(n) => return Err(ApiError::new(Code::ApiBadQuery, format!("max_moves {n} is not in 1..=8"))),
    };
    Ok(Json(s.control.ask(|done| Control::Room { pod, max_moves, done }).await?))
}

/// The latest rescheduling plans, newest first.
#[utoipa::path(get, path = "/v1/plans", params(Limit), responses(
    (status = 200, body = Vec<PlanRecord>),
    (status = 400, body = ApiError),
))]
pub async fn list_plans(
    State(s): State<AppState>,
    q: Result<Query<Limit>, QueryRejection>,
) -> ApiResult<Vec<PlanRecord>> {
    let n = q?.get()?;
    let log = s.shared.plans.read().unwrap_or_else(|p| p.into_inner());
    Ok(Json(log.newest_first().take(n).cloned().collect()))
}

/// One plan: its moves, their state and costs.
#[utoipa::path(get, path = "/v1/plans/{id}", params(("id" = u64, Path, description = "Plan id")), responses(
    (status = 200, body = PlanRecord),
    (status = 400, body = ApiError),
    (status = 404, body = ApiError),
))]
pub async fn plan(State(s): State<AppState>, id: Result<Path<u64>, PathRejection>) -> ApiResult<PlanRecord> {
    let Path(id) = id?;
    let log = s.shared.plans.read().unwrap_or_else(|p| p.into_inner());
    log.get(id).cloned().map(Json).ok_or_else(|| ApiError::new(Code::PlanNotFound, format!("no plan {id} is held")))
}

/// `?metric=&from=&to=`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AttributionQuery {
    /// A metric as in PromQL (`tessera_decision_latency_seconds_bucket`,
    /// `scheduling_failures`, …).
    pub metric: String,
    /// Window start: Unix seconds, or milliseconds (as Grafana's
    /// `${__from}`); default 5 minutes before `to`.
    pub from: Option<f64>,
    /// Window end, likewise; default now.
    pub to: Option<f64>,
}

fn unix_ms(v: f64) -> Result<u64, ApiError> {
    if !v.is_finite() || v < 0.0 {
        return Err(ApiError::new(Code::AttributionBadWindow, format!("time {v} is not a Unix time")));
    }
    // Seconds stay below 1e11 until the year 5138.
    Ok(if v >= 1e11 { v as u64 } else { (v * 1000.0) as u64 })
}

/// The decisions, plugins and plans behind a metric over a window.
#[utoipa::path(get, path = "/v1/attribution", params(AttributionQuery), responses(
    (status = 200, body = Attribution),
    (status = 400, description = "Unknown metric, bad window or malformed query", body = ApiError),
))]
pub async fn attribution(
    State(s): State<AppState>,
    q: Result<Query<AttributionQuery>, QueryRejection>,
) -> ApiResult<Attribution> {
    let Query(q) = q?;
    let metric = Metric::parse(&q.metric).ok_or_else(|| {
        ApiError::new(
            Code::AttributionUnknownMetric,
            format!("cannot attribute {:?}; known: {}", q.metric, Metric::names()),
        )
    })?;
    let now = now_unix_ms();
    let to = q.to.map(unix_ms).transpose()?.unwrap_or(now);
    let from = q.from.map(unix_ms).transpose()?.unwrap_or(to.saturating_sub(300_000));
    if from > to {
        return Err(ApiError::new(Code::AttributionBadWindow, "from is after to"));
    }
    let decisions = s.shared.decisions.read().unwrap_or_else(|p| p.into_inner());
    let plans = s.shared.plans.read().unwrap_or_else(|p| p.into_inner());
    Ok(Json(attribution::attribute(metric, from, to, &decisions, &plans)))
}

/// The cluster now — nodes, running and waiting pods — as a JSON document
/// a chaos campaign takes as its twin (`cluster: {snapshot: FILE}`).
#[utoipa::path(get, path = "/v1/snapshot", responses(
    (status = 200, description = "tessera_core::snapshot::Snapshot", body = Object),
    (status = 503, body = ApiError),
))]
pub async fn snapshot(State(s): State<AppState>) -> Result<Json<tessera_core::snapshot::Snapshot>, ApiError> {
    Ok(Json(s.control.ask(|done| Control::Snapshot { done }).await?))
}
