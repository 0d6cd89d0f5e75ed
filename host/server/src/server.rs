//! A running service: [`Server::start`] builds everything from one typed
//! [`ServeConfig`] (tracing, the policy, the loop on its thread, the
//! campaign scheduler); [`Server::router`] is the axum router (tests drive
//! it without a socket); [`Server::serve`] runs it on a listener until a
//! shutdown signal, then stops the loop after the pass under way and
//! flushes the traces.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tessera_policy::PolicyDocument;

use crate::backend::Backend;
use crate::campaigns::{CampaignError, CampaignRunner, CampaignScheduler};
use crate::config::ServeConfig;
use crate::control::{Control, ExtenderHandle, LoopHandle, PolicyHandle};
use crate::cron::Schedule;
use crate::engine::Engine;
use crate::loader::Loader;
use crate::observe::{ObserveError, Tracing};
use crate::state::Shared;

/// The service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Trace export.
    #[error(transparent)]
    Observe(#[from] ObserveError),
    /// The policy.
    #[error("policy {name}: {source}")]
    Policy {
        /// Its name.
        name: String,
        /// What failed.
        source: crate::loader::LoadError,
    },
    /// The loop's thread.
    #[error("cannot start the scheduling loop: {0}")]
    Thread(std::io::Error),
    /// Fine-tuning's schedule.
    #[error("learning.schedule: {0}")]
    Learning(String),
    /// The scheduled campaign.
    #[error("chaos.campaign {campaign}: {source}")]
    Campaign {
        /// The file.
        campaign: String,
        /// What is wrong.
        source: CampaignError,
    },
}

/// A running service.
pub struct Server {
    cfg: ServeConfig,
    shared: Arc<Shared>,
    control: Mutex<std::sync::mpsc::Sender<Control>>,
    loader: Arc<dyn Loader>,
    tracing: Tracing,
    engine: Option<std::thread::JoinHandle<()>>,
    /// Wakes the campaign scheduler for a manual run (none: no schedule).
    chaos: Option<Arc<tokio::sync::Notify>>,
    chaos_task: Option<tokio::task::JoinHandle<()>>,
    /// Wakes the fine-tuning scheduler for a manual run (none: none runs).
    learning: Option<Arc<tokio::sync::Notify>>,
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
                let fail = |source| ServeError::Campaign { campaign: c.campaign.display().to_string(), source };
                let runner = runner.ok_or_else(|| fail(CampaignError::Unsupported))?;
                runner.check(&c.campaign).map_err(fail)?;
                let schedule = Schedule::parse(&c.schedule).map_err(|e| fail(CampaignError::Invalid(e.to_string())))?;
                Some((c.clone(), schedule, runner))
            }
        };
        let tracing = Tracing::new(&cfg.otel)?;
        let policy =
            loader.load_policy(&doc).map_err(|source| ServeError::Policy { name: doc.name.clone(), source })?;
        let shared = Arc::new(Shared::new(&cfg, &doc));
        let (tx, rx) = std::sync::mpsc::channel();
        let reply_timeout = Duration::from_millis(cfg.engine.reply_timeout_ms);
        let e = Engine::new(
            backend,
            policy,
            doc,
            cfg.engine.clone(),
            cfg.sim.seed,
            cfg.otel.top_k,
            tracing.clone(),
            shared.clone(),
        )
        .record_arrivals(cfg.learning.as_ref().map_or(0, |l| l.record));
        let handle = std::thread::Builder::new()
            .name("tessera-loop".into())
            .spawn(move || e.run(rx))
            .map_err(ServeError::Thread)?;
        let (chaos, chaos_task) = match scheduled {
            None => (None, None),
            Some((cfg, schedule, runner)) => {
                let manual = Arc::new(tokio::sync::Notify::new());
                let s = CampaignScheduler {
                    cfg,
                    schedule,
                    runner,
                    shared: shared.clone(),
                    control: LoopHandle::new(tx.clone(), reply_timeout),
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
            learning: None,
            extra: None,
            owned: Vec::new(),
        })
    }

    /// Runs fine-tuning with `tuner` on `learning.schedule`, when the
    /// configuration has a `learning:` section (else nothing). Call before
    /// [`Server::router`], inside the Tokio runtime.
    pub fn learn(&mut self, tuner: Arc<dyn crate::learning::FineTuner>) -> Result<(), ServeError> {
        let Some(cfg) = self.cfg.learning.clone() else { return Ok(()) };
        let schedule = Schedule::parse(&cfg.schedule).map_err(|e| ServeError::Learning(e.to_string()))?;
        let manual = Arc::new(tokio::sync::Notify::new());
        let s = crate::learning::LearningScheduler {
            cfg,
            schedule,
            tuner,
            loader: self.loader.clone(),
            shared: self.shared.clone(),
            control: self.handle(),
            manual: manual.clone(),
        };
        self.owned.push(tokio::spawn(s.run()));
        self.learning = Some(manual);
        Ok(())
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
        PolicyHandle { handle: self.handle(), loader: self.loader.clone() }
    }

    /// Sets and reads the loop's queues (the Kubernetes `TesseraQueue`
    /// controller).
    pub fn queues(&self) -> crate::control::QueueHandle {
        crate::control::QueueHandle { handle: self.handle() }
    }

    /// Sends scheduler-extender calls to the loop.
    pub fn extender(&self) -> ExtenderHandle {
        ExtenderHandle { handle: self.handle() }
    }

    /// Asks the loop, waiting at most `engine.reply_timeout_ms`.
    fn handle(&self) -> LoopHandle {
        let tx = self.control.lock().unwrap_or_else(|p| p.into_inner()).clone();
        LoopHandle::new(tx, Duration::from_millis(self.cfg.engine.reply_timeout_ms))
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
        crate::api::router(crate::api::AppState {
            shared: self.shared.clone(),
            control: self.handle(),
            loader: self.loader.clone(),
            token: self.cfg.api_token.clone().map(Arc::from),
            seed: self.cfg.sim.seed,
            rollout: self.cfg.rollout,
            chaos: self.chaos.clone(),
            learning: self.learning.clone(),
            trace_url: self.cfg.console.trace_url.as_deref().map(Arc::from),
            uploads: Arc::new(tokio::sync::Semaphore::new(crate::api::MAX_UPLOADS_AT_ONCE)),
            sources_dir: self.cfg.sources_dir.as_deref().map(Arc::from),
        })
    }

    /// Serves the API on `listener` until `shutdown` completes, then stops.
    pub async fn serve(
        mut self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let app = self.router();
        let header_read_timeout = Duration::from_millis(self.cfg.header_read_timeout_ms);
        // Event streams end as the listener closes, so they do not hold
        // the drain.
        let shared = self.shared.clone();
        let shutdown = async move {
            shutdown.await;
            shared.draining.store(true, std::sync::atomic::Ordering::SeqCst);
        };
        let served = crate::http::serve(listener, app, header_read_timeout, shutdown).await;
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
