//! `tessera bench throughput`: pods placed per second and per-decision
//! latency on a synthetic cluster, with a policy of Wasm scorers and with
//! the same policy compiled natively, in one run.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use tessera_core::cluster::Cluster;
use tessera_core::framework::Placer;
use tessera_core::framework::bind_choice;
use tessera_core::metrics::percentile;
use tessera_core::model::{Node, Pod};
use tessera_core::synthetic;
use tessera_policy::PolicyDocument;
use tessera_wasm::{Runtime, RuntimeConfig};

use crate::{bench, load, native, sim};

/// What to measure.
#[derive(Debug, Clone)]
pub struct ThroughputOptions {
    /// Nodes (8 GPUs each, 3 zones).
    pub nodes: u32,
    /// Pending pods of mixed shapes.
    pub pods: usize,
    /// Policy: a shipped policy's name (`throughput`, the four-scorer
    /// policy, by default) or a file.
    pub policy: String,
    /// Seed of the workload.
    pub seed: u64,
    /// Worker threads scoring each decision's plugins in parallel (1 = in
    /// turn); the native twin uses as many.
    pub workers: usize,
    /// Reuse the answers of plugins that promise it (both sides alike).
    pub reuse: bool,
}

/// The figures printed.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputResult {
    /// Nodes.
    pub nodes: u32,
    /// Pods submitted.
    pub pods: usize,
    /// Pods decided per second through Wasm (placed or failed).
    pub pods_per_sec: f64,
    /// Median decision latency (filter, score, bind), ms.
    pub p50_ms: f64,
    /// 99th percentile decision latency, ms.
    pub p99_ms: f64,
    /// Wasm time per decision over native time per decision.
    pub wasm_native_ratio: f64,
    /// Mean candidates scored per pod.
    pub nodes_scored_per_pod: f64,
    /// Pods placed (Wasm run).
    pub placed: usize,
    /// Pods decided per second natively.
    pub native_pods_per_sec: f64,
    /// Worker threads per decision.
    pub workers: usize,
    /// Decisions made on partial scores because `timeout_ms` ran out.
    pub deadline_hits: u64,
    /// Plugin errors and faults seen (counted, never fatal: a bench
    /// reports).
    pub plugin_errors: u64,
    /// Whether answers of plugins that promise it were reused.
    pub reuse: bool,
}

#[derive(Default)]
struct Run {
    latencies_ms: Vec<f64>,
    placed: usize,
    scored: u64,
    deadline_hits: u64,
    plugin_errors: u64,
    wall_s: f64,
}

/// One side of the comparison: a placer and its own copy of the cluster.
struct Side<'p> {
    placer: &'p mut dyn Placer,
    cluster: Cluster,
    candidates: Vec<u32>,
    run: Run,
}

impl<'p> Side<'p> {
    fn new(placer: &'p mut dyn Placer, nodes: Vec<Node>, pods: usize) -> Self {
        let cluster = Cluster::new(nodes);
        placer.nodes_changed(&cluster.nodes().iter().collect::<Vec<_>>());
        placer.prime();
        let run = Run { latencies_ms: Vec::with_capacity(pods), ..Run::default() };
        Self { placer, cluster, candidates: Vec::new(), run }
    }

    /// One decision (hard filter, plugins, bind, mirror update), timed.
    fn decide(&mut self, pod: &Pod) {
        let t = Instant::now();
        let mut rejected = [0u32; tessera_core::cluster::FilterReason::COUNT];
        self.cluster.feasible(pod, &mut self.candidates, &mut rejected);
        if !self.candidates.is_empty() {
            self.run.scored += self.candidates.len() as u64;
            let choice = self.placer.place(pod, &self.candidates);
            self.run.deadline_hits += u64::from(choice.deadline_hit);
            self.run.plugin_errors += u64::from(choice.plugin_errors);
            if let Ok(at) = bind_choice(&mut self.cluster, pod, &self.candidates, &choice) {
                self.placer.nodes_changed(&[self.cluster.node(at.node).expect("just bound")]);
                self.run.placed += 1;
            }
        }
        let dt = t.elapsed().as_secs_f64();
        self.run.wall_s += dt;
        self.run.latencies_ms.push(dt * 1e3);
    }
}

/// Pods each side decides before the other takes its turn: long enough
/// for a side's caches to be its own, short enough (~0.2 s) that the
/// machine's noise falls on both sides alike.
const TURN: usize = 500;

/// Runs both placers over `pods` taking turns of [`TURN`] pods; each side's
/// time is its own.
fn drive_both(wasm: &mut dyn Placer, native: &mut dyn Placer, nodes: Vec<Node>, pods: &[Pod]) -> (Run, Run) {
    let mut w = Side::new(wasm, nodes.clone(), pods.len());
    let mut n = Side::new(native, nodes, pods.len());
    for turn in pods.chunks(TURN) {
        turn.iter().for_each(|p| w.decide(p));
        turn.iter().for_each(|p| n.decide(p));
    }
    (w.run, n.run)
}

/// Runs the benchmark.
pub fn run(opts: &ThroughputOptions) -> Result<ThroughputResult> {
    if opts.nodes == 0 || opts.pods == 0 {
        bail!("--nodes and --pods must be positive");
    }
    let doc: PolicyDocument = sim::policy_document(&opts.policy, opts.seed)?;
    let nodes = bench::synthetic_cluster(opts.nodes);
    let models: Vec<String> = vec![nodes[0].gpu_model.clone()];
    let pods = synthetic::pods(opts.pods, &models, opts.seed);

    let rt = Runtime::new(RuntimeConfig::default())?;
    let audit = tessera_core::reuse::AnswerCache::AUDIT_EVERY;
    let mut wasm = load::load_policy(&rt, &doc)?.with_workers(opts.workers)?.with_reuse(opts.reuse, audit);
    let mut twin = native::NativePolicy::from_document(&doc)
        .map(|p| p.with_reuse(opts.reuse, audit))
        .and_then(|p| p.with_workers(opts.workers))
        .map_err(anyhow::Error::msg)
        .context("native twin")?;
    let (w, n) = drive_both(&mut wasm, &mut twin, nodes, &pods);
    let mut lat = w.latencies_ms.clone();
    lat.sort_by(f64::total_cmp);
    Ok(ThroughputResult {
        nodes: opts.nodes,
        pods: opts.pods,
        pods_per_sec: opts.pods as f64 / w.wall_s,
        p50_ms: percentile(&lat, 0.50),
        p99_ms: percentile(&lat, 0.99),
        wasm_native_ratio: w.wall_s / n.wall_s,
        nodes_scored_per_pod: w.scored as f64 / opts.pods as f64,
        placed: w.placed,
        native_pods_per_sec: opts.pods as f64 / n.wall_s,
        workers: opts.workers,
        deadline_hits: w.deadline_hits,
        plugin_errors: w.plugin_errors,
        reuse: opts.reuse,
    })
}

impl ThroughputResult {
    /// Human-readable table.
    pub fn to_table(&self) -> String {
        let rows = [
            ("nodes", self.nodes.to_string()),
            ("pods", self.pods.to_string()),
            ("placed", self.placed.to_string()),
            ("pods/s (Wasm)", format!("{:.0}", self.pods_per_sec)),
            ("pods/s (native)", format!("{:.0}", self.native_pods_per_sec)),
            ("p50 decision ms", format!("{:.3}", self.p50_ms)),
            ("p99 decision ms", format!("{:.3}", self.p99_ms)),
            ("Wasm / native", format!("{:.2}", self.wasm_native_ratio)),
            ("nodes scored per pod", format!("{:.0}", self.nodes_scored_per_pod)),
            ("workers", self.workers.to_string()),
            ("deadline hits", self.deadline_hits.to_string()),
            ("plugin errors", self.plugin_errors.to_string()),
            ("answers reused", if self.reuse { "where promised" } else { "never" }.to_string()),
        ];
        rows.iter().map(|(k, v)| format!("{k:<22} {v:>12}\n")).collect()
    }
}
