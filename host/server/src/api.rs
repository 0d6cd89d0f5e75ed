//! The HTTP API: health, metrics, explain, plans, plugins, attribution,
//! and the two mutating endpoints (load a plugin, swap the policy), which
//! need the bearer token from the configuration.
//!
//! Every error is JSON `{"code", "message"}` with a stable code; malformed
//! paths, queries and bodies get 400 with the reason.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::attribution::{self, Attribution, Metric};
use crate::engine::Control;
use crate::record::{DecisionRecord, PlanRecord};
use crate::{Loader, Shared, Status};

/// The OpenMetrics content type `/metrics` answers with.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Largest plugin component accepted, bytes.
pub const MAX_COMPONENT_BYTES: usize = 64 << 20;

/// Largest policy document accepted, bytes.
pub const MAX_POLICY_BYTES: usize = 1 << 20;

/// How long a mutation waits for the loop to take it.
const SWAP_TIMEOUT: Duration = Duration::from_secs(30);

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// State shared with the loop.
    pub shared: Arc<Shared>,
    /// The loop's control channel.
    pub control: Arc<Sender<Control>>,
    /// Loads policies and plugins.
    pub loader: Arc<dyn Loader>,
    /// Bearer token of the mutating endpoints (none: they are disabled).
    pub token: Option<Arc<str>>,
    /// Seed for plugins loaded through the API.
    pub seed: u64,
    /// Rollout settings.
    pub rollout: crate::rollout::RolloutConfig,
    /// Wakes the campaign scheduler (none: no campaign is scheduled).
    pub chaos: Option<Arc<tokio::sync::Notify>>,
}

/// An API error.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApiError {
    /// Stable code (`DECISION-NOT-FOUND`, `API-BAD-BODY`, …).
    pub code: String,
    /// What went wrong, for a person.
    pub message: String,
    #[serde(skip)]
    #[schema(ignore)]
    status: u16,
}

impl ApiError {
    /// An error answered with `status`.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self { code: code.into(), message: message.into(), status: status.as_u16() }
    }

    fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut r = (status, Json(self)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"tessera\""));
        }
        r
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "API-BAD-PATH", r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "API-BAD-QUERY", r.body_text())
    }
}

impl From<BytesRejection> for ApiError {
    fn from(r: BytesRejection) -> Self {
        let status = r.status();
        let code = if status == StatusCode::PAYLOAD_TOO_LARGE { "API-BODY-TOO-LARGE" } else { "API-BAD-BODY" };
        Self::new(status, code, r.body_text())
    }
}

type ApiResult<T> = Result<Json<T>, ApiError>;

/// The router over `state`.
pub fn router(state: AppState) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .route("/v1/status", get(status))
        .route("/v1/decisions", get(list_decisions))
        .route("/v1/decisions/{pod}", get(explain))
        .route("/v1/plans", get(list_plans))
        .route("/v1/plans/{id}", get(plan))
        .route("/v1/plugins", get(plugins).post(load_plugin).layer(DefaultBodyLimit::max(MAX_COMPONENT_BYTES)))
        .route("/v1/policies", get(policy).post(swap_policy).layer(DefaultBodyLimit::max(MAX_POLICY_BYTES)))
        .route("/v1/attribution", get(attribution))
        .route("/v1/snapshot", get(snapshot))
        .merge(crate::rollout::routes())
        .merge(crate::campaigns::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), count_requests))
        .with_state(state)
}

async fn count_requests(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched", |m| m.as_str()).to_string();
    let r = next.run(req).await;
    let class = format!("{}xx", r.status().as_u16() / 100);
    s.shared.metrics.api_requests.get_or_create(&vec![("route".into(), route), ("status".into(), class)]).inc();
    r
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "API-NOT-FOUND", "no such route; the routes are listed at /openapi.json")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "API-METHOD-NOT-ALLOWED", "method not allowed on this route")
}

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
        Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "API-NOT-READY", "the scheduling loop is not running"))
    }
}

/// Metrics in the OpenMetrics text format, with exemplars.
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String)))]
pub async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, OPENMETRICS)], s.shared.metrics.encode())
}

/// The OpenAPI document of this API.
pub async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], crate::openapi::document())
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
            Some(n) => {
                Err(ApiError::new(StatusCode::BAD_REQUEST, "API-BAD-QUERY", format!("limit {n} is not in 1..=1000")))
            }
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
            StatusCode::NOT_FOUND,
            "DECISION-NOT-FOUND",
            format!("no decision about pod {pod:?} is held (the last {} are)", log.cap()),
        )
    })
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
    log.get(id)
        .cloned()
        .map(Json)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "PLAN-NOT-FOUND", format!("no plan {id} is held")))
}

/// A plugin of the running policy.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PluginView {
    /// Name in the policy.
    pub name: String,
    /// `scorer` or `detector`.
    pub kind: String,
    /// Version serving calls.
    pub version: String,
    /// Its content key (SHA-256 of the component and its configuration).
    pub key: String,
    /// What it does, as it says.
    pub description: String,
    /// Weight of its normalised scores.
    pub weight: f64,
    /// Calls made to this slot since its version was loaded.
    pub calls: u64,
    /// Faults counted.
    pub faults: u64,
    /// Quarantined: calls are refused until a new version is loaded.
    pub quarantined: bool,
    /// Versions loaded into this slot so far.
    pub versions_loaded: u64,
}

/// The running policy's plugins.
#[utoipa::path(get, path = "/v1/plugins", responses((status = 200, body = Vec<PluginView>)))]
pub async fn plugins(State(s): State<AppState>) -> Json<Vec<PluginView>> {
    let view = s.shared.policy.read().unwrap_or_else(|p| p.into_inner());
    Json(view.members.iter().map(plugin_view).collect())
}

fn plugin_view(m: &tessera_wasm::Member) -> PluginView {
    let v = m.slot.current();
    let st = m.slot.stats();
    PluginView {
        name: m.name.clone(),
        kind: v.kind().to_string(),
        version: v.version().to_string(),
        key: v.key().to_string(),
        description: v.info().description.clone(),
        weight: m.weight,
        calls: st.calls,
        faults: st.faults,
        quarantined: st.quarantined,
        versions_loaded: st.versions,
    }
}

/// `?name=`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct PluginName {
    /// The plugin of the running policy to replace.
    pub name: String,
}

/// What a plugin load did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PluginLoaded {
    /// The plugin, with its new version.
    pub plugin: PluginView,
    /// The version it replaced.
    pub previous_version: String,
}

/// Loads a new version of one of the running policy's plugins (a WASI
/// component, `application/wasm`), checks it beside the running one and
/// swaps it in; calls in flight finish on the old version.
#[utoipa::path(post, path = "/v1/plugins", params(PluginName), request_body(content = Vec<u8>, content_type = "application/wasm"),
    security(("bearer" = [])), responses(
    (status = 200, body = PluginLoaded),
    (status = 400, description = "Malformed request", body = ApiError),
    (status = 401, description = "No or wrong bearer token", body = ApiError),
    (status = 404, description = "No such plugin in the running policy", body = ApiError),
    (status = 422, description = "The component failed its checks", body = ApiError),
))]
pub async fn load_plugin(
    State(s): State<AppState>,
    headers: HeaderMap,
    q: Result<Query<PluginName>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<PluginLoaded> {
    authorize(&s, &headers)?;
    let Query(PluginName { name }) = q?;
    content_type(&headers, &["application/wasm", "application/octet-stream"])?;
    let body = body?;
    if body.is_empty() {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "API-BAD-BODY", "the body is empty: send the component"));
    }
    if !body.starts_with(b"\0asm") {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "API-BAD-BODY",
            "the body is not WebAssembly (no \\0asm magic): send the compiled component",
        ));
    }
    let entry = {
        let view = s.shared.policy.read().unwrap_or_else(|p| p.into_inner());
        view.doc.plugins.iter().find(|p| p.name == name).cloned()
    }
    .ok_or_else(|| {
        ApiError::new(StatusCode::NOT_FOUND, "PLUGIN-NOT-FOUND", format!("the running policy has no plugin {name:?}"))
    })?;
    let (loader, seed) = (s.loader.clone(), s.seed);
    let version = tokio::task::spawn_blocking(move || loader.load_plugin(&entry, seed, &body))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "API-INTERNAL", e.to_string()))?
        .map_err(|m| {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "PLUGIN-REJECTED", format!("plugin {name}: {m}"))
        })?;
    let (tx, rx) = std::sync::mpsc::channel();
    send(&s, Control::SwapPlugin { name: name.clone(), version, done: tx })?;
    let old = wait(rx).await?.ok_or_else(|| {
        ApiError::new(StatusCode::CONFLICT, "PLUGIN-NOT-FOUND", format!("plugin {name:?} left the policy meanwhile"))
    })?;
    let view = s.shared.policy.read().unwrap_or_else(|p| p.into_inner());
    let member = view.members.iter().find(|m| m.name == name).ok_or_else(|| {
        ApiError::new(StatusCode::CONFLICT, "PLUGIN-NOT-FOUND", format!("plugin {name:?} left the policy meanwhile"))
    })?;
    Ok(Json(PluginLoaded { plugin: plugin_view(member), previous_version: old.version().to_string() }))
}

/// The running policy.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PolicyInfo {
    /// Its name.
    pub name: String,
    /// Its plugins.
    pub plugins: Vec<PluginView>,
    /// The document, as loaded.
    #[schema(value_type = Object)]
    pub document: tessera_policy::PolicyDocument,
}

/// The running policy and its document.
#[utoipa::path(get, path = "/v1/policies", responses((status = 200, body = PolicyInfo)))]
pub async fn policy(State(s): State<AppState>) -> Json<PolicyInfo> {
    let view = s.shared.policy.read().unwrap_or_else(|p| p.into_inner());
    Json(PolicyInfo {
        name: view.name.clone(),
        plugins: view.members.iter().map(plugin_view).collect(),
        document: view.doc.clone(),
    })
}

/// Replaces the running policy with a policy document (YAML or JSON). Its
/// plugins are all loaded and checked first; the next pass uses it.
#[utoipa::path(post, path = "/v1/policies", request_body(content = String, content_type = "application/yaml"),
    security(("bearer" = [])), responses(
    (status = 200, body = PolicyInfo),
    (status = 400, description = "Malformed or invalid document", body = ApiError),
    (status = 401, description = "No or wrong bearer token", body = ApiError),
    (status = 422, description = "A plugin failed to load", body = ApiError),
))]
pub async fn swap_policy(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<PolicyInfo> {
    let (loaded, doc) = load_policy_body(&s, &headers, body).await?;
    s.shared.metrics.zero_known_series(&doc);
    let (tx, rx) = std::sync::mpsc::channel();
    send(&s, Control::SwapPolicy { policy: loaded, doc: Box::new(doc), done: tx })?;
    wait(rx).await?;
    Ok(policy(State(s)).await)
}

/// A policy document from a mutating request (token, media type, UTF-8,
/// schema), with all its plugins loaded and checked.
pub(crate) async fn load_policy_body(
    s: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(tessera_wasm::Policy, tessera_policy::PolicyDocument), ApiError> {
    authorize(s, headers)?;
    content_type(headers, &["application/yaml", "application/x-yaml", "text/yaml", "application/json", "text/plain"])?;
    let body = body?;
    let text = std::str::from_utf8(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "API-BAD-BODY", format!("the body is not UTF-8: {e}")))?;
    let doc = tessera_policy::PolicyDocument::parse(text, "request body")
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "POLICY-INVALID", e.to_string()))?;
    let loader = s.loader.clone();
    let d = doc.clone();
    let loaded = tokio::task::spawn_blocking(move || loader.load_policy(&d))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "API-INTERNAL", e.to_string()))?
        .map_err(|m| {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "POLICY-LOAD-FAILED", format!("policy {}: {m}", doc.name))
        })?;
    Ok((loaded, doc))
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
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "ATTRIBUTION-BAD-WINDOW",
            format!("time {v} is not a Unix time"),
        ));
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
            StatusCode::BAD_REQUEST,
            "ATTRIBUTION-UNKNOWN-METRIC",
            format!("cannot attribute {:?}; known: {}", q.metric, Metric::names()),
        )
    })?;
    let now = crate::now_unix_ms();
    let to = q.to.map(unix_ms).transpose()?.unwrap_or(now);
    let from = q.from.map(unix_ms).transpose()?.unwrap_or(to.saturating_sub(300_000));
    if from > to {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "ATTRIBUTION-BAD-WINDOW", "from is after to"));
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
    let (tx, rx) = std::sync::mpsc::channel();
    send(&s, Control::Snapshot { done: tx })?;
    Ok(Json(wait(rx).await?))
}

/// Checks the bearer token in constant time.
pub(crate) fn authorize(s: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &s.token else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "API-TOKEN-NOT-CONFIGURED",
            "mutating endpoints are disabled: set api_token in the configuration or TESSERA_API_TOKEN",
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    match given {
        Some(g) if constant_time_eq(g.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::new(StatusCode::UNAUTHORIZED, "API-UNAUTHORIZED", "wrong bearer token")),
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "API-UNAUTHORIZED",
            "this endpoint mutates the service: send Authorization: Bearer <api_token>",
        )),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A body's content type, when given, must be one of `allowed`.
pub(crate) fn content_type(headers: &HeaderMap, allowed: &[&str]) -> Result<(), ApiError> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else { return Ok(()) };
    let essence = ct.to_str().unwrap_or_default().split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    if allowed.contains(&essence.as_str()) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "API-UNSUPPORTED-MEDIA-TYPE",
            format!("content type {essence:?} is not one of {}", allowed.join(", ")),
        ))
    }
}

pub(crate) fn send(s: &AppState, c: Control) -> Result<(), ApiError> {
    if s.shared.stopping.load(Ordering::SeqCst) {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "API-NOT-READY", "the service is stopping"));
    }
    s.control
        .send(c)
        .map_err(|_| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "API-NOT-READY", "the scheduling loop has stopped"))
}

pub(crate) async fn wait<T: Send + 'static>(rx: std::sync::mpsc::Receiver<T>) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(move || rx.recv_timeout(SWAP_TIMEOUT))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "API-INTERNAL", e.to_string()))?
        .map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "API-NOT-READY",
                "the scheduling loop did not take the change",
            )
        })
}
