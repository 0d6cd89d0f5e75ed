//! The loop that serves is the loop the chaos twin proves: the same
//! cluster, workload, policy (real Wasm plugins) and seed through the
//! service's engine on its simulator backend and through the twin with no
//! faults give the same decisions (pod → node, GPUs, at the same backend
//! time, victims included) and the same rescheduling plans — with fixed
//! weights and with `adaptive:` ones.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tessera_chaos::twin;
use tessera_core::cluster::{Cluster, Placement};
use tessera_core::driver::DriverConfig;
use tessera_core::framework::Rescheduler;
use tessera_core::model::{Arrival, Node, Pod};
use tessera_core::sched::Event;
use tessera_core::telemetry::{Detection, TelemetryConfig};
use tessera_movement::sim::SimActuatorConfig;
use tessera_movement::simulated::Executing;
use tessera_policy::{Adaptive, Bounded, PolicyDocument};
use tessera_server::backend::{ArrivalStream, Backend};
use tessera_server::config::{EngineConfig, SimBackendConfig};
use tessera_server::engine::Engine;
use tessera_server::{Loader, ServeConfig, Shared, Tracing};

/// One decision as both sides can say it: backend time, pod, outcome,
/// node, GPUs, victims.
type Decision = (u64, String, &'static str, Option<String>, Vec<u8>, Vec<String>);

/// One plan's moves: pod, from, to.
type PlanMoves = Vec<(String, String, String)>;

/// The planner of the twin, recording each plan's moves by name.
struct Recording {
    inner: tessera_resched::SimPlanner,
    plans: Arc<Mutex<Vec<PlanMoves>>>,
}

impl Recording {
    fn keep(&self, cluster: &Cluster, running: &[(Pod, Placement)], moves: &[(usize, Placement)]) {
        let name = |n: u32| cluster.node(n).map(|n| n.name.clone()).unwrap_or_default();
        let plan =
            moves.iter().map(|&(i, to)| (running[i].0.name.clone(), name(running[i].1.node), name(to.node))).collect();
        self.plans.lock().unwrap().push(plan);
    }
}

impl Rescheduler for Recording {
    fn plan(&mut self, cluster: &Cluster, running: &[(Pod, Placement)], max_moves: usize) -> Vec<(usize, Placement)> {
        let moves = self.inner.plan(cluster, running, max_moves);
        self.keep(cluster, running, &moves);
        moves
    }

    fn plan_for(
        &mut self,
        cluster: &Cluster,
        running: &[(Pod, Placement)],
        max_moves: usize,
        anomalies: &[Detection],
    ) -> Vec<(usize, Placement)> {
        let moves = self.inner.plan_for(cluster, running, max_moves, anomalies);
        self.keep(cluster, running, &moves);
        moves
    }
}

const SEED: u64 = 11;
const STEPS: u64 = 240;
/// Backend seconds per step (a 1 s tick at 60× speed).
const STEP_S: u64 = 60;

fn serve_config() -> ServeConfig {
    let mut cfg = ServeConfig {
        cache_dir: Some(crate::cache_dir()),
        engine: EngineConfig {
            tick_ms: 1000,
            telemetry_interval_s: 60,
            reschedule_every_s: 900,
            max_migrations_pct: 5.0,
            ..EngineConfig::default()
        },
        sim: SimBackendConfig { seed: SEED, node_count: 40, load: 1.1, speed: 60.0, ..SimBackendConfig::default() },
        ..ServeConfig::default()
    };
    cfg.history.decisions = 1_000_000;
    cfg.history.plans = 10_000;
    cfg
}

/// The document both sides run: the shipped `default`, with budgets no
/// busy test machine can exceed (wall-clock limits are not what this test
/// is about).
fn document(adaptive: bool) -> (tessera_server::SimBackend, PolicyDocument) {
    let (backend, mut doc) = tessera::serve::backend(&serve_config()).unwrap();
    doc.timeout_ms = Bounded(60_000);
    for p in &mut doc.plugins {
        p.limits.deadline_ms = Bounded(10_000);
    }
    doc.rescheduling.time_limit_ms = 600_000;
    if adaptive {
        doc.adaptive = Some(Adaptive { weight_sets: vec![vec![3.0, 1.0], vec![1.0, 1.0], vec![1.0, 3.0]] });
    }
    (backend, doc)
}

/// The service's engine on the simulator backend, stepped `STEPS` times.
fn served(adaptive: bool) -> (Vec<Decision>, Vec<PlanMoves>, Vec<Node>) {
    let cfg = serve_config();
    let (backend, doc) = document(adaptive);
    let nodes = backend.nodes().to_vec();
    let loader = tessera::serve::CliLoader::new(backend.workload().clone(), cfg.cache_dir.clone()).unwrap();
    let policy = loader.load_policy(&doc).unwrap();
    let shared = Arc::new(Shared::new(&cfg, &doc));
    let tracing = Tracing::new(&cfg.otel).unwrap();
    let mut engine =
        Engine::new(Box::new(backend), policy, doc, cfg.engine.clone(), cfg.sim.seed, 3, tracing, shared.clone());
    for _ in 0..STEPS {
        engine.step(Duration::from_millis(cfg.engine.tick_ms));
    }
    let decisions: Vec<Decision> = {
        let log = shared.decisions.read().unwrap();
        let mut all: Vec<Decision> = log
            .newest_first()
            .map(|d| {
                (d.backend_time_s, d.pod.clone(), d.outcome.as_str(), d.node.clone(), d.gpus.clone(), d.victims.clone())
            })
            .collect();
        all.reverse();
        all
    };
    let plans: Vec<PlanMoves> = {
        let log = shared.plans.read().unwrap();
        let mut all: Vec<_> = log.newest_first().map(|p| (p.id, p.moves.clone())).collect();
        all.sort_by_key(|(id, _)| *id);
        all.into_iter().map(|(_, moves)| moves.into_iter().map(|m| (m.pod, m.from, m.to)).collect()).collect()
    };
    (decisions, plans, nodes)
}

/// The same through the twin, with no faults: the stream of pods the
/// backend would have produced by the engine's last step.
fn twinned(adaptive: bool) -> (Vec<Decision>, Vec<PlanMoves>) {
    let cfg = serve_config();
    let (backend, doc) = document(adaptive);
    let nodes = backend.nodes().to_vec();
    let workload = backend.workload().clone();
    let end = STEPS * STEP_S;
    let arrivals: Vec<Arrival> = ArrivalStream::new(&nodes, cfg.sim.load, cfg.sim.seed)
        .until(end)
        .into_iter()
        .map(|(_, pod, at, leaves)| Arrival { pod, at, leaves_at: Some(leaves) })
        .collect();
    let loader = tessera::serve::CliLoader::new(workload.clone(), cfg.cache_dir.clone()).unwrap();
    let mut policy = loader.load_policy(&doc).unwrap();
    let plans = Arc::new(Mutex::new(Vec::new()));
    let planner = Recording {
        inner: tessera_resched::SimPlanner::new(
            tessera_resched::Planner::new(doc.rescheduling.clone()),
            workload.clone(),
        ),
        plans: plans.clone(),
    };
    let mut exec =
        Executing::new(planner, doc.movement.clone(), SimActuatorConfig { seed: SEED, ..Default::default() });
    let driver = DriverConfig {
        sched: doc.scheduling,
        queues: doc.queue_tree(),
        telemetry: TelemetryConfig { interval_s: cfg.engine.telemetry_interval_s, ..TelemetryConfig::default() },
        detection: doc.detection,
        seed: SEED,
        weight_sets: doc.adaptive.as_ref().map(|a| a.weight_sets.clone()).unwrap_or_default(),
        max_moves_share: cfg.engine.max_migrations_pct / 100.0,
        reschedule_every_s: cfg.engine.reschedule_every_s,
        dead_band_permille: 0,
        start_s: Some(0),
    };
    let names: Vec<String> = arrivals.iter().map(|a| a.pod.name.clone()).collect();
    let outcome = twin::run(nodes.clone(), &workload, arrivals, &[], &mut policy, Some(&mut exec), &driver);
    assert_eq!(outcome.lost, 0);
    let log = outcome.decisions;
    let node = |id: u32| nodes[id as usize].name.clone();
    let decisions = log
        .into_iter()
        .filter(|(t, _)| *t <= end)
        .map(|(t, e)| match e {
            Event::Bound { pod, placement, .. } => (
                t,
                names[pod as usize].clone(),
                "bound",
                Some(node(placement.node)),
                placement.gpus.indices().map(|g| g as u8).collect(),
                Vec::new(),
            ),
            Event::Preempted { pod, placement, victims, .. } => (
                t,
                names[pod as usize].clone(),
                "preempted",
                Some(node(placement.node)),
                placement.gpus.indices().map(|g| g as u8).collect(),
                victims.iter().map(|v| format!("pod-{v}")).collect(),
            ),
            Event::Unschedulable { pod, .. } => {
                (t, names[pod as usize].clone(), "unschedulable", None, Vec::new(), Vec::new())
            }
        })
        .collect();
    let plans = plans.lock().unwrap().clone();
    (decisions, plans)
}

fn same_run(adaptive: bool) {
    let (served, served_plans, _) = served(adaptive);
    let (twin, twin_plans) = twinned(adaptive);
    assert!(served.len() > 500, "a run with work in it: {} decisions", served.len());
    assert!(served.iter().any(|d| d.2 == "unschedulable"), "demand above capacity: some pods wait");
    let first_difference = served.iter().zip(&twin).position(|(a, b)| a != b);
    assert_eq!(
        first_difference,
        None,
        "first different decision: served {:?} vs twin {:?}",
        first_difference.map(|i| &served[i]),
        first_difference.map(|i| &twin[i])
    );
    assert_eq!(served.len(), twin.len(), "the same number of decisions");
    // The twin plans at the intervals of the engine's last step too: it
    // may have planned once more.
    assert!(served_plans.len() >= 10, "cycles ran: {}", served_plans.len());
    assert!(served_plans.iter().any(|p| !p.is_empty()), "some plan moved pods");
    assert_eq!(served_plans[..], twin_plans[..served_plans.len()], "the same plans, in order");
}

#[test]
fn the_service_and_the_twin_make_the_same_decisions_and_plans() {
    same_run(false);
}

#[test]
fn with_adaptive_weights_too() {
    same_run(true);
    // The service honours them: other weights, other decisions.
    assert_ne!(served(true).0, served(false).0, "adaptive weights changed nothing");
}
