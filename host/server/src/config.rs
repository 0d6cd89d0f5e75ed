//! The service's configuration: one typed document (YAML, unknown fields
//! refused, ranges checked at load), filled from a file, command-line
//! options and the OpenTelemetry environment variables.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read (missing, not a regular file, too large,
    /// not UTF-8).
    #[error(transparent)]
    Read(#[from] tessera_input::FileError),
    /// The YAML does not match the schema.
    #[error("{path}:{message}")]
    Parse {
        /// File.
        path: String,
        /// What serde said, with line and column.
        message: String,
    },
    /// A value out of range.
    #[error("{path}: `{field}` {message}")]
    Invalid {
        /// File (or `options`).
        path: String,
        /// Dotted field name.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// Everything `tessera serve` runs with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// Address of the HTTP API and `/metrics`.
    pub listen: SocketAddr,
    /// The policy: a shipped name (`default`), a built-in plugin or a file.
    pub policy: String,
    /// Bearer token the mutating endpoints require; unset, they refuse
    /// every request. `TESSERA_API_TOKEN` fills it when the file does not.
    pub api_token: Option<String>,
    /// The scheduling loop and its rescheduling cycle, on any backend.
    pub engine: EngineConfig,
    /// Which cluster the loop schedules.
    pub backend: BackendKind,
    /// The simulator backend.
    pub sim: SimBackendConfig,
    /// The Kubernetes backend's section, kept as written: `tessera-kube`
    /// decodes and checks it at load (the service does not know its
    /// fields).
    pub kube: BackendSection,
    /// Trace export.
    pub otel: OtelConfig,
    /// How much history the API keeps.
    pub history: HistoryConfig,
    /// Policy rollout.
    pub rollout: RolloutConfig,
    /// Directory of the precompiled-component cache (unset: components
    /// are compiled at every start). `TESSERA_CACHE_DIR` fills it when the
    /// file does not.
    pub cache_dir: Option<PathBuf>,
    /// Chaos campaigns the service runs on a schedule (unset: none).
    pub chaos: Option<ChaosConfig>,
    /// The web console at `/ui/`.
    pub console: ConsoleConfig,
    /// Fine-tuning of the active policy's learned plugin on a schedule,
    /// from what the service saw arrive; the tuned model becomes the
    /// rollout's candidate, never the active policy (unset: none).
    pub learning: Option<LearningConfig>,
    /// The directory the file sources of policy documents posted to the
    /// API are read from (and below; `..`, absolute paths elsewhere and
    /// links out of it are refused). Unset: a posted document may name
    /// only `builtin:` plugins; components are uploaded with `POST
    /// /v1/plugins` instead.
    pub sources_dir: Option<PathBuf>,
    /// Meter fuel in the service's runtime (~20% slower calls), so a
    /// policy's `limits.fuel` applies; without it such a policy is refused.
    /// What must replay meters fuel always.
    pub fuel_metering: bool,
    /// Milliseconds a client has to send a request's headers (100..=600000,
    /// default 10000); a connection that has not is closed.
    pub header_read_timeout_ms: u64,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            policy: "default".into(),
            api_token: None,
            engine: EngineConfig::default(),
            backend: BackendKind::Simulator,
            sim: SimBackendConfig::default(),
            kube: BackendSection::default(),
            otel: OtelConfig::default(),
            history: HistoryConfig::default(),
            rollout: RolloutConfig::default(),
            cache_dir: None,
            chaos: None,
            console: ConsoleConfig::default(),
            learning: None,
            sources_dir: None,
            fuel_metering: false,
            header_read_timeout_ms: 10_000,
        }
    }
}

/// The loop: how often it passes, when telemetry and detection run, when
/// and how much it reschedules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Wall-clock milliseconds between two passes of the loop.
    pub tick_ms: u64,
    /// Backend seconds between telemetry samples (and detection rounds).
    pub telemetry_interval_s: u64,
    /// Backend seconds between periodic rescheduling cycles (0: only on
    /// anomalies).
    pub reschedule_every_s: u64,
    /// Most moves per plan, % of the running pods (0 turns rescheduling
    /// off).
    pub max_migrations_pct: f64,
    /// How long a request to the loop (a policy or plugin swap, a
    /// snapshot, an extender call, a campaign's inputs) waits for its
    /// answer, ms.
    pub reply_timeout_ms: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            tick_ms: 100,
            telemetry_interval_s: 60,
            reschedule_every_s: 600,
            max_migrations_pct: 5.0,
            reply_timeout_ms: 30_000,
        }
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

/// Scheduled chaos campaigns, as configured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChaosConfig {
    /// Cron expression, UTC (`0 3 * * *`: every night at 03:00; 6 fields
    /// when the first is seconds).
    pub schedule: String,
    /// The campaign file.
    pub campaign: PathBuf,
    /// Run on a twin of the live cluster (its nodes, running and waiting
    /// pods) instead of the campaign's cluster.
    #[serde(default = "yes")]
    pub live_cluster: bool,
}

fn yes() -> bool {
    true
}

/// The web console's settings (`console:`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// A trace's address in Jaeger or Grafana, with `{trace_id}` where the
    /// id goes (`http://jaeger:16686/trace/{trace_id}`); unset: the console
    /// shows trace ids without links.
    pub trace_url: Option<String>,
}

/// Online fine-tuning, as configured (`learning:`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LearningConfig {
    /// Cron expression, UTC, as `chaos.schedule`.
    pub schedule: String,
    /// The plugin whose model is tuned: a `builtin:learned` entry of the
    /// active policy.
    #[serde(default = "learned")]
    pub plugin: String,
    /// Arrivals kept for training, newest (1..=1000000, default 20000).
    #[serde(default = "record")]
    pub record: usize,
    /// A run with fewer recorded arrivals is skipped (default 500).
    #[serde(default = "min_arrivals")]
    pub min_arrivals: usize,
    /// The tuned model becomes a candidate only when its validation gain
    /// over FGD beats the model in use by more than this (0..1, default
    /// 0.005: half a percent of FGD's unallocated GPUs).
    #[serde(default = "min_gain")]
    pub min_gain: f64,
    /// The optimiser's settings.
    #[serde(default)]
    pub training: TrainingConfig,
}

fn learned() -> String {
    "learned".into()
}
fn record() -> usize {
    20_000
}
fn min_arrivals() -> usize {
    500
}
fn min_gain() -> f64 {
    0.005
}

/// The settings of a fine-tuning run (`tessera train`'s, smaller).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainingConfig {
    /// Generations (1..=1000).
    pub generations: usize,
    /// ± perturbation pairs per generation (1..=64).
    pub pairs: usize,
    /// Episodes per generation (1..=256).
    pub episodes: usize,
    /// Validation episodes (1..=256).
    pub validation: usize,
    /// Share of the nodes and of the recorded pods an episode uses, (0, 1].
    pub scale: f64,
    /// Perturbation scale, > 0.
    pub sigma: f64,
    /// Learning rate, > 0.
    pub lr: f64,
    /// Seed.
    pub seed: u64,
}

impl Default for TrainingConfig {
    fn default() -> Self {
        Self { generations: 10, pairs: 4, episodes: 6, validation: 6, scale: 0.5, sigma: 0.001, lr: 0.0005, seed: 42 }
    }
}

/// The embedded simulator as the backend: a cluster (built-in or an openb
/// node list) with the built-in workload arriving as a Poisson stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimBackendConfig {
    /// Seed of the workload, telemetry and actuator.
    pub seed: u64,
    /// An openb node list (`openb_node_list_gpu_node.csv`); unset: the
    /// built-in cluster.
    pub nodes: Option<PathBuf>,
    /// Nodes of the built-in cluster.
    pub node_count: usize,
    /// Offered load: GPU demand of the arriving pods over the cluster's GPU
    /// capacity, in steady state (above 1 the queue grows).
    pub load: f64,
    /// Simulated seconds per wall-clock second.
    pub speed: f64,
    /// Probability that one step of a move fails in the simulated actuator.
    pub move_failure_rate: f64,
}

impl Default for SimBackendConfig {
    fn default() -> Self {
        Self { seed: 42, nodes: None, node_count: 200, load: 0.9, speed: 60.0, move_failure_rate: 0.0 }
    }
}

/// Which cluster the service schedules.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The embedded simulator.
    #[default]
    Simulator,
    /// A Kubernetes cluster (in-cluster configuration, or `KUBECONFIG`).
    Kubernetes,
}

/// A backend's own section of the configuration, as written (a YAML
/// value; absent: `None`). The crate of that backend decodes it, with its
/// own schema, when the file is loaded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BackendSection(pub Option<serde_yaml_ng::Value>);

/// How traces leave the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OtlpProtocol {
    /// OTLP over gRPC (port 4317 by convention).
    #[serde(rename = "grpc")]
    Grpc,
    /// OTLP over HTTP with protobuf bodies (port 4318, `/v1/traces`).
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

/// Trace export and sampling, after the OpenTelemetry conventions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtelConfig {
    /// OTLP endpoint (`http://host:4317`); unset: spans are made (their
    /// trace ids appear in explanations and exemplars) but not exported.
    pub endpoint: Option<String>,
    /// Transport (unset: the environment's, else gRPC).
    pub protocol: Option<OtlpProtocol>,
    /// Share of decisions traced, 0..=1 (`traceidratio` sampling; unset:
    /// the environment's, else all).
    pub sampling_ratio: Option<f64>,
    /// `service.name` of the resource.
    pub service_name: String,
    /// Runners-up recorded per decision.
    pub top_k: usize,
}

impl Default for OtelConfig {
    fn default() -> Self {
        Self { endpoint: None, protocol: None, sampling_ratio: None, service_name: "tessera".into(), top_k: 5 }
    }
}

/// Bounded history behind the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    /// Decisions kept for explanation and attribution (oldest dropped).
    pub decisions: usize,
    /// Rescheduling plans kept.
    pub plans: usize,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self { decisions: 200_000, plans: 1_000 }
    }
}

impl OtelConfig {
    /// The transport in effect.
    pub fn protocol(&self) -> OtlpProtocol {
        self.protocol.unwrap_or(OtlpProtocol::Grpc)
    }

    /// The sampling ratio in effect.
    pub fn ratio(&self) -> f64 {
        self.sampling_ratio.unwrap_or(1.0)
    }
}

impl ServeConfig {
    /// Reads and validates a file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let shown = path.display().to_string();
        let text = tessera_input::file::read_to_string(path, tessera_input::Limit::CONFIG)?;
        Self::parse(&text, &shown)
    }

    /// Parses and validates `text` (from `origin`).
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let (cfg, _): (Self, _) = tessera_input::yaml::parse(text)
            .map_err(|e| ConfigError::Parse { path: origin.to_string(), message: e.to_string() })?;
        cfg.validate(origin)?;
        Ok(cfg)
    }

    /// Fills what the file left unset from the environment, as the
    /// OpenTelemetry SDKs do: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`), `OTEL_EXPORTER_OTLP_PROTOCOL`,
    /// `OTEL_TRACES_SAMPLER_ARG` (with `OTEL_TRACES_SAMPLER` naming a ratio
    /// sampler, or `always_off`), `OTEL_SERVICE_NAME`; and
    /// `TESSERA_API_TOKEN`. `env` looks a variable up (`std::env::var` in
    /// the binary).
    pub fn with_env(mut self, env: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let bad = |field, message: String| ConfigError::Invalid { path: "environment".into(), field, message };
        if self.otel.endpoint.is_none() {
            self.otel.endpoint =
                env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"));
        }
        if self.otel.protocol.is_none()
            && let Some(p) = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        {
            self.otel.protocol = Some(match p.as_str() {
                "grpc" => OtlpProtocol::Grpc,
                "http/protobuf" => OtlpProtocol::HttpProtobuf,
                other => {
                    return Err(bad(
                        "OTEL_EXPORTER_OTLP_PROTOCOL",
                        format!("`{other}` is not supported (grpc, http/protobuf)"),
                    ));
                }
            });
        }
        if self.otel.sampling_ratio.is_none() {
            match env("OTEL_TRACES_SAMPLER").as_deref() {
                Some("always_off" | "parentbased_always_off") => self.otel.sampling_ratio = Some(0.0),
                Some("always_on" | "parentbased_always_on") => self.otel.sampling_ratio = Some(1.0),
                Some("traceidratio" | "parentbased_traceidratio") | None => {
                    if let Some(arg) = env("OTEL_TRACES_SAMPLER_ARG") {
                        self.otel.sampling_ratio = Some(
                            arg.parse()
                                .map_err(|_| bad("OTEL_TRACES_SAMPLER_ARG", format!("`{arg}` is not a number")))?,
                        );
                    }
                }
                Some(other) => return Err(bad("OTEL_TRACES_SAMPLER", format!("`{other}` is not supported"))),
            }
        }
        if let Some(name) = env("OTEL_SERVICE_NAME") {
            self.otel.service_name = name;
        }
        if self.cache_dir.is_none() {
            self.cache_dir = env("TESSERA_CACHE_DIR").filter(|d| !d.is_empty()).map(PathBuf::from);
        }
        if self.api_token.is_none() {
            self.api_token = env("TESSERA_API_TOKEN").filter(|t| !t.is_empty());
        }
        self.validate("environment")?;
        Ok(self)
    }

    /// Checks every range.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let bad = |field, message: &str| {
            Err(ConfigError::Invalid { path: origin.to_string(), field, message: message.to_string() })
        };
        if !(100..=600_000).contains(&self.header_read_timeout_ms) {
            return bad("header_read_timeout_ms", "must be in 100..=600000");
        }
        let s = &self.sim;
        if !(s.load > 0.0 && s.load <= 3.0) {
            return bad("sim.load", "must be in (0, 3]");
        }
        if !(s.speed > 0.0 && s.speed <= 100_000.0) {
            return bad("sim.speed", "must be in (0, 100000]");
        }
        let e = &self.engine;
        if e.tick_ms == 0 || e.tick_ms > 60_000 {
            return bad("engine.tick_ms", "must be in 1..=60000");
        }
        if e.reply_timeout_ms == 0 || e.reply_timeout_ms > 600_000 {
            return bad("engine.reply_timeout_ms", "must be in 1..=600000");
        }
        if e.telemetry_interval_s == 0 {
            return bad("engine.telemetry_interval_s", "must be at least 1");
        }
        let most = tessera_core::synthetic::MAX_LIVE_NODES;
        if s.nodes.is_none() && !(1..=most).contains(&s.node_count) {
            return bad("sim.node_count", &format!("must be in 1..={most}"));
        }
        if !(0.0..=100.0).contains(&e.max_migrations_pct) {
            return bad("engine.max_migrations_pct", "must be in 0..=100");
        }
        if !(0.0..=1.0).contains(&s.move_failure_rate) {
            return bad("sim.move_failure_rate", "must be in 0..=1");
        }
        if !(0.0..=1.0).contains(&self.otel.ratio()) {
            return bad("otel.sampling_ratio", "must be in 0..=1");
        }
        if self.otel.top_k > 50 {
            return bad("otel.top_k", "must be at most 50 (attributes stay bounded)");
        }
        if let Some(e) = &self.otel.endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            return bad("otel.endpoint", "must be an http:// or https:// URL");
        }
        if self.history.decisions == 0 || self.history.plans == 0 {
            return bad("history", "must keep at least one decision and one plan");
        }
        if self.api_token.as_deref().is_some_and(|t| t.len() < 16) {
            return bad("api_token", "must be at least 16 characters");
        }
        if let Some(c) = &self.chaos {
            if let Err(e) = crate::cron::Schedule::parse(&c.schedule) {
                return bad("chaos.schedule", &e.to_string());
            }
            if c.campaign.as_os_str().is_empty() {
                return bad("chaos.campaign", "must name a campaign file");
            }
        }
        if let Some(u) = &self.console.trace_url
            && (!(u.starts_with("http://") || u.starts_with("https://")) || !u.contains("{trace_id}"))
        {
            return bad("console.trace_url", "must be an http(s) URL with {trace_id} in it");
        }
        if let Some(l) = &self.learning {
            if let Err(e) = crate::cron::Schedule::parse(&l.schedule) {
                return bad("learning.schedule", &e.to_string());
            }
            if l.plugin.is_empty() {
                return bad("learning.plugin", "must name a plugin of the policy");
            }
            if !(1..=1_000_000).contains(&l.record) {
                return bad("learning.record", "must be in 1..=1000000");
            }
            if l.min_arrivals > l.record {
                return bad("learning.min_arrivals", "must be at most learning.record");
            }
            if !(0.0..1.0).contains(&l.min_gain) {
                return bad("learning.min_gain", "must be in 0..1");
            }
            let t = &l.training;
            if !(1..=1000).contains(&t.generations) {
                return bad("learning.training.generations", "must be in 1..=1000");
            }
            if !(1..=64).contains(&t.pairs) {
                return bad("learning.training.pairs", "must be in 1..=64");
            }
            if !(1..=256).contains(&t.episodes) || !(1..=256).contains(&t.validation) {
                return bad("learning.training", "episodes and validation must be in 1..=256");
            }
            if !(t.scale > 0.0 && t.scale <= 1.0) {
                return bad("learning.training.scale", "must be in (0, 1]");
            }
            if !(t.sigma > 0.0 && t.sigma.is_finite() && t.lr > 0.0 && t.lr.is_finite()) {
                return bad("learning.training", "sigma and lr must be above 0");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
