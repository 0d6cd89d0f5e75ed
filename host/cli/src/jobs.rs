//! Multi-GPU training jobs (Philly traces via Gavel) on the simulator:
//! `tessera sim --jobs FILE` and `tessera bench jobs --traces DIR`, each
//! trace with gangs (Tessera), one pod at a time without gangs, and a
//! strict FIFO queue of gangs.
//!
//! A job's run time is its steps over Gavel's measured throughput of its
//! job type at its scale factor on the GPU model it runs on
//! (`tessera_trace::jobs::Throughputs::gavel`); past the largest scale
//! Gavel measured (8 GPUs, 1 for some types), at that scale's rate per GPU
//! (linear scaling, counted as `extrapolated`); between two measured
//! scales (3, 5, 6 or 7 GPUs), linearly between their rates (counted as
//! `interpolated`); a model without a rate is not one it may use, and a
//! job with none at all is skipped and counted. The cluster is Gavel's for the trace's virtual
//! cluster (`vc_cluster_specs.json` beside the traces, its first size)
//! when there is one, else V100 nodes sized to the trace: its GPU-seconds
//! over its arrival span at 90% load, at least its largest job and at most
//! the most GPUs that would run at once with room for every job on
//! arrival.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use tessera_core::driver::DriverConfig;
use tessera_core::quota::QueueTree;
use tessera_core::sim::jobs::{Job, JobMode, JobReport, JobSummary, run_jobs};
use tessera_core::telemetry::TelemetryConfig;
use tessera_trace::jobs::{JobRow, RateSource, Throughputs, read_jobs};

use crate::load;

mod cluster;
mod fairness;
mod limits;
mod table;

use cluster::never_fitting;
pub use cluster::{cluster, sized_cluster, spec_cluster};
pub use fairness::{Fairness, equal_named_queues, equal_queues, vc_queues};
pub use limits::{MAX_LIMIT_FACTOR, limit_factor_ok};

/// GPUs per node (Gavel's clusters).
pub const GPUS_PER_NODE: u32 = 8;

/// GPU models of Gavel's cluster specs, in the order of `"V100:P100:K80"`.
pub const SPEC_MODELS: [&str; 3] = ["V100", "P100", "K80"];

/// Telemetry interval of a job run, s: jobs run for hours.
pub const TELEMETRY_INTERVAL_S: u64 = 600;

/// How a trace's jobs are admitted: `bench jobs` runs each, `sim --jobs`
/// one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Admission {
    /// Gangs, and queues with guarantees and dominant-resource fair share
    /// (the policy's `queues:`, else one equal queue per `--queues`, each
    /// guaranteed its share of the GPUs): Tessera.
    FairShare,
    /// Gangs, one queue.
    Gangs,
    /// Each pod on its own, no gangs (kube-scheduler without a gang plugin).
    OneAtATime,
    /// Gangs, strictly in arrival order.
    Fifo,
}

impl Admission {
    /// Every way, as `bench jobs` runs them.
    pub const ALL: [Admission; 4] = [Admission::FairShare, Admission::Gangs, Admission::OneAtATime, Admission::Fifo];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Admission::FairShare => "fair-share",
            Admission::Gangs => "gangs",
            Admission::OneAtATime => "one-at-a-time",
            Admission::Fifo => "fifo",
        }
    }

    /// How the loop's world admits jobs.
    pub fn mode(self) -> JobMode {
        match self {
            Admission::FairShare | Admission::Gangs => JobMode::Gangs,
            Admission::OneAtATime => JobMode::OneAtATime,
            Admission::Fifo => JobMode::Fifo,
        }
    }
}

/// A job trace as the simulator takes it.
#[derive(Debug, Clone, Default)]
pub struct JobTrace {
    /// The trace's name (its file stem).
    pub name: String,
    /// Jobs with a run time.
    pub jobs: Vec<Job>,
    /// Jobs skipped: no measured throughput on any GPU model.
    pub skipped: u64,
    /// Of them, how many of each job type (as the trace names it).
    pub skipped_types: BTreeMap<String, u64>,
    /// Queues its jobs are spread over (`q0`, `q1`, …).
    pub queues: u32,
    /// Jobs whose run time was extrapolated past the largest scale Gavel
    /// measured ([`tessera_trace::jobs::Throughputs::rate`]).
    pub extrapolated: u64,
    /// Jobs whose run time was interpolated between scales Gavel measured
    /// (none extrapolated).
    pub interpolated: u64,
}

impl JobTrace {
    /// Every job checkpoints every `every` seconds of its run (none:
    /// none does).
    pub fn checkpoint_every(&mut self, every: Option<u64>) {
        for j in &mut self.jobs {
            j.checkpoint_s = every;
        }
    }
}

/// Reads `path` and gives each job a queue (one of `queues`, seeded) and
/// its run time per GPU model.
pub fn load_trace(path: &Path, table: &Throughputs, queues: u32, seed: u64) -> Result<JobTrace> {
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("trace").to_string();
    let r = tessera_input::file::open(path, tessera_input::Limit::TRACE)?;
    let rows = read_jobs(r, &path.display().to_string())?;
    let (mut jobs, mut skipped, mut extrapolated, mut interpolated) = (Vec::with_capacity(rows.len()), 0, 0, 0);
    let mut skipped_types = BTreeMap::new();
    for (i, row) in rows.iter().enumerate() {
        match job(&name, i, row, table, queues, seed) {
            Some((j, _)) if j.seconds_on.values().all(|&s| s > tessera_trace::MAX_SPAN_S) => {
                // The run ticks telemetry through every interval of it.
                bail!(
                    "{}: job {} ({}, {} steps on {} GPUs) runs {} s on its fastest model, more than the {} days a trace may span",
                    path.display(),
                    j.name,
                    row.job_type,
                    row.total_steps,
                    row.scale_factor,
                    j.seconds_on.values().min().copied().unwrap_or(0),
                    tessera_trace::MAX_SPAN_S / 86_400
                );
            }
            Some((j, source)) => {
                jobs.push(j);
                match source {
                    RateSource::Measured => {}
                    RateSource::Interpolated { .. } => interpolated += 1,
                    RateSource::Extrapolated { .. } => extrapolated += 1,
                }
            }
            None => {
                skipped += 1;
                *skipped_types.entry(row.job_type.clone()).or_insert(0) += 1;
            }
        }
    }
    Ok(JobTrace { name, jobs, skipped, skipped_types, queues: queues.max(1), extrapolated, interpolated })
}

/// The job of row `i`, and the least measured of its run times' sources
/// (extrapolated over interpolated over measured).
fn job(trace: &str, i: usize, row: &JobRow, table: &Throughputs, queues: u32, seed: u64) -> Option<(Job, RateSource)> {
    let mut source = RateSource::Measured;
    let seconds_on: BTreeMap<String, u64> = SPEC_MODELS
        .iter()
        .filter_map(|m| {
            let (s, x) = table.seconds(row, m)?;
            source = source.max(x);
            Some((m.to_string(), s))
        })
        .collect();
    if seconds_on.is_empty() {
        return None;
    }
    let q = tessera_core::hash::draw(format!("{seed}/{trace}/{i}").bytes()) % u64::from(queues.max(1));
    let job = Job {
        name: format!("{trace}-{i}"),
        arrival_s: row.arrival_s.floor() as u64,
        gpus: row.scale_factor,
        seconds_on,
        queue: format!("q{q}"),
        checkpoint_s: None,
        limit_s: None,
    };
    Some((job, source))
}

/// A trace ready to run: read with Gavel's throughputs, its jobs spread
/// over `queues`, and its cluster: Gavel's spec for its virtual cluster
/// when `vc_cluster_specs.json` beside it lists it, else sized to it.
pub fn prepare(path: &Path, queues: u32, seed: u64) -> Result<(JobTrace, [u32; 3])> {
    if !(1..=tessera_core::quota::MAX_QUEUES as u32).contains(&queues) {
        bail!("--queues must be 1..={}, not {queues}", tessera_core::quota::MAX_QUEUES);
    }
    let trace = load_trace(path, &Throughputs::gavel(), queues, seed)?;
    if trace.jobs.is_empty() {
        bail!("{}: no job has a measured throughput on V100, P100 or K80", path.display());
    }
    let specs = path.parent().map(|d| d.join("vc_cluster_specs.json")).filter(|p| p.is_file());
    let spec = match specs {
        Some(p) => spec_cluster(&crate::sim::read_trace_text(&p)?, &trace.name)?,
        None => None,
    };
    let gpus = match spec {
        Some(g) => g,
        None => sized_cluster(&trace.jobs).with_context(|| path.display().to_string())?,
    };
    Ok((trace, gpus))
}

fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// One trace run one way.
#[derive(Debug, Clone, Serialize)]
pub struct JobRun {
    /// Trace.
    pub trace: String,
    /// How jobs were admitted: `fair-share` (Tessera: gangs and queues),
    /// `gangs` (one queue), `one-at-a-time`, `fifo`.
    pub policy: &'static str,
    /// GPUs per model (V100, P100, K80).
    pub gpus: [u32; 3],
    /// Jobs skipped for want of a measured throughput.
    pub skipped: u64,
    /// Of them, how many of each job type.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub skipped_job_types: BTreeMap<String, u64>,
    /// Jobs run with an extrapolated run time (more GPUs than Gavel
    /// measured).
    pub extrapolated: u64,
    /// Jobs run with a run time interpolated between scales Gavel
    /// measured (e.g. 3 or 6 GPUs).
    #[serde(skip_serializing_if = "is_zero")]
    pub interpolated: u64,
    /// Jobs that can never run here: more GPUs at once than the cluster
    /// has of every model they can use. They wait to the end (and hold up
    /// FIFO's line); the widest such job's GPUs are in `widest_never_fit`.
    #[serde(skip_serializing_if = "is_zero")]
    pub never_fit: u64,
    /// The most GPUs a job that can never run asks for.
    #[serde(skip_serializing_if = "is_zero")]
    pub widest_never_fit: u32,
    /// The run's figures; `jobs` counts the skipped ones too.
    #[serde(flatten)]
    pub summary: JobSummary,
    /// Wall time of the run, s.
    pub wall_s: f64,
}

/// Runs `trace` on `gpus` admitted as `admission` says, placed by
/// `policy`.
pub fn run_one(
    rt: &tessera_wasm::Runtime,
    trace: &JobTrace,
    gpus: [u32; 3],
    admission: Admission,
    policy: &str,
    seed: u64,
    fairness: Fairness,
) -> Result<(JobRun, JobReport)> {
    let (doc, fairness) = fairness.document(policy, seed)?;
    let queues = match admission {
        Admission::FairShare if !doc.queues.list.is_empty() => doc.queue_tree(),
        Admission::FairShare => equal_queues(trace.queues, gpus, fairness)?,
        _ => QueueTree::default(),
    };
    run_with(rt, trace, gpus, admission, Some(queues), &doc, seed)
}

/// [`run_one`] with these queues (none: one queue) and the policy `doc`.
fn run_with(
    rt: &tessera_wasm::Runtime,
    trace: &JobTrace,
    gpus: [u32; 3],
    admission: Admission,
    queues: Option<QueueTree>,
    doc: &tessera_policy::PolicyDocument,
    seed: u64,
) -> Result<(JobRun, JobReport)> {
    let mut placer = load::load_policy(rt, doc)?.without_timeout();
    let queues = queues.unwrap_or_default();
    let mode = admission.mode();
    let cfg = DriverConfig {
        sched: doc.scheduling,
        queues,
        telemetry: TelemetryConfig { interval_s: TELEMETRY_INTERVAL_S, ..TelemetryConfig::default() },
        seed,
        detection: doc.detection,
        ..DriverConfig::default()
    };
    let nodes = cluster(gpus);
    let (never_fit, widest_never_fit) = never_fitting(&nodes, &trace.jobs);
    let started = Instant::now();
    let report = run_jobs(nodes, &trace.jobs, &mut placer, mode, &cfg);
    let run = JobRun {
        trace: trace.name.clone(),
        policy: admission.name(),
        gpus,
        skipped: trace.skipped,
        skipped_job_types: trace.skipped_types.clone(),
        extrapolated: trace.extrapolated,
        interpolated: trace.interpolated,
        never_fit,
        widest_never_fit,
        summary: JobSummary { jobs: report.summary.jobs + trace.skipped, ..report.summary.clone() },
        wall_s: started.elapsed().as_secs_f64(),
    };
    Ok((run, report))
}

/// `bench jobs`: every trace, every mode.
#[derive(Debug, Clone, Serialize)]
pub struct JobsBench {
    /// One row per trace and policy.
    pub runs: Vec<JobRun>,
}

/// Options of `bench jobs`.
#[derive(Debug, Clone)]
pub struct JobsOptions {
    /// A directory of `*.trace` files (and, if Gavel's,
    /// `vc_cluster_specs.json`).
    pub traces: PathBuf,
    /// The placement policy.
    pub policy: String,
    /// Queues jobs are spread over (seeded).
    pub queues: u32,
    /// Seed.
    pub seed: u64,
    /// Only these traces (file stems).
    pub only: Vec<String>,
    /// Run the traces together on one cluster (the sum of theirs), each
    /// trace (a Philly virtual cluster) its own queue, guaranteed its own
    /// cluster's GPUs under `fair-share`.
    pub mix: bool,
    /// With `mix`: the pooled cluster as a share of the clusters' sum, %
    /// (each VC guaranteed that share of its own), 10..=100.
    pub capacity_pct: u32,
    /// With `mix`: every VC's queue guaranteed an equal share of the pooled
    /// cluster instead (equal weights).
    pub equal: bool,
    /// The gate of `fair-share`'s built-in queues, and reservations.
    pub fairness: Fairness,
    /// Every job checkpoints every this many seconds of its run (an
    /// eviction loses only the run since the last); unset: none does.
    pub checkpoint_s: Option<u64>,
    /// Every job declares this many times its run as its limit
    /// ([`JobTrace::declare_limits`]); unset: none declares one.
    pub declared_limit: Option<f64>,
}

/// Runs the bench.
pub fn bench(opts: &JobsOptions) -> Result<JobsBench> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(&opts.traces)
        .with_context(|| format!("--traces {}", opts.traces.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "trace"))
        .filter(|p| {
            opts.only.is_empty()
                || p.file_stem().and_then(|s| s.to_str()).is_some_and(|s| opts.only.iter().any(|o| o == s))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("--traces {}: no *.trace files (Philly/Gavel job traces)", opts.traces.display());
    }
    if opts.mix {
        return mixed(&files, opts);
    }
    let mut runs = Vec::new();
    for f in files {
        let (mut trace, gpus) = prepare(&f, opts.queues, opts.seed)?;
        trace.checkpoint_every(opts.checkpoint_s);
        trace.declare_limits(opts.declared_limit, gpus)?;
        let results = crate::replay::run_parallel(Admission::ALL.to_vec(), |rt, admission| {
            run_one(rt, &trace, gpus, admission, &opts.policy, opts.seed, opts.fairness).map(|(run, _)| run)
        })?;
        for r in results {
            runs.push(r?);
        }
    }
    Ok(JobsBench { runs })
}

/// `bench jobs --mix`: the traces' jobs together, arrivals overlaid from
/// each trace's start, each job in its trace's queue.
fn mixed(files: &[PathBuf], opts: &JobsOptions) -> Result<JobsBench> {
    if !(10..=100).contains(&opts.capacity_pct) {
        bail!("--capacity must be 10..=100 (% of the clusters' sum), not {}", opts.capacity_pct);
    }
    let scale = |g: u32| g * opts.capacity_pct / 100;
    let mut vcs = Vec::new();
    let mut all = JobTrace::default();
    for f in files {
        let (mut trace, gpus) = prepare(f, 1, opts.seed)?;
        trace.checkpoint_every(opts.checkpoint_s);
        all.jobs.extend(trace.jobs.into_iter().map(|j| Job { queue: trace.name.clone(), ..j }));
        all.skipped += trace.skipped;
        for (t, n) in trace.skipped_types {
            *all.skipped_types.entry(t).or_insert(0) += n;
        }
        all.extrapolated += trace.extrapolated;
        all.interpolated += trace.interpolated;
        vcs.push((trace.name, gpus.map(scale)));
    }
    let (doc, fairness) = opts.fairness.document(&opts.policy, opts.seed)?;
    all.name = match opts.capacity_pct {
        100 => format!("mix:{}", vcs.len()),
        pct => format!("mix:{}@{pct}%", vcs.len()),
    };
    if opts.equal {
        all.name += "=";
    }
    all.name += &fairness.suffix();
    if let Some(c) = opts.checkpoint_s {
        all.name += &format!("+ckpt@{c}s");
    }
    if let Some(f) = opts.declared_limit {
        all.name += &format!("+limit×{f}");
    }
    let mut sums = [0u64; 3];
    for (_, g) in &vcs {
        for (sum, x) in sums.iter_mut().zip(g) {
            *sum += u64::from(*x);
        }
    }
    if sums.iter().sum::<u64>() > cluster::MAX_CLUSTER_GPUS {
        bail!(
            "--mix: the traces' clusters together have {sums:?} GPUs; at most {} are supported",
            cluster::MAX_CLUSTER_GPUS
        );
    }
    let gpus = sums.map(|g| g as u32);
    all.declare_limits(opts.declared_limit, gpus)?;
    let fair = if opts.equal {
        equal_named_queues(&vcs.iter().map(|(name, _)| name.clone()).collect::<Vec<_>>(), gpus, fairness)?
    } else {
        vc_queues(&vcs, fairness)?
    };
    let results = crate::replay::run_parallel(Admission::ALL.to_vec(), |rt, admission| {
        let queues = (admission == Admission::FairShare).then(|| fair.clone());
        run_with(rt, &all, gpus, admission, queues, &doc, opts.seed).map(|(run, _)| run)
    })?;
    Ok(JobsBench { runs: results.into_iter().collect::<Result<_>>()? })
}
