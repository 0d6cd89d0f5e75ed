use super::*;
use crate::cluster::GpuSet;
use crate::framework::Choice;
use crate::metrics::TargetWorkload;
use crate::model::Resources;

/// Binds on the first candidate; records what it was told.
#[derive(Default)]
struct First {
    changed: Vec<NodeId>,
    weights: Vec<Vec<f64>>,
}

impl Placer for First {
    fn nodes_changed(&mut self, nodes: &[&Node]) {
        self.changed.extend(nodes.iter().map(|n| n.id));
    }
    fn set_weights(&mut self, w: &[f64]) {
        self.weights.push(w.to_vec());
    }
    fn detect(&mut self, frame: &DetectionFrame) -> Vec<Detection> {
        // Node 0 is flagged whenever it runs above half load.
        frame
            .nodes
            .iter()
            .zip(&frame.gpu_util_permille)
            .filter(|&(&n, &u)| n == 0 && u > 500)
            .map(|(&node, _)| Detection {
                detector: "test".into(),
                node,
                kind: "busy".into(),
                severity: 900,
                message: String::new(),
            })
            .collect()
    }
    fn place(&mut self, _pod: &Pod, candidates: &[NodeId]) -> Choice {
        Choice { node: candidates.first().copied(), ..Choice::default() }
    }
}

/// A scripted world: events at given times, every node at `load`‰.
struct Script {
    events: Vec<(u64, ClusterEvent)>,
    next: usize,
    log: Vec<String>,
    placer: First,
    load: u16,
    acting: bool,
    /// What a cycle carries out.
    moves: Vec<(PodId, Placement)>,
    cycles: Vec<(Trigger, u64, usize)>,
}

impl Script {
    fn new(events: Vec<(u64, ClusterEvent)>) -> Self {
        Self {
            events,
            next: 0,
            log: Vec::new(),
            placer: First::default(),
            load: 300,
            acting: true,
            moves: Vec::new(),
            cycles: Vec::new(),
        }
    }
}

impl World for Script {
    fn placer(&mut self) -> &mut dyn Placer {
        &mut self.placer
    }
    fn next_event(&mut self, until: u64) -> Option<u64> {
        self.events.get(self.next).map(|e| e.0).filter(|&t| t <= until)
    }
    fn happen(&mut self, t: u64, model: &mut Model) {
        self.log.push(format!("happen {t}"));
        while let Some((at, _)) = self.events.get(self.next)
            && *at <= t
        {
            model.apply(self.events[self.next].1.clone(), t).unwrap();
            self.next += 1;
        }
    }
    fn sample(&mut self, node: &Node, _pods: &[(&Pod, Placement)], t: u64) -> NodeSample {
        if node.id == 0 {
            self.log.push(format!("tick {t}"));
        }
        NodeSample {
            cpu_util_permille: self.load,
            memory_util_permille: self.load,
            gpu_util_permille: vec![self.load; node.gpus.len()],
            gpu_memory_used_mib: vec![0; node.gpus.len()],
        }
    }
    fn zone_carbon(&mut self, _zone: &str, _t: u64) -> u32 {
        100
    }
    fn acting(&self) -> bool {
        self.acting
    }
    fn before_pass(&mut self, _model: &mut Model, t: u64) -> bool {
        self.log.push(format!("pass {t}"));
        self.acting
    }
    fn reschedule(&mut self, _model: &mut Model, cycle: &Cycle<'_>) -> Option<Vec<(PodId, Placement)>> {
        self.cycles.push((cycle.trigger, cycle.at, cycle.anomalies.len()));
        Some(std::mem::take(&mut self.moves))
    }
}

fn nodes(n: u32) -> Vec<Node> {
    (0..n).map(|i| Node::new(i, format!("n{i}"), Resources { cpu_milli: 8_000, memory_mib: 32_768 }, 2, "T4")).collect()
}

fn pod(name: &str, gpus: u32) -> Pod {
    Pod {
        name: name.into(),
        requests: Resources { cpu_milli: 1_000, memory_mib: 1_024 },
        gpu_count: gpus,
        gpu_milli: 1000,
        ..Pod::default()
    }
}

fn submit(id: PodId, p: Pod) -> ClusterEvent {
    ClusterEvent::Submitted { id, pod: p }
}

fn cfg(interval_s: u64) -> DriverConfig {
    DriverConfig {
        telemetry: TelemetryConfig { interval_s, ..TelemetryConfig::default() },
        start_s: Some(0),
        ..DriverConfig::default()
    }
}

fn workload() -> TargetWorkload {
    TargetWorkload::from_pods(&[pod("a", 1)], 0.95)
}

#[test]
fn intervals_end_before_what_happens_at_their_second_and_each_instant_has_a_pass() {
    let mut w = Script::new(vec![(60, submit(1, pod("a", 1))), (90, submit(2, pod("b", 1)))]);
    let mut d = Driver::new(nodes(1), workload(), cfg(60));
    d.run_until(130, &mut w);
    assert_eq!(
        w.log,
        [
            "tick 0",
            "pass 0", // an interval with nothing else: a pass of its own
            "tick 60",
            "happen 60",
            "pass 60", // the interval first, then the arrival, one pass
            "happen 90",
            "pass 90",
            "tick 120",
            "pass 120", // and the closing pass at 130
            "pass 130",
        ]
    );
    assert_eq!(d.model().running().count(), 2);
    assert_eq!(d.intervals(), 3);
    // Nothing new: another run to the same time adds nothing.
    d.run_until(130, &mut w);
    assert_eq!(w.log.len(), 10);
}

#[test]
fn a_finite_run_ends_with_its_last_event_and_a_late_event_happens_now() {
    let mut w = Script::new(vec![(10, submit(1, pod("a", 1))), (400, ClusterEvent::Deleted { id: 1 })]);
    let mut d = Driver::new(nodes(1), workload(), DriverConfig { start_s: None, ..cfg(100) });
    d.run_to_end(&mut w);
    // Intervals end from the first instant on: 10, 110, 210, 310.
    assert_eq!(d.intervals(), 4);
    let r = d.report();
    assert_eq!((r.submitted, r.departed, r.abandoned), (1, 1, 0));
    // An event stamped before the last instant happens at it.
    w.events.push((100, submit(2, pod("b", 1))));
    d.run_until(500, &mut w);
    assert_eq!(d.model().sched().pod(2).map(|p| p.name.as_str()), Some("b"));
    assert!(w.log.iter().any(|l| l == "happen 400"));
    assert!(!w.log.iter().any(|l| l == "happen 100"), "{:?}", w.log);
}

#[test]
fn a_standby_follows_the_cluster_and_decides_nothing() {
    let mut w = Script::new(vec![(0, submit(1, pod("a", 1))), (0, submit(2, pod("b", 2)))]);
    w.acting = false;
    let mut d = Driver::new(nodes(2), workload(), DriverConfig { max_moves_share: 1.0, ..cfg(60) });
    d.run_until(300, &mut w);
    assert_eq!(d.model().tally().submitted, 2);
    assert_eq!(d.model().running().count(), 0);
    assert_eq!(d.model().waiting().count(), 2);
    assert!(w.cycles.is_empty(), "no cycle on a standby");
    w.acting = true;
    d.run_until(360, &mut w);
    assert_eq!(d.model().running().count(), 2, "it decides once it leads");
}

#[test]
fn cycles_run_on_anomalies_or_the_period_and_their_moves_are_applied() {
    let events = vec![(0, submit(1, pod("a", 1))), (0, submit(2, pod("b", 1)))];
    let mut w = Script::new(events);
    let c = DriverConfig { max_moves_share: 1.0, reschedule_every_s: 600, ..cfg(60) };
    let mut d = Driver::new(nodes(2), workload(), c);
    d.run_until(0, &mut w);
    // First fit: both on node 0. A cycle moves b to node 1's first GPU.
    assert!(d.model().running().all(|(_, _, at)| at.node == 0));
    let to = Placement { node: 1, gpus: GpuSet(1) };
    w.moves = vec![(2, to)];
    d.run_until(600, &mut w);
    assert_eq!(w.cycles, [(Trigger::Periodic, 600, 0)], "the period: at 600 s, not before");
    assert_eq!(d.model().placement(2), Some(to));
    let r = d.report();
    assert_eq!((r.reschedule_plans, r.migrations), (1, 1));
    // A hot node 0: every interval's detection round flags it.
    w.load = 800;
    d.run_until(720, &mut w);
    assert_eq!(w.cycles[1..], [(Trigger::Anomalies, 660, 1), (Trigger::Anomalies, 720, 1)]);
    assert_eq!(d.report().anomalies["busy"], 2);
    // No share of moves, no cycle.
    let mut quiet = Driver::new(nodes(2), workload(), DriverConfig { max_moves_share: 0.0, ..c_copy() });
    let mut w2 = Script::new(vec![(0, submit(1, pod("a", 1)))]);
    w2.load = 800;
    quiet.run_until(1200, &mut w2);
    assert!(w2.cycles.is_empty());
}

fn c_copy() -> DriverConfig {
    DriverConfig { reschedule_every_s: 600, ..cfg(60) }
}

#[test]
fn utilisation_reaches_the_placer_beyond_the_dead_band_only() {
    let run = |band: u16, loads: &[u16]| {
        let mut w = Script::new(Vec::new());
        let mut d = Driver::new(nodes(1), workload(), DriverConfig { dead_band_permille: band, ..cfg(60) });
        for (i, &l) in loads.iter().enumerate() {
            w.load = l;
            d.run_until(i as u64 * 60, &mut w);
        }
        // The first pass tells the placer every node (with the first
        // sample); count what came after.
        w.placer.changed.len() - 1
    };
    let loads = [300, 305, 315, 330, 335];
    assert_eq!(run(0, &loads), 4, "any change reaches it");
    assert_eq!(run(20, &loads), 1, "only 330, 30 beyond the 300 it last heard");
}

#[test]
fn adaptive_weights_are_chosen_every_interval_and_start_afresh_with_new_sets() {
    let mut w = Script::new(vec![(0, submit(1, pod("a", 1)))]);
    let sets = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
    let mut d = Driver::new(nodes(2), workload(), DriverConfig { weight_sets: sets.clone(), seed: 3, ..cfg(60) });
    d.run_until(600, &mut w);
    assert_eq!(w.placer.weights.len(), 11, "one choice per interval, 0 to 600 s");
    assert!(w.placer.weights.iter().all(|x| sets.contains(x)));
    let r = d.report();
    assert_eq!(r.bandit.iter().map(|a| a.pulls).sum::<u64>(), 11);
    d.set_weight_sets(vec![vec![5.0]]);
    d.run_until(660, &mut w);
    assert_eq!(w.placer.weights.last(), Some(&vec![5.0]));
    assert_eq!(d.report().bandit.len(), 1);
    d.set_weight_sets(Vec::new());
    d.run_until(720, &mut w);
    assert_eq!(w.placer.weights.len(), 12, "no adaptive weights: none chosen");
}

/// A planner sees a gang's members pinned: moving one restarts the job.
#[test]
fn a_planner_sees_gang_members_pinned() {
    let mut m = Model::new(nodes(2), workload(), crate::sched::SchedConfig::default());
    let gang = crate::model::Gang { name: "job".into(), min_member: 2, timeout_s: None };
    for (id, name) in [(1, "w0"), (2, "w1")] {
        m.submit(id, Pod { gang: Some(gang.clone()), ..pod(name, 1) }, 0).unwrap();
    }
    m.submit(3, pod("lone", 1), 0).unwrap();
    m.schedule(&mut First::default(), 0);
    let (ids, running) = m.for_planner();
    let tiers: Vec<(PodId, Tier)> = ids.iter().copied().zip(running.iter().map(|(p, _)| p.tier)).collect();
    assert_eq!(tiers, [(1, Tier::Hard), (2, Tier::Hard), (3, Tier::Soft)]);
    assert_eq!(m.sched().pod(1).unwrap().tier, Tier::Soft, "pinned for the planner only");
}

/// GPU-seconds a gang holds while it runs short of `min_member` are
/// counted from the moment it goes short until a member replaces the lost
/// one; a whole gang counts nothing.
#[test]
fn a_gang_short_of_a_member_counts_the_gpus_it_holds_for_nothing() {
    let gang = crate::model::Gang { name: "job".into(), min_member: 2, timeout_s: None };
    let member = |name: &str| Pod { gang: Some(gang.clone()), ..pod(name, 2) };
    let mut w = Script::new(vec![
        (0, submit(1, member("w0"))),
        (0, submit(2, member("w1"))),
        (10, ClusterEvent::Deleted { id: 1 }),
        (30, submit(3, member("w0-again"))),
        (100, ClusterEvent::Deleted { id: 2 }),
        (100, ClusterEvent::Deleted { id: 3 }),
    ]);
    let mut d = Driver::new(nodes(2), workload(), cfg(60));
    d.run_to_end(&mut w);
    let r = d.report();
    assert_eq!((r.gangs_admitted, r.gang_rollbacks), (2, 0), "placed whole, then made whole again");
    assert_eq!(r.partial_gang_gpu_s, 2 * 20, "w1's two GPUs from 10 s to 30 s");
}
