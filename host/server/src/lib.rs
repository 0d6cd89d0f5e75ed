//! `tessera serve`: the scheduling loop, the rescheduling cycle and the
//! Movement Manager running on a backend (the embedded simulator; the
//! Kubernetes backend comes behind the same loop), observed through
//! OpenTelemetry traces and OpenMetrics with exemplars, and explained by an
//! HTTP API.
//!
//! Shaped like Kubewarden's policy server: [`Server::start`] builds
//! everything from one typed [`ServeConfig`]; [`Server::router`] is the
//! axum router (tests drive it without a socket); [`Server::serve`] runs it
//! on a listener until a shutdown signal, then stops the loop after the pass
//! under way and flushes the traces.

pub mod api;
pub mod attribution;
pub mod backend;
pub mod campaigns;
pub mod config;
pub mod engine;
pub mod extend;
pub mod metrics;
pub mod observe;
pub mod openapi;
pub mod record;
pub mod rollout;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};

use tessera_policy::{PluginEntry, PolicyDocument};
use tessera_wasm::{Member, PluginVersion, Policy};

pub use backend::{Backend, SimBackend};
pub use campaigns::CampaignRunner;
pub use config::{ConfigError, ServeConfig};
pub use observe::Tracing;

use crate::metrics::Metrics;
use crate::record::{DecisionLog, PlanLog};

/// `t` as Unix milliseconds (0 before the epoch).
pub fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Now, as Unix milliseconds.
pub fn now_unix_ms() -> u64 {
    unix_ms(std::time::SystemTime::now())
}

/// Turns policy documents and plugin components into running code. The
/// binary supplies it (it knows the built-in plugins and owns the Wasm
/// runtime); the service only asks.
pub trait Loader: Send + Sync + 'static {
    /// Loads every plugin of `doc` (all or nothing).
    fn load_policy(&self, doc: &PolicyDocument) -> Result<Policy, String>;
    /// Loads and checks a new component for `entry`.
    fn load_plugin(&self, entry: &PluginEntry, seed: u64, wasm: &[u8]) -> Result<Arc<PluginVersion>, String>;
}

/// Loads policy documents and hands them to the loop: as the rollout's
/// candidate (shadow) or as the active policy.
#[derive(Clone)]
pub struct PolicyHandle {
    control: std::sync::mpsc::Sender<engine::Control>,
    loader: Arc<dyn Loader>,
}

impl std::fmt::Debug for PolicyHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyHandle").finish_non_exhaustive()
    }
}

impl PolicyHandle {
    async fn load(&self, doc: &PolicyDocument) -> Result<Policy, String> {
        let (loader, d) = (self.loader.clone(), doc.clone());
        tokio::task::spawn_blocking(move || loader.load_policy(&d))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|m| format!("policy {}: {m}", doc.name))
    }

    async fn send<T: Send + 'static>(
        &self,
        make: impl FnOnce(std::sync::mpsc::Sender<T>) -> engine::Control,
    ) -> Result<T, String> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.control.send(make(tx)).map_err(|_| "the scheduling loop has stopped".to_string())?;
        tokio::task::spawn_blocking(move || rx.recv_timeout(std::time::Duration::from_secs(30)))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|_| "the scheduling loop did not take the policy".to_string())
    }

    /// Loads `doc` (every plugin, or nothing changes) and makes it the
    /// rollout's candidate, in shadow.
    pub async fn set_candidate(&self, doc: PolicyDocument) -> Result<(), String> {
        let policy = self.load(&doc).await?;
        self.send(|done| engine::Control::SetCandidate { candidate: Some((policy, Box::new(doc))), done }).await
    }

    /// Loads `doc` and makes it the active policy at once.
    pub async fn replace(&self, doc: PolicyDocument) -> Result<(), String> {
        let policy = self.load(&doc).await?;
        self.send(|done| engine::Control::SwapPolicy { policy, doc: Box::new(doc), done }).await
    }
}

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
    pub rollout: RwLock<rollout::RolloutView>,
    /// Scheduled chaos campaigns.
    pub chaos: RwLock<campaigns::ChaosView>,
    /// The loop mirrored the cluster into the plugins and runs.
    pub ready: AtomicBool,
    /// Shutdown asked.
    pub stopping: AtomicBool,
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
            rollout: RwLock::new(rollout::RolloutView { active: doc.name.clone(), ..Default::default() }),
            chaos: RwLock::new(campaigns::ChaosView {
                schedule: cfg.chaos.as_ref().map(|c| c.schedule.clone()),
                campaign: cfg.chaos.as_ref().map(|c| c.campaign.display().to_string()),
                ..Default::default()
            }),
            ready: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
        };
        shared.metrics.zero_known_series(doc);
        shared
    }
}

/// The service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Trace export.
    #[error(transparent)]
    Observe(#[from] observe::ObserveError),
    /// The policy.
    #[error("policy {name}: {message}")]
    Policy {
        /// Its name.
        name: String,
        /// What failed.
        message: String,
    },
    /// The loop's thread.
    #[error("cannot start the scheduling loop: {0}")]
    Thread(std::io::Error),
    /// The scheduled campaign.
    #[error("chaos.campaign {campaign}: {message}")]
    Campaign {
        /// The file.
        campaign: String,
        /// What is wrong.
        message: String,
    },
}

/// A running service.
pub struct Server {
    cfg: ServeConfig,
    shared: Arc<Shared>,
    control: Mutex<std::sync::mpsc::Sender<engine::Control>>,
    loader: Arc<dyn Loader>,
    tracing: Tracing,
    engine: Option<std::thread::JoinHandle<()>>,
    /// Wakes the campaign scheduler for a manual run (none: no schedule).
    chaos: Option<Arc<tokio::sync::Notify>>,
    chaos_task: Option<tokio::task::JoinHandle<()>>,
    /// Routes served beside the API.
    extra: Option<axum::Router>,
    /// Tasks that live as long as the service (e.g. a policy controller).
    owned: Vec<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Loads `doc`'s policy and starts the loop on `backend`, and the
    /// campaign scheduler when `cfg.chaos` is set (`campaigns` runs them).
    /// Call inside a Tokio runtime (trace export and the scheduler run on
    /// it).
    pub fn start(
        cfg: ServeConfig,
        backend: Box<dyn Backend>,
        doc: PolicyDocument,
        loader: Arc<dyn Loader>,
        campaigns: Option<Arc<dyn CampaignRunner>>,
    ) -> Result<Self, ServeError> {
        let scheduled = match (&cfg.chaos, campaigns) {
            (None, _) => None,
            (Some(c), runner) => {
                let fail =
                    |message: String| ServeError::Campaign { campaign: c.campaign.display().to_string(), message };
                let runner = runner.ok_or_else(|| fail("this binary cannot run campaigns".into()))?;
                runner.check(&c.campaign).map_err(fail)?;
                let schedule = campaigns::Schedule::parse(&c.schedule).map_err(fail)?;
                Some((c.clone(), schedule, runner))
            }
        };
        let tracing = Tracing::new(&cfg.otel)?;
        let policy =
            loader.load_policy(&doc).map_err(|message| ServeError::Policy { name: doc.name.clone(), message })?;
        let shared = Arc::new(Shared::new(&cfg, &doc));
        let (tx, rx) = std::sync::mpsc::channel();
        let e = engine::Engine::new(
            backend,
            policy,
            doc,
            cfg.engine.clone(),
            cfg.sim.seed,
            cfg.otel.top_k,
            tracing.clone(),
            shared.clone(),
        );
        let handle = std::thread::Builder::new()
            .name("tessera-loop".into())
            .spawn(move || e.run(rx))
            .map_err(ServeError::Thread)?;
        let (chaos, chaos_task) = match scheduled {
            None => (None, None),
            Some((cfg, schedule, runner)) => {
                let manual = Arc::new(tokio::sync::Notify::new());
                let s = campaigns::Scheduler {
                    cfg,
                    schedule,
                    runner,
                    shared: shared.clone(),
                    control: tx.clone(),
                    manual: manual.clone(),
                };
                (Some(manual), Some(tokio::spawn(s.run())))
            }
        };
        Ok(Self {
            cfg,
            shared,
            control: Mutex::new(tx),
            loader,
            tracing,
            engine: Some(handle),
            chaos,
            chaos_task,
            extra: None,
            owned: Vec::new(),
        })
    }

    /// State shared with the loop.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The configuration.
    pub fn config(&self) -> &ServeConfig {
        &self.cfg
    }

    /// Applies policy documents from outside the API (the Kubernetes
    /// `TesseraPolicy` controller) through the same path as the API.
    pub fn policies(&self) -> PolicyHandle {
        PolicyHandle {
            control: self.control.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            loader: self.loader.clone(),
        }
    }

    /// Sends scheduler-extender calls to the loop.
    pub fn extender(&self) -> extend::ExtenderHandle {
        extend::ExtenderHandle { control: self.control.lock().unwrap_or_else(|p| p.into_inner()).clone() }
    }

    /// Ties `task` to the service: it is stopped with it.
    pub fn own(&mut self, task: tokio::task::JoinHandle<()>) {
        self.owned.push(task);
    }

    /// Serves `routes` beside the API (e.g. the scheduler-extender
    /// endpoints of the Kubernetes backend).
    pub fn mount(&mut self, routes: axum::Router) {
        self.extra = Some(match self.extra.take() {
            Some(r) => r.merge(routes),
            None => routes,
        });
    }

    /// The HTTP API.
    pub fn router(&self) -> axum::Router {
        let api = self.api_router();
        match &self.extra {
            Some(extra) => api.merge(extra.clone()),
            None => api,
        }
    }

    fn api_router(&self) -> axum::Router {
        api::router(api::AppState {
            shared: self.shared.clone(),
            control: Arc::new(self.control.lock().unwrap_or_else(|p| p.into_inner()).clone()),
            loader: self.loader.clone(),
            token: self.cfg.api_token.clone().map(Arc::from),
            seed: self.cfg.sim.seed,
            rollout: self.cfg.rollout,
            chaos: self.chaos.clone(),
        })
    }

    /// Serves the API on `listener` until `shutdown` completes, then stops.
    pub async fn serve(
        mut self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let app = self.router();
        let served = axum::serve(listener, app).with_graceful_shutdown(shutdown).await;
        tokio::task::spawn_blocking(move || self.stop()).await.map_err(std::io::Error::other)?;
        served
    }

    /// Stops the loop after the pass under way (its moves finish) and
    /// flushes the traces. Idempotent.
    pub fn stop(&mut self) {
        self.shared.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
        for t in self.chaos_task.take().into_iter().chain(self.owned.drain(..)) {
            t.abort();
        }
        if let Some(h) = self.engine.take() {
            let _ = h.join();
        }
        self.tracing.shutdown();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shared.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
        for t in self.chaos_task.take().into_iter().chain(self.owned.drain(..)) {
            t.abort();
        }
        if let Some(h) = self.engine.take() {
            let _ = h.join();
        }
    }
}
