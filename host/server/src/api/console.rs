//! The web console (`/ui/`): a single page, embedded in the binary (plain
//! HTML, CSS and JavaScript under `host/server/console/`, no build step,
//! no external fonts or CDNs), over the same API any client uses, plus
//! three views made for it: the cluster compacted for a GPU map of
//! 10,000 nodes, decision latency over time as a heatmap, and a stream of
//! the service's status (server-sent events) that keeps the page live.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;

use super::app::AppState;
use super::error::ApiError;
use crate::control::Control;
use crate::heat::HeatView;

/// The page's files: path under `/ui/`, body, media type.
const ASSETS: [(&str, &str, &str); 6] = [
    ("", include_str!("../../console/index.html"), "text/html; charset=utf-8"),
    ("console.css", include_str!("../../console/console.css"), "text/css; charset=utf-8"),
    ("console.js", include_str!("../../console/console.js"), JS),
    ("util.js", include_str!("../../console/util.js"), JS),
    ("map.js", include_str!("../../console/map.js"), JS),
    ("views.js", include_str!("../../console/views.js"), JS),
];
const JS: &str = "text/javascript; charset=utf-8";

/// Nothing but this origin: no inline script, no external font, script or
/// style.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The console's routes.
pub fn routes() -> axum::Router<AppState> {
    let mut r = axum::Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }));
    for (path, body, kind) in ASSETS {
        r = r.route(&format!("/ui/{path}"), get(move || async move { asset(body, kind) }));
    }
    r.route("/v1/console/cluster", get(cluster))
        .route("/v1/console/latency", get(latency))
        .route("/v1/console/events", get(events))
        .route("/v1/console/config", get(config))
}

fn asset(body: &'static str, kind: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// What the page needs to know of the configuration.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConsoleInfo {
    /// A trace's address in Jaeger or Grafana, `{trace_id}` replaced (none:
    /// trace ids are shown, not linked).
    pub trace_url: Option<String>,
    /// Mutating endpoints are enabled (an API token is configured).
    pub mutations: bool,
}

/// The console's settings.
#[utoipa::path(get, path = "/v1/console/config", responses((status = 200, body = ConsoleInfo)))]
pub async fn config(State(s): State<AppState>) -> Json<ConsoleInfo> {
    Json(ConsoleInfo { trace_url: s.trace_url.as_deref().map(str::to_string), mutations: s.token.is_some() })
}

/// One node of the GPU map.
#[derive(Debug, Serialize, ToSchema)]
pub struct MapNode {
    /// Name.
    pub name: String,
    /// Zone.
    pub zone: String,
    /// GPU model.
    pub model: String,
    /// Ready for pods.
    pub ready: bool,
    /// Per GPU: free share, 0..=1000.
    pub free: Vec<u32>,
    /// Per GPU: 0 healthy, 1 degraded, 2 failed.
    pub health: Vec<u8>,
    /// Pods running here: `[name, GPU bit mask, share per GPU, queue]`.
    #[schema(value_type = Vec<Object>)]
    pub pods: Vec<(String, u32, u32, String)>,
}

/// The cluster as the GPU map draws it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterMap {
    /// Backend time, seconds.
    pub backend_time_s: u64,
    /// Nodes in id order.
    pub nodes: Vec<MapNode>,
    /// Pods waiting to be placed.
    pub waiting: usize,
}

/// The cluster compacted for the GPU map: each node's GPUs (free share,
/// health) and the pods on them.
#[utoipa::path(get, path = "/v1/console/cluster", responses(
    (status = 200, body = ClusterMap),
    (status = 503, body = ApiError),
))]
pub async fn cluster(State(s): State<AppState>) -> Result<Json<ClusterMap>, ApiError> {
    let snap = s.control.ask(|done| Control::Snapshot { done }).await?;
    let mut nodes: Vec<MapNode> = snap
        .nodes
        .iter()
        .map(|n| MapNode {
            name: n.name.clone(),
            zone: n.zone.clone(),
            model: n.gpu_model.clone(),
            ready: n.ready,
            free: n.gpus.iter().map(|g| g.free_milli).collect(),
            health: n
                .gpus
                .iter()
                .map(|g| match g.health {
                    tessera_core::model::GpuHealth::Healthy => 0,
                    tessera_core::model::GpuHealth::Degraded => 1,
                    tessera_core::model::GpuHealth::Failed => 2,
                })
                .collect(),
            pods: Vec::new(),
        })
        .collect();
    for r in &snap.running {
        if let Some(n) = nodes.get_mut(r.placement.node as usize) {
            let queue = r.pod.queue.clone().unwrap_or_default();
            n.pods.push((r.pod.name.clone(), r.placement.gpus.0, r.pod.gpu_milli, queue));
        }
    }
    Ok(Json(ClusterMap { backend_time_s: snap.backend_time_s, nodes, waiting: snap.waiting.len() }))
}

/// Decision latency over the last hour by minute — the buckets of the
/// service's `tessera_decision_latency_seconds` histogram, kept per minute
/// (`crate::heat`) — and failures by code; a cell's minute is what
/// `/v1/attribution` is asked for the decisions behind it.
#[utoipa::path(get, path = "/v1/console/latency", responses((status = 200, body = HeatView)))]
pub async fn latency(State(s): State<AppState>) -> Json<HeatView> {
    Json(s.shared.heat.lock().unwrap_or_else(|p| p.into_inner()).view())
}

/// What the stream sends every second.
#[derive(Debug, Serialize, ToSchema)]
pub struct Pulse {
    /// Backend time, seconds.
    pub backend_time_s: u64,
    /// Nodes.
    pub nodes: usize,
    /// Pods running.
    pub pods_running: usize,
    /// Pods waiting.
    pub pods_waiting: usize,
    /// Decisions recorded since the start.
    pub decisions: u64,
    /// The newest plan's id.
    pub latest_plan: Option<u64>,
    /// The active policy.
    pub policy: String,
    /// The rollout's candidate.
    pub candidate: Option<String>,
}

fn pulse(s: &AppState) -> Pulse {
    let status = s.shared.status.read().unwrap_or_else(|p| p.into_inner()).clone();
    let rollout = s.shared.rollout.read().unwrap_or_else(|p| p.into_inner());
    Pulse {
        backend_time_s: status.backend_time_s,
        nodes: status.nodes,
        pods_running: status.pods_running,
        pods_waiting: status.pods_waiting,
        decisions: s.shared.decisions.read().unwrap_or_else(|p| p.into_inner()).total(),
        latest_plan: s.shared.plans.read().unwrap_or_else(|p| p.into_inner()).newest_first().next().map(|p| p.id),
        policy: rollout.active.clone(),
        candidate: rollout.candidate.clone(),
    }
}

/// The service's status every second, as server-sent events (`pulse`).
#[utoipa::path(get, path = "/v1/console/events", responses(
    (status = 200, description = "text/event-stream of Pulse, one a second", body = Pulse),
))]
pub async fn events(State(s): State<AppState>) -> Sse<impl tokio_stream::Stream<Item = Result<Event, Infallible>>> {
    use tokio_stream::StreamExt as _;
    let ticks = tokio_stream::wrappers::IntervalStream::new(tokio::time::interval(Duration::from_secs(1)));
    let shared = s.shared.clone();
    // Ends when the service drains, so an open page does not hold it.
    let ticks = ticks.take_while(move |_| !shared.draining.load(std::sync::atomic::Ordering::SeqCst));
    let stream = ticks.map(move |_| {
        let data = serde_json::to_string(&pulse(&s)).unwrap_or_default();
        Ok(Event::default().event("pulse").data(data))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
