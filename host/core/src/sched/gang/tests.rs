use std::collections::BTreeMap;

use crate::framework::{Choice, GangWait, Placer, Why};
use crate::model::{Gang, Node, NodeId, Pod, PodId, Resources, Tier};
use crate::sched::{Event, SchedConfig, Scheduler};

/// Chooses the lowest-id candidate; counts what it was told per node.
#[derive(Default)]
struct First {
    told: Vec<NodeId>,
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

fn nodes(n: usize) -> Vec<Node> {
    (0..n).map(|i| node(&format!("n{i}"))).collect()
}

fn pod(name: &str, tier: Tier, priority: i32, gpus: u32) -> Pod {
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

fn member(gang: &str, min_member: u32, name: &str, tier: Tier, gpus: u32) -> Pod {
    Pod { gang: Some(Gang { name: gang.into(), min_member, timeout_s: None }), ..pod(name, tier, 0, gpus) }
}

fn codes(events: &[Event]) -> Vec<(PodId, String)> {
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
fn no_partial_gang(s: &Scheduler) {
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

/// Two 8-GPU nodes (and `extra`), each of the two with a 5-GPU pod; a
/// gang of two 8-GPU members waits from t=0. At t=20 `a` ends (the gang
/// wakes and is decided again, still one node short); at t=21 a 1-GPU pod
/// `c` arrives. Returns the scheduler and the events of t=21.
fn starved_gang(reserve_after_s: Option<u64>, extra: Vec<Node>) -> (Scheduler, First, Vec<Event>) {
    let cfg = SchedConfig { reserve_after_s, ..SchedConfig::default() };
    let mut all = nodes(2);
    all.extend(extra);
    let mut s = Scheduler::new(all, cfg);
    let mut p = First::default();
    s.submit(100, pod("a", Tier::Soft, 0, 5), 0).unwrap();
    s.submit(101, pod("b", Tier::Soft, 0, 5), 0).unwrap();
    assert_eq!(codes(&s.schedule(&mut p, 0)), [(100, "bound".into()), (101, "bound".into())]);
    s.submit(0, member("wide", 2, "w0", Tier::Soft, 8), 0).unwrap();
    s.submit(1, member("wide", 2, "w1", Tier::Soft, 8), 0).unwrap();
    let events = s.schedule(&mut p, 0);
    assert!(codes(&events).iter().all(|(_, c)| c == "SCHED-GANG-UNSCHEDULABLE"), "{events:?}");
    assert!(s.reservations().into_iter().next().is_none(), "it has not waited yet");

    s.remove(100);
    let at20 = s.schedule(&mut p, 20);
    assert!(codes(&at20).iter().all(|(_, c)| c == "SCHED-GANG-UNSCHEDULABLE"), "{at20:?}");
    s.submit(102, pod("c", Tier::Soft, 0, 1), 21).unwrap();
    let at21 = s.schedule(&mut p, 21);
    no_partial_gang(&s);
    (s, p, at21)
}

#[test]
fn without_reservations_small_pods_starve_a_wide_gang() {
    let (mut s, mut p, at21) = starved_gang(None, Vec::new());
    assert!(codes(&at21).contains(&(102, "bound".into())), "c takes the freed node: {at21:?}");
    s.remove(101);
    let at30 = s.schedule(&mut p, 30);
    assert!(codes(&at30).iter().all(|(_, c)| c == "SCHED-GANG-UNSCHEDULABLE"), "{at30:?}");
    assert_eq!(s.stats().reservations, 0);
}

#[test]
fn a_gang_that_waited_for_room_gets_nodes_kept_for_it() {
    let (mut s, mut p, at21) = starved_gang(Some(10), Vec::new());
    // At t=20 the gang had waited 20 s for room: both nodes are kept for
    // it, so the 1-GPU pod that fits on either is refused, and says why.
    let reserved = s.reservations().into_iter().next().expect("the gang waited 20 s for room");
    assert_eq!((reserved.gang.as_str(), reserved.nodes.len()), ("wide", 2));
    assert_eq!(codes(&at21), [(102, "SCHED-NODE-RESERVED".into())]);
    assert_eq!(s.stats().reservations, 1);
    // `b` ends: the gang runs on both nodes and the reservation ends.
    s.remove(101);
    let at30 = s.schedule(&mut p, 30);
    let c30 = codes(&at30);
    assert!(c30.contains(&(0, "bound".into())) && c30.contains(&(1, "bound".into())), "{at30:?}");
    assert!(s.reservations().into_iter().next().is_none());
    assert_eq!(s.gangs().next().unwrap().running, 2);
    no_partial_gang(&s);
}

#[test]
fn a_reservation_waits_its_time_keeps_only_what_fits_and_ends_when_its_gang_leaves() {
    // Waited 20 s of the 60 asked: no reservation, c is placed.
    let (s, _, at21) = starved_gang(Some(60), Vec::new());
    assert!(codes(&at21).contains(&(102, "bound".into())), "{at21:?}");
    assert!(s.reservations().into_iter().next().is_none());

    // A 4-GPU node holds no member: it is not kept, and c goes there.
    let small = Node::new(0, "n2", Resources { cpu_milli: 64_000, memory_mib: 262_144 }, 4, "A100");
    let (mut s, mut p, at21) = starved_gang(Some(10), vec![small]);
    let reserved = s.reservations().into_iter().next().expect("the gang waited 20 s for room");
    assert_eq!(reserved.nodes, ["n0", "n1"]);
    let Some(Event::Bound { placement, .. }) = at21.iter().find(|e| matches!(e, Event::Bound { pod: 102, .. })) else {
        panic!("c fits the node not kept: {at21:?}")
    };
    assert_eq!(s.cluster().node(placement.node).unwrap().name, "n2");
    // The gang is withdrawn: its nodes are everyone's again.
    s.remove(0);
    s.remove(1);
    s.submit(103, pod("d", Tier::Soft, 0, 1), 22).unwrap();
    let at22 = s.schedule(&mut p, 22);
    assert!(s.reservations().into_iter().next().is_none(), "its gang left");
    let Some(Event::Bound { placement, .. }) = at22.iter().find(|e| matches!(e, Event::Bound { pod: 103, .. })) else {
        panic!("{at22:?}")
    };
    assert_eq!(s.cluster().node(placement.node).unwrap().name, "n0");
}

/// Two 8-GPU nodes, each with a 5-GPU pod bound at t=0 (`a` declaring
/// 100 s, `b` declaring `b_limit`); a gang of two 8-GPU members waits from
/// t=0 and is elected at t=20, when `a` ends early. At t=21 three 1-GPU
/// pods arrive: `short` declares 50 s, `long` 90 s, `open` nothing.
fn backfill(b_limit: Option<u64>) -> (Scheduler, First, Vec<Event>) {
    backfill_in(b_limit, false)
}

/// [`backfill`]; with `queues`, leaf queues `a` and `b`, every pod in `a`,
/// and `other` (1 GPU, declaring 50 s) in `b` arriving at t=21 too.
fn backfill_in(b_limit: Option<u64>, queues: bool) -> (Scheduler, First, Vec<Event>) {
    use crate::quota::{QueueSpec, QueueTree, QueuesConfig, Quota};
    let cfg = SchedConfig { reserve_after_s: Some(10), ..SchedConfig::default() };
    let mut s = Scheduler::new(nodes(2), cfg);
    if queues {
        let leaf = |name: &str| QueueSpec {
            name: name.into(),
            parent: None,
            weight: 1.0,
            guarantee: Quota::default(),
            limit: Quota::default(),
        };
        let list = vec![leaf("a"), leaf("b")];
        s.set_queues(QueueTree::new(&QueuesConfig { list, ..QueuesConfig::default() }).unwrap());
    }
    let queue = queues.then(|| "a".to_string());
    let mut p = First::default();
    let limited = |name: &str, gpus: u32, limit: Option<u64>| Pod {
        run_limit_s: limit,
        queue: queue.clone(),
        ..pod(name, Tier::Soft, 0, gpus)
    };
    let member = |name: &str| Pod { queue: queue.clone(), ..member("wide", 2, name, Tier::Soft, 8) };
    s.submit(100, limited("a", 5, Some(100)), 0).unwrap();
    s.submit(101, limited("b", 5, b_limit), 0).unwrap();
    s.submit(0, member("w0"), 0).unwrap();
    s.submit(1, member("w1"), 0).unwrap();
    s.schedule(&mut p, 0);
    s.remove(100);
    s.schedule(&mut p, 20);
    assert!(s.reservations().into_iter().next().is_some(), "the gang waited 20 s for room");
    s.submit(102, limited("short", 1, Some(50)), 21).unwrap();
    s.submit(103, limited("long", 1, Some(90)), 21).unwrap();
    s.submit(104, limited("open", 1, None), 21).unwrap();
    if queues {
        s.submit(106, Pod { queue: Some("b".into()), ..limited("other", 1, Some(50)) }, 21).unwrap();
    }
    let at21 = s.schedule(&mut p, 21);
    no_partial_gang(&s);
    (s, p, at21)
}

#[test]
fn a_pod_that_ends_before_the_kept_nodes_are_free_backfills_them() {
    let (mut s, mut p, at21) = backfill(Some(100));
    // `b` ends by t=100 at the latest: that is when the gang can start.
    assert_eq!(s.reservations().into_iter().next().unwrap().ready_at, Some(100));
    // 21 + 50 <= 100: `short` runs meanwhile; `long` would hold the gang
    // past 100 and `open` might run for ever: both are kept off.
    assert_eq!(
        codes(&at21),
        [(102, "bound".into()), (103, "SCHED-NODE-RESERVED".into()), (104, "SCHED-NODE-RESERVED".into())]
    );
    // `short` ends at 71 and `b` at 100, as declared: the gang starts then.
    s.remove(102);
    s.schedule(&mut p, 71);
    assert_eq!(s.reservations().into_iter().next().unwrap().ready_at, Some(100), "ready_at is taken afresh");
    s.remove(101);
    let at100 = s.schedule(&mut p, 100);
    let c = codes(&at100);
    assert!(c.contains(&(0, "bound".into())) && c.contains(&(1, "bound".into())), "{at100:?}");
    assert!(s.reservations().into_iter().next().is_none());
}

#[test]
fn no_backfill_while_a_pod_on_the_kept_nodes_declares_no_limit_or_ran_past_it() {
    let (s, _, at21) = backfill(None);
    assert_eq!(s.reservations().into_iter().next().unwrap().ready_at, None);
    assert!(codes(&at21).iter().all(|(_, c)| c == "SCHED-NODE-RESERVED"), "{at21:?}");

    // `b` declared 100 s and still runs at t=150: when it ends is unknown.
    let (mut s, mut p, _) = backfill(Some(100));
    s.remove(102);
    s.submit(105, Pod { run_limit_s: Some(1), ..pod("tiny", Tier::Soft, 0, 1) }, 150).unwrap();
    let at150 = s.schedule(&mut p, 150);
    assert_eq!(s.reservations().into_iter().next().unwrap().ready_at, None);
    assert!(!codes(&at150).contains(&(105, "bound".into())), "{at150:?}");
}

#[test]
fn only_the_gangs_own_queue_backfills_its_kept_nodes() {
    let (s, _, at21) = backfill_in(Some(100), true);
    assert_eq!(s.reservations().into_iter().next().unwrap().ready_at, Some(100));
    let mut c = codes(&at21);
    c.sort();
    // `other` ends in time too, but waits in queue `b`: the drain is `a`'s.
    assert_eq!(
        c,
        [
            (102, "bound".into()),
            (103, "SCHED-NODE-RESERVED".into()),
            (104, "SCHED-NODE-RESERVED".into()),
            (106, "SCHED-NODE-RESERVED".into())
        ]
    );
}

#[test]
fn the_nodes_kept_are_those_whose_pods_end_first_by_what_they_declare() {
    let cfg = SchedConfig { reserve_after_s: Some(0), ..SchedConfig::default() };
    let mut s = Scheduler::new(nodes(3), cfg);
    let mut p = First::default();
    let limited =
        |name: &str, gpus: u32, limit: u64| Pod { run_limit_s: Some(limit), ..pod(name, Tier::Soft, 0, gpus) };
    // n0: `a`, 5 GPUs until 500; n1: `b`, 5 GPUs until 100; n2: `c`, 6 GPUs until 50.
    s.submit(100, limited("a", 5, 500), 0).unwrap();
    s.submit(101, limited("b", 5, 100), 0).unwrap();
    s.submit(102, limited("c", 6, 50), 0).unwrap();
    s.schedule(&mut p, 0);
    s.submit(0, member("wide", 2, "w0", Tier::Soft, 8), 0).unwrap();
    s.submit(1, member("wide", 2, "w1", Tier::Soft, 8), 0).unwrap();
    s.schedule(&mut p, 0);
    let r = s.reservations().into_iter().next().expect("elected at once");
    // The least in use would be n0 and n1 (5 GPUs each), free at 500.
    assert_eq!((r.nodes, r.ready_at), (vec!["n1".to_string(), "n2".to_string()], Some(100)));
}

/// Three 8-GPU nodes: `a` (5 GPUs) on n0, `b` (5) on n1, `c` (6) on n2; a
/// gang of two 8-GPU members is elected at once and keeps n0 and n1, the
/// least in use.
fn kept_for_wide(reserve_after_s: u64) -> (Scheduler, First) {
    let cfg = SchedConfig { reserve_after_s: Some(reserve_after_s), ..SchedConfig::default() };
    let mut s = Scheduler::new(nodes(3), cfg);
    let mut p = First::default();
    s.submit(100, pod("a", Tier::Soft, 0, 5), 0).unwrap();
    s.submit(101, pod("b", Tier::Soft, 0, 5), 0).unwrap();
    s.submit(102, pod("c", Tier::Soft, 0, 6), 0).unwrap();
    s.schedule(&mut p, 0);
    s.submit(0, member("wide", 2, "w0", Tier::Soft, 8), 0).unwrap();
    s.submit(1, member("wide", 2, "w1", Tier::Soft, 8), 0).unwrap();
    s.schedule(&mut p, 0);
    (s, p)
}

fn kept(s: &Scheduler) -> Vec<String> {
    s.reservations().into_iter().next().map(|r| r.nodes).unwrap_or_default()
}

#[test]
fn a_kept_node_still_busy_is_traded_for_one_that_emptied() {
    let (mut s, mut p) = kept_for_wide(0);
    assert_eq!(kept(&s), ["n0", "n1"]);
    // `c` ends: n2, kept for no one, holds a member now. It is kept in
    // place of n1 (n0 and n1 drain alike; the later goes back), which
    // takes the next pod.
    s.remove(102);
    s.submit(103, pod("d", Tier::Soft, 0, 1), 10).unwrap();
    let at10 = s.schedule(&mut p, 10);
    assert_eq!(kept(&s), ["n0", "n2"]);
    let Some(Event::Bound { placement, .. }) = at10.iter().find(|e| matches!(e, Event::Bound { pod: 103, .. })) else {
        panic!("d takes the node given back: {at10:?}")
    };
    assert_eq!(s.cluster().node(placement.node).unwrap().name, "n1");
    // `a` ends: the gang runs on n0 and n2 without waiting for `b`.
    s.remove(100);
    let at20 = s.schedule(&mut p, 20);
    let c20 = codes(&at20);
    assert!(c20.contains(&(0, "bound".into())) && c20.contains(&(1, "bound".into())), "{at20:?}");
    assert!(s.reservations().is_empty());
    no_partial_gang(&s);
}

#[test]
fn a_gang_short_of_room_is_decided_again_to_be_elected_though_no_node_frees() {
    let cfg = SchedConfig { reserve_after_s: Some(10), ..SchedConfig::default() };
    let mut s = Scheduler::new(nodes(2), cfg);
    let mut p = First::default();
    s.submit(100, pod("a", Tier::Soft, 0, 5), 0).unwrap();
    s.submit(101, pod("b", Tier::Soft, 0, 5), 0).unwrap();
    s.schedule(&mut p, 0);
    s.submit(0, member("wide", 2, "w0", Tier::Soft, 8), 0).unwrap();
    s.submit(1, member("wide", 2, "w1", Tier::Soft, 8), 0).unwrap();
    assert!(codes(&s.schedule(&mut p, 0)).iter().all(|(_, c)| c == "SCHED-GANG-UNSCHEDULABLE"));
    // Nothing ends: no node frees enough for a member to wake the gang.
    assert!(s.schedule(&mut p, 5).is_empty(), "not yet waited 10 s");
    assert!(s.reservations().is_empty());
    let at20 = s.schedule(&mut p, 20);
    assert_eq!(codes(&at20).len(), 2, "decided again: {at20:?}");
    assert_eq!(s.reservations()[0].nodes, ["n0", "n1"]);
    assert!(s.schedule(&mut p, 25).is_empty(), "once elected, not decided again for it");
}

/// [`kept_for_wide`]'s scene with `reserve_after_s` 100: the gang waits
/// from 0 and is elected at 100, keeping n0 and n1; nothing declares when
/// it ends.
fn elected_at_100() -> (Scheduler, First) {
    let (mut s, mut p) = kept_for_wide(100);
    assert!(s.reservations().is_empty(), "not before it waited 100 s");
    s.schedule(&mut p, 100);
    assert_eq!(kept(&s), ["n0", "n1"], "elected at 100, the least in use");
    (s, p)
}

#[test]
fn a_kept_node_held_by_the_oldest_pod_is_traded_for_one_running_younger_pods() {
    let (mut s, mut p) = elected_at_100();
    // `b` ends: n1 is free for a member. At 150 `d` (2 GPUs) takes what
    // `c` leaves of n2, then `c` ends.
    s.remove(101);
    s.submit(103, pod("d", Tier::Soft, 0, 2), 150).unwrap();
    let at150 = s.schedule(&mut p, 150);
    assert!(codes(&at150).contains(&(103, "bound".into())), "{at150:?}");
    s.remove(102);
    // Not yet `reserve_after_s` since the election: n0 stays kept
    // however old `a` is.
    s.schedule(&mut p, 199);
    assert_eq!(kept(&s), ["n0", "n1"]);
    // At 200 `a` has run 200 s, `d` 50: n0 goes back for n2, and `e` (3
    // GPUs, which n2 would hold) takes what n0 drained.
    s.submit(104, pod("e", Tier::Soft, 0, 3), 200).unwrap();
    let at200 = s.schedule(&mut p, 200);
    assert_eq!(kept(&s), ["n1", "n2"]);
    let Some(Event::Bound { placement, .. }) = at200.iter().find(|e| matches!(e, Event::Bound { pod: 104, .. })) else {
        panic!("e takes the node given back: {at200:?}")
    };
    assert_eq!(s.cluster().node(placement.node).unwrap().name, "n0");
    // Once a trade is made, none for another `reserve_after_s`.
    s.schedule(&mut p, 250);
    assert_eq!(kept(&s), ["n1", "n2"]);
    // `d` ends: the gang runs on n1 and n2 while `a` still runs.
    s.remove(103);
    let at260 = s.schedule(&mut p, 260);
    let c260 = codes(&at260);
    assert!(c260.contains(&(0, "bound".into())) && c260.contains(&(1, "bound".into())), "{at260:?}");
    assert!(s.reservations().is_empty());
    no_partial_gang(&s);
}

#[test]
fn a_kept_node_is_not_traded_for_one_whose_pods_are_about_as_old() {
    let (mut s, mut p) = elected_at_100();
    // n2's `c` has run as long as n0's `a`: nothing to gain by a trade.
    for t in [200, 300, 400] {
        s.schedule(&mut p, t);
        assert_eq!(kept(&s), ["n0", "n1"], "at {t}");
    }
}
