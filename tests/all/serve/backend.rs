//! The loop on a backend other than the simulator, through the `Backend`
//! trait the Kubernetes backend will implement: a scripted cluster submits
//! and deletes pods, records every bind and eviction the loop asks for, and
//! refuses one bind once. The loop follows the script, carries out each
//! decision once, counts the refusal, queues that pod again after a
//! backoff and binds it then.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tessera_core::cluster::Placement;
use tessera_core::metrics::TargetWorkload;
use tessera_core::model::{Node, Pod, Resources};
use tessera_core::sched::PodId;
use tessera_core::telemetry::NodeSample;
use tessera_server::backend::{Backend, BackendError, BackendOp, ClusterEvent, LiveBackend, Moves, Refusal};
use tessera_server::record::PlanState;
use tessera_server::{ServeConfig, Server};

use super::TOKEN;

/// What the loop asked of the backend.
#[derive(Debug, Default)]
struct Calls {
    binds: Vec<(PodId, Placement)>,
    evictions: Vec<PodId>,
}

struct Scripted {
    nodes: Vec<Node>,
    workload: TargetWorkload,
    /// (time, event), in order.
    script: Vec<(u64, ClusterEvent)>,
    now: u64,
    refuse_bind: PodId,
    calls: Arc<Mutex<Calls>>,
}

fn pod(name: &str, gpus: u32) -> Pod {
    Pod {
        name: name.into(),
        workload: "w".into(),
        requests: Resources { cpu_milli: 1000, memory_mib: 1024 },
        gpu_count: gpus,
        gpu_milli: 1000,
        ..Pod::default()
    }
}

/// The same moderate load on every node, always.
fn steady(node: &Node) -> NodeSample {
    NodeSample {
        cpu_util_permille: 300,
        memory_util_permille: 300,
        gpu_util_permille: vec![500; node.gpus.len()],
        gpu_memory_used_mib: vec![0; node.gpus.len()],
    }
}

impl Backend for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    fn workload(&self) -> &TargetWorkload {
        &self.workload
    }

    fn advance(&mut self, _tick: Duration) -> u64 {
        self.now += 60;
        self.now
    }

    fn events(&mut self, now: u64) -> Vec<(u64, ClusterEvent)> {
        let due = self.script.iter().take_while(|(t, _)| *t <= now).count();
        self.script.drain(..due).collect()
    }

    fn sample(&mut self, node: &Node, _pods: &[(&Pod, Placement)], _t: u64) -> NodeSample {
        steady(node)
    }

    fn zone_carbon(&mut self, _zone: &str, _t: u64) -> u32 {
        200
    }

    fn bind(&mut self, id: PodId, at: Placement) -> Result<(), BackendError> {
        let mut calls = self.calls.lock().unwrap();
        calls.binds.push((id, at));
        if id == self.refuse_bind && calls.binds.iter().filter(|(p, _)| *p == id).count() == 1 {
            return Err(BackendError::new(BackendOp::Bind, id, "503: the API server is unavailable"));
        }
        Ok(())
    }

    fn evict(&mut self, id: PodId) -> Result<(), BackendError> {
        self.calls.lock().unwrap().evictions.push(id);
        Ok(())
    }

    fn moves(&self) -> Moves {
        Moves::Simulated(tessera_movement::sim::SimActuatorConfig::default())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_runs_on_any_backend_and_has_it_carry_out_each_decision_once() {
    let nodes: Vec<Node> = (0..4)
        .map(|i| {
            let mut n =
                Node::new(i, format!("node-{i}"), Resources { cpu_milli: 32_000, memory_mib: 131_072 }, 4, "V100M32");
            n.zone = format!("zone-{}", i % 2);
            n
        })
        .collect();
    let script = vec![
        (0, ClusterEvent::Submitted { id: 10, pod: pod("a", 1) }),
        (0, ClusterEvent::Submitted { id: 11, pod: pod("b", 2) }),
        (60, ClusterEvent::Submitted { id: 12, pod: pod("c", 4) }),
        (120, ClusterEvent::Deleted { id: 11 }),
        (180, ClusterEvent::Submitted { id: 13, pod: pod("too-big", 8) }),
        (240, ClusterEvent::Submitted { id: 14, pod: pod("d", 1) }),
    ];
    let workload = TargetWorkload::from_pods(&[pod("a", 1), pod("b", 2)], 0.95);
    let calls = Arc::new(Mutex::new(Calls::default()));
    let backend = Scripted { nodes, workload: workload.clone(), script, now: 0, refuse_bind: 14, calls: calls.clone() };

    let mut cfg =
        ServeConfig { api_token: Some(TOKEN.into()), cache_dir: Some(crate::cache_dir()), ..ServeConfig::default() };
    cfg.engine.tick_ms = 20;
    let mut doc = tessera::sim::policy_document("default", 1).unwrap();
    tessera::sim::inject_workload(&mut doc, &workload);
    let loader = Arc::new(tessera::serve::CliLoader::new(workload, Some(crate::cache_dir())).unwrap());
    let mut server = Server::start(cfg, Box::new(backend), doc, loader, None).unwrap();
    let shared = server.shared().clone();
    let t0 = std::time::Instant::now();
    while shared.decisions.read().unwrap().get("d").is_none() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the script ran through");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refused_at = std::time::Instant::now();
    while calls.lock().unwrap().binds.iter().filter(|(p, _)| *p == 14).count() < 2 {
        assert!(refused_at.elapsed() < Duration::from_secs(10), "the refused pod was bound again after its backoff");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused_at.elapsed() >= Duration::from_millis(700), "not before its backoff");
    // Let a few more passes run: nothing is bound twice.
    tokio::time::sleep(Duration::from_millis(200)).await;
    tokio::task::spawn_blocking(move || server.stop()).await.unwrap();

    let calls = calls.lock().unwrap();
    let by_pod: BTreeMap<PodId, Vec<Placement>> = calls.binds.iter().fold(BTreeMap::new(), |mut m, (id, at)| {
        m.entry(*id).or_insert_with(Vec::new).push(*at);
        m
    });
    assert_eq!(by_pod.keys().copied().collect::<Vec<_>>(), [10, 11, 12, 14], "each placed pod is bound");
    assert!(
        by_pod.iter().all(|(id, v)| v.len() == if *id == 14 { 2 } else { 1 }),
        "once, d after its refusal: {by_pod:?}"
    );
    assert!(calls.evictions.is_empty(), "nothing was preempted: {:?}", calls.evictions);
    let decisions = shared.decisions.read().unwrap();
    for (name, id) in [("a", 10), ("b", 11), ("c", 12), ("d", 14)] {
        let d = decisions.get(name).unwrap();
        assert_eq!(d.node.as_deref(), Some(format!("node-{}", by_pod[&id].last().unwrap().node).as_str()), "{d:?}");
        assert_eq!(d.gpus.len(), by_pod[&id].last().unwrap().gpus.len() as usize);
    }
    let big = decisions.get("too-big").unwrap();
    assert_eq!(big.reason.as_deref(), Some("SCHED-GPU-INSUFFICIENT"), "{big:?}");
    // The refused bind is counted, and the loop went on.
    let metrics = shared.metrics.encode();
    assert!(metrics.contains("tessera_backend_errors_total{code=\"BACKEND-BIND\"} 1"), "{metrics}");
    let status = shared.status.read().unwrap();
    assert_eq!(status.backend, "scripted");
    // b was deleted; a, c and d run (too-big waits).
    assert_eq!((status.pods_running, status.pods_waiting), (3, 1), "{status:?}");
}

/// A backend whose moves take real time, as on Kubernetes: an evicted pod
/// is gone on the next pass and its owner recreates it, under a new id,
/// a pass later. Another pod that could only use the room held for the
/// move arrives with the eviction.
struct Recreating {
    nodes: Vec<Node>,
    workload: TargetWorkload,
    now: u64,
    pending: Vec<Vec<ClusterEvent>>,
    calls: Arc<Mutex<Calls>>,
    /// A pod it will not move.
    pinned: Option<PodId>,
}

impl Backend for Recreating {
    fn name(&self) -> &'static str {
        "recreating"
    }
    fn nodes(&self) -> &[Node] {
        &self.nodes
    }
    fn workload(&self) -> &TargetWorkload {
        &self.workload
    }
    fn advance(&mut self, _tick: Duration) -> u64 {
        self.now += 60;
        self.now
    }
    fn events(&mut self, now: u64) -> Vec<(u64, ClusterEvent)> {
        let next = if self.pending.is_empty() { Vec::new() } else { self.pending.remove(0) };
        next.into_iter().map(|e| (now, e)).collect()
    }
    fn sample(&mut self, node: &Node, _pods: &[(&Pod, Placement)], _t: u64) -> NodeSample {
        steady(node)
    }
    fn zone_carbon(&mut self, _zone: &str, _t: u64) -> u32 {
        200
    }
    fn bind(&mut self, id: PodId, at: Placement) -> Result<(), BackendError> {
        self.calls.lock().unwrap().binds.push((id, at));
        Ok(())
    }
    fn evict(&mut self, id: PodId) -> Result<(), BackendError> {
        self.calls.lock().unwrap().evictions.push(id);
        let h100_only = Pod { allowed_models: vec!["H100".into()], workload: "other".into(), ..half("intruder") };
        self.pending.push(vec![ClusterEvent::Deleted { id }, ClusterEvent::Submitted { id: 900, pod: h100_only }]);
        self.pending.push(vec![ClusterEvent::Submitted { id: id + 100, pod: half("web-r1") }]);
        Ok(())
    }
    fn moves(&self) -> Moves {
        Moves::Live
    }
    fn live(&self) -> Option<&dyn LiveBackend> {
        Some(self)
    }
}

impl LiveBackend for Recreating {
    fn movable(&self, id: PodId) -> Result<(), Refusal> {
        if self.pinned == Some(id) { Err(Refusal::new("nothing would recreate it")) } else { Ok(()) }
    }
    /// A recreated pod serves at once.
    fn ready(&self, _id: PodId) -> bool {
        true
    }
}

/// The two web pods of the live-move tests, and the backend.
fn recreating(pinned: Option<PodId>) -> (Recreating, TargetWorkload, Arc<Mutex<Calls>>) {
    let node = |i: u32, gpus: usize, model: &str| {
        Node::new(i, format!("node-{i}"), Resources { cpu_milli: 32_000, memory_mib: 131_072 }, gpus, model)
    };
    // web-0 shares GPU 0 of node-0 (A100 ×2), web-1 GPU 0 of node-1 (H100
    // ×1): moving web-0 beside web-1 frees node-0 for the 2-GPU pods of
    // the workload.
    let nodes = vec![node(0, 2, "A100"), node(1, 1, "H100")];
    let gpu0 = Some(tessera_core::cluster::GpuSet(1));
    let start = vec![
        ClusterEvent::Running { id: 1, pod: half("web-0"), node: "node-0".into(), gpus: gpu0 },
        ClusterEvent::Running { id: 2, pod: half("web-1"), node: "node-1".into(), gpus: gpu0 },
    ];
    let workload = TargetWorkload::from_pods(&[half("w"), pod("train", 2)], 0.95);
    let calls = Arc::new(Mutex::new(Calls::default()));
    let backend =
        Recreating { nodes, workload: workload.clone(), now: 0, pending: vec![start], calls: calls.clone(), pinned };
    (backend, workload, calls)
}

fn start_live(backend: Recreating, workload: TargetWorkload) -> Server {
    let mut cfg =
        ServeConfig { api_token: Some(TOKEN.into()), cache_dir: Some(crate::cache_dir()), ..ServeConfig::default() };
    cfg.engine.tick_ms = 20;
    cfg.engine.reschedule_every_s = 60;
    cfg.engine.max_migrations_pct = 50.0;
    let mut doc = tessera::sim::policy_document("default", 1).unwrap();
    tessera::sim::inject_workload(&mut doc, &workload);
    let loader = Arc::new(tessera::serve::CliLoader::new(workload, Some(crate::cache_dir())).unwrap());
    Server::start(cfg, Box::new(backend), doc, loader, None).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planner_leaves_alone_the_pods_the_backend_will_not_move() {
    let (backend, workload, calls) = recreating(Some(1));
    let mut server = start_live(backend, workload);
    let shared = server.shared().clone();
    let t0 = std::time::Instant::now();
    while shared.plans.read().unwrap().newest_first().count() < 5 {
        assert!(t0.elapsed() < Duration::from_secs(30), "five cycles ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::task::spawn_blocking(move || server.stop()).await.unwrap();
    let plans: Vec<_> = shared.plans.read().unwrap().newest_first().cloned().collect();
    assert!(plans.iter().all(|p| p.moves.iter().all(|m| m.pod != "web-0")), "web-0 is pinned: {plans:#?}");
    assert!(!calls.lock().unwrap().evictions.contains(&1));
}

fn half(name: &str) -> Pod {
    Pod { name: name.into(), namespace: "ml".into(), workload: "ml/web".into(), gpu_milli: 500, ..pod(name, 1) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_move_holds_its_room_until_the_replacement_takes_it() {
    let (backend, workload, calls) = recreating(None);
    let mut server = start_live(backend, workload);
    let shared = server.shared().clone();
    let t0 = std::time::Instant::now();
    let executed = || shared.plans.read().unwrap().newest_first().any(|p| p.state == PlanState::Executed);
    while !executed() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the move ended: {:?}",
            shared.plans.read().unwrap().newest_first().next()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    tokio::task::spawn_blocking(move || server.stop()).await.unwrap();

    let plan = shared.plans.read().unwrap().newest_first().find(|p| p.state == PlanState::Executed).cloned().unwrap();
    assert_eq!(plan.moves.len(), 1, "{plan:?}");
    let mv = &plan.moves[0];
    assert_eq!(
        (mv.pod.as_str(), mv.from.as_str(), mv.to.as_str(), mv.state.as_str()),
        ("web-0", "node-0", "node-1", "done")
    );
    let calls = calls.lock().unwrap();
    assert_eq!(calls.evictions, [1], "web-0 was evicted, once");
    // The replacement took the room held for it; the pod that could only
    // use that room never got it.
    let r1 = calls.binds.iter().find(|(id, _)| *id == 101).expect("the replacement was bound");
    assert_eq!(r1.1, Placement { node: 1, gpus: tessera_core::cluster::GpuSet(1) });
    assert!(calls.binds.iter().all(|(id, _)| *id != 900), "the held room was not given away: {:?}", calls.binds);
    let intruder = shared.decisions.read().unwrap().get("intruder").cloned().expect("decided");
    assert_eq!(intruder.node, None, "{intruder:?}");
}
