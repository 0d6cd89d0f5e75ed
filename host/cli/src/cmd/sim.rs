//! `tessera sim`: replay a workload on the embedded simulator (the
//! published protocol, a time replay, or the online loop).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use tessera::sim;

use super::workload::{TieBreakArg, WorkloadArgs};

/// `tessera sim`.
#[derive(clap::Args)]
pub struct SimArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Replay by creation and deletion times (departures free capacity).
    #[arg(long, conflicts_with = "online")]
    pub time_replay: bool,
    /// Run the scheduling loop online: queue, tiers, preemption, node
    /// sampling, telemetry, zone carbon and adaptive weights from the
    /// policy; trace pods by their times, the built-in workload as a
    /// Poisson stream at `--inflate` × capacity.
    #[arg(long)]
    pub online: bool,
    /// Run a multi-GPU job trace (Philly via Gavel: seven tab-separated
    /// fields) through the loop instead: jobs as gangs of 8-GPU pods,
    /// run times from Gavel's measured throughputs; the cluster is Gavel's
    /// for the trace's virtual cluster (`vc_cluster_specs.json` beside it)
    /// or sized to the trace.
    #[arg(long, conflicts_with_all = ["online", "time_replay", "reschedule", "bound", "plot"])]
    pub jobs: Option<PathBuf>,
    /// How --jobs are admitted.
    #[arg(long, value_enum, default_value = "fair-share", requires = "jobs")]
    pub admission: tessera::jobs::Admission,
    /// Queues the --jobs are spread over (seeded).
    #[arg(long, default_value_t = 4, requires = "jobs", value_parser = super::count::<u32>(1, tessera_core::quota::MAX_QUEUES as u64))]
    pub queues: u32,
    /// Every job declares F times its run as its limit (within [1, 100]):
    /// pods that end before the nodes kept for a waiting gang of their
    /// queue are free may use them (backfill). Default: none declares one.
    #[arg(long, value_name = "F", requires = "jobs", value_parser = super::limit_factor)]
    pub declared_limit: Option<f64>,
    /// Seconds between telemetry samples (online).
    #[arg(long, default_value_t = 300, value_parser = super::count::<u64>(1, 86_400))]
    pub telemetry_interval: u64,
    /// Reschedule. Submissions protocol: when a pod fits nowhere, move
    /// running pods to make room for it, else plan globally with the
    /// policy's `rescheduling:` planner; prints placement alone beside
    /// placement with rescheduling. Online: plan whenever the policy's
    /// detectors report anomalies. Plans execute through the Movement
    /// Manager.
    #[arg(long, conflicts_with = "time_replay")]
    pub reschedule: bool,
    /// Migrations allowed, % of pods placed (online: per plan, % of pods
    /// running).
    #[arg(long, default_value_t = 5.0, requires = "reschedule")]
    pub max_migrations_pct: f64,
    /// Also plan globally every N submissions (0: only when a pod fits
    /// nowhere; submissions protocol).
    #[arg(long, default_value_t = 5, requires = "reschedule")]
    pub reschedule_every: u64,
    /// Plans execute through the Movement Manager on a simulated
    /// actuator: probability that an eviction or a start fails.
    #[arg(long, default_value_t = 0.0, requires = "reschedule")]
    pub move_failure_rate: f64,
    /// Error rate each moved pod adds to the health reading after its
    /// batch (rollback gates read it; e.g. 0.005).
    #[arg(long, default_value_t = 0.0, requires = "reschedule")]
    pub move_error_rate: f64,
    /// Also print the offline LP bound on GPU allocation for the pods
    /// submitted: no placement, with or without migrations, does better.
    #[arg(long, conflicts_with_all = ["online", "time_replay"])]
    pub bound: bool,
    /// How equal scores are decided (default: the policy's setting).
    #[arg(long, value_enum)]
    pub tie_break: Option<TieBreakArg>,
    /// Write the per-bucket series and totals here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Draw the allocation curve (SVG) here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// `sim --jobs`: one trace, one admission; the table, and the report as
/// JSON in `out`.
fn run_jobs(
    file: &std::path::Path,
    admission: tessera::jobs::Admission,
    queues: u32,
    declared_limit: Option<f64>,
    policy: &str,
    seed: u64,
    out: Option<PathBuf>,
) -> Result<ExitCode> {
    use tessera::jobs;
    let (mut trace, gpus) = jobs::prepare(file, queues, seed)?;
    trace.declare_limits(declared_limit, gpus)?;
    let rt = tessera::replay::runtime(None)?;
    let (run, report) = jobs::run_one(&rt, &trace, gpus, admission, policy, seed, jobs::Fairness::default())?;
    print!("{}", jobs::JobsBench { runs: vec![run] }.to_table());
    if let Some(path) = out {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(&path, json + "\n").with_context(|| format!("cannot write {}", path.display()))?;
        println!("{:<30} {}", "run written to", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs it.
pub fn run(a: SimArgs) -> Result<ExitCode> {
    let SimArgs {
        workload,
        jobs,
        admission,
        queues,
        declared_limit,
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
    } = a;
    let seed = workload.seed;
    if let Some(file) = jobs {
        return run_jobs(&file, admission, queues, declared_limit, &workload.policy, seed, out);
    }
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
    let tie_break = tie_break.map(TieBreakArg::spec);
    let opts =
        sim::SimOptions { time_replay, tie_break, reschedule, reschedule_every, actuator, bound, ..workload.options() };
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
