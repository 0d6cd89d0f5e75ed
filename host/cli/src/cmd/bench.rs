//! `tessera bench …`: benchmarks, each printing a table or JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use tessera::report::{Format, emit};
use tessera::{fidelity, quality, throughput};

#[derive(Subcommand)]
pub enum BenchCmd {
    /// Pods placed per second and decision latency on a synthetic cluster
    /// (8 GPUs per node, 3 zones), through Wasm and natively.
    Throughput {
        /// Nodes.
        #[arg(long, default_value_t = 10_000, value_parser = super::count::<u32>(1, super::MAX_NODES))]
        nodes: u32,
        /// Pending pods.
        #[arg(long, default_value_t = 50_000, value_parser = super::count::<usize>(1, super::MAX_PODS))]
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
        /// Ask every plugin about every candidate, even those that promise
        /// their answers may be reused (`tessera:policy/reuse`): the
        /// comparison for what reuse saves.
        #[arg(long)]
        no_reuse: bool,
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
        #[arg(long, default_value_t = 10_000, value_parser = super::count::<usize>(1, super::MAX_NODES))]
        nodes: usize,
        /// Pods generated (those some node takes are bound).
        #[arg(long, default_value_t = 100_000, value_parser = super::count::<usize>(1, super::MAX_PODS))]
        pods: usize,
        /// Seed of the cluster and pods.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Repetitions of each measurement.
        #[arg(long, default_value_t = 5, value_parser = super::count::<usize>(1, super::MAX_REPS))]
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
    /// Decisions per second through the service's engine (decision
    /// records, metrics and spans on; spans unsampled, then all sampled)
    /// on its simulator backend, beside the bare loop on the same cluster,
    /// arrivals, policy and seed (the chaos twin without faults).
    Serve {
        /// Nodes of the simulator backend.
        #[arg(long, default_value_t = 1000, value_parser = super::count::<u32>(1, super::MAX_NODES))]
        nodes: u32,
        /// Offered load (1.0 fills the cluster; above it pods wait).
        #[arg(long, default_value_t = 1.2)]
        load: f64,
        /// Backend seconds to run (at most the span a trace may cover).
        #[arg(long, default_value_t = 7200, value_parser = super::count::<u64>(1, tessera_trace::MAX_SPAN_S))]
        seconds: u64,
        /// A shipped policy or a policy file.
        #[arg(long, default_value = "default")]
        policy: String,
        /// Seed of the cluster, the arrivals and the policy.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Gang decisions on a large fragmented cluster through the Wasm
    /// policy: each gang's pass (hold room member by member, bind all or
    /// release all) timed, with one queue and with queues.
    Gangs {
        /// Nodes.
        #[arg(long, default_value_t = 10_000, value_parser = super::count::<u32>(1, super::MAX_NODES))]
        nodes: u32,
        /// Gangs, one pass each.
        #[arg(long, default_value_t = 300, value_parser = super::count::<usize>(1, super::MAX_PODS))]
        gangs: usize,
        /// Members per gang (the default: a 64-GPU job of eight 8-GPU pods).
        #[arg(long, default_value_t = 8, value_parser = super::count::<u32>(2, 4096))]
        members: u32,
        /// Whole GPUs per member.
        #[arg(long, default_value_t = 8)]
        member_gpus: u32,
        /// Share of the nodes (%) idle at the start; the rest fragmented.
        #[arg(long = "idle", default_value_t = 30)]
        idle_pct: u32,
        /// Queues of the second run.
        #[arg(long, default_value_t = 4, value_parser = super::count::<u32>(1, tessera_core::quota::MAX_QUEUES as u64))]
        queues: u32,
        /// A shipped policy or a policy file.
        #[arg(long, default_value = "throughput")]
        policy: String,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Multi-GPU training jobs: every Philly/Gavel job trace in DIR with
    /// gangs and fair-share queues (Tessera), gangs in one queue, one pod
    /// at a time without gangs, and a strict FIFO queue of gangs: completion times, queue delay, useful GPU
    /// utilisation, fairness across queues, GPU-seconds held by partly
    /// placed jobs.
    Jobs {
        /// A directory of `*.trace` files (like shared/traces/philly-gavel).
        #[arg(long)]
        traces: PathBuf,
        /// The placement policy: shipped, a built-in plugin, or a file.
        #[arg(long, default_value = "default")]
        policy: String,
        /// Queues the jobs are spread over (seeded).
        #[arg(long, default_value_t = 4, value_parser = super::count::<u32>(1, tessera_core::quota::MAX_QUEUES as u64))]
        queues: u32,
        /// Seed.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Only these traces (file stems, comma-separated).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// The traces together on one cluster (the sum of theirs), each a
        /// queue (a Philly virtual cluster) guaranteed its own cluster's
        /// GPUs under fair-share.
        #[arg(long)]
        mix: bool,
        /// With --mix: the pooled cluster as a share of the clusters' sum,
        /// % (each virtual cluster guaranteed that share of its own).
        #[arg(long, default_value_t = 100, requires = "mix")]
        capacity: u32,
        /// With --mix: every virtual cluster's queue guaranteed an equal
        /// share of the pooled cluster (equal weights), not its own
        /// cluster's GPUs.
        #[arg(long, requires = "mix")]
        equal: bool,
        /// fair-share's built-in queues with the fair-share gate: a queue
        /// already at its fair share of GPUs starts nothing new while
        /// others' demand is unmet.
        #[arg(long)]
        gate: bool,
        /// With --gate (or the policy's): time-based fair share, use over or
        /// under a queue's share remembered with this half-life (s) and
        /// paid back.
        #[arg(long, value_name = "S")]
        usage_half_life: Option<u64>,
        /// With --usage-half-life: the gate holds queues only while
        /// remembered fairness (Jain over queues of held ÷ fair share) is
        /// below T (the policy's queues.fairness_target).
        #[arg(long, value_name = "T")]
        fairness_target: Option<f64>,
        /// Reserve nodes for a gang that has waited S seconds for room
        /// (the policy's scheduling.reserve_after_s), in every mode.
        #[arg(long, value_name = "S")]
        reserve_after: Option<u64>,
        /// With --reserve-after: one gang of each leaf queue may have
        /// nodes kept at once (the policy's scheduling.reserve_per_queue).
        #[arg(long)]
        reserve_per_queue: bool,
        /// Within a queue, smaller jobs (fewer GPUs over the gang) first
        /// (the policy's scheduling.queue.smallest_first), in every mode
        /// but fifo.
        #[arg(long)]
        smallest_first: bool,
        /// With --gate: a queue below its fair share reclaims up to it,
        /// not only up to its guarantee (the policy's
        /// queues.reclaim_to_fair_share): queues take turns by preemption.
        #[arg(long)]
        reclaim_to_share: bool,
        /// A pod is reclaimed only after running S seconds (the policy's
        /// queues.reclaim_min_runtime_s).
        #[arg(long, value_name = "S")]
        reclaim_min_runtime: Option<u64>,
        /// Every job checkpoints every S seconds of its run: an eviction
        /// loses only the run since the last (default: jobs start over).
        #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..))]
        checkpoint_every: Option<u64>,
        /// Every job declares F times its run as its limit (Kubernetes'
        /// activeDeadlineSeconds, Slurm's time limit), F within [1, 100]:
        /// a pod that will have ended before the nodes kept for a waiting
        /// gang are free may use them (backfill). Default: no job declares
        /// one (Philly's traces carry none).
        #[arg(long, value_name = "F", value_parser = super::limit_factor)]
        declared_limit: Option<f64>,
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

/// Runs one.
pub fn run(cmd: BenchCmd) -> Result<ExitCode> {
    match cmd {
        BenchCmd::Throughput { nodes, pods, policy, seed, workers, no_reuse, format } => {
            let reuse = !no_reuse;
            emit(
                &throughput::run(&throughput::ThroughputOptions { nodes, pods, policy, seed, workers, reuse })?,
                format,
            )?;
        }
        BenchCmd::Fidelity { traces, policies, plot, format } => {
            let report = fidelity::run(&traces, &policies)?;
            if let Some(dir) = plot {
                for f in report.plot(&dir)? {
                    eprintln!("plot written to {}", f.display());
                }
            }
            emit(&report, format)?;
        }
        BenchCmd::Serve { nodes, load, seconds, policy, seed, format } => {
            let opts = tessera::bench_serve::ServeBenchOptions { nodes, load, seconds, policy, seed };
            emit(&tessera::bench_serve::run_bench(&opts)?, format)?;
        }
        BenchCmd::Gangs { nodes, gangs, members, member_gpus, idle_pct, queues, policy, seed, format } => {
            let opts =
                tessera::gang_bench::GangOptions { nodes, gangs, members, member_gpus, idle_pct, queues, policy, seed };
            emit(&tessera::gang_bench::run(&opts)?, format)?;
        }
        BenchCmd::Jobs {
            traces,
            policy,
            queues,
            seed,
            only,
            mix,
            capacity,
            equal,
            gate,
            usage_half_life,
            fairness_target,
            reserve_after,
            reserve_per_queue,
            smallest_first,
            reclaim_to_share,
            reclaim_min_runtime,
            checkpoint_every,
            declared_limit,
            format,
        } => {
            let opts = tessera::jobs::JobsOptions {
                traces,
                policy,
                queues,
                seed,
                only,
                mix,
                capacity_pct: capacity,
                equal,
                fairness: tessera::jobs::Fairness {
                    gate,
                    usage_half_life_s: usage_half_life,
                    fairness_target,
                    reserve_after_s: reserve_after,
                    reserve_per_queue,
                    smallest_first,
                    reclaim_to_fair_share: reclaim_to_share,
                    reclaim_min_runtime_s: reclaim_min_runtime,
                },
                checkpoint_s: checkpoint_every,
                declared_limit,
            };
            emit(&tessera::jobs::bench(&opts)?, format)?;
        }
        BenchCmd::Reschedule { nodes, pods, seed, reps, format } => {
            emit(&tessera_resched::bench::run(nodes, pods, seed, reps), format)?;
        }
        BenchCmd::Api { rate, duration, config, format } => {
            if !(duration > 0.0 && duration <= 3600.0) {
                anyhow::bail!("--duration must be within (0, 3600] seconds, not {duration}");
            }
            let opts = tessera::serve::ServeOptions { config, ..Default::default() };
            let cfg = tessera::serve::config(&opts, |k| std::env::var(k).ok())?;
            let r = tessera::bench_api::run(cfg, rate, std::time::Duration::from_secs_f64(duration))?;
            emit(&r, format)?;
            return Ok(if r.errors == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE });
        }
        BenchCmd::Quality { traces, policy, reschedule, max_migrations_pct, reschedule_every, workloads, format } => {
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
            emit(&report, format)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
