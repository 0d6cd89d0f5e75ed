//! Publishing: the latest sample on `GET /v1/sample` (JSON), OpenMetrics on
//! `GET /metrics`, liveness on `GET /healthz`, and the background task that
//! samples the node every interval.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use crate::health::{DEFAULT_HOT_CELSIUS, XidCounts};
use crate::metrics::{Metrics, OPENMETRICS};
use crate::{Agent, AgentError, AgentSample};

/// The agent's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// Address of the endpoint (default `0.0.0.0:9402`).
    pub listen: SocketAddr,
    /// Seconds between samples (default 10).
    pub interval_s: u64,
    /// The node's name.
    pub node_name: String,
    /// Degraded from this GPU temperature, °C (default 85).
    pub hot_celsius: u32,
}

/// The default port of the agent's endpoint.
pub const DEFAULT_PORT: u16 = 9402;

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)),
            interval_s: 10,
            node_name: node_name(|k| std::env::var(k).ok(), Path::new("/proc/sys/kernel/hostname")),
            hot_celsius: DEFAULT_HOT_CELSIUS,
        }
    }
}

/// The node's name: `NODE_NAME` (what a DaemonSet sets from
/// `spec.nodeName` through the downward API), else the kernel's hostname,
/// else `unknown`.
pub fn node_name(env: impl Fn(&str) -> Option<String>, hostname: &Path) -> String {
    env("NODE_NAME")
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .or_else(|| std::fs::read_to_string(hostname).ok().map(|h| h.trim().to_string()).filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "unknown".into())
}

/// What the endpoint serves: the latest sample and the metrics.
#[derive(Debug, Default)]
pub struct Published {
    latest: RwLock<Option<AgentSample>>,
    metrics: Metrics,
    /// Serialises metric updates against scrapes (an update clears and
    /// refills the GPU families).
    lock: Mutex<()>,
}

impl Published {
    /// Nothing published yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Publishes a sample and the XID counts so far.
    pub fn publish(&self, sample: AgentSample, xids: &XidCounts) {
        {
            let _g = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
            self.metrics.observe(&sample, xids);
        }
        *self.latest.write().unwrap_or_else(PoisonError::into_inner) = Some(sample);
    }

    /// The latest sample.
    pub fn latest(&self) -> Option<AgentSample> {
        self.latest.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The OpenMetrics text.
    pub fn metrics_text(&self) -> String {
        let _g = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.metrics.encode()
    }
}

/// The routes: `GET /v1/sample`, `GET /metrics`, `GET /healthz`.
pub fn router(published: Arc<Published>) -> Router {
    Router::new()
        .route("/v1/sample", get(sample))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(published)
}

async fn sample(State(p): State<Arc<Published>>) -> Response {
    match p.latest() {
        Some(s) => Json(s).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({"error": "no sample yet"}))).into_response(),
    }
}

async fn metrics(State(p): State<Arc<Published>>) -> Response {
    ([(header::CONTENT_TYPE, OPENMETRICS)], p.metrics_text()).into_response()
}

/// Samples once on a blocking thread (the first CPU reading waits, NVML
/// calls block) and publishes the result; gives the agent back.
pub async fn sample_and_publish(mut agent: Agent, published: &Published) -> Agent {
    let (agent, result) = tokio::task::spawn_blocking(move || {
        let r = agent.sample();
        (agent, r)
    })
    .await
    .expect("the sampling task does not panic");
    match result {
        Ok(s) => published.publish(s, agent.xid_counts()),
        Err(e) => tracing::warn!("sample failed, keeping the previous one: {e}"),
    }
    agent
}

/// Samples every `interval` and publishes, forever.
pub async fn sample_every(mut agent: Agent, published: Arc<Published>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        agent = sample_and_publish(agent, &published).await;
    }
}

/// Serves on `listener` until `shutdown` resolves: samples once before
/// answering (so `/v1/sample` has a sample from the start), then every
/// `interval` in the background.
pub async fn serve(
    agent: Agent,
    listener: TcpListener,
    interval: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AgentError> {
    let addr = listener.local_addr().map_or_else(|_| "?".into(), |a| a.to_string());
    let published = Arc::new(Published::new());
    let agent = sample_and_publish(agent, &published).await;
    let sampler = tokio::spawn({
        let published = published.clone();
        async move {
            tokio::time::sleep(interval).await;
            sample_every(agent, published, interval).await;
        }
    });
    let served = axum::serve(listener, router(published)).with_graceful_shutdown(shutdown).await;
    sampler.abort();
    served.map_err(|source| AgentError::Serve { addr, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_name_from_env_then_hostname() {
        let dir = tempfile::tempdir().unwrap();
        let h = dir.path().join("hostname");
        std::fs::write(&h, "gpu-node-7\n").unwrap();
        assert_eq!(node_name(|_| Some("from-downward-api".into()), &h), "from-downward-api");
        assert_eq!(node_name(|_| Some(" ".into()), &h), "gpu-node-7");
        assert_eq!(node_name(|_| None, &h), "gpu-node-7");
        assert_eq!(node_name(|_| None, &dir.path().join("missing")), "unknown");
    }

    #[test]
    fn defaults() {
        let c = AgentConfig::default();
        assert_eq!(c.listen.to_string(), "0.0.0.0:9402");
        assert_eq!((c.interval_s, c.hot_celsius), (10, 85));
        assert!(!c.node_name.is_empty());
    }
}
