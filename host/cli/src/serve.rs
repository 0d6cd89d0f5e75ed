//! `tessera serve`: the configuration from a file, the environment and the
//! command line; the simulator backend; the loader that turns policy
//! documents and uploaded components into running plugins; and the
//! service's lifetime (bind, serve, stop on SIGINT or SIGTERM).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use tessera_core::metrics::TargetWorkload;
use tessera_core::model::Node;
use tessera_core::synthetic;
use tessera_kube::KubeBackendConfig;
use tessera_policy::{PluginEntry, PolicyDocument};
use tessera_server::campaigns::{CampaignError, CampaignJob, CampaignOutcome};
use tessera_server::config::BackendKind;
use tessera_server::learning::{FineTuneError, FineTuneJob, FineTuneOutcome};
use tessera_server::{Backend, CampaignRunner, LoadError, Loader, ServeConfig, Server, SimBackend};
use tessera_wasm::{PluginVersion, Policy, Runtime, RuntimeConfig};

/// Pods of the built-in workload the target workload is measured on.
const WORKLOAD_SAMPLE: usize = 8_000;

/// What the command line may set over the configuration file.
#[derive(Debug, Default, Clone)]
pub struct ServeOptions {
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--policy`.
    pub policy: Option<String>,
}

/// Everything `tessera serve` runs with: the service's configuration and
/// the Kubernetes backend's section of the same file, which `tessera-kube`
/// decodes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceConfig {
    /// The service: loop, API, traces, rollout, the simulator backend.
    pub serve: ServeConfig,
    /// The Kubernetes backend (`kube:`).
    pub kube: KubeBackendConfig,
}

/// The configuration: the file (or defaults), then the environment for what
/// it leaves unset, then the command line; validated.
pub fn config(opts: &ServeOptions, env: impl Fn(&str) -> Option<String>) -> Result<ServiceConfig> {
    let (serve, kube) = match &opts.config {
        Some(path) => {
            let shown = path.display().to_string();
            let text = tessera_input::file::read_to_string(path, tessera_input::Limit::CONFIG)?;
            let kube = KubeBackendConfig::from_serve_yaml(&text, &shown)?;
            // Decoded: the raw section has served its purpose.
            let serve = ServeConfig { kube: Default::default(), ..ServeConfig::parse(&text, &shown)? };
            (serve, kube)
        }
        None => (ServeConfig::default(), KubeBackendConfig::default()),
    };
    let mut serve = serve.with_env(env)?;
    if let Some(l) = opts.listen {
        serve.listen = l;
    }
    if let Some(p) = &opts.policy {
        serve.policy.clone_from(p);
    }
    serve.validate("options")?;
    Ok(ServiceConfig { serve, kube })
}

/// The simulator backend `cfg` names and its policy document (the
/// built-in `fgd` plugin gets the backend's target workload).
pub fn backend(cfg: &ServeConfig) -> Result<(SimBackend, PolicyDocument)> {
    let seed = cfg.sim.seed;
    let nodes: Vec<Node> = match &cfg.sim.nodes {
        None => synthetic::cluster(cfg.sim.node_count, seed),
        Some(p) => crate::sim::read_node_list(p)?,
    };
    let models = synthetic::gpu_models(&nodes);
    let workload = TargetWorkload::from_pods(&synthetic::pods(WORKLOAD_SAMPLE, &models, seed), 0.95);
    let mut doc = crate::sim::policy_document(&cfg.policy, seed)?;
    crate::sim::inject_workload(&mut doc, &workload);
    Ok((SimBackend::new(nodes, workload, cfg.sim.clone(), cfg.engine.telemetry_interval_s), doc))
}

/// Loads policies and components with one Wasm runtime.
pub struct CliLoader {
    rt: Runtime,
    workload: TargetWorkload,
}

impl CliLoader {
    /// A loader with a runtime of its own; documents it loads get
    /// `workload` as the `fgd` plugin's target workload.
    pub fn new(workload: TargetWorkload, cache_dir: Option<PathBuf>) -> Result<Self> {
        Self::with_runtime(workload, RuntimeConfig { cache_dir, ..RuntimeConfig::default() })
    }

    /// A loader on a runtime configured as `config` says.
    pub fn with_runtime(workload: TargetWorkload, config: RuntimeConfig) -> Result<Self> {
        Ok(Self { rt: Runtime::new(config)?, workload })
    }
}

impl Loader for CliLoader {
    fn load_policy(&self, doc: &PolicyDocument) -> Result<Policy, LoadError> {
        let mut doc = doc.clone();
        crate::sim::inject_workload(&mut doc, &self.workload);
        crate::load::load_policy(&self.rt, &doc)
    }

    fn load_plugin(&self, entry: &PluginEntry, seed: u64, wasm: &[u8]) -> Result<Arc<PluginVersion>, LoadError> {
        Ok(self.rt.load(&crate::load::spec(entry, seed), wasm)?.0)
    }
}

/// Runs the service's scheduled campaigns with the chaos crate, each on a
/// Wasm runtime of its own.
pub struct CliCampaigns;

impl CampaignRunner for CliCampaigns {
    fn check(&self, campaign: &std::path::Path) -> Result<String, CampaignError> {
        tessera_chaos::Campaign::load(campaign).map(|c| c.name).map_err(|e| CampaignError::Invalid(e.to_string()))
    }

    fn run(&self, job: &CampaignJob) -> Result<CampaignOutcome, CampaignError> {
        let o = crate::chaos::Overrides {
            candidate: job.candidate.clone(),
            baseline: job.baseline.clone(),
            snapshot: job.snapshot.clone(),
        };
        let report =
            crate::chaos::verify_with(&job.campaign, &o).map_err(|e| CampaignError::Failed(format!("{e:#}")))?;
        let mut json = serde_json::to_value(&report).map_err(|e| CampaignError::Failed(e.to_string()))?;
        // The per-run detail stays with `tessera chaos verify`; the gates
        // say why.
        if let Some(m) = json.as_object_mut() {
            m.remove("runs");
        }
        Ok(CampaignOutcome {
            campaign: report.campaign.clone(),
            verdict: report.word().to_string(),
            failing: report.failing.clone(),
            runs: report.runs.len(),
            report: json,
        })
    }
}

/// Fine-tunes the service's learned plugin with `tessera train`'s
/// optimiser on episodes drawn from the service's record.
pub struct CliTuner;

impl tessera_server::FineTuner for CliTuner {
    fn fine_tune(&self, job: &FineTuneJob) -> Result<FineTuneOutcome, FineTuneError> {
        let t = &job.training;
        let record = crate::train::episodes::Recorded { nodes: job.nodes.clone(), pods: job.arrivals.clone() };
        let tune = crate::train::FineTune {
            active: &job.active,
            plugin: &job.plugin,
            record: &record,
            hyper: crate::train::Hyper::from(t),
        };
        let tuned =
            crate::train::fine_tune(&tune, job.min_gain).map_err(|e| FineTuneError::Failed(format!("{e:#}")))?;
        let mut candidate = tuned.candidate;
        if let Some(doc) = &mut candidate {
            // Named for what it is, so the rollout shows it.
            doc.name = format!("{}-tuned-{}", job.active.name, &tuned.report.digest[7..15]);
        }
        Ok(FineTuneOutcome {
            candidate,
            current_gain: tuned.gains.0,
            tuned_gain: tuned.gains.1,
            digest: tuned.report.digest.clone(),
            kept_generation: tuned.report.kept_generation,
        })
    }
}

/// Starts the service on `cfg` (the simulator, or Kubernetes through the
/// in-cluster configuration or `KUBECONFIG`) and binds its listener. Call
/// inside a Tokio runtime.
pub async fn start(cfg: ServiceConfig) -> Result<(Server, tokio::net::TcpListener)> {
    match cfg.serve.backend {
        BackendKind::Simulator => {
            let (backend, doc) = backend(&cfg.serve)?;
            start_on(cfg.serve, Box::new(backend), doc).await
        }
        BackendKind::Kubernetes => {
            let config = kube::Config::infer()
                .await
                .context("no Kubernetes API to reach (in-cluster configuration or KUBECONFIG)")?;
            start_kube(cfg, config).await
        }
    }
}

/// Starts the service on the Kubernetes cluster `config` reaches.
pub async fn start_kube(cfg: ServiceConfig, config: kube::Config) -> Result<(Server, tokio::net::TcpListener)> {
    let ServiceConfig { serve: cfg, kube } = cfg;
    let seed = cfg.sim.seed;
    let fallback = |nodes: &[Node]| {
        let models = synthetic::gpu_models(nodes);
        TargetWorkload::from_pods(&synthetic::pods(WORKLOAD_SAMPLE, &models, seed), 0.95)
    };
    let backend = tessera_kube::KubeBackend::connect(config, kube.clone(), fallback)
        .await
        .context("cannot start the Kubernetes backend")?;
    let mut doc = crate::sim::policy_document(&cfg.policy, seed)?;
    crate::sim::inject_workload(&mut doc, backend.workload());
    let (client, leadership, names) = (backend.client(), backend.leadership(), backend.model_names());
    let (namespace, cache) =
        (kube.lease_namespace.clone(), tessera_kube::policies::cache_dir(cfg.cache_dir.as_deref()));
    let (mut server, listener) = start_on(cfg, Box::new(backend), doc).await?;
    // Clusters that keep kube-scheduler call these (deploy/kube-scheduler/extender.yaml).
    server.mount(tessera_kube::extender::routes(server.extender(), names));
    // TesseraPolicy objects in the service's namespace reach the loop
    // through the rollout path.
    let controller = tessera_kube::policies::PolicyController::new(
        client.clone(),
        Some(namespace),
        cache,
        server.policies(),
        leadership.clone(),
    );
    let task = tokio::spawn(controller.run());
    server.own(task);
    // TesseraQueue objects, while any exist, are the loop's queues.
    let queues = tessera_kube::queues::QueueController::new(client, server.queues(), leadership);
    server.own(tokio::spawn(queues.run()));
    Ok((server, listener))
}

/// Starts the service on `backend` with the policy `doc`.
pub async fn start_on(
    cfg: ServeConfig,
    backend: Box<dyn Backend>,
    doc: PolicyDocument,
) -> Result<(Server, tokio::net::TcpListener)> {
    let loader = Arc::new(CliLoader::with_runtime(
        backend.workload().clone(),
        RuntimeConfig { cache_dir: cfg.cache_dir.clone(), fuel: cfg.fuel_metering, ..RuntimeConfig::default() },
    )?);
    let listener =
        tokio::net::TcpListener::bind(cfg.listen).await.with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let mut server = Server::start(cfg, backend, doc, loader, Some(Arc::new(CliCampaigns)))?;
    server.learn(Arc::new(CliTuner))?;
    Ok((server, listener))
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

/// `tessera serve`: runs until SIGINT or SIGTERM, then stops the loop after
/// the pass under way (its moves run to the end) and flushes the traces.
pub fn run(opts: &ServeOptions) -> Result<()> {
    let cfg = config(opts, |k| std::env::var(k).ok())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("tessera-api")
        .build()
        .context("cannot start the async runtime")?;
    let scheduler_name = cfg.kube.scheduler_name.clone();
    rt.block_on(async {
        let (server, listener) = start(cfg).await?;
        let addr = listener.local_addr()?;
        let c = server.config();
        let on = match c.backend {
            BackendKind::Simulator => format!("simulator at load {}", c.sim.load),
            BackendKind::Kubernetes => format!("Kubernetes, scheduler name {scheduler_name}"),
        };
        eprintln!(
            "tessera serve: http://{addr} (console http://{addr}/ui/; policy {}, {on}, traces {}{})",
            c.policy,
            c.otel.endpoint.as_deref().unwrap_or("not exported"),
            if c.api_token.is_some() { "" } else { "; mutating endpoints disabled: no api_token" },
        );
        server.serve(listener, shutdown_signal()).await?;
        eprintln!("tessera serve: stopped");
        anyhow::Ok(())
    })
}
