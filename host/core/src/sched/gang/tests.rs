use std::collections::BTreeMap;

use crate::framework::{Choice, GangWait, Placer, Why};
use crate::model::{Gang, Node, NodeId, Pod, PodId, Resources, Tier};
use crate::sched::{Event, SchedConfig, Scheduler};

/// Chooses the lowest-id candidate; counts what it was told per node.
#[derive(Default)]
pub(in crate::sched) struct First {
    pub(in crate::sched) told: Vec<NodeId>,
}

impl Placer for First {
    fn nodes_changed(&mut self, nodes: &[&Node]) {
        self.told.extend(nodes.iter().map(|n| n.id));
    }
    fn place(&mut self, _pod: &Pod, candidates: &[NodeId]) -> Choice {
        Choice { node: candidates.first().copied(), ..Choice::default() }
    }
}

fn node(name: &str) -> Node {
    Node::new(0, name, Resources { cpu_milli: 64_000, memory_mib: 262_144 }, 8, "A100")
}

pub(in crate::sched) fn nodes(n: usize) -> Vec<Node> {
    (0..n).map(|i| node(&format!("n{i}"))).collect()
}

pub(in crate::sched) fn pod(name: &str, tier: Tier, priority: i32, gpus: u32) -> Pod {
    Pod {
        name: name.into(),
        requests: Resources { cpu_milli: 1_000, memory_mib: 1_024 },
        gpu_count: gpus,
        gpu_milli: 1000,
        priority,
        tier,
        ..Pod::default()
    }
}

pub(in crate::sched) fn member(gang: &str, min_member: u32, name: &str, tier: Tier, gpus: u32) -> Pod {
    Pod { gang: Some(Gang { name: gang.into(), min_member, timeout_s: None }), ..pod(name, tier, 0, gpus) }
}

pub(in crate::sched) fn codes(events: &[Event]) -> Vec<(PodId, String)> {
    events
        .iter()
        .map(|e| match e {
            Event::Bound { pod, .. } => (*pod, "bound".to_string()),
            Event::Preempted { pod, .. } => (*pod, "preempted".to_string()),
            Event::Unschedulable { pod, reason } => (*pod, reason.code().to_string()),
        })
        .collect()
}

fn free_gpus(s: &Scheduler) -> u32 {
    s.cluster().nodes().iter().map(|n| n.whole_free_gpus()).sum()
}

/// No gang is ever partly running: none, or at least `min_member`.
pub(in crate::sched) fn no_partial_gang(s: &Scheduler) {
    for g in s.gangs() {
        assert!(g.running == 0 || g.running >= g.min_member, "{g:?}");
    }
}

#[test]
fn a_gang_binds_only_once_min_member_fit_and_holds_nothing_otherwise() {
    let mut s = Scheduler::new(nodes(2), SchedConfig::default());
    let mut p = First::default();
    for i in 0..3 {
        s.submit(i, member("job", 3, &format!("w{i}"), Tier::Soft, 8), 0).unwrap();
    }
    let events = s.schedule(&mut p, 0);
    assert_eq!(codes(&events), (0..3).map(|i| (i, "SCHED-GANG-UNSCHEDULABLE".to_string())).collect::<Vec<_>>());
    let Event::Unschedulable { reason: Why::Gang(GangWait::Unschedulable { fit, needed, blocker, .. }), .. } =
        &events[2]
    else {
        panic!("{events:?}")
    };
    assert_eq!((*fit, *needed, blocker.code()), (2, 3, "SCHED-GPU-INSUFFICIENT"));
    assert_eq!(free_gpus(&s), 16, "what was held for two members is released");
    // The placer heard of both nodes again after the release: its mirror
    // is the cluster as it stands.
    assert_eq!(p.told.iter().filter(|&&n| n == 0).count(), 3, "initial, held, released: {:?}", p.told);
    assert_eq!(s.stats().gang_rollbacks, 1);
    no_partial_gang(&s);

    // A third node: the members wake and the gang runs, all three at once.
    s.add_node(node("n2"));
    let events = s.schedule(&mut p, 5);
    assert_eq!(codes(&events), (0..3).map(|i| (i, "bound".to_string())).collect::<Vec<_>>());
    assert_eq!(free_gpus(&s), 0);
    assert_eq!(s.stats().gangs_admitted, 1);
    no_partial_gang(&s);
}

#[test]
fn an_incomplete_gang_waits_for_its_members_not_for_room() {
    let mut s = Scheduler::new(nodes(3), SchedConfig::default());
    let mut p = First::default();
    s.submit(0, member("job", 3, "w0", Tier::Soft, 8), 0).unwrap();
    s.submit(1, member("job", 3, "w1", Tier::Soft, 8), 0).unwrap();
    s.submit(9, pod("other", Tier::Soft, 0, 1), 0).unwrap();
    let events = s.schedule(&mut p, 0);
    assert_eq!(
        codes(&events),
        [(0, "SCHED-GANG-INCOMPLETE".into()), (1, "SCHED-GANG-INCOMPLETE".into()), (9, "bound".into())]
    );
    assert_eq!(s.waiting().next().unwrap().2.map(Why::code), Some("SCHED-GANG-INCOMPLETE"));
    // Room frees: no use to a gang short of members; they stay parked.
    s.remove(9);
    assert!(s.schedule(&mut p, 1).is_empty());
    // The third member arrives: the gang is decided, and runs.
    s.submit(2, member("job", 3, "w2", Tier::Soft, 8), 2).unwrap();
    let events = s.schedule(&mut p, 2);
    assert_eq!(codes(&events).iter().filter(|(_, c)| c == "bound").count(), 3, "{events:?}");
    assert_eq!(s.gangs().next().unwrap().running, 3);
}

/// Two gangs that each fit alone but not together: one at a time, each
/// would take one of the two nodes and wait forever for the other.
#[test]
fn two_gangs_that_fit_only_one_at_a_time_never_deadlock() {
    let mut s = Scheduler::new(nodes(2), SchedConfig::default());
    let mut p = First::default();
    // Interleaved, as two job controllers would create them.
    s.submit(0, member("a", 2, "a0", Tier::Soft, 8), 0).unwrap();
    s.submit(1, member("b", 2, "b0", Tier::Soft, 8), 0).unwrap();
    s.submit(2, member("a", 2, "a1", Tier::Soft, 8), 0).unwrap();
    s.submit(3, member("b", 2, "b1", Tier::Soft, 8), 0).unwrap();
    let events = s.schedule(&mut p, 0);
    no_partial_gang(&s);
    let bound: Vec<PodId> = s.running().map(|(id, ..)| id).collect();
    assert_eq!(bound, [0, 2], "gang a whole: {events:?}");
    let b: Vec<_> = s.waiting().map(|(id, _, r)| (id, r.map(Why::code))).collect();
    assert_eq!(b, [(1, Some("SCHED-GANG-UNSCHEDULABLE")), (3, Some("SCHED-GANG-UNSCHEDULABLE"))]);
    // Gang a finishes: b runs.
    s.remove(0);
    s.remove(2);
    s.schedule(&mut p, 10);
    no_partial_gang(&s);
    assert_eq!(s.running().map(|(id, ..)| id).collect::<Vec<_>>(), [1, 3]);
}

#[test]
fn members_past_min_member_are_placed_one_at_a_time() {
    let mut s = Scheduler::new(nodes(2), SchedConfig::default());
    let mut p = First::default();
    for i in 0..3 {
        s.submit(i, member("elastic", 2, &format!("w{i}"), Tier::Soft, 8), 0).unwrap();
    }
    let events = s.schedule(&mut p, 0);
    assert_eq!(codes(&events), [(0, "bound".into()), (1, "bound".into()), (2, "SCHED-GPU-INSUFFICIENT".into())]);
    s.add_node(node("n2"));
    assert_eq!(codes(&s.schedule(&mut p, 1)), [(2, "bound".into())]);
}

/// Places each pod on the node its name is given in the map (else the
/// first candidate): a layout for a test.
struct At(BTreeMap<&'static str, NodeId>);

impl Placer for At {
    fn nodes_changed(&mut self, _nodes: &[&Node]) {}
    fn place(&mut self, pod: &Pod, candidates: &[NodeId]) -> Choice {
        Choice { node: self.0.get(pod.name.as_str()).copied().or(candidates.first().copied()), ..Choice::default() }
    }
}

fn at(s: &Scheduler, id: PodId) -> Option<NodeId> {
    s.placement(id).map(|a| a.node)
}

#[test]
fn a_victim_costs_its_whole_gang() {
    // n0: lone (4 GPUs, started at 0) and gang member g0 (4, started at
    // 50); n1: g1 (4) and a hard pod (4).
    let mut p = At([("lone", 0), ("hard", 1), ("g0", 0), ("g1", 1)].into());
    let mut s = Scheduler::new(nodes(2), SchedConfig::default());
    s.submit(10, pod("lone", Tier::Opportunistic, 0, 4), 0).unwrap();
    s.submit(11, pod("hard", Tier::Hard, 0, 4), 0).unwrap();
    s.schedule(&mut p, 0);
    s.submit(1, member("g", 2, "g0", Tier::Opportunistic, 4), 50).unwrap();
    s.submit(2, member("g", 2, "g1", Tier::Opportunistic, 4), 50).unwrap();
    s.schedule(&mut p, 50);
    assert_eq!([10, 11, 1, 2].map(|id| at(&s, id)), [Some(0), Some(1), Some(0), Some(1)]);
    // 4 GPUs for a soft pod: g0 alone has lost less work than lone, but
    // evicting it ends its gang (two pods); lone is one pod.
    s.submit(20, pod("svc", Tier::Soft, 0, 4), 100).unwrap();
    let events = s.schedule(&mut p, 100);
    let Event::Preempted { victims, placement, .. } = &events[0] else { panic!("{events:?}") };
    assert_eq!((placement.node, victims.as_slice()), (0, [10].as_slice()));
    assert_eq!(s.gangs().next().unwrap().running, 2, "the gang runs on");
}

#[test]
fn a_gang_member_on_another_node_goes_with_its_gang() {
    // n0: g0 (4) and lone-a (4); n1: g1 (4) and lone-b (4).
    let mut p = At([("g0", 0), ("lone-a", 0), ("g1", 1), ("lone-b", 1)].into());
    let mut s = Scheduler::new(nodes(2), SchedConfig::default());
    s.submit(1, member("g", 2, "g0", Tier::Opportunistic, 4), 0).unwrap();
    s.submit(2, member("g", 2, "g1", Tier::Opportunistic, 4), 0).unwrap();
    s.submit(3, pod("lone-a", Tier::Opportunistic, 0, 4), 0).unwrap();
    s.submit(4, pod("lone-b", Tier::Opportunistic, 0, 4), 0).unwrap();
    s.schedule(&mut p, 0);
    assert_eq!([1, 2, 3, 4].map(|id| at(&s, id)), [Some(0), Some(1), Some(0), Some(1)]);
    // 8 GPUs on one node: a member and a lone pod either way; the
    // member's partner on the other node goes too, never left running
    // alone.
    s.submit(9, pod("big", Tier::Soft, 0, 8), 10).unwrap();
    let events = s.schedule(&mut p, 10);
    let Event::Preempted { victims, placement, .. } = &events[0] else { panic!("{events:?}") };
    assert_eq!((placement.node, victims.as_slice()), (0, [1, 2, 3].as_slice()));
    no_partial_gang(&s);
}

#[test]
fn a_protected_member_shields_its_whole_gang() {
    let mut p = First::default();
    let mut s = Scheduler::new(nodes(1), SchedConfig::default());
    s.submit(1, member("h", 2, "h0", Tier::Opportunistic, 4), 0).unwrap();
    s.submit(2, member("h", 2, "h1", Tier::Opportunistic, 4), 0).unwrap();
    s.schedule(&mut p, 0);
    // h1 is under a disruption budget: evicting h0 alone would end the
    // job all the same, so neither is a victim.
    s.protect(2, true);
    s.submit(9, pod("svc", Tier::Soft, 0, 4), 1).unwrap();
    assert_eq!(codes(&s.schedule(&mut p, 1)), [(9, "SCHED-GPU-INSUFFICIENT".into())]);
    s.protect(2, false);
    s.remove(9);
    s.submit(9, pod("svc", Tier::Soft, 0, 4), 2).unwrap();
    let events = s.schedule(&mut p, 2);
    let Event::Preempted { victims, .. } = &events[0] else { panic!("{events:?}") };
    assert_eq!(victims.as_slice(), [1, 2], "unprotected, the gang goes whole");
}

#[test]
fn a_gang_preempts_for_all_its_members_or_evicts_nobody() {
    let mut s = Scheduler::new(nodes(2), SchedConfig::default());
    let mut p = First::default();
    for i in 0..8 {
        s.submit(10 + i, pod(&format!("batch-{i}"), Tier::Opportunistic, 0, 1), 0).unwrap();
    }
    s.schedule(&mut p, 0);
    s.submit(30, pod("exclusive", Tier::Hard, 0, 8), 0).unwrap();
    s.schedule(&mut p, 0);
    let before: Vec<_> = s.running().map(|(id, _, at)| (id, at)).collect();
    // Member 1 could evict the batch pods on n0; member 2 finds nothing to
    // evict on n1 (a hard pod): the batch pods keep running where they ran.
    s.submit(1, member("train", 2, "t0", Tier::Soft, 8), 5).unwrap();
    s.submit(2, member("train", 2, "t1", Tier::Soft, 8), 5).unwrap();
    let events = s.schedule(&mut p, 5);
    assert_eq!(codes(&events), [(1, "SCHED-GANG-UNSCHEDULABLE".into()), (2, "SCHED-GANG-UNSCHEDULABLE".into())]);
    assert_eq!(s.running().map(|(id, _, at)| (id, at)).collect::<Vec<_>>(), before, "nothing moved");
    assert_eq!((s.stats().preemptions, s.stats().evicted), (0, 0));
    // The hard pod leaves: the gang binds on n1 and preempts on n0.
    s.remove(30);
    let events = s.schedule(&mut p, 6);
    assert!(
        matches!(&events[..2], [Event::Bound { pod: 1, .. }, Event::Preempted { pod: 2, victims, .. }] if victims.len() == 8),
        "{events:?}"
    );
    assert_eq!(s.gangs().next().unwrap().running, 2);
    no_partial_gang(&s);
}

#[test]
fn a_gang_past_its_timeout_says_so_and_keeps_waiting() {
    let mut s = Scheduler::new(nodes(1), SchedConfig::default());
    let mut p = First::default();
    let timed = |name: &str| Pod {
        gang: Some(Gang { name: "job".into(), min_member: 2, timeout_s: Some(10) }),
        ..pod(name, Tier::Soft, 0, 8)
    };
    s.submit(0, timed("w0"), 0).unwrap();
    s.submit(1, timed("w1"), 0).unwrap();
    assert_eq!(codes(&s.schedule(&mut p, 0))[0].1, "SCHED-GANG-UNSCHEDULABLE");
    // Woken at 20 (its node changed), still one node short: past the
    // timeout, and it says so.
    s.update_node(0, |_| ());
    let events = s.schedule(&mut p, 20);
    assert_eq!(codes(&events), [(0, "SCHED-GANG-TIMEOUT".into()), (1, "SCHED-GANG-TIMEOUT".into())]);
    let Event::Unschedulable { reason: Why::Gang(GangWait::TimedOut { waited_s, wait }), .. } = &events[0] else {
        panic!("{events:?}")
    };
    assert_eq!((*waited_s, wait.code()), (20, "SCHED-GANG-UNSCHEDULABLE"));
    assert!(reason_text(&events[0]).contains("1 of 2 members fit together"), "{}", reason_text(&events[0]));
    // It kept waiting: a second node, and it runs.
    s.add_node(node("n1"));
    assert_eq!(codes(&s.schedule(&mut p, 30)), [(0, "bound".into()), (1, "bound".into())]);
}

fn reason_text(e: &Event) -> String {
    match e {
        Event::Unschedulable { reason: Why::Gang(w), .. } => w.describe(),
        other => format!("{other:?}"),
    }
}

/// Random gangs and lone pods of every tier arriving and leaving (a gang
/// leaves whole): after every pass no gang runs short of `min_member`,
/// and the cluster's free GPUs are exactly what running pods leave, so
/// nothing an attempt held or a rollback restored is lost or doubled.
#[test]
fn random_gangs_never_run_partly_and_never_leak_room() {
    use rand::{RngExt, SeedableRng};
    let mut seen = (0, 0, 0);
    for seed in 0..40 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut s = Scheduler::new(nodes(4), SchedConfig::default());
        let mut p = First::default();
        let mut next: PodId = 0;
        let mut groups: Vec<Vec<PodId>> = Vec::new();
        for t in 0..60u64 {
            if rng.random_bool(0.6) {
                let size = rng.random_range(1..=4u32);
                let tier = [Tier::Opportunistic, Tier::Soft, Tier::Hard][rng.random_range(0..3)];
                let gpus = [1, 2, 4, 8][rng.random_range(0..4)];
                let name = format!("g{next}");
                let ids: Vec<PodId> = (0..size).map(|k| next + PodId::from(k)).collect();
                for &id in &ids {
                    let mut m = member(&name, size, &format!("{name}-{id}"), tier, gpus);
                    m.priority = rng.random_range(0..3);
                    if size == 1 && rng.random_bool(0.5) {
                        m.gang = None;
                    }
                    s.submit(id, m, t).unwrap();
                }
                next += PodId::from(size);
                groups.push(ids);
            }
            if !groups.is_empty() && rng.random_bool(0.3) {
                let g = groups.swap_remove(rng.random_range(0..groups.len()));
                for id in g {
                    s.remove(id);
                }
            }
            s.schedule(&mut p, t);
            no_partial_gang(&s);
            let used: u32 = s.running().map(|(_, pod, _)| pod.gpu_count).sum();
            assert_eq!(free_gpus(&s) + used, 32, "seed {seed} at {t}");
        }
        let st = s.stats();
        seen = (seen.0 + st.gangs_admitted, seen.1 + st.gang_rollbacks, seen.2 + st.preemptions);
    }
    let (admitted, rollbacks, preemptions) = seen;
    assert!(admitted > 0 && rollbacks > 0 && preemptions > 0, "the test exercises too little: {seen:?}");
}
