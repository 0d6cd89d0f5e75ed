use rand::{RngExt as _, SeedableRng as _};
use tessera_core::cluster::{Cluster, choose_gpus};
use tessera_core::model::{Node, Pod, Resources};

use super::*;
use crate::config::{BatchSize, Budget};
use crate::dag;
use crate::journal::MemJournal;
use crate::sim::{SimActuator, SimActuatorConfig};

fn nodes(n: usize, gpus: usize) -> Cluster {
    Cluster::new(
        (0..n)
            .map(|i| Node::new(0, format!("n{i}"), Resources { cpu_milli: 64_000, memory_mib: 262_144 }, gpus, "A100"))
            .collect(),
    )
}

fn pod(id: u64, workload: &str) -> Pod {
    Pod {
        name: format!("p{id}"),
        namespace: "ns".into(),
        workload: workload.into(),
        requests: Resources { cpu_milli: 1_000, memory_mib: 1_024 },
        gpu_count: 1,
        gpu_milli: 1000,
        ..Pod::default()
    }
}

/// A cluster with `placed` pods ((node, workload) each) and moves of some
/// of them (pod index → target node).
struct Scene {
    act: SimActuator,
    plan: MovePlan,
}

fn scene(c: Cluster, placed: &[(NodeId, &str)], moves: &[(usize, NodeId)], sim: SimActuatorConfig) -> Scene {
    let mut c = c;
    let mut pods = Vec::new();
    for (i, &(node, w)) in placed.iter().enumerate() {
        let spec = pod(i as u64, w);
        let gpus = choose_gpus(c.node(node).unwrap(), &spec, None).expect("room for the scene");
        let at = c.bind(node, &spec, gpus).unwrap();
        pods.push((i as u64, spec, at));
    }
    let plan = MovePlan {
        id: 7,
        moves: moves
            .iter()
            .map(|&(i, to)| PodMove { pod: pods[i].0, spec: pods[i].1.clone(), from: pods[i].2, to, gpu_hint: None })
            .collect(),
    };
    Scene { act: SimActuator::new(c, pods, sim), plan }
}

/// Ticks every 5 s until the plan is over; returns the end time.
fn drive(ex: &mut Executor, act: &mut SimActuator, j: &mut dyn Journal, mut now: u64) -> u64 {
    for _ in 0..10_000 {
        ex.tick(act, j, now).expect("journal works");
        if ex.finished() {
            return now;
        }
        now += 5;
    }
    panic!("the plan never finished: {:?}", ex.states());
}

fn cfg() -> MovementConfig {
    MovementConfig { pause_duration_s: 10, ..MovementConfig::default() }
}

#[test]
fn a_chain_and_a_swap_end_where_the_plan_says() {
    // n0..n2 one GPU each, n3 free. p0: n0 → n1 (full of p1); p1: n1 → n0 (swap); p2: n2 → n3.
    let mut s =
        scene(nodes(4, 1), &[(0, "a"), (1, "b"), (2, "c")], &[(0, 1), (1, 0), (2, 3)], SimActuatorConfig::default());
    let d = dag::build(s.act.cluster(), &s.plan);
    let mut j = MemJournal::default();
    let mut ex = Executor::start(cfg(), &s.plan, d, &mut j).unwrap();
    drive(&mut ex, &mut s.act, &mut j, 0);
    let at: Vec<NodeId> = s.act.placements().values().map(|p| p.unwrap().node).collect();
    assert_eq!(at, [1, 0, 3], "{:?}", ex.report());
    assert!(s.act.reservations().is_empty(), "no reservation left behind");
    assert_eq!(ex.report().executed, 4, "three moves, one in two hops");
}

#[test]
fn dry_run_lists_batches_and_acts_on_nothing() {
    let s = scene(nodes(4, 1), &[(0, "a"), (1, "b")], &[(0, 1), (1, 0)], SimActuatorConfig::default());
    let before = s.act.placements();
    let d = dag::build(s.act.cluster(), &s.plan);
    let batches = dry_run(&MovementConfig { batch_size: BatchSize::Count(1), ..cfg() }, &d);
    assert_eq!(batches.len(), 3);
    assert!(batches[0][0].contains("evict pod 0 (p0) from node 0") && batches[0][0].contains("(hop)"), "{batches:?}");
    assert!(batches[2][0].contains("after steps [0, 1]"), "{batches:?}");
    assert_eq!(s.act.placements(), before);
}

/// Over random clusters and plans: batches never exceed their size, moves
/// in flight never exceed the concurrency limit, no pod moves twice in a
/// plan (hops aside) and a second plan right after leaves moved pods alone.
#[test]
fn limits_hold_over_random_plans() {
    for seed in 0..40u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let n = rng.random_range(3..10);
        let gpus = rng.random_range(1..4);
        let mut placed = Vec::new();
        for node in 0..n {
            for _ in 0..rng.random_range(0..=gpus) {
                placed.push((node as NodeId, ["w1", "w2", "w3"][rng.random_range(0..3)]));
            }
        }
        let mut moves: Vec<(usize, NodeId)> = Vec::new();
        for i in 0..placed.len() {
            if rng.random_bool(0.5) {
                moves.push((i, rng.random_range(0..n) as NodeId));
            }
        }
        let mut s = scene(nodes(n, gpus), &placed, &moves, SimActuatorConfig { seed, ..SimActuatorConfig::default() });
        let c = MovementConfig {
            batch_size: BatchSize::Count(rng.random_range(1..4)),
            concurrency_limit: rng.random_range(1..3),
            caps: crate::config::Caps { per_node: 100, per_namespace: 100, per_workload: 100 },
            ..cfg()
        };
        let d = dag::build(s.act.cluster(), &s.plan);
        let mut j = MemJournal::default();
        let mut ex = Executor::start(c.clone(), &s.plan, d.clone(), &mut j).unwrap();
        let mut now = 0;
        while !ex.finished() {
            ex.tick(&mut s.act, &mut j, now).unwrap();
            let in_flight = ex.states().iter().filter(|st| st.in_flight()).count() as u32;
            assert!(in_flight <= c.concurrency_limit, "seed {seed}: {in_flight} in flight");
            now += 5;
            assert!(now < 100_000, "seed {seed}: never finished");
        }
        let max_batch = c.batch_len(d.steps.len());
        for e in &j.entries {
            if let Entry::Batch { steps, .. } = e {
                assert!(steps.len() <= max_batch, "seed {seed}: batch of {}", steps.len());
            }
        }
        let mut moved: Vec<u64> = d
            .steps
            .iter()
            .zip(ex.states())
            .filter(|(st, s)| **s == StepState::Done && !st.hop)
            .map(|(st, _)| st.mv.pod)
            .collect();
        let all = moved.len();
        moved.sort_unstable();
        moved.dedup();
        assert_eq!(all, moved.len(), "seed {seed}: a pod moved twice");
        // The same plan again, right away: every pod it moved is cooling down.
        if let Some(pod) = moved.first() {
            let again = MovePlan {
                id: 8,
                moves: s
                    .plan
                    .moves
                    .iter()
                    .filter(|m| m.pod == *pod)
                    .cloned()
                    .map(|m| PodMove { from: s.act.placements()[pod].unwrap(), to: m.from.node, ..m })
                    .collect(),
            };
            let d2 = dag::build(s.act.cluster(), &again);
            let mut ex2 = Executor::start(c.clone(), &again, d2, &mut j).unwrap().with_history(ex.moved().clone());
            drive(&mut ex2, &mut s.act, &mut j, now);
            assert_eq!(ex2.report().executed, 0, "seed {seed}: {:?}", ex2.report());
        }
    }
}

#[test]
fn disruption_budgets_hold() {
    // Four pods of `web` on n0..n3, all moving to n4..n7; at most one may
    // be unavailable at a time, even with four moves allowed in flight.
    let placed: Vec<(NodeId, &str)> = (0..4).map(|i| (i, "web")).collect();
    let moves: Vec<(usize, NodeId)> = (0..4).map(|i| (i, 4 + i as NodeId)).collect();
    let mut s =
        scene(nodes(8, 1), &placed, &moves, SimActuatorConfig { ready_delay_s: 20, ..SimActuatorConfig::default() });
    let c = MovementConfig {
        batch_size: BatchSize::Count(4),
        concurrency_limit: 4,
        budgets: vec![Budget { workload: "web".into(), max_unavailable: Some(1), min_available: None }],
        ..cfg()
    };
    let d = dag::build(s.act.cluster(), &s.plan);
    let mut j = MemJournal::default();
    let mut ex = Executor::start(c, &s.plan, d, &mut j).unwrap();
    drive(&mut ex, &mut s.act, &mut j, 0);
    assert_eq!(ex.report().executed, 4);
    assert_eq!(ex.report().peak_unavailable["web"], 1);
    // A budget that allows nothing: every move dropped with the reason.
    let mut s = scene(nodes(8, 1), &placed, &moves, SimActuatorConfig::default());
    let c = MovementConfig {
        budgets: vec![Budget { workload: "web".into(), max_unavailable: None, min_available: Some(4) }],
        ..cfg()
    };
    let d = dag::build(s.act.cluster(), &s.plan);
    let mut ex = Executor::start(c, &s.plan, d, &mut j).unwrap();
    drive(&mut ex, &mut s.act, &mut j, 0);
    assert_eq!(ex.report().executed, 0);
    assert!(
        ex.report().dropped.iter().all(|d| d.reason().contains("allows no pod to be unavailable")),
        "{:?}",
        ex.report()
    );
}

#[test]
fn an_error_rate_over_the_gate_rolls_the_batch_back_and_stops() {
    let placed: Vec<(NodeId, &str)> = (0..6).map(|i| (i, "api")).collect();
    let moves: Vec<(usize, NodeId)> = (0..6).map(|i| (i, 6 + i as NodeId)).collect();
    // Each moved pod adds 0.8% errors: a batch of two crosses 1%.
    let sim = SimActuatorConfig { error_rate_per_move: 0.008, ..SimActuatorConfig::default() };
    let mut s = scene(nodes(12, 1), &placed, &moves, sim);
    let before = s.act.placements();
    let c = MovementConfig { batch_size: BatchSize::Count(2), concurrency_limit: 2, ..cfg() };
    let d = dag::build(s.act.cluster(), &s.plan);
    let mut j = MemJournal::default();
    let mut ex = Executor::start(c, &s.plan, d, &mut j).unwrap();
    drive(&mut ex, &mut s.act, &mut j, 0);
    let r = ex.report();
    assert!(r.stopped.as_deref().is_some_and(|s| s.contains("error rate")), "{r:?}");
    assert_eq!((r.executed, r.rolled_back), (0, 2), "{r:?}");
    assert_eq!(r.dropped.len(), 4, "the rest never ran: {r:?}");
    let nodes_now: Vec<NodeId> = s.act.placements().values().map(|p| p.unwrap().node).collect();
    let nodes_before: Vec<NodeId> = before.values().map(|p| p.unwrap().node).collect();
    assert_eq!(nodes_now, nodes_before, "every pod back on its source");
}

/// Starts, evictions and restores that fail half the time, plus errors
/// that trip the rollback gate: every plan still ends, and no pod ever ends
/// nowhere (a failed start or rollback is retried until the pod runs on
/// its source again).
#[test]
fn failing_starts_and_rollbacks_never_lose_a_pod() {
    for seed in 0..30u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let n = rng.random_range(4..10);
        let placed: Vec<(NodeId, &str)> = (0..n / 2).map(|i| (i as NodeId, ["a", "b"][i % 2])).collect();
        let moves: Vec<(usize, NodeId)> = (0..placed.len()).map(|i| (i, (n / 2 + i) as NodeId)).collect();
        let sim = SimActuatorConfig {
            start_failure: 0.5,
            evict_failure: 0.2,
            error_rate_per_move: if seed % 2 == 0 { 0.02 } else { 0.0 },
            seed,
            ..SimActuatorConfig::default()
        };
        let mut s = scene(nodes(n, 1), &placed, &moves, sim);
        let d = dag::build(s.act.cluster(), &s.plan);
        let mut j = MemJournal::default();
        let c = MovementConfig { batch_size: BatchSize::Count(2), ..cfg() };
        let mut ex = Executor::start(c, &s.plan, d, &mut j).unwrap();
        drive(&mut ex, &mut s.act, &mut j, 0);
        let lost: Vec<u64> = s.act.placements().iter().filter(|(_, p)| p.is_none()).map(|(&id, _)| id).collect();
        assert!(lost.is_empty(), "seed {seed}: pods {lost:?} run nowhere: {:?}", ex.states());
        let r = ex.report();
        let ended = r.executed + r.failed + r.rolled_back + r.dropped.len() as u32;
        assert_eq!(ended as usize, s.plan.moves.len(), "seed {seed}: every move accounted for: {r:?}");
        assert!(s.act.reservations().is_empty(), "seed {seed}: no reservation left behind");
    }
}

/// A journal that stops the process right after its `k`-th write.
struct CrashAfter<'a> {
    inner: &'a mut dyn Journal,
    writes: u64,
    crash_at: Option<u64>,
}

impl Journal for CrashAfter<'_> {
    fn append(&mut self, e: &Entry) -> Result<(), JournalError> {
        self.inner.append(e)?;
        self.writes += 1;
        if self.crash_at == Some(self.writes) {
            self.crash_at = None;
            return Err(JournalError::Crashed(self.writes));
        }
        Ok(())
    }
    fn read_all(&mut self) -> Result<Vec<Entry>, JournalError> {
        self.inner.read_all()
    }
}

fn crash_scene() -> (Scene, MovementConfig) {
    let placed = [(0, "a"), (1, "b"), (2, "a"), (3, "b"), (4, "c")];
    let moves = [(0, 1), (1, 0), (2, 5), (3, 6), (4, 7)];
    let sim = SimActuatorConfig { evict_failure: 0.1, start_failure: 0.1, seed: 5, ..SimActuatorConfig::default() };
    let c = MovementConfig { batch_size: BatchSize::Count(2), concurrency_limit: 2, ..cfg() };
    (scene(nodes(8, 1), &placed, &moves, sim), c)
}

/// Runs the crash scene, crashing after write `crash_at` (if any) and
/// resuming from the journal; returns the final placements.
fn run_with_crash(
    journal: &mut dyn Journal,
    crash_at: Option<u64>,
) -> (BTreeMap<PodId, Option<tessera_core::cluster::Placement>>, u64) {
    let (mut s, c) = crash_scene();
    let d = dag::build(s.act.cluster(), &s.plan);
    let mut j = CrashAfter { inner: journal, writes: 0, crash_at };
    let mut now = 0;
    // A crash while journaling the plan leaves it to `resume`.
    let mut ex = Executor::start(c.clone(), &s.plan, d, &mut j).ok();
    for _ in 0..10_000 {
        let Some(e) = ex.as_mut() else {
            ex = Executor::resume(c.clone(), &mut j, &s.act, now).unwrap();
            continue;
        };
        if e.finished() {
            break;
        }
        if e.tick(&mut s.act, &mut j, now).is_err() {
            // The process died; a new one starts from the journal.
            ex = None;
            continue;
        }
        now += 5;
    }
    assert!(s.act.reservations().is_empty(), "crash at {crash_at:?}: reservations reconciled");
    (s.act.placements(), j.writes)
}

#[test]
fn a_crash_after_any_journal_write_ends_like_no_crash() {
    let (expected, writes) = run_with_crash(&mut MemJournal::default(), None);
    assert!(writes > 20, "{writes}");
    for k in 1..=writes {
        let (got, _) = run_with_crash(&mut MemJournal::default(), Some(k));
        assert_eq!(got, expected, "crash after write {k}");
    }
}

#[test]
fn the_redb_journal_survives_reopening_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("movement.redb");
    let (expected, writes) = run_with_crash(&mut MemJournal::default(), None);
    let (got, _) = {
        let mut j = crate::journal::RedbJournal::open(&path).unwrap();
        run_with_crash(&mut j, Some(writes / 2))
    };
    assert_eq!(got, expected);
    let mut reopened = crate::journal::RedbJournal::open(&path).unwrap();
    let entries = reopened.read_all().unwrap();
    assert!(matches!(entries.first(), Some(Entry::Plan { .. })));
    assert!(matches!(entries.last(), Some(Entry::Finished { .. })));
}

#[test]
fn the_pause_separates_batches_but_does_not_delay_the_end() {
    // Two moves, one per batch, 100 s pause: the second batch waits it
    // out; nothing waits after the last.
    let mut s = scene(nodes(4, 1), &[(0, "a"), (1, "b")], &[(0, 2), (1, 3)], SimActuatorConfig::default());
    let d = dag::build(s.act.cluster(), &s.plan);
    let mut j = MemJournal::default();
    let cfg = MovementConfig { batch_size: BatchSize::Count(1), pause_duration_s: 100, ..MovementConfig::default() };
    let mut ex = Executor::start(cfg, &s.plan, d, &mut j).unwrap();
    let end = drive(&mut ex, &mut s.act, &mut j, 0);
    let ready = SimActuatorConfig::default().ready_delay_s;
    assert!(end >= 100 + 2 * ready, "the second batch waited for the pause: ended at {end}");
    assert!(end < 2 * 100, "the plan did not wait a pause after its last batch: ended at {end}");
    assert_eq!(ex.report().executed, 2);
}
