use super::*;
use crate::framework::Choice;
use crate::model::{GpuHealth, Resources};

/// Chooses the lowest-id candidate and records what it was told.
#[derive(Default)]
struct First {
    told: usize,
    decisions: usize,
}

impl Placer for First {
    fn nodes_changed(&mut self, nodes: &[&Node]) {
        self.told += nodes.len();
    }
    fn place(&mut self, _pod: &Pod, candidates: &[NodeId]) -> Choice {
        self.decisions += 1;
        Choice { node: candidates.first().copied(), ..Choice::default() }
    }
}

fn nodes(n: usize, gpus: usize) -> Vec<Node> {
    (0..n)
        .map(|i| Node::new(0, format!("n{i}"), Resources { cpu_milli: 32_000, memory_mib: 131_072 }, gpus, "A100"))
        .collect()
}

fn pod(name: &str, tier: Tier, priority: i32, gpus: u32, milli: u32) -> Pod {
    Pod {
        name: name.into(),
        requests: Resources { cpu_milli: 1_000, memory_mib: 1_024 },
        gpu_count: gpus,
        gpu_milli: milli,
        priority,
        tier,
        ..Pod::default()
    }
}

#[test]
fn sampling_follows_kube_scheduler() {
    let s = Sampling::default();
    assert_eq!(s.nodes_to_find(10_000), 10_000, "all nodes up to 10,000");
    // 20,000 nodes: adaptive 50 - 160 -> at least 5% = 1,000.
    assert_eq!(s.nodes_to_find(20_000), 1_000);
    let fixed = Sampling { percentage: Some(30), all_up_to: 100, min_nodes: 100 };
    assert_eq!(fixed.nodes_to_find(1_000), 300);
    assert_eq!(fixed.nodes_to_find(200), 100, "never fewer than min_nodes");
}

#[test]
fn sampled_search_rotates_and_finds_enough() {
    let cfg = SchedConfig {
        sampling: Sampling { percentage: Some(10), all_up_to: 10, min_nodes: 3 },
        ..SchedConfig::default()
    };
    let mut s = Scheduler::new(nodes(40, 8), cfg);
    let mut p = First::default();
    for i in 0..3 {
        s.submit(i, pod(&format!("p{i}"), Tier::Soft, 0, 1, 1000), 0).unwrap();
    }
    let events = s.schedule(&mut p, 0);
    let at: Vec<(NodeId, usize)> = events
        .iter()
        .map(|e| match e {
            Event::Bound { placement, candidates, .. } => (placement.node, *candidates),
            other => panic!("{other:?}"),
        })
        .collect();
    // 10% of 40 = 4 feasible nodes per decision, the next search starting
    // where the previous stopped.
    assert_eq!(at, [(0, 4), (4, 4), (8, 4)]);
    assert_eq!(s.stats().nodes_scored, 12);
}

#[test]
fn hard_tier_gpus_are_exclusive() {
    let mut s = Scheduler::new(nodes(1, 1), SchedConfig::default());
    let mut p = First::default();
    s.submit(1, pod("hard", Tier::Hard, 0, 1, 300), 0).unwrap();
    s.submit(2, pod("soft", Tier::Soft, 0, 1, 300), 0).unwrap();
    let events = s.schedule(&mut p, 0);
    assert!(matches!(events[0], Event::Bound { pod: 1, .. }), "{events:?}");
    assert_eq!(
        events[1],
        Event::Unschedulable { pod: 2, reason: Why::Filter(FilterReason::GpuInsufficient) },
        "the hard pod's GPU is not shared, and a soft pod cannot preempt a hard one"
    );
    assert_eq!(s.cluster().nodes()[0].gpus[0].free_milli, 0);
}

#[test]
fn preemption_evicts_the_cheapest_and_requeues_victims_one_level_down() {
    let mut s = Scheduler::new(nodes(2, 2), SchedConfig::default());
    let mut p = First::default();
    // Fill all four GPUs: two batch pods on node 0, a soft and a batch pod on node 1.
    s.submit(1, pod("batch-a", Tier::Opportunistic, 0, 1, 1000), 0).unwrap();
    s.submit(2, pod("batch-b", Tier::Opportunistic, 0, 1, 1000), 0).unwrap();
    s.submit(3, pod("web", Tier::Soft, 0, 1, 1000), 0).unwrap();
    s.schedule(&mut p, 10);
    s.submit(4, pod("batch-c", Tier::Opportunistic, 0, 1, 1000), 12).unwrap();
    s.schedule(&mut p, 15);
    assert_eq!(s.running().count(), 4);
    // An online pod needing one GPU: one batch victim suffices; of the
    // three, batch-c has lost the least work (started last).
    s.submit(5, pod("api", Tier::Soft, 0, 1, 1000), 20).unwrap();
    let events = s.schedule(&mut p, 20);
    let Event::Preempted { pod: 5, victims, placement, .. } = &events[0] else { panic!("{events:?}") };
    assert_eq!(victims, &[4]);
    assert_eq!(placement.node, 1);
    // The victim was queued one level down, tried in the same pass, and parked.
    assert_eq!(events[1], Event::Unschedulable { pod: 4, reason: Why::Filter(FilterReason::GpuInsufficient) });
    assert_eq!((s.stats().preemptions, s.stats().evicted), (1, 1));
    // A batch pod never preempts a soft one, nor its equal.
    s.submit(6, pod("batch-d", Tier::Opportunistic, 0, 1, 1000), 30).unwrap();
    let events = s.schedule(&mut p, 30);
    assert_eq!(events, [Event::Unschedulable { pod: 6, reason: Why::Filter(FilterReason::GpuInsufficient) }]);
    // Capacity frees: the parked pods come back; batch-c, evicted and then
    // failed, sits two levels down, below batch-d (failed once).
    s.remove(1);
    let events = s.schedule(&mut p, 40);
    assert!(matches!(events[0], Event::Bound { pod: 6, .. }), "{events:?}");
    let waiting: Vec<_> = s.waiting().map(|(id, _, r)| (id, r.cloned())).collect();
    assert_eq!(waiting, [(4, Some(Why::Filter(FilterReason::GpuInsufficient)))]);
}

#[test]
fn preemption_never_bends_a_hard_constraint() {
    // Node 0 runs batch pods on T4s; the pod wants an A100 (node 1, full of
    // a hard pod). Evicting the batch pods would not help: no preemption.
    let mut ns = nodes(2, 1);
    ns[0].gpu_model = "T4".into();
    let mut s = Scheduler::new(ns, SchedConfig::default());
    let mut p = First::default();
    s.submit(1, pod("batch", Tier::Opportunistic, 0, 1, 1000), 0).unwrap();
    s.submit(2, pod("hard", Tier::Hard, 0, 1, 1000), 0).unwrap();
    s.schedule(&mut p, 0);
    let mut want = pod("needs-a100", Tier::Soft, 10, 1, 1000);
    want.allowed_models = vec!["A100".into()];
    s.submit(3, want, 1).unwrap();
    let events = s.schedule(&mut p, 1);
    assert_eq!(events, [Event::Unschedulable { pod: 3, reason: Why::Filter(FilterReason::ModelMismatch) }]);
    assert_eq!(s.stats().evicted, 0);
}

#[test]
fn a_pod_that_can_never_fit_gets_a_reason_code() {
    let mut s = Scheduler::new(nodes(3, 2), SchedConfig::default());
    let mut p = First::default();
    s.submit(1, pod("huge", Tier::Soft, 0, 8, 1000), 0).unwrap();
    let mut wrong = pod("wrong-model", Tier::Soft, 0, 1, 1000);
    wrong.allowed_models = vec!["H100".into()];
    s.submit(2, wrong, 0).unwrap();
    let mut fat = pod("fat", Tier::Soft, 0, 0, 1000);
    fat.requests.cpu_milli = 64_000;
    s.submit(3, fat, 0).unwrap();
    s.schedule(&mut p, 0);
    let reasons: Vec<_> = s.waiting().map(|(id, _, r)| (id, r.map(Why::code))).collect();
    assert_eq!(
        reasons,
        [(1, Some("SCHED-GPU-INSUFFICIENT")), (2, Some("SCHED-MODEL-MISMATCH")), (3, Some("SCHED-CPU-INSUFFICIENT"))]
    );
    assert_eq!(s.stats().unschedulable.values().sum::<u64>(), 3);
}

#[test]
fn node_changes_reach_the_placer_and_free_parked_pods() {
    let mut s = Scheduler::new(nodes(2, 1), SchedConfig::default());
    let mut p = First::default();
    s.schedule(&mut p, 0);
    assert_eq!(p.told, 2, "every node, once, before the first decision");
    s.update_node(0, |n| n.ready = false);
    s.update_node(1, |n| n.gpus[0].health = GpuHealth::Failed);
    s.submit(1, pod("p", Tier::Soft, 0, 1, 1000), 1).unwrap();
    let events = s.schedule(&mut p, 1);
    assert!(matches!(events[0], Event::Unschedulable { pod: 1, .. }), "{events:?}");
    assert_eq!(p.told, 4);
    // Utilisation changes reach the placer but do not retry parked pods.
    s.observe_node(0, |n| n.cpu_util_permille = 500);
    assert!(s.schedule(&mut p, 2).is_empty());
    assert_eq!(p.told, 5);
    // The GPU recovers: the pod binds.
    s.update_node(1, |n| n.gpus[0].health = GpuHealth::Healthy);
    let events = s.schedule(&mut p, 3);
    assert!(matches!(events[0], Event::Bound { pod: 1, waited: 2, .. }), "{events:?}");
}

#[test]
fn removed_pods_are_skipped_and_ids_are_unique() {
    let mut s = Scheduler::new(nodes(1, 1), SchedConfig::default());
    let mut p = First::default();
    s.submit(1, pod("gone", Tier::Soft, 0, 1, 1000), 0).unwrap();
    assert_eq!(s.submit(1, pod("again", Tier::Soft, 0, 1, 1000), 0), Err(SchedError::Duplicate(1)));
    assert!(s.remove(1).is_some());
    assert!(s.schedule(&mut p, 2).is_empty());
    assert_eq!(p.decisions, 0);
}

/// A placer whose plugin filter rejects every candidate.
struct RejectsAll;

impl Placer for RejectsAll {
    fn nodes_changed(&mut self, _nodes: &[&Node]) {}
    fn place(&mut self, _pod: &Pod, _candidates: &[NodeId]) -> Choice {
        Choice { filtered: Some("SCHED-ZONE-SPREAD".into()), ..Choice::default() }
    }
}

#[test]
fn a_plugin_filter_rejecting_every_node_keeps_the_pod_out_with_its_code() {
    let mut s = Scheduler::new(nodes(2, 2), SchedConfig::default());
    s.submit(1, pod("p", Tier::Soft, 0, 1, 1000), 0).unwrap();
    let events = s.schedule(&mut RejectsAll, 0);
    assert_eq!(events, [Event::Unschedulable { pod: 1, reason: Why::Plugin("SCHED-ZONE-SPREAD".into()) }]);
    assert_eq!(s.running().count(), 0, "not placed on the first candidate anyway");
    assert_eq!(s.stats().unschedulable["SCHED-ZONE-SPREAD"], 1);
}

/// A rescheduling move carried out: the pod runs on its target, its source
/// frees and a parked pod that fits there binds; a move that does not fit
/// changes nothing.
#[test]
fn migrate_moves_a_running_pod_and_frees_its_source() {
    use crate::cluster::GpuSet;
    let mut s = Scheduler::new(nodes(2, 1), SchedConfig::default());
    let mut p = First::default();
    s.submit(1, pod("half", Tier::Soft, 0, 1, 500), 0).unwrap();
    s.submit(2, pod("whole", Tier::Soft, 0, 1, 1000), 0).unwrap();
    s.schedule(&mut p, 0);
    assert_eq!(s.placement(1).map(|p| p.node), Some(0));
    assert_eq!(s.placement(2).map(|p| p.node), Some(1));
    s.submit(3, pod("second-whole", Tier::Soft, 0, 1, 1000), 1).unwrap();
    assert!(matches!(s.schedule(&mut p, 1)[0], Event::Unschedulable { pod: 3, .. }));
    // Nowhere to go: node 1's GPU is full.
    let to = Placement { node: 1, gpus: GpuSet(1) };
    assert!(s.migrate(1, to).is_err());
    assert_eq!(s.placement(1).map(|p| p.node), Some(0), "unchanged");
    // Free node 1 and move the half there: node 0 comes free for pod 3.
    s.remove(2);
    assert_eq!(s.migrate(1, to).unwrap().node, 1);
    let events = s.schedule(&mut p, 2);
    assert!(events.iter().any(|e| matches!(e, Event::Bound { pod: 3, .. })), "{events:?}");
    assert_eq!(s.placement(3).map(|p| p.node), Some(0));
    assert!(s.migrate(99, to).is_err(), "unknown pods are refused");
}
