//! `tessera sim`: replay a workload on the embedded simulator with a policy
//! of Wasm plugins, print a summary, optionally write `run.json`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use tessera_core::metrics::TargetWorkload;
use tessera_core::model::Arrival;
use tessera_core::model::{Node, Pod, Resources, Tier};
use tessera_core::sim::{RunReport, Simulator};
use tessera_core::synthetic;
use tessera_movement::simulated::Executing;
use tessera_policy::PolicyDocument;
use tessera_resched::SimPlanner;

use tessera_trace::{NodeRow, PodRow};
use tessera_wasm::Runtime;

use crate::load;

mod summary;
pub use summary::summary;

/// Where nodes or pods come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Generated from the seed.
    Builtin,
    /// A trace file.
    File(PathBuf),
}

/// How an input is named in reports.
pub fn describe(i: &Input) -> String {
    match i {
        Input::Builtin => "builtin".to_string(),
        Input::File(p) => p.display().to_string(),
    }
}

impl std::str::FromStr for Input {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(if s == "builtin" { Input::Builtin } else { Input::File(s.into()) })
    }
}

/// Options of `tessera sim`.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Node list.
    pub nodes: Input,
    /// Nodes generated for `--nodes builtin`.
    pub node_count: usize,
    /// Pod list.
    pub pods: Input,
    /// Arrival order (row indices), for trace pod lists.
    pub order: Option<PathBuf>,
    /// Seed of the built-in workload and of the plugins' random streams.
    pub seed: u64,
    /// Policy: a built-in plugin name, `default`, or a policy file.
    pub policy: String,
    /// Replay by creation/deletion time instead of submissions.
    pub time_replay: bool,
    /// Built-in workload: submit until GPU demand reaches this × capacity.
    pub inflate: f64,
    /// Overrides the policy's tie-break.
    pub tie_break: Option<tessera_policy::TieBreakSpec>,
    /// Reschedule (submissions protocol), migrating at most this share of
    /// placed pods: make room when a pod fits nowhere, and plan globally
    /// with the policy's `rescheduling:` planner.
    pub reschedule: Option<f64>,
    /// Submissions between periodic global plans (0: only when a pod fits
    /// nowhere).
    pub reschedule_every: u64,
    /// Delays and failure rates of the simulated actuator the Movement
    /// Manager executes plans through.
    pub actuator: tessera_movement::sim::SimActuatorConfig,
    /// Also compute the offline LP bound on GPU allocation for the pods
    /// submitted (submissions protocol).
    pub bound: bool,
}

impl SimOptions {
    /// The built-in cluster of `node_count` nodes and the built-in
    /// workload, submitted until GPU demand is `inflate` × capacity,
    /// under `policy`; nothing else.
    pub fn builtin(node_count: usize, seed: u64, policy: String, inflate: f64) -> Self {
        Self {
            nodes: Input::Builtin,
            node_count,
            pods: Input::Builtin,
            order: None,
            seed,
            policy,
            time_replay: false,
            inflate,
            tie_break: None,
            reschedule: None,
            reschedule_every: 0,
            actuator: Default::default(),
            bound: false,
        }
    }

    /// The published protocol on trace files: submissions in the given
    /// arrival order up to 130% of the GPU capacity, ties broken by a seeded
    /// ranking of nodes (the published runs' node names carried random
    /// prefixes), nothing else.
    pub fn published(nodes: PathBuf, pods: PathBuf, order: PathBuf, seed: u64, policy: String) -> Self {
        Self {
            nodes: Input::File(nodes),
            node_count: 0,
            pods: Input::File(pods),
            order: Some(order),
            seed,
            policy,
            time_replay: false,
            inflate: 1.3,
            tie_break: Some(tessera_policy::TieBreakSpec::SeededRank),
            reschedule: None,
            reschedule_every: 0,
            actuator: Default::default(),
            bound: false,
        }
    }
}

/// What `run.json` holds: inputs and the report (no timings, so equal
/// inputs give byte-identical files).
#[derive(Debug, Serialize)]
pub struct RunFile {
    /// Policy name.
    pub policy: String,
    /// Seed.
    pub seed: u64,
    /// Node source.
    pub nodes: String,
    /// Pod source.
    pub pods: String,
    /// Protocol.
    pub protocol: &'static str,
    /// The report.
    pub report: RunReport,
    /// Upper bound on GPU allocation for the pods submitted, %, from the
    /// offline LP (`--bound`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_allocation_pct: Option<f64>,
    /// With rescheduling and `--bound`: upper bound on GPU allocation by
    /// any re-packing that keeps every pod the run admitted (GPU packing
    /// only; no eviction, no overcommit), %.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repacking_bound_allocation_pct: Option<f64>,
    /// With rescheduling: the same run with placement alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_only: Option<Figures>,
    /// With rescheduling: what the global plans added up to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plans: Option<tessera_resched::PlanTotals>,
    /// With rescheduling: how the Movement Manager executed them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution: Option<tessera_movement::simulated::ExecutionTotals>,
}

/// Headline figures of a run, for before/after tables.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// Pods placed.
    pub placed: u64,
    /// Pods that fit nowhere.
    pub failed: u64,
    /// Unallocated GPUs at 130% arrived demand (else at the end), %.
    pub unallocated_pct: f64,
    /// Fragmentation at the end, % of GPUs.
    pub fragmentation_pct: f64,
    /// Nodes ever hot (≥ 90% of a resource allocated), share of nodes.
    pub hotspot_ratio: f64,
    /// Migrations.
    pub migrations: u64,
}

impl Figures {
    /// The figures of `r`.
    pub fn of(r: &RunReport) -> Self {
        let nodes = r.hotspot_counts.len().max(1) as f64;
        Self {
            placed: r.placed,
            failed: r.failed,
            unallocated_pct: r.unallocated_at(130),
            fragmentation_pct: r.last.fragmentation,
            hotspot_ratio: r.hotspot_counts.iter().filter(|&&c| c > 0).count() as f64 / nodes,
            migrations: r.migrations,
        }
    }
}

/// A finished run.
pub struct SimOutcome {
    /// What goes into `run.json`.
    pub file: RunFile,
    /// Nodes simulated.
    pub nodes: usize,
    /// Wall time of the simulation itself, seconds.
    pub wall_s: f64,
}

/// A simulator node from an openb node row (`i` is its id).
pub fn node_of(i: usize, row: &NodeRow) -> Node {
    let cap = Resources { cpu_milli: row.cpu_milli, memory_mib: row.memory_mib };
    Node::new(i as u32, row.name.clone(), cap, row.gpus as usize, &row.model)
}

/// A trace pod row as a pod to schedule.
pub fn pod_of(row: &PodRow) -> Pod {
    Pod {
        name: row.name.clone(),
        namespace: "default".into(),
        workload: String::new(),
        requests: Resources { cpu_milli: row.cpu_milli, memory_mib: row.memory_mib },
        gpu_count: row.num_gpu,
        gpu_milli: row.gpu_milli,
        allowed_models: row.gpu_spec.clone(),
        priority: 0,
        tier: match row.qos.as_deref() {
            Some("BE") => Tier::Opportunistic,
            Some("Guaranteed") => Tier::Hard,
            _ => Tier::Soft,
        },
        ..Default::default()
    }
}

/// A trace file, bounded: a regular file of at most 512 MiB whose lines
/// are at most 64 KiB (a FIFO or `/dev/zero` is refused before reading).
fn open(path: &Path) -> Result<tessera_input::file::Bounded> {
    Ok(tessera_input::file::open(path, tessera_input::Limit::TRACE)?)
}

/// A whole trace file as text, bounded like every trace file: a regular
/// file of at most 512 MiB whose lines are at most 64 KiB.
pub fn read_trace_text(path: &Path) -> Result<String> {
    Ok(tessera_input::file::read_to_string(path, tessera_input::Limit::TRACE)?)
}

/// Submission order from an arrival-order file: row indices; repeats are
/// clones named `NAME-tuned-K` (K counts clones in order, as in the
/// published runs).
pub fn ordered(rows: &[PodRow], order: &[u32]) -> Vec<Pod> {
    let mut seen = vec![false; rows.len()];
    let mut clones = 0;
    order
        .iter()
        .map(|&i| {
            let mut p = pod_of(&rows[i as usize]);
            if std::mem::replace(&mut seen[i as usize], true) {
                p.name = format!("{}-tuned-{clones}", p.name);
                clones += 1;
            }
            p
        })
        .collect()
}

/// The policies shipped in `deploy/policies`, by name: `default` is the
/// recommended one, `throughput` the four-scorer policy of
/// `tessera bench throughput`, `training` the one for multi-GPU jobs
/// (GPU topology first).
pub const SHIPPED: &[(&str, &str)] = &[
    ("default", include_str!("../../../deploy/policies/default.yaml")),
    ("throughput", include_str!("../../../deploy/policies/throughput.yaml")),
    ("training", include_str!("../../../deploy/policies/training.yaml")),
    ("learned", include_str!("../../../deploy/policies/learned.yaml")),
];

/// The policy document for `--policy`: a shipped policy's name, a built-in
/// plugin's name (that plugin alone), or a file.
pub fn policy_document(policy: &str, seed: u64) -> Result<PolicyDocument> {
    let mut doc = if let Some((name, text)) = SHIPPED.iter().find(|(n, _)| *n == policy) {
        PolicyDocument::parse(text, &format!("deploy/policies/{name}.yaml"))?
    } else if tessera_plugins::by_name(policy).is_some() {
        PolicyDocument::parse(
            &format!("name: {policy}\nplugins:\n  - name: {policy}\n    source: builtin:{policy}\n"),
            "builtin",
        )?
    } else {
        let path = Path::new(policy);
        if !path.exists() {
            let known: Vec<&str> = tessera_plugins::ALL.iter().map(|a| a.name).collect();
            let shipped: Vec<&str> = SHIPPED.iter().map(|(n, _)| *n).collect();
            bail!(
                "--policy {policy}: not a file, a shipped policy ({}), or a built-in plugin ({})",
                shipped.join(", "),
                known.join(", ")
            );
        }
        let mut d = PolicyDocument::load(path)?;
        d.resolve_paths(path)?;
        d
    };
    doc.seed = seed;
    Ok(doc)
}

/// Gives each built-in plugin whose configuration takes the target workload
/// (`takes-workload` in its manifest) the trace's, when the policy gives
/// none.
pub fn inject_workload(doc: &mut PolicyDocument, workload: &TargetWorkload) {
    let shapes: Vec<serde_json::Value> = workload
        .shapes
        .iter()
        .map(|(s, p)| {
            serde_json::json!({
                "cpu_milli": s.cpu_milli,
                "gpu_count": s.gpu_count,
                "gpu_milli": s.gpu_milli,
                "models": s.allowed_models,
                "weight": p,
            })
        })
        .collect();
    for entry in &mut doc.plugins {
        let takes = matches!(&entry.source, tessera_policy::Source::Builtin(name)
            if tessera_plugins::by_name(name).is_some_and(|a| a.takes_workload));
        if !takes {
            continue;
        }
        // The trace's shapes, unless the policy names its own workload.
        if entry.config.is_null() {
            entry.config = serde_json::json!({ "workload": shapes });
        } else if let Some(obj) = entry.config.as_object_mut()
            && !obj.contains_key("workload")
        {
            obj.insert("workload".into(), serde_json::Value::Array(shapes.clone()));
        }
    }
}

/// Runs the simulation with a runtime of its own.
pub fn run(opts: &SimOptions) -> Result<SimOutcome> {
    run_with(&crate::replay::runtime(None)?, opts)
}

/// Everything a run reads, loaded and checked before anything runs.
pub struct Inputs {
    /// The cluster.
    pub nodes: Vec<Node>,
    /// The pod list as given (trace rows or the built-in workload).
    pub trace_pods: Vec<Pod>,
    /// The trace rows, when pods come from a file.
    pub rows: Option<Vec<PodRow>>,
    /// Submission order for the submissions protocol.
    pub submissions: Vec<Pod>,
    /// The target workload fragmentation is measured against.
    pub workload: TargetWorkload,
}

/// The nodes of an openb node list file.
pub fn read_node_list(path: &Path) -> Result<Vec<Node>> {
    let rows = tessera_trace::read_nodes(std::io::BufReader::new(open(path)?), &path.display().to_string())?;
    Ok(rows.iter().enumerate().map(|(i, r)| node_of(i, r)).collect())
}

/// The rows of an openb pod list file.
pub fn read_pod_rows(path: &Path) -> Result<Vec<PodRow>> {
    Ok(tessera_trace::read_pods(std::io::BufReader::new(open(path)?), &path.display().to_string())?)
}

/// Loads nodes, pods and the arrival order.
pub fn load_inputs(opts: &SimOptions) -> Result<Inputs> {
    let nodes: Vec<Node> = match &opts.nodes {
        Input::Builtin => synthetic::cluster(opts.node_count, opts.seed),
        Input::File(p) => read_node_list(p)?,
    };
    let total_gpus: u64 = nodes.iter().map(|n| n.gpus.len() as u64).sum();
    let (trace_pods, rows): (Vec<Pod>, Option<Vec<PodRow>>) = match &opts.pods {
        Input::Builtin => {
            let models = synthetic::gpu_models(&nodes);
            (synthetic::pods(8_000, &models, opts.seed), None)
        }
        Input::File(p) => {
            let rows = read_pod_rows(p)?;
            (rows.iter().map(pod_of).collect(), Some(rows))
        }
    };
    let submissions: Vec<Pod> = match (&opts.order, &rows) {
        (Some(order), Some(rows)) => {
            let text = read_trace_text(order)?;
            ordered(rows, &tessera_trace::read_order(&text, &order.display().to_string(), rows.len())?)
        }
        (Some(_), None) => bail!("--order needs a pod list file (--pods FILE)"),
        (None, Some(_)) => trace_pods.clone(),
        (None, None) => synthetic::inflate(&trace_pods, total_gpus, opts.inflate, opts.seed),
    };
    let workload = TargetWorkload::from_pods(&trace_pods, 0.95);
    Ok(Inputs { nodes, trace_pods, rows, submissions, workload })
}

/// Arrivals with creation and deletion times from trace rows (rows with no
/// creation time are left out).
pub fn trace_arrivals(rows: &[PodRow]) -> Vec<Arrival> {
    rows.iter()
        .filter_map(|r| {
            Some(Arrival { pod: pod_of(r), at: r.creation_time?, leaves_at: r.deletion_time.filter(|&d| d > 0) })
        })
        .collect()
}

/// Runs the simulation on `rt` (share one, with a cache, across many runs).
pub fn run_with(rt: &Runtime, opts: &SimOptions) -> Result<SimOutcome> {
    // Load every input before simulating anything.
    let Inputs { nodes, rows, submissions, workload, .. } = load_inputs(opts)?;
    let mut doc = policy_document(&opts.policy, opts.seed)?;
    if let Some(t) = opts.tie_break {
        doc.tie_break = t;
    }
    let solver = doc.rescheduling.solver;
    let bound = if opts.bound && !opts.time_replay {
        Some(
            tessera_resched::gpu_allocation_bound(&nodes, &submissions, solver)
                .context("offline bound")?
                .allocation_pct,
        )
    } else {
        None
    };
    inject_workload(&mut doc, &workload);
    // The wall-clock decision budget is for live scheduling; a simulation
    // must give the same result on any machine.
    let mut policy = load::load_policy(rt, &doc)?.without_timeout();

    let started = Instant::now();
    let n_nodes = nodes.len();
    let (mut placement_only, mut plans, mut execution, mut repacking) = (None, None, None, None);
    let report = if opts.time_replay {
        let rows = rows.as_ref().context("time replay needs a pod list with creation times (--pods FILE)")?;
        let arrivals = trace_arrivals(rows);
        Simulator::new(nodes, workload, &mut policy).run_time_replay(&arrivals)
    } else {
        match opts.reschedule {
            Some(cap) => {
                let baseline =
                    Simulator::new(nodes.clone(), workload.clone(), &mut policy).run_submissions(&submissions);
                placement_only = Some(Figures::of(&baseline));
                // A fresh policy: plugins keep state across decisions.
                let mut policy = load::load_policy(rt, &doc)?.without_timeout();
                let planner =
                    SimPlanner::new(tessera_resched::Planner::new(doc.rescheduling.clone()), workload.clone());
                let mut exec = Executing::new(planner, doc.movement.clone(), opts.actuator);
                let (r, cluster, running) = Simulator::new(nodes, workload, &mut policy)
                    .with_rescheduling(cap)
                    .with_planner(&mut exec, opts.reschedule_every)
                    .run_submissions_keep(&submissions);
                plans = Some(exec.planner().totals().clone());
                execution = Some(exec.totals().clone());
                if opts.bound {
                    let waiting: Vec<Pod> = r.failed_pods.iter().map(|&i| submissions[i].clone()).collect();
                    repacking = Some(
                        tessera_resched::bound::repacking_bound(&cluster, &running, &waiting, solver)
                            .context("re-packing bound")?
                            .allocation_pct,
                    );
                }
                r
            }
            None => Simulator::new(nodes, workload, &mut policy).run_submissions(&submissions),
        }
    };
    let wall_s = started.elapsed().as_secs_f64();
    Ok(SimOutcome {
        file: RunFile {
            policy: doc.name.clone(),
            seed: opts.seed,
            nodes: describe(&opts.nodes),
            pods: describe(&opts.pods),
            protocol: if opts.time_replay { "time-replay" } else { "submissions" },
            report,
            bound_allocation_pct: bound,
            repacking_bound_allocation_pct: repacking,
            placement_only,
            plans,
            execution,
        },
        nodes: n_nodes,
        wall_s,
    })
}

#[cfg(test)]
mod tests {
    use tessera_core::metrics::TargetWorkload;
    use tessera_core::model::Pod;

    #[test]
    fn the_target_workload_goes_to_the_built_in_plugins_whose_manifest_takes_it_unless_the_policy_gives_one() {
        let takers: Vec<&str> = tessera_plugins::ALL.iter().filter(|a| a.takes_workload).map(|a| a.name).collect();
        assert_eq!(takers, ["fgd", "learned"], "from plugins/*/Cargo.toml");
        let yaml = "name: p\nplugins:\n  - name: a\n    source: builtin:fgd\n  - name: b\n    source: builtin:binpack\n  - name: c\n    source: builtin:fgd\n    config: { workload: [] }\n";
        let mut doc = tessera_policy::PolicyDocument::parse(yaml, "test").unwrap();
        let w = TargetWorkload::from_pods(&[Pod { gpu_count: 1, gpu_milli: 500, ..Pod::default() }], 0.95);
        super::inject_workload(&mut doc, &w);
        assert_eq!(doc.plugins[0].config["workload"].as_array().map(Vec::len), Some(1));
        assert!(doc.plugins[1].config.is_null(), "binpack takes none");
        assert_eq!(doc.plugins[2].config["workload"], serde_json::json!([]), "the policy's own stays");
    }
}
