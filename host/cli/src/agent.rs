//! `tessera agent`: the node agent (a DaemonSet). Opens NVML (or replays a
//! recorded fixture), falls back to CPU and memory when there is no NVIDIA
//! driver, and either prints one sample (`--once`) or serves `/v1/sample`,
//! `/metrics` and `/healthz` until SIGINT or SIGTERM.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use tessera_agent::gpu::{GpuSource, NvmlSource, RecordedSource};
use tessera_agent::health::{DEFAULT_HOT_CELSIUS, Tracker};
use tessera_agent::host::HostSource;
use tessera_agent::{Agent, AgentConfig, AgentError, AgentSample};

/// How `--once` prints its sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum AgentFormat {
    /// Lines for a person.
    #[default]
    Text,
    /// One JSON object (the `/v1/sample` body).
    Json,
}

/// The flags of `tessera agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// Address of the endpoint.
    #[arg(long, default_value = "0.0.0.0:9402")]
    pub listen: SocketAddr,
    /// Seconds between samples.
    #[arg(long, default_value_t = 10)]
    pub interval_s: u64,
    /// The node's name (default: the kernel's hostname).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// GPUs at or above this temperature (°C) are degraded.
    #[arg(long, default_value_t = DEFAULT_HOT_CELSIUS)]
    pub hot_celsius: u32,
    /// Print one sample and exit.
    #[arg(long)]
    pub once: bool,
    /// Output of `--once`.
    #[arg(long, value_enum, default_value = "text", requires = "once")]
    pub format: AgentFormat,
    /// Replay recorded NVML readings from this JSON file instead of asking
    /// NVML (tests, CI, demos; see host/agent/tests/fixtures).
    #[arg(long)]
    pub nvml_fixture: Option<PathBuf>,
}

/// The agent's configuration from the flags.
pub fn config(args: &AgentArgs) -> Result<AgentConfig> {
    if !(1..=86_400).contains(&args.interval_s) {
        bail!("--interval-s must be within 1..=86400, not {}", args.interval_s);
    }
    let mut cfg = AgentConfig {
        listen: args.listen,
        interval_s: args.interval_s,
        hot_celsius: args.hot_celsius,
        ..AgentConfig::default()
    };
    if let Some(n) = args.node_name.as_deref().map(str::trim).filter(|n| !n.is_empty()) {
        cfg.node_name = n.to_string();
    }
    Ok(cfg)
}

/// The GPU source: the fixture (a bad one is an error), else NVML, whose
/// absence is not an error but the reason the agent serves CPU and memory
/// only.
pub fn gpu_source(args: &AgentArgs) -> Result<Result<Box<dyn GpuSource>, AgentError>> {
    Ok(match &args.nvml_fixture {
        Some(path) => Ok(Box::new(RecordedSource::from_file(path)?)),
        None => NvmlSource::open().map(|s| Box::new(s) as Box<dyn GpuSource>),
    })
}

/// A sample as lines for a person.
pub fn text(s: &AgentSample) -> String {
    let pct = |p: u16| f64::from(p) / 10.0;
    let mut out = String::new();
    let _ = writeln!(out, "{:<10} {}", "node", s.node);
    let _ = writeln!(out, "{:<10} {} cores, {:.1} % busy", "cpu", s.cpu.cores, pct(s.cpu.util_permille));
    let m = &s.memory;
    let _ = writeln!(out, "{:<10} {} / {} MiB ({:.1} %)", "memory", m.used_mib, m.total_mib, pct(m.util_permille));
    let nvml = match (&s.nvml.driver_version, &s.nvml.message) {
        (_, Some(msg)) => msg.clone(),
        (Some(v), None) => format!("driver {v}"),
        (None, None) => "available".into(),
    };
    let _ = writeln!(out, "{:<10} {nvml}", "nvml");
    for g in &s.gpus {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "gpu {:<6} {} {}  util {:>5.1} %  memory {:>6} / {} MiB  {:>5}  {:>7}  ECC {}/{}  {}{}",
            g.index,
            g.name,
            g.uuid,
            pct(g.util_permille),
            g.memory_used_mib,
            g.memory_total_mib,
            opt(g.temperature_c.map(|t| format!("{t} °C"))),
            opt(g.power_w.map(|p| format!("{p:.1} W"))),
            opt(g.ecc_uncorrected.map(|v| v.to_string())),
            opt(g.ecc_corrected.map(|v| v.to_string())),
            g.health.as_str(),
            g.health_reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default(),
        );
    }
    out
}

/// `tessera agent`.
pub fn run(args: &AgentArgs) -> Result<()> {
    let cfg = config(args)?;
    let gpus = gpu_source(args)?;
    if let Err(e) = &gpus {
        eprintln!("tessera agent: {e}; serving CPU and memory telemetry only");
    }
    let mut agent = Agent::new(cfg.node_name.clone(), gpus, HostSource::new(), Tracker::new(cfg.hot_celsius));
    if args.once {
        let s = agent.sample()?;
        match args.format {
            AgentFormat::Text => print!("{}", text(&s)),
            AgentFormat::Json => println!("{}", serde_json::to_string(&s)?),
        }
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name("tessera-agent")
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .with_context(|| format!("cannot listen on {}", cfg.listen))?;
        let addr = listener.local_addr()?;
        eprintln!(
            "tessera agent: node {} on http://{addr} (GET /v1/sample, /metrics, /healthz), sampling every {} s",
            cfg.node_name, cfg.interval_s
        );
        let interval = Duration::from_secs(cfg.interval_s);
        tessera_agent::serve::serve(agent, listener, interval, crate::serve::shutdown_signal()).await?;
        eprintln!("tessera agent: stopped");
        anyhow::Ok(())
    })
}
