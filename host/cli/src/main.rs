//! `tessera`: the command line of the Tessera GPU scheduler. Each
//! subcommand is a module of `cmd`; the library (`tessera`) does the work.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

mod cmd;

#[derive(Parser)]
#[command(name = "tessera", version, about = "GPU cluster scheduler with sandboxed WebAssembly policies")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a workload on the embedded cluster simulator with a policy of
    /// Wasm plugins and print a summary (defaults: built-in cluster and
    /// workload, the `default` policy).
    Sim(cmd::sim::SimArgs),
    /// What the rescheduler would do now, acting on nothing: place the
    /// workload on the simulator with the policy, plan once with its
    /// `rescheduling:` planner, and print the plan and the batches the
    /// Movement Manager would run (a dry run).
    Plan(cmd::plan::PlanArgs),
    /// Run the service: the scheduling loop, the rescheduling cycle and the
    /// Movement Manager on the embedded simulator, with the explain API,
    /// OpenMetrics on /metrics and OTLP traces (endpoint and sampling from
    /// the configuration or the OTEL_* environment). Stops on SIGINT or
    /// SIGTERM after the pass under way.
    Serve {
        /// Address of the API (default 127.0.0.1:8080).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Configuration file (YAML; see deploy/serve.yaml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// `default`, a built-in plugin name, or a policy file (overrides
        /// the configuration).
        #[arg(long)]
        policy: Option<String>,
    },
    /// Run the node agent (a DaemonSet): GPU telemetry through NVML
    /// (utilization, memory, temperature, power, ECC and XID events, health)
    /// and the node's CPU and memory, served as JSON on /v1/sample and
    /// OpenMetrics on /metrics. Without an NVIDIA driver it says so once and
    /// serves CPU and memory only. Stops on SIGINT or SIGTERM.
    Agent(tessera::agent::AgentArgs),
    /// Print a CustomResourceDefinition generated from its Rust type:
    /// `policy` (TesseraPolicy, `deploy/kubernetes/crd.yaml`) or
    /// `podgroup` (the part of scheduler-plugins' PodGroup Tessera reads,
    /// `deploy/kubernetes/podgroup-crd.yaml`).
    Crd {
        /// Which one.
        #[arg(value_enum, default_value = "policy")]
        kind: CrdKind,
    },
    /// Chaos verification of a policy before rollout.
    #[command(subcommand)]
    Chaos(cmd::chaos::ChaosCmd),
    /// Benchmarks against published results.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCmd),
    /// Inspect, check and benchmark policy plugins.
    #[command(subcommand)]
    Plugin(cmd::plugin::PluginCmd),
    /// Validate policy documents.
    #[command(subcommand)]
    Policy(cmd::policy::PolicyCmd),
    /// Workloads for the simulator: generated members of the trace's
    /// families.
    #[command(subcommand)]
    Workload(cmd::workload::WorkloadCmd),
    /// Train the `learned` placement policy in the simulator (evolution
    /// strategies over generated members of the workload families,
    /// starting from `default`'s rules) and write the model, its card and
    /// training curves.
    Train(cmd::train::TrainArgs),
}

/// The CustomResourceDefinitions `tessera crd` prints.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum CrdKind {
    /// TesseraPolicy.
    Policy,
    /// scheduler-plugins' PodGroup (the part Tessera reads).
    Podgroup,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("TESSERA_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Sim(a) => cmd::sim::run(a),
        Command::Plan(a) => cmd::plan::run(a),
        Command::Serve { listen, config, policy } => {
            tessera::serve::run(&tessera::serve::ServeOptions { listen, config, policy })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Agent(args) => {
            tessera::agent::run(&args)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Crd { kind } => {
            match kind {
                CrdKind::Policy => print!("{}", tessera_kube::crd::crd_yaml()),
                CrdKind::Podgroup => print!("{}", tessera_kube::podgroup::crd_yaml()),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Chaos(c) => cmd::chaos::run(c),
        Command::Bench(c) => cmd::bench::run(c),
        Command::Plugin(c) => cmd::plugin::run(c),
        Command::Policy(c) => cmd::policy::run(c),
        Command::Workload(c) => cmd::workload::run(c),
        Command::Train(a) => cmd::train::run(a),
    }
}
