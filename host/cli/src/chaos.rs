//! `tessera chaos verify`: a campaign's inputs loaded and checked, every
//! scenario × seed run for the candidate and the baseline on the simulated
//! twin (in parallel on the available cores, each run on its own loaded
//! policy), and the runs judged by the campaign's gates.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use tessera_chaos::campaign::{ClusterSpec, WorkloadSpec};
use tessera_chaos::fault::Start;
use tessera_chaos::twin;
use tessera_chaos::verdict::{self, Report, Run, Side};
use tessera_chaos::{Campaign, ResolvedFault};
use tessera_core::driver::DriverConfig;
use tessera_core::metrics::TargetWorkload;
use tessera_core::model::Arrival;
use tessera_core::model::{Node, Pod};
use tessera_core::synthetic;
use tessera_core::telemetry::TelemetryConfig;
use tessera_policy::PolicyDocument;
use tessera_wasm::Runtime;

use crate::sim::{pod_of, trace_arrivals};

/// Seed of the built-in cluster: the twin is one cluster; seeds vary the
/// workload, the faults' targets and the telemetry.
const CLUSTER_SEED: u64 = 42;

/// Everything the runs read, loaded once before any runs.
struct Inputs {
    nodes: Vec<Node>,
    /// Pods of a snapshot, arriving first in every run.
    live: Vec<Arrival>,
    /// Per seed (one entry when the workload is a trace).
    arrivals: Vec<(u64, Vec<Arrival>)>,
    workload: TargetWorkload,
    candidate: PolicyDocument,
    baseline: PolicyDocument,
}

/// What a caller replaces in a campaign: `tessera serve` proves its
/// rollout's candidate against its active policy on its live cluster.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// Instead of the campaign's candidate.
    pub candidate: Option<PolicyDocument>,
    /// Instead of the campaign's baseline.
    pub baseline: Option<PolicyDocument>,
    /// Instead of the campaign's cluster.
    pub snapshot: Option<tessera_core::snapshot::Snapshot>,
}

fn load_inputs(c: &Campaign, o: &Overrides) -> Result<Inputs> {
    let mut live = Vec::new();
    let mut from_snapshot = |snap: &tessera_core::snapshot::Snapshot| {
        live = snap.arrivals(0);
        snap.empty_nodes()
    };
    let nodes: Vec<Node> = match (&o.snapshot, &c.cluster) {
        (Some(snap), _) => {
            snap.validate().context("the live cluster's snapshot")?;
            from_snapshot(snap)
        }
        (None, ClusterSpec::Builtin { nodes }) => synthetic::cluster(*nodes, CLUSTER_SEED),
        (None, ClusterSpec::Snapshot(p)) => {
            let p = c.resolve(p);
            let text = tessera_input::file::read_to_string(&p, tessera_input::Limit::SNAPSHOT)?;
            let snap: tessera_core::snapshot::Snapshot = serde_json::from_str(&text)
                .with_context(|| format!("{}: not a snapshot (GET /v1/snapshot)", p.display()))?;
            snap.validate().with_context(|| format!("{}", p.display()))?;
            from_snapshot(&snap)
        }
        (None, ClusterSpec::Trace(p)) => crate::sim::read_node_list(&c.resolve(p))?,
    };
    let models = synthetic::gpu_models(&nodes);
    let total_gpus: u64 = nodes.iter().map(|n| n.gpus.len() as u64).sum();
    let (arrivals, shapes): (Vec<(u64, Vec<Arrival>)>, Vec<Pod>) = match &c.workload {
        WorkloadSpec::Builtin { pods, load } => {
            let shapes = synthetic::pods(*pods, &models, CLUSTER_SEED);
            let per_seed = c
                .seeds
                .iter()
                .map(|&s| (s, synthetic::arrivals(&synthetic::pods(*pods, &models, s), total_gpus, *load, s)))
                .collect();
            (per_seed, shapes)
        }
        WorkloadSpec::Trace { pods, load } => {
            let p = c.resolve(pods);
            let rows = crate::sim::read_pod_rows(&p)?;
            let shapes: Vec<Pod> = rows.iter().map(pod_of).collect();
            let per_seed = match load {
                Some(load) => {
                    c.seeds.iter().map(|&s| (s, synthetic::arrivals(&shapes, total_gpus, *load, s))).collect()
                }
                None => {
                    let arr = trace_arrivals(&rows);
                    anyhow::ensure!(!arr.is_empty(), "{}: no pod has a creation time to replay", p.display());
                    c.seeds.iter().map(|&s| (s, arr.clone())).collect()
                }
            };
            (per_seed, shapes)
        }
    };
    let workload = TargetWorkload::from_pods(&shapes, 0.95);
    let doc = |name: &str, given: &Option<PolicyDocument>| -> Result<PolicyDocument> {
        let mut d = match given {
            Some(d) => d.clone(),
            None => crate::sim::policy_document(&c.policy_ref(name), CLUSTER_SEED)
                .with_context(|| format!("campaign {}: policy {name}", c.name))?,
        };
        crate::sim::inject_workload(&mut d, &workload);
        Ok(d)
    };
    let (candidate, baseline) = (doc(&c.candidate, &o.candidate)?, doc(&c.baseline, &o.baseline)?);
    Ok(Inputs { nodes, live, arrivals, candidate, baseline, workload })
}

/// A scenario's faults placed in a run: windows (fixed or predicted) and
/// targets, and the forecasts behind predictive starts.
fn place_faults(
    scenario: &tessera_chaos::campaign::Scenario,
    nodes: &[Node],
    arrivals: &[Arrival],
    interval_s: u64,
    seed: u64,
) -> Result<(Vec<ResolvedFault>, Vec<tessera_chaos::forecast::Forecast>)> {
    let t0 = arrivals.iter().map(|a| a.at).min().unwrap_or(0);
    let mut faults = Vec::with_capacity(scenario.faults.len());
    let mut forecasts = Vec::new();
    for (i, f) in scenario.faults.iter().enumerate() {
        let (r, fc) = tessera_chaos::forecast::place(
            f,
            nodes,
            arrivals,
            t0,
            interval_s,
            seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        )
        .with_context(|| format!("scenario {}: {}", scenario.name, f.kind.name()))?;
        faults.push(r);
        forecasts.extend(fc);
    }
    Ok((faults, forecasts))
}

struct Job {
    scenario: usize,
    seed: u64,
    side: Side,
}

fn run_one(rt: &Runtime, c: &Campaign, inputs: &Inputs, job: &Job) -> Result<Run> {
    let started = Instant::now();
    let scenario = &c.scenarios[job.scenario];
    let workload = &inputs.arrivals.iter().find(|(s, _)| *s == job.seed).expect("one per seed").1;
    let t0 = workload.iter().map(|a| a.at).min().unwrap_or(0);
    let arrivals: Vec<Arrival> =
        inputs.live.iter().map(|a| Arrival { at: t0, ..a.clone() }).chain(workload.iter().cloned()).collect();
    let (faults, forecasts) =
        place_faults(&c.scenarios[job.scenario], &inputs.nodes, &arrivals, c.telemetry_interval_s, job.seed)?;
    let doc = match job.side {
        Side::Candidate => &inputs.candidate,
        Side::Baseline => &inputs.baseline,
    };
    // Deterministic: no per-decision deadline in the twin (slow plugins are
    // a fault of their own).
    let mut policy = crate::load::load_policy(rt, doc)?.without_timeout();
    let cfg = DriverConfig {
        sched: doc.scheduling,
        queues: doc.queue_tree(),
        telemetry: TelemetryConfig { interval_s: c.telemetry_interval_s, ..TelemetryConfig::default() },
        detection: doc.detection,
        seed: job.seed,
        weight_sets: doc.adaptive.as_ref().map(|a| a.weight_sets.clone()).unwrap_or_default(),
        max_moves_share: c.max_migrations_pct / 100.0,
        dead_band_permille: twin::DEAD_BAND_PERMILLE,
        ..DriverConfig::default()
    };
    let mut exec = (c.max_migrations_pct > 0.0).then(|| {
        let planner = tessera_resched::SimPlanner::new(
            tessera_resched::Planner::new(doc.rescheduling.clone()),
            inputs.workload.clone(),
        );
        tessera_movement::simulated::Executing::new(
            planner,
            doc.movement.clone(),
            tessera_movement::sim::SimActuatorConfig { seed: job.seed, ..Default::default() },
        )
    });
    let outcome = twin::run(
        inputs.nodes.clone(),
        &inputs.workload,
        arrivals,
        &faults,
        &mut policy,
        exec.as_mut().map(|e| e as &mut dyn tessera_chaos::twin::TwinRescheduler),
        &cfg,
    );
    Ok(Run {
        scenario: scenario.name.clone(),
        seed: job.seed,
        side: job.side,
        outcome,
        forecasts,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// A slice of a campaign's runs: shard `index` of `count` (each
/// scenario × seed pair, with both policies, goes to one shard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 0-based.
    pub index: usize,
    /// Shards in all.
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (i, n) = s.split_once('/').ok_or_else(|| format!("shard {s:?} is not INDEX/COUNT"))?;
        let (index, count): (usize, usize) = (
            i.parse().map_err(|_| format!("shard index {i:?}"))?,
            n.parse().map_err(|_| format!("shard count {n:?}"))?,
        );
        if count == 0 || index >= count {
            return Err(format!("shard {index}/{count}: the index must be below the count"));
        }
        Ok(Self { index, count })
    }
}

/// One shard's runs, as `tessera chaos run` writes them.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct ShardRuns {
    /// Campaign name.
    pub campaign: String,
    /// `INDEX/COUNT`.
    pub shard: String,
    /// The runs.
    pub runs: Vec<Run>,
    /// Wall time, seconds.
    pub wall_s: f64,
}

/// Runs `campaign` (a file), or the slice `shard` of it.
pub fn run(path: &Path, shard: Option<Shard>) -> Result<(Campaign, Vec<Run>)> {
    run_with(path, shard, &Overrides::default())
}

/// Runs `campaign` (a file), or the slice `shard` of it, with `o`
/// replacing its policies or cluster.
pub fn run_with(path: &Path, shard: Option<Shard>, o: &Overrides) -> Result<(Campaign, Vec<Run>)> {
    let mut c = Campaign::load(path)?;
    let inputs = load_inputs(&c, o)?;
    if let Some(d) = &o.candidate {
        c.candidate.clone_from(&d.name);
    }
    if let Some(d) = &o.baseline {
        c.baseline.clone_from(&d.name);
    }
    // Every fault must land on this cluster before anything runs.
    for s in &c.scenarios {
        for f in &s.faults {
            let probe = tessera_chaos::FaultSpec { start: Start::At(0), ..f.clone() };
            probe.resolve(&inputs.nodes, 0, 0).with_context(|| format!("{}: scenario {}", path.display(), s.name))?;
        }
    }
    let mut jobs = Vec::with_capacity(c.runs());
    let mut pair = 0;
    for scenario in 0..c.scenarios.len() {
        for &seed in &c.seeds {
            if shard.is_none_or(|sh| pair % sh.count == sh.index) {
                for side in [Side::Candidate, Side::Baseline] {
                    jobs.push(Job { scenario, seed, side });
                }
            }
            pair += 1;
        }
    }
    let runs = crate::replay::run_parallel(jobs, |rt, job| run_one(rt, &c, &inputs, &job))?
        .into_iter()
        .collect::<Result<Vec<Run>>>()?;
    Ok((c, runs))
}

/// Runs `campaign` (a file) and judges it.
pub fn verify(path: &Path) -> Result<Report> {
    verify_with(path, &Overrides::default())
}

/// Runs `campaign` (a file) with `o` replacing its policies or cluster,
/// and judges it.
pub fn verify_with(path: &Path, o: &Overrides) -> Result<Report> {
    let started = Instant::now();
    let (c, runs) = run_with(path, None, o)?;
    Ok(verdict::judge(&c, runs, started.elapsed().as_secs_f64()))
}

/// Judges the shards' runs of `campaign` together: every scenario × seed ×
/// policy exactly once, or an error naming what is missing or repeated.
pub fn merge(path: &Path, shards: &[std::path::PathBuf]) -> Result<Report> {
    let c = Campaign::load(path)?;
    let mut runs: Vec<Run> = Vec::new();
    let mut wall_s: f64 = 0.0;
    for f in shards {
        let text = tessera_input::file::read_to_string(f, tessera_input::Limit::SNAPSHOT)?;
        let s: ShardRuns =
            serde_json::from_str(&text).with_context(|| format!("{}: not a shard's runs", f.display()))?;
        anyhow::ensure!(s.campaign == c.name, "{}: runs of campaign {}, not {}", f.display(), s.campaign, c.name);
        wall_s = wall_s.max(s.wall_s);
        runs.extend(s.runs);
    }
    for sc in &c.scenarios {
        for &seed in &c.seeds {
            for side in [Side::Candidate, Side::Baseline] {
                let n = runs.iter().filter(|r| r.scenario == sc.name && r.seed == seed && r.side == side).count();
                anyhow::ensure!(
                    n == 1,
                    "scenario {} seed {seed} {side:?}: {n} runs in the shards, expected 1",
                    sc.name
                );
            }
        }
    }
    anyhow::ensure!(runs.len() == c.runs(), "the shards hold {} runs; the campaign has {}", runs.len(), c.runs());
    Ok(verdict::judge(&c, runs, wall_s))
}

/// `tessera chaos export`: the campaign's faults as Chaos Mesh manifests
/// (targets resolved on its cluster with its first seed).
pub fn export(path: &Path, opts: &tessera_chaos::export::ExportOptions) -> Result<tessera_chaos::export::Export> {
    let c = Campaign::load(path)?;
    let inputs = load_inputs(&c, &Overrides::default())?;
    let seed = c.seeds[0];
    let arrivals = &inputs.arrivals.iter().find(|(s, _)| *s == seed).expect("one per seed").1;
    let resolved = c
        .scenarios
        .iter()
        .map(|s| {
            place_faults(s, &inputs.nodes, arrivals, c.telemetry_interval_s, seed)
                .map(|(f, _)| f)
                .with_context(|| format!("{}: scenario {}", path.display(), s.name))
        })
        .collect::<Result<Vec<_>>>()?;
    let names: Vec<String> = inputs.nodes.iter().map(|n| n.name.clone()).collect();
    Ok(tessera_chaos::export::export(&c, &resolved, &names, opts))
}
