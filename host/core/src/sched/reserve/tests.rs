//! Reservations for gangs that wait for room (`scheduling.reserve_after_s`):
//! election, kept nodes taken afresh and traded, backfill. The scenes are
//! built with the gang tests' helpers.

use crate::model::{Node, Pod, PodId, Resources, Tier};
use crate::sched::gang::tests::{First, codes, member, no_partial_gang, nodes, pod};
use crate::sched::{Event, SchedConfig, Scheduler};

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

/// The scenes' gang (members 0 and 1) was bound by the pass that gave
/// `events`, whole, and its nodes are no longer kept.
fn gang_ran(s: &Scheduler, events: &[Event]) {
    let c = codes(events);
    assert!(c.contains(&(0, "bound".into())) && c.contains(&(1, "bound".into())), "{events:?}");
    assert!(s.reservations().is_empty(), "{events:?}");
    no_partial_gang(s);
}

/// The node `id` was bound to by `events` (a pass's), by name.
fn bound_to(s: &Scheduler, events: &[Event], id: PodId, why: &str) -> String {
    let Some(Event::Bound { placement, .. }) =
        events.iter().find(|e| matches!(e, Event::Bound { pod, .. } if *pod == id))
    else {
        panic!("{why}: {events:?}")
    };
    s.cluster().node(placement.node).unwrap().name.clone()
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
    gang_ran(&s, &at30);
    assert_eq!(s.gangs().next().unwrap().running, 2);
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
    assert_eq!(bound_to(&s, &at21, 102, "c fits the node not kept"), "n2");
    // The gang is withdrawn: its nodes are everyone's again.
    s.remove(0);
    s.remove(1);
    s.submit(103, pod("d", Tier::Soft, 0, 1), 22).unwrap();
    let at22 = s.schedule(&mut p, 22);
    assert!(s.reservations().into_iter().next().is_none(), "its gang left");
    assert_eq!(bound_to(&s, &at22, 103, "d is bound"), "n0");
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
    gang_ran(&s, &at100);
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
    assert_eq!(bound_to(&s, &at10, 103, "d takes the node given back"), "n1");
    // `a` ends: the gang runs on n0 and n2 without waiting for `b`.
    s.remove(100);
    let at20 = s.schedule(&mut p, 20);
    gang_ran(&s, &at20);
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
    assert_eq!(bound_to(&s, &at200, 104, "e takes the node given back"), "n0");
    // Once a trade is made, none for another `reserve_after_s`.
    s.schedule(&mut p, 250);
    assert_eq!(kept(&s), ["n1", "n2"]);
    // `d` ends: the gang runs on n1 and n2 while `a` still runs.
    s.remove(103);
    let at260 = s.schedule(&mut p, 260);
    gang_ran(&s, &at260);
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
