//! `tessera`: the command line of the Tessera GPU scheduler.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use tessera::{bench, check, fidelity, load, plan, quality, sim, throughput};
use tessera_policy::PolicyDocument;
use tessera_wasm::{Runtime, RuntimeConfig};

mod chaos_cmd;

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
    Sim {
        #[command(flatten)]
        workload: WorkloadArgs,
        /// Replay by creation and deletion times (departures free capacity).
        #[arg(long, conflicts_with = "online")]
        time_replay: bool,
        /// Run the scheduling loop online: queue, tiers, preemption, node
        /// sampling, telemetry, zone carbon and adaptive weights from the
        /// policy; trace pods by their times, the built-in workload as a
        /// Poisson stream at `--inflate` × capacity.
        #[arg(long)]
        online: bool,
        /// Seconds between telemetry samples (online).
        #[arg(long, default_value_t = 300)]
        telemetry_interval: u64,
        /// Reschedule. Submissions protocol: when a pod fits nowhere, move
        /// running pods to make room for it, else plan globally with the
        /// policy's `rescheduling:` planner; prints placement alone beside
        /// placement with rescheduling. Online: plan whenever the policy's
        /// detectors report anomalies. Plans execute through the Movement
        /// Manager.
        #[arg(long, conflicts_with = "time_replay")]
        reschedule: bool,
        /// Migrations allowed, % of pods placed (online: per plan, % of pods
        /// running).
        #[arg(long, default_value_t = 5.0, requires = "reschedule")]
        max_migrations_pct: f64,
        /// Also plan globally every N submissions (0: only when a pod fits
        /// nowhere; submissions protocol).
        #[arg(long, default_value_t = 5, requires = "reschedule")]
        reschedule_every: u64,
        /// Plans execute through the Movement Manager on a simulated
        /// actuator: probability that an eviction or a start fails.
        #[arg(long, default_value_t = 0.0, requires = "reschedule")]
        move_failure_rate: f64,
        /// Error rate each moved pod adds to the health reading after its
        /// batch (rollback gates read it; e.g. 0.005).
        #[arg(long, default_value_t = 0.0, requires = "reschedule")]
        move_error_rate: f64,
        /// Also print the offline LP bound on GPU allocation for the pods
        /// submitted: no placement, with or without migrations, does better.
        #[arg(long, conflicts_with_all = ["online", "time_replay"])]
        bound: bool,
        /// How equal scores are decided (default: the policy's setting).
        #[arg(long, value_enum)]
        tie_break: Option<TieBreakArg>,
        /// Write the per-bucket series and totals here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Draw the allocation curve (SVG) here.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// What the rescheduler would do now, acting on nothing: place the
    /// workload on the simulator with the policy, plan once with its
    /// `rescheduling:` planner, and print the plan and the batches the
    /// Movement Manager would run (a dry run).
    Plan {
        #[command(flatten)]
        workload: WorkloadArgs,
        /// Most moves in the plan.
        #[arg(long, default_value_t = 100)]
        max_moves: usize,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
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
    /// Print the TesseraPolicy CustomResourceDefinition (generated from
    /// its Rust type; `deploy/kubernetes/crd.yaml` is this output).
    Crd,
    /// Chaos verification of a policy before rollout.
    #[command(subcommand)]
    Chaos(chaos_cmd::ChaosCmd),
    /// Benchmarks against published results.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Inspect, check and benchmark policy plugins.
    #[command(subcommand)]
    Plugin(PluginCmd),
    /// Validate policy documents.
    #[command(subcommand)]
    Policy(PolicyCmd),
}

/// The cluster, the workload and the policy of a simulation.
#[derive(clap::Args)]
struct WorkloadArgs {
    /// Node list (openb CSV) or `builtin`.
    #[arg(long, default_value = "builtin")]
    nodes: sim::Input,
    /// Nodes to generate for `--nodes builtin`.
    #[arg(long, default_value_t = 1000)]
    node_count: usize,
    /// Pod list (openb CSV) or `builtin`.
    #[arg(long, default_value = "builtin")]
    pods: sim::Input,
    /// Arrival order file (one pod row index per line).
    #[arg(long)]
    order: Option<PathBuf>,
    /// Seed of the built-in workload and of the plugins' random streams.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// `default`, a built-in plugin name, or a policy file.
    #[arg(long, default_value = "default")]
    policy: String,
    /// Built-in workload: submit until GPU demand is this × capacity.
    #[arg(long, default_value_t = 1.3)]
    inflate: f64,
}

impl WorkloadArgs {
    /// Simulator options for these inputs; nothing else set.
    fn options(self) -> sim::SimOptions {
        sim::SimOptions {
            nodes: self.nodes,
            node_count: self.node_count,
            pods: self.pods,
            order: self.order,
            seed: self.seed,
            policy: self.policy,
            time_replay: false,
            inflate: self.inflate,
            tie_break: None,
            reschedule: None,
            reschedule_every: 0,
            actuator: Default::default(),
            bound: false,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum TieBreakArg {
    /// The lowest node id wins.
    NodeId,
    /// A fixed random ranking of nodes from the seed.
    SeededRank,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Table,
    Json,
}

#[derive(Subcommand)]
enum PluginCmd {
    /// Load a component, report its world, exports and imports, and run the
    /// canned calls. Exits 0 only if it is loadable.
    Check {
        /// The component (`.wasm`).
        file: PathBuf,
        /// Plugin configuration as JSON.
        #[arg(long, default_value = "null")]
        config: String,
        /// Directory of the precompiled-component cache.
        #[arg(long, env = "TESSERA_CACHE_DIR")]
        cache_dir: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Score N nodes through the Wasm plugin and through the same logic
    /// compiled natively; print the per-node costs and their ratio.
    Bench {
        /// Nodes scored per call.
        #[arg(long, default_value_t = 10_000)]
        nodes: u32,
        /// Built-in plugin to measure.
        #[arg(long, default_value = "binpack")]
        plugin: String,
        /// Plugin configuration as JSON.
        #[arg(long, default_value = "null")]
        config: String,
        /// Repetitions (the median is reported).
        #[arg(long, default_value_t = 7)]
        reps: u32,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// List the plugins built into this binary.
    List,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Pods placed per second and decision latency on a synthetic cluster
    /// (8 GPUs per node, 3 zones), through Wasm and natively.
    Throughput {
        /// Nodes.
        #[arg(long, default_value_t = 10_000)]
        nodes: u32,
        /// Pending pods.
        #[arg(long, default_value_t = 50_000)]
        pods: usize,
        /// A shipped policy (`throughput`: binpack, topology-spread,
        /// gpu-aware, hybrid-score) or a policy file.
        #[arg(long, default_value = "throughput")]
        policy: String,
        /// Seed of the workload.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Threads scoring each decision's plugins in parallel, each plugin
        /// on a fixed thread. On a 2-vCPU VM handing a 0.4 ms decision to
        /// another core costs more than it saves, hence 1.
        #[arg(long, default_value_t = 1)]
        workers: usize,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Replay every (workload, policy, seed) with published results under
    /// DIR/expected and print the deviations from the published curves.
    Fidelity {
        /// A directory laid out like shared/traces/openb.
        #[arg(long)]
        traces: PathBuf,
        /// Only these policies (comma-separated).
        #[arg(long, value_delimiter = ',')]
        policies: Vec<String>,
        /// Write one allocation-curve SVG per workload into this directory.
        #[arg(long)]
        plot: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Planning time and quality on a fragmented synthetic cluster: full
    /// plans, re-plans after a 1% change, whole GPUs freed against the LP
    /// bound.
    Reschedule {
        /// Nodes.
        #[arg(long, default_value_t = 10_000)]
        nodes: usize,
        /// Pods generated (those some node takes are bound).
        #[arg(long, default_value_t = 100_000)]
        pods: usize,
        /// Seed of the cluster and pods.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Repetitions of each measurement.
        #[arg(long, default_value_t = 5)]
        reps: usize,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Explain requests (GET /v1/decisions/{pod}) at a fixed rate against
    /// `tessera serve` on loopback while its scheduling loop runs: answers,
    /// errors and latency.
    Api {
        /// Requests per second.
        #[arg(long, default_value_t = 1000)]
        rate: u32,
        /// Seconds of load.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Service configuration (default: the built-in simulator).
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// The published protocol on every workload and seed in DIR, with one
    /// policy (optionally with rescheduling), beside FGD's published
    /// result and the offline bound.
    Quality {
        /// A directory laid out like shared/traces/openb.
        #[arg(long)]
        traces: PathBuf,
        /// A shipped policy, a built-in plugin, or a policy file.
        #[arg(long, default_value = "default")]
        policy: String,
        /// Reschedule (make room when a pod fits nowhere, plan globally).
        #[arg(long)]
        reschedule: bool,
        /// Migrations allowed, % of pods placed.
        #[arg(long, default_value_t = 5.0, requires = "reschedule")]
        max_migrations_pct: f64,
        /// Also plan globally every N submissions (0: only when a pod fits
        /// nowhere).
        #[arg(long, default_value_t = 5, requires = "reschedule")]
        reschedule_every: u64,
        /// Only these workloads (pod list file stems, comma-separated).
        #[arg(long, value_delimiter = ',')]
        workloads: Vec<String>,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
}

#[derive(Subcommand)]
enum PolicyCmd {
    /// Validate a policy document and load (and check) all its plugins.
    Check {
        /// The policy document (YAML).
        file: PathBuf,
    },
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
        Command::Sim {
            workload,
            time_replay,
            online,
            telemetry_interval,
            reschedule,
            max_migrations_pct,
            reschedule_every,
            move_failure_rate,
            move_error_rate,
            bound,
            tie_break,
            out,
            plot,
        } => {
            let seed = workload.seed;
            if !(0.0..=100.0).contains(&max_migrations_pct) {
                anyhow::bail!("--max-migrations-pct must be within 0..=100, not {max_migrations_pct}");
            }
            let reschedule = reschedule.then_some(max_migrations_pct / 100.0);
            for (name, v) in [("--move-failure-rate", move_failure_rate), ("--move-error-rate", move_error_rate)] {
                if !(0.0..=1.0).contains(&v) {
                    anyhow::bail!("{name} must be within 0..=1, not {v}");
                }
            }
            let actuator = tessera_movement::sim::SimActuatorConfig {
                evict_failure: move_failure_rate,
                start_failure: move_failure_rate,
                error_rate_per_move: move_error_rate,
                seed,
                ..Default::default()
            };
            let tie_break = tie_break.map(|t| match t {
                TieBreakArg::NodeId => tessera_policy::TieBreakSpec::NodeId,
                TieBreakArg::SeededRank => tessera_policy::TieBreakSpec::SeededRank,
            });
            let opts = sim::SimOptions {
                time_replay,
                tie_break,
                reschedule,
                reschedule_every,
                actuator,
                bound,
                ..workload.options()
            };
            if online {
                if plot.is_some() {
                    anyhow::bail!("--plot draws the allocation curve of the published protocols, not of --online");
                }
                let outcome = tessera::online::run(&opts, telemetry_interval.max(1))?;
                print!("{}", tessera::online::summary(&outcome));
                if let Some(path) = out {
                    tessera::online::write(&outcome, &path)?;
                    println!("{:<30} {}", "run written to", path.display());
                }
                return Ok(ExitCode::SUCCESS);
            }
            let outcome = sim::run(&opts)?;
            print!("{}", sim::summary(&outcome));
            if let Some(path) = out {
                let json = serde_json::to_string_pretty(&outcome.file)?;
                std::fs::write(&path, json + "\n").with_context(|| format!("cannot write {}", path.display()))?;
                println!("{:<30} {}", "run written to", path.display());
            }
            if let Some(path) = plot {
                let r = &outcome.file.report;
                let curve = tessera::plot::Curve {
                    label: outcome.file.policy.clone(),
                    points: r.buckets.iter().map(|b| (f64::from(b.arrived_pct), b.allocation)).collect(),
                    colour: 0,
                    dashed: false,
                };
                tessera::plot::allocation_svg(&path, "GPU allocation by arrived demand", &[curve])?;
                println!("{:<30} {}", "plot written to", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve { listen, config, policy } => {
            tessera::serve::run(&tessera::serve::ServeOptions { listen, config, policy })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Crd => {
            print!("{}", tessera_kube::crd::crd_yaml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Agent(args) => {
            tessera::agent::run(&args)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Chaos(cmd) => chaos_cmd::run(cmd),
        Command::Bench(BenchCmd::Throughput { nodes, pods, policy, seed, workers, format }) => {
            let r = throughput::run(&throughput::ThroughputOptions { nodes, pods, policy, seed, workers })?;
            match format {
                Format::Table => print!("{}", r.to_table()),
                Format::Json => println!("{}", serde_json::to_string(&r)?),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCmd::Fidelity { traces, policies, plot, format }) => {
            let report = fidelity::run(&traces, &policies)?;
            if let Some(dir) = plot {
                for f in report.plot(&dir)? {
                    eprintln!("plot written to {}", f.display());
                }
            }
            match format {
                Format::Table => print!("{}", report.to_table()),
                Format::Json => println!("{}", serde_json::to_string(&report)?),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Plan { workload, max_moves, format } => {
            let opts = workload.options();
            let outcome = plan::run(&opts, max_moves)?;
            match format {
                Format::Table => print!("{}", outcome.to_table()),
                Format::Json => println!("{}", serde_json::to_string(&outcome)?),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCmd::Reschedule { nodes, pods, seed, reps, format }) => {
            let r = tessera_resched::bench::run(nodes, pods, seed, reps);
            match format {
                Format::Table => print!("{}", r.to_table()),
                Format::Json => println!("{}", serde_json::to_string(&r)?),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCmd::Api { rate, duration, config, format }) => {
            if !(duration > 0.0 && duration <= 3600.0) {
                anyhow::bail!("--duration must be within (0, 3600] seconds, not {duration}");
            }
            let opts = tessera::serve::ServeOptions { config, ..Default::default() };
            let cfg = tessera::serve::config(&opts, |k| std::env::var(k).ok())?;
            let r = tessera::bench_api::run(cfg, rate, std::time::Duration::from_secs_f64(duration))?;
            match format {
                Format::Table => print!("{}", r.to_table()),
                Format::Json => println!("{}", serde_json::to_string(&r)?),
            }
            Ok(if r.errors == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Command::Bench(BenchCmd::Quality {
            traces,
            policy,
            reschedule,
            max_migrations_pct,
            reschedule_every,
            workloads,
            format,
        }) => {
            if !(0.0..=100.0).contains(&max_migrations_pct) {
                anyhow::bail!("--max-migrations-pct must be within 0..=100, not {max_migrations_pct}");
            }
            let report = quality::run(&quality::QualityOptions {
                traces,
                policy,
                reschedule: reschedule.then_some(max_migrations_pct / 100.0),
                reschedule_every,
                workloads,
            })?;
            match format {
                Format::Table => print!("{}", report.to_table()),
                Format::Json => println!("{}", serde_json::to_string(&report)?),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugin(PluginCmd::Check { file, config, cache_dir, format }) => {
            let rt = Runtime::new(RuntimeConfig { cache_dir, ..RuntimeConfig::default() })?;
            let report = check::check_file(&rt, &file, &config);
            match format {
                Format::Table => print!("{}", report.to_table()),
                Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
            }
            Ok(if report.loadable { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Command::Plugin(PluginCmd::Bench { nodes, plugin, config, reps, format }) => {
            let result = bench::run(&bench::BenchOptions { nodes, plugin, config_json: config, reps: reps.max(1) })?;
            match format {
                Format::Table => print!("{}", result.to_table()),
                Format::Json => println!("{}", serde_json::to_string(&result)?),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugin(PluginCmd::List) => {
            for a in tessera_plugins::ALL {
                println!("{:<14} sha256:{}  {} bytes", a.name, tessera_wasm::sha256_hex(a.bytes), a.bytes.len());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Policy(PolicyCmd::Check { file }) => {
            let mut doc = PolicyDocument::load(&file)?;
            doc.resolve_paths(&file);
            let rt = Runtime::new(RuntimeConfig::default())?;
            let policy = load::load_policy(&rt, &doc).with_context(|| format!("policy {}", file.display()))?;
            println!("policy {} is valid", policy.name());
            for m in policy.scorers().iter().chain(policy.detectors()) {
                let v = m.slot.current();
                println!(
                    "  {:<12} {:<8} {} {:<8} weight {:<5} deadline {} ms, memory {} MiB",
                    m.name,
                    v.kind().to_string(),
                    v.info().name,
                    v.version(),
                    m.weight,
                    v.limits().deadline_ms.0,
                    v.limits().memory_mib.0,
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
