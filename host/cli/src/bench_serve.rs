//! `tessera bench serve`: decisions per second through the service's
//! engine (`tessera serve`'s loop on its simulator backend, with decision
//! records for the API, metrics and spans all on) beside the bare loop
//! (the same driver through the chaos twin's world with no faults: the
//! same cluster, arrivals, policy and seed, so the same decisions — as
//! `tests/all/serve/one_loop.rs` proves), in one run.
//!
//! The engine is stepped back to back (no waiting for its tick), so the
//! figure is what its work costs, not how its clock is paced. Spans are
//! made for every decision; with no OTLP endpoint they are not exported
//! (exporting is a batch on another thread).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde::Serialize;
use tessera_core::framework::{Choice, Placer};
use tessera_core::metrics::percentile;
use tessera_core::model::{Arrival, Node, NodeId, Pod};
use tessera_server::backend::{ArrivalStream, Backend};
use tessera_server::config::{EngineConfig, SimBackendConfig};
use tessera_server::engine::Engine;
use tessera_server::{Loader, ServeConfig, Shared, Tracing};

/// What to measure.
#[derive(Debug, Clone)]
pub struct ServeBenchOptions {
    /// Nodes of the simulator backend.
    pub nodes: u32,
    /// Offered load (the backend's `load`: 1.0 fills the cluster).
    pub load: f64,
    /// Backend seconds run.
    pub seconds: u64,
    /// A shipped policy's name or a policy file.
    pub policy: String,
    /// Seed of the cluster, the arrivals and the policy.
    pub seed: u64,
}

/// One way of running the loop.
#[derive(Debug, Clone, Serialize)]
pub struct ServeRun {
    /// What ran: `bare loop`, `service, unsampled`, `service, sampled`.
    pub run: String,
    /// Decisions made (placed, preempted or left waiting).
    pub decisions: u64,
    /// Wall seconds of the whole run.
    pub wall_s: f64,
    /// Decisions per wall second.
    pub decisions_per_sec: f64,
    /// Decision latency p50, ms (the placer's call in the bare loop; the
    /// service's recorded decision: filter, scoring, select, bind).
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// This run's decisions per second over the bare loop's.
    pub of_bare: f64,
}

/// The figures printed.
#[derive(Debug, Clone, Serialize)]
pub struct ServeBenchResult {
    /// Nodes.
    pub nodes: u32,
    /// Backend seconds run.
    pub seconds: u64,
    /// Policy.
    pub policy: String,
    /// Each run.
    pub runs: Vec<ServeRun>,
}

/// Times each placement call of the placer it wraps.
struct Timed<'p, P: Placer> {
    inner: &'p mut P,
    latencies_ms: Vec<f64>,
}

impl<P: Placer> Placer for Timed<'_, P> {
    fn nodes_changed(&mut self, nodes: &[&Node]) {
        self.inner.nodes_changed(nodes);
    }
    fn prime(&mut self) {
        self.inner.prime();
    }
    fn set_weights(&mut self, weights: &[f64]) {
        self.inner.set_weights(weights);
    }
    fn zone_carbon(&mut self, zone: &str, g_per_kwh: u32) {
        self.inner.zone_carbon(zone, g_per_kwh);
    }
    fn detect(&mut self, frame: &tessera_core::telemetry::DetectionFrame) -> Vec<tessera_core::telemetry::Detection> {
        self.inner.detect(frame)
    }
    fn place(&mut self, pod: &Pod, candidates: &[NodeId]) -> Choice {
        let t = Instant::now();
        let c = self.inner.place(pod, candidates);
        self.latencies_ms.push(t.elapsed().as_secs_f64() * 1e3);
        c
    }
}

/// The service's settings for the bench: the simulator backend, a 1 s
/// tick at 60× speed, every decision kept for the API.
fn serve_config(opts: &ServeBenchOptions, sampling: f64) -> ServeConfig {
    let mut cfg = ServeConfig {
        policy: opts.policy.clone(),
        engine: EngineConfig { tick_ms: 1000, ..EngineConfig::default() },
        sim: SimBackendConfig {
            seed: opts.seed,
            node_count: opts.nodes as usize,
            load: opts.load,
            speed: 60.0,
            ..SimBackendConfig::default()
        },
        ..ServeConfig::default()
    };
    cfg.otel.sampling_ratio = Some(sampling);
    cfg.history.decisions = 10_000_000;
    cfg
}

/// The service's engine, stepped until the backend has run `seconds`.
fn served(opts: &ServeBenchOptions, sampling: f64, label: &str) -> Result<ServeRun> {
    let cfg = serve_config(opts, sampling);
    let (backend, doc) = crate::serve::backend(&cfg)?;
    let loader = crate::serve::CliLoader::new(backend.workload().clone(), None)?;
    let policy = loader.load_policy(&doc)?;
    let shared = Arc::new(Shared::new(&cfg, &doc));
    let tracing = Tracing::new(&cfg.otel)?;
    let tick = Duration::from_millis(cfg.engine.tick_ms);
    let steps = (opts.seconds as f64 / (tick.as_secs_f64() * cfg.sim.speed)).ceil() as u64;
    let mut engine = Engine::new(
        Box::new(backend),
        policy,
        doc,
        cfg.engine.clone(),
        cfg.sim.seed,
        cfg.otel.top_k,
        tracing,
        shared.clone(),
    );
    let started = Instant::now();
    for _ in 0..steps {
        engine.step(tick);
    }
    let wall_s = started.elapsed().as_secs_f64();
    let mut lat: Vec<f64> = shared
        .decisions
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .newest_first()
        .map(|d| d.latency_us as f64 / 1e3)
        .collect();
    Ok(run(label, lat.len() as u64, wall_s, &mut lat))
}

/// The same cluster, arrivals, policy and seed through the twin's world.
fn bare(opts: &ServeBenchOptions) -> Result<ServeRun> {
    let cfg = serve_config(opts, 0.0);
    let (backend, doc) = crate::serve::backend(&cfg)?;
    let nodes = backend.nodes().to_vec();
    let workload = backend.workload().clone();
    let arrivals: Vec<Arrival> = ArrivalStream::new(&nodes, cfg.sim.load, cfg.sim.seed)
        .until(opts.seconds)
        .into_iter()
        // A pod still running at the horizon stays: the twin runs to its
        // last event, and the service is stopped at the horizon.
        .map(|(_, pod, at, leaves)| Arrival { pod, at, leaves_at: (leaves <= opts.seconds).then_some(leaves) })
        .collect();
    let loader = crate::serve::CliLoader::new(workload.clone(), None)?;
    let mut policy = loader.load_policy(&doc)?;
    let planner =
        tessera_resched::SimPlanner::new(tessera_resched::Planner::new(doc.rescheduling.clone()), workload.clone());
    let mut exec = tessera_movement::simulated::Executing::new(
        planner,
        doc.movement.clone(),
        tessera_movement::sim::SimActuatorConfig { seed: opts.seed, ..Default::default() },
    );
    let driver = tessera_server::engine::driver_config(&cfg.engine, &doc, opts.seed);
    let mut timed = Timed { inner: &mut policy, latencies_ms: Vec::new() };
    let started = Instant::now();
    let outcome = tessera_chaos::twin::run(nodes, &workload, arrivals, &[], &mut timed, Some(&mut exec), &driver);
    let wall_s = started.elapsed().as_secs_f64();
    let decisions = outcome.decisions.iter().filter(|(t, _)| *t <= opts.seconds).count() as u64;
    let mut lat = timed.latencies_ms;
    Ok(run("bare loop (twin, no faults)", decisions, wall_s, &mut lat))
}

fn run(label: &str, decisions: u64, wall_s: f64, lat: &mut [f64]) -> ServeRun {
    lat.sort_by(f64::total_cmp);
    ServeRun {
        run: label.into(),
        decisions,
        wall_s,
        decisions_per_sec: decisions as f64 / wall_s.max(1e-9),
        p50_ms: percentile(lat, 0.50),
        p99_ms: percentile(lat, 0.99),
        of_bare: 0.0,
    }
}

/// Runs the bench: the bare loop, then the service unsampled and sampled.
pub fn run_bench(opts: &ServeBenchOptions) -> Result<ServeBenchResult> {
    if opts.nodes == 0 || opts.seconds == 0 || !opts.load.is_finite() || opts.load <= 0.0 {
        bail!("--nodes, --seconds and --load must be positive");
    }
    let mut runs = vec![
        bare(opts)?,
        served(opts, 0.0, "service: records, metrics, spans unsampled")?,
        served(opts, 1.0, "service: records, metrics, every span sampled")?,
    ];
    let base = runs[0].decisions_per_sec;
    for r in &mut runs {
        r.of_bare = r.decisions_per_sec / base;
    }
    Ok(ServeBenchResult { nodes: opts.nodes, seconds: opts.seconds, policy: opts.policy.clone(), runs })
}

impl ServeBenchResult {
    /// Human-readable table.
    pub fn to_table(&self) -> String {
        let mut s = format!(
            "{} nodes, {} backend seconds, policy {}\n{:<48} {:>9} {:>8} {:>12} {:>8} {:>8} {:>8}\n",
            self.nodes,
            self.seconds,
            self.policy,
            "run",
            "decisions",
            "wall s",
            "decisions/s",
            "p50 ms",
            "p99 ms",
            "of bare"
        );
        for r in &self.runs {
            s += &format!(
                "{:<48} {:>9} {:>8.2} {:>12.0} {:>8.3} {:>8.3} {:>8.2}\n",
                r.run, r.decisions, r.wall_s, r.decisions_per_sec, r.p50_ms, r.p99_ms, r.of_bare
            );
        }
        s
    }
}
