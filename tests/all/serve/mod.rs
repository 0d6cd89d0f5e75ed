//! `tessera serve` end to end: the service started as the binary starts
//! it (`tessera::serve::start`), on the simulator, reached over real HTTP
//! on loopback; traces received by a real OTLP receiver (gRPC and HTTP) in
//! the test; metrics scraped by a real Prometheus.

mod api;
mod backend;
mod chaos;
mod console;
mod learning;
mod load;
mod one_loop;
mod otlp;
mod prometheus;
mod queues;
mod rollout;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use tessera_server::config::{EngineConfig, OtlpProtocol, SimBackendConfig};
use tessera_server::{ServeConfig, Shared};

/// The bearer token of the test services.
pub const TOKEN: &str = "test-token-0123456789";

/// A small, fast cluster: 60 nodes, a minute of backend time every half
/// second of wall time, telemetry every 30 s, a periodic plan every 2 min,
/// demand at capacity so that some pods wait and plans have work.
pub fn config(otel: Option<(String, OtlpProtocol)>) -> ServeConfig {
    let mut cfg = ServeConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        api_token: Some(TOKEN.into()),
        cache_dir: Some(crate::cache_dir()),
        engine: EngineConfig {
            tick_ms: 50,
            telemetry_interval_s: 30,
            reschedule_every_s: 120,
            ..EngineConfig::default()
        },
        sim: SimBackendConfig { node_count: 60, load: 1.0, speed: 120.0, ..SimBackendConfig::default() },
        ..ServeConfig::default()
    };
    if let Some((endpoint, protocol)) = otel {
        cfg.otel.endpoint = Some(endpoint);
        cfg.otel.protocol = Some(protocol);
    }
    cfg
}

/// A service running in this process.
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its state (read by the tests to pick pods and plans).
    pub shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Starts `cfg` and waits until it reports ready.
    pub async fn start(cfg: ServeConfig) -> Self {
        let cfg = tessera::serve::ServiceConfig { serve: cfg, ..Default::default() };
        let (server, listener) = tessera::serve::start(cfg).await.expect("tessera serve starts");
        Self::serve(server, listener).await
    }

    /// Serves a started service and waits until it reports ready.
    pub async fn serve(server: tessera_server::Server, listener: tokio::net::TcpListener) -> Self {
        let addr = listener.local_addr().unwrap();
        let shared = server.shared().clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(listener, async {
            let _ = rx.await;
        }));
        let r = Self { addr, shared, stop: Some(tx), task };
        r.wait("the loop to be ready", Duration::from_secs(60), |s| s.ready.load(std::sync::atomic::Ordering::SeqCst))
            .await;
        r
    }

    /// `http://addr{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Polls `f` every 50 ms until it holds; panics naming `what` after
    /// `timeout`.
    pub async fn wait(&self, what: &str, timeout: Duration, f: impl Fn(&Shared) -> bool) {
        let t0 = Instant::now();
        while !f(&self.shared) {
            assert!(t0.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Graceful shutdown: the loop stops after its pass, traces flush.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .expect("the service stops within a minute")
            .expect("the serve task does not panic")
            .expect("serving ends cleanly");
    }
}

/// A span as received, with its ids in hex and attributes as strings.
#[derive(Debug, Clone)]
pub struct Received {
    pub trace_id: String,
    pub span_id: String,
    pub parent: String,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attrs: HashMap<String, String>,
    /// (trace id, span id) of each link.
    pub links: Vec<(String, String)>,
    /// `service.name` of the resource.
    pub service: String,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn value(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

/// Every span of `req`, flattened.
pub fn flatten(req: ExportTraceServiceRequest) -> Vec<Received> {
    let mut out = Vec::new();
    for rs in req.resource_spans {
        let service = rs
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
            .map(|kv| value(kv.value.as_ref()))
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(Received {
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent: hex(&s.parent_span_id),
                    name: s.name,
                    start_ns: s.start_time_unix_nano,
                    end_ns: s.end_time_unix_nano,
                    attrs: s.attributes.iter().map(|kv| (kv.key.clone(), value(kv.value.as_ref()))).collect(),
                    links: s.links.iter().map(|l| (hex(&l.trace_id), hex(&l.span_id))).collect(),
                    service: service.clone(),
                });
            }
        }
    }
    out
}

/// An OTLP trace receiver inside the test: gRPC (`TraceService`) or HTTP
/// (`POST /v1/traces`, protobuf), keeping every span it is sent.
#[derive(Clone, Default)]
pub struct Receiver {
    spans: Arc<Mutex<Vec<Received>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.spans.lock().unwrap().extend(flatten(request.into_inner()));
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

impl Receiver {
    /// Serves OTLP/gRPC on a loopback port; its endpoint URL.
    pub async fn grpc(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let svc = TraceServiceServer::new(self.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        format!("http://{addr}")
    }

    /// Serves OTLP/HTTP (protobuf) on a loopback port; its endpoint URL.
    pub async fn http(&self) -> String {
        use prost::Message;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let me = self.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let me = me.clone();
                async move {
                    let req = ExportTraceServiceRequest::decode(body).expect("a protobuf ExportTraceServiceRequest");
                    me.spans.lock().unwrap().extend(flatten(req));
                    let mut out = Vec::new();
                    ExportTraceServiceResponse { partial_success: None }.encode(&mut out).unwrap();
                    ([(axum::http::header::CONTENT_TYPE, "application/x-protobuf")], out)
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    /// Everything received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }
}

/// The spans of one trace, by span id, with the root.
pub struct Trace<'a> {
    pub root: &'a Received,
    pub spans: Vec<&'a Received>,
}

impl<'a> Trace<'a> {
    /// The trace `trace_id` among `all`; panics if it has no single root.
    pub fn of(all: &'a [Received], trace_id: &str) -> Self {
        let spans: Vec<&Received> = all.iter().filter(|s| s.trace_id == trace_id).collect();
        let roots: Vec<&&Received> = spans.iter().filter(|s| s.parent.is_empty()).collect();
        assert_eq!(roots.len(), 1, "trace {trace_id}: one root span, got {:?}", spans);
        Self { root: roots[0], spans }
    }

    /// The children of `parent` named `name`.
    pub fn children(&self, parent: &Received, name: &str) -> Vec<&'a Received> {
        self.spans.iter().copied().filter(|s| s.parent == parent.span_id && s.name == name).collect()
    }
}
