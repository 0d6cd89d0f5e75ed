use std::collections::BTreeMap;

use crate::framework::{Choice, Placer, QueueWait, Why};
use crate::model::{Gang, Node, NodeId, Pod, PodId, Resources, Tier};
use crate::quota::{Dim, QueueSpec, QueueTree, QueuesConfig, Quota};
use crate::sched::{Event, SchedConfig, Scheduler};

/// Chooses the lowest-id candidate.
struct First;

impl Placer for First {
    fn nodes_changed(&mut self, _nodes: &[&Node]) {}
    fn place(&mut self, _pod: &Pod, candidates: &[NodeId]) -> Choice {
        Choice { node: candidates.first().copied(), ..Choice::default() }
    }
}

fn node(name: &str, gpus: usize, model: &str) -> Node {
    Node::new(0, name, Resources { cpu_milli: 64_000, memory_mib: 262_144 }, gpus, model)
}

fn pod(name: &str, queue: &str, gpus: u32) -> Pod {
    Pod {
        name: name.into(),
        requests: Resources { cpu_milli: 1_000, memory_mib: 1_024 },
        gpu_count: gpus,
        gpu_milli: 1000,
        tier: Tier::Opportunistic,
        queue: Some(queue.into()),
        ..Pod::default()
    }
}

fn gpus(n: u32) -> Quota {
    Quota { gpus: Some(n), ..Quota::default() }
}

fn queue(name: &str, weight: f64, guarantee: Quota, limit: Quota) -> QueueSpec {
    QueueSpec { name: name.into(), parent: None, weight, guarantee, limit }
}

fn with_queues(nodes: Vec<Node>, list: Vec<QueueSpec>) -> Scheduler {
    let mut s = Scheduler::new(nodes, SchedConfig::default());
    s.set_queues(QueueTree::new(&QueuesConfig { list, ..QueuesConfig::default() }).unwrap());
    s
}

/// GPUs each queue's pods hold, by queue name.
fn held(s: &Scheduler) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for (_, p, _) in s.running() {
        *out.entry(p.queue.clone().unwrap_or_default()).or_insert(0) += p.gpu_count;
    }
    out
}

fn reasons(events: &[Event]) -> Vec<(PodId, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Unschedulable { pod, reason } => Some((*pod, reason.code().to_string())),
            _ => None,
        })
        .collect()
}

fn used_gpus(s: &Scheduler, q: &str) -> u64 {
    s.queues().into_iter().find(|x| x.name == q).unwrap().used.get(&Dim::Gpu) / 1000
}

#[test]
fn sibling_queues_share_by_dominant_resource_not_by_arrival() {
    let run = |queues: bool| {
        let mut s = if queues {
            with_queues(
                vec![node("n0", 8, "A100")],
                vec![
                    queue("a", 1.0, Quota::default(), Quota::default()),
                    queue("b", 1.0, Quota::default(), Quota::default()),
                ],
            )
        } else {
            Scheduler::new(vec![node("n0", 8, "A100")], SchedConfig::default())
        };
        let mut id = 0;
        for q in ["a", "b"] {
            for i in 0..8 {
                let p = if queues {
                    pod(&format!("{q}{i}"), q, 1)
                } else {
                    Pod { queue: None, ..pod(&format!("{q}{i}"), q, 1) }
                };
                s.submit(id, p, 0).unwrap();
                id += 1;
            }
        }
        s.schedule(&mut First, 0);
        let mut by_name: BTreeMap<char, u32> = BTreeMap::new();
        for (_, p, _) in s.running() {
            *by_name.entry(p.name.chars().next().unwrap()).or_insert(0) += 1;
        }
        by_name
    };
    assert_eq!(run(false), BTreeMap::from([('a', 8)]), "one queue: first come, first served");
    assert_eq!(run(true), BTreeMap::from([('a', 4), ('b', 4)]), "two queues of equal weight: half each");
}

#[test]
fn weights_set_the_shares_of_what_is_not_guaranteed() {
    let mut s = with_queues(
        vec![node("n0", 8, "A100")],
        vec![queue("a", 1.0, Quota::default(), Quota::default()), queue("b", 3.0, Quota::default(), Quota::default())],
    );
    for i in 0..16 {
        let q = if i < 8 { "a" } else { "b" };
        s.submit(i, pod(&format!("p{i}"), q, 1), 0).unwrap();
    }
    s.schedule(&mut First, 0);
    assert_eq!(held(&s), BTreeMap::from([("a".into(), 2), ("b".into(), 6)]));
}

#[test]
fn a_limit_holds_pods_with_room_free_until_the_queue_uses_less() {
    let mut s = with_queues(vec![node("n0", 8, "A100")], vec![queue("a", 1.0, Quota::default(), gpus(2))]);
    for i in 0..3 {
        s.submit(i, pod(&format!("p{i}"), "a", 1), 0).unwrap();
    }
    let ev = s.schedule(&mut First, 0);
    assert_eq!(reasons(&ev), [(2, "SCHED-QUEUE-LIMIT".to_string())]);
    let (_, _, why) = s.waiting().next().unwrap();
    assert_eq!(
        why,
        Some(&Why::Queue(QueueWait::Limit {
            queue: "a".into(),
            resource: "gpus".into(),
            limit: "2".into(),
            used: "2".into()
        }))
    );
    assert_eq!(s.cluster().nodes()[0].whole_free_gpus(), 6, "room was free: the limit held it");
    // Room elsewhere does not wake it; its queue using less does.
    s.add_node(node("n1", 8, "A100"));
    assert!(s.schedule(&mut First, 1).is_empty(), "still held by its limit");
    s.remove(0);
    let ev = s.schedule(&mut First, 2);
    assert!(matches!(ev[..], [Event::Bound { pod: 2, .. }]), "{ev:?}");
    assert_eq!(used_gpus(&s, "a"), 2);
}

#[test]
fn a_limit_on_one_gpu_model_sends_the_pod_to_another() {
    let limit = Quota { gpus_by_model: BTreeMap::from([("V100".into(), 1)]), ..Quota::default() };
    let mut s =
        with_queues(vec![node("v", 8, "V100"), node("p", 8, "P100")], vec![queue("a", 1.0, Quota::default(), limit)]);
    s.submit(0, pod("x", "a", 1), 0).unwrap();
    s.submit(1, pod("y", "a", 1), 0).unwrap();
    s.schedule(&mut First, 0);
    assert_eq!((s.placement(0).unwrap().node, s.placement(1).unwrap().node), (0, 1), "the second V100 GPU is over");
    let only_v100 = Pod { allowed_models: vec!["V100".into()], ..pod("z", "a", 1) };
    s.submit(2, only_v100, 0).unwrap();
    let ev = s.schedule(&mut First, 1);
    assert_eq!(reasons(&ev), [(2, "SCHED-QUEUE-LIMIT".to_string())]);
    let q = s.queues().into_iter().find(|q| q.name == "a").unwrap();
    assert_eq!(q.used.get(&Dim::Model("V100".into())), 1000);
    assert_eq!(q.used.get(&Dim::Model("P100".into())), 1000);
}

#[test]
fn a_pod_naming_no_queue_waits_until_the_queues_name_it() {
    let mut s = with_queues(vec![node("n0", 8, "A100")], vec![queue("a", 1.0, Quota::default(), Quota::default())]);
    s.submit(0, pod("x", "ml", 1), 0).unwrap();
    s.submit(1, Pod { queue: None, ..pod("y", "", 1) }, 0).unwrap();
    let ev = s.schedule(&mut First, 0);
    assert_eq!(reasons(&ev), [(0, "SCHED-QUEUE-UNKNOWN".to_string())], "no queue named: the default");
    assert!(s.schedule(&mut First, 1).is_empty(), "room does not end it");
    let list =
        vec![queue("a", 1.0, Quota::default(), Quota::default()), queue("ml", 1.0, Quota::default(), Quota::default())];
    s.set_queues(QueueTree::new(&QueuesConfig { list, ..QueuesConfig::default() }).unwrap());
    let ev = s.schedule(&mut First, 2);
    assert!(matches!(ev[..], [Event::Bound { pod: 0, .. }]), "{ev:?}");
    assert_eq!(used_gpus(&s, "ml"), 1);
    assert_eq!(used_gpus(&s, "default"), 1, "what ran is charged to the new tree");
}

/// b borrows a's idle guarantee; a takes it back, whatever the priority
/// of b's pods, and never takes b below its own guarantee.
#[test]
fn an_idle_guarantee_is_borrowed_and_reclaimed_down_to_the_borrowers_guarantee() {
    let list = || vec![queue("a", 1.0, gpus(4), Quota::default()), queue("b", 1.0, gpus(4), Quota::default())];
    let mut s = with_queues(vec![node("n0", 8, "A100")], list());
    for i in 0..8 {
        let p = Pod { priority: 100, tier: Tier::Soft, ..pod(&format!("b{i}"), "b", 1) };
        s.submit(i, p, 0).unwrap();
    }
    s.schedule(&mut First, 0);
    assert_eq!(held(&s), BTreeMap::from([("b".into(), 8)]), "b borrows all of a's idle guarantee");
    let b = s.queues().into_iter().find(|q| q.name == "b").unwrap();
    assert_eq!(b.borrowed.get(&Dim::Gpu), 4000);
    for i in 0..5 {
        s.submit(100 + i, pod(&format!("a{i}"), "a", 1), 10).unwrap();
    }
    let ev = s.schedule(&mut First, 10);
    let preempted = ev.iter().filter(|e| matches!(e, Event::Preempted { .. })).count();
    assert_eq!(preempted, 4, "{ev:?}");
    assert_eq!(held(&s), BTreeMap::from([("a".into(), 4), ("b".into(), 4)]), "the fifth a pod is past a's guarantee");
    assert_eq!(s.stats().evicted, 4);
    // Without reclaim, a waits for b to finish.
    let mut s = Scheduler::new(vec![node("n0", 8, "A100")], SchedConfig::default());
    s.set_queues(QueueTree::new(&QueuesConfig { list: list(), reclaim: false, ..QueuesConfig::default() }).unwrap());
    for i in 0..8 {
        s.submit(i, pod(&format!("b{i}"), "b", 1), 0).unwrap();
    }
    s.schedule(&mut First, 0);
    s.submit(100, Pod { priority: 1000, tier: Tier::Soft, ..pod("a0", "a", 1) }, 10).unwrap();
    let ev = s.schedule(&mut First, 10);
    assert_eq!(reasons(&ev), [(100, "SCHED-GPU-INSUFFICIENT".to_string())], "no preemption across queues");
}

#[test]
fn reclaim_counts_every_victim_together_against_the_borrowers_guarantee() {
    // b is guaranteed 6 (guarantees over-commit the 8 GPUs) and uses 8: it
    // may give back 2, not the 4 a's pod needs, though each 1-GPU pod
    // alone could go.
    let list = vec![queue("a", 1.0, gpus(4), Quota::default()), queue("b", 1.0, gpus(6), Quota::default())];
    let mut s = with_queues(vec![node("n0", 8, "A100")], list);
    for i in 0..8 {
        s.submit(i, pod(&format!("b{i}"), "b", 1), 0).unwrap();
    }
    s.schedule(&mut First, 0);
    s.submit(100, pod("a0", "a", 4), 10).unwrap();
    let ev = s.schedule(&mut First, 10);
    assert_eq!(reasons(&ev), [(100, "SCHED-GPU-INSUFFICIENT".to_string())], "{ev:?}");
    assert_eq!(held(&s), BTreeMap::from([("b".into(), 8)]));
    s.submit(101, pod("a1", "a", 2), 11).unwrap();
    let ev = s.schedule(&mut First, 11);
    assert!(ev.iter().any(|e| matches!(e, Event::Preempted { pod: 101, victims, .. } if victims.len() == 2)), "{ev:?}");
    assert_eq!(used_gpus(&s, "b"), 6);
}

#[test]
fn hard_tier_pods_are_never_reclaimed() {
    let list = vec![queue("a", 1.0, gpus(4), Quota::default()), queue("b", 1.0, Quota::default(), Quota::default())];
    let mut s = with_queues(vec![node("n0", 8, "A100")], list);
    for i in 0..8 {
        s.submit(i, Pod { tier: Tier::Hard, ..pod(&format!("b{i}"), "b", 1) }, 0).unwrap();
    }
    s.schedule(&mut First, 0);
    s.submit(100, pod("a0", "a", 1), 10).unwrap();
    let ev = s.schedule(&mut First, 10);
    assert_eq!(reasons(&ev), [(100, "SCHED-GPU-INSUFFICIENT".to_string())]);
}

#[test]
fn a_gang_past_its_queues_limit_holds_nothing_and_says_why() {
    let mut s = with_queues(
        vec![node("n0", 8, "A100"), node("n1", 8, "A100")],
        vec![queue("a", 1.0, Quota::default(), gpus(12))],
    );
    let gang = Some(Gang { name: "job".into(), min_member: 2, timeout_s: None });
    for i in 0..2 {
        s.submit(i, Pod { gang: gang.clone(), ..pod(&format!("w{i}"), "a", 8) }, 0).unwrap();
    }
    let ev = s.schedule(&mut First, 0);
    assert_eq!(
        reasons(&ev),
        [(0, "SCHED-GANG-UNSCHEDULABLE".to_string()), (1, "SCHED-GANG-UNSCHEDULABLE".to_string())]
    );
    let (_, _, why) = s.waiting().next().unwrap();
    assert_eq!(why.and_then(Why::queue_wait).map(QueueWait::code), Some("SCHED-QUEUE-LIMIT"), "{why:?}");
    assert_eq!(used_gpus(&s, "a"), 0, "the member held was given back");
    assert_eq!(s.cluster().nodes().iter().map(|n| n.whole_free_gpus()).sum::<u32>(), 16);
}

/// Random queues, limits and guarantees; pods come and go. At every step
/// each queue's use is what its running pods use, and no limit is passed.
#[test]
fn use_is_what_runs_and_limits_hold_over_random_runs() {
    use rand::{RngExt, SeedableRng};
    for seed in 0..30u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let names = ["a", "b", "c"];
        let list: Vec<QueueSpec> = names
            .iter()
            .map(|n| {
                let g = rng.random_range(0..6);
                let l = rng.random_bool(0.5).then(|| g + rng.random_range(0..8));
                queue(n, rng.random_range(1..4) as f64, gpus(g), Quota { gpus: l, ..Quota::default() })
            })
            .collect();
        let limits: BTreeMap<String, Option<u32>> = list.iter().map(|q| (q.name.clone(), q.limit.gpus)).collect();
        let nodes = (0..3).map(|i| node(&format!("n{i}"), 8, "A100")).collect();
        let mut s = with_queues(nodes, list);
        let mut next = 0;
        for step in 0..60u64 {
            for _ in 0..rng.random_range(0..4) {
                let q = names[rng.random_range(0..3)];
                let p = Pod { priority: rng.random_range(0..3), ..pod(&format!("p{next}"), q, rng.random_range(1..5)) };
                s.submit(next, p, step).unwrap();
                next += 1;
            }
            if rng.random_bool(0.4) {
                let running: Vec<PodId> = s.running().map(|(id, ..)| id).collect();
                if !running.is_empty() {
                    s.remove(running[rng.random_range(0..running.len())]);
                }
            }
            s.schedule(&mut First, step);
            let held = held(&s);
            for q in s.queues() {
                assert_eq!(
                    q.used.get(&Dim::Gpu) / 1000,
                    u64::from(*held.get(&q.name).unwrap_or(&0)),
                    "seed {seed} step {step}"
                );
                if let Some(Some(l)) = limits.get(&q.name) {
                    assert!(q.used.get(&Dim::Gpu) <= u64::from(*l) * 1000, "seed {seed} step {step}: {q:?}");
                }
            }
        }
    }
}

/// Queue a fills two 8-GPU nodes with 4-GPU pods before b asks for one
/// 8-GPU pod. Without the gate, each half node a frees goes back to a (b
/// never fits); with it, a — already at its fair half — starts nothing
/// new, the freed GPUs wait, and b runs once a whole node is free. When b
/// is gone, a's share grows back and its held pods run.
#[test]
fn the_fair_share_gate_keeps_room_for_a_queue_below_its_share() {
    let run = |gate: bool| {
        let list = vec![
            queue("a", 1.0, Quota::default(), Quota::default()),
            queue("b", 1.0, Quota::default(), Quota::default()),
        ];
        let mut s = Scheduler::new(vec![node("n0", 8, "A100"), node("n1", 8, "A100")], SchedConfig::default());
        let cfg = QueuesConfig { list, reclaim: false, fair_share_gate: gate, ..QueuesConfig::default() };
        s.set_queues(QueueTree::new(&cfg).unwrap());
        for i in 0..8 {
            s.submit(i, pod(&format!("a{i}"), "a", 4), 0).unwrap();
        }
        s.schedule(&mut First, 0);
        assert_eq!(held(&s)["a"], 16, "alone, a may take everything");
        s.submit(10, pod("b", "b", 8), 10).unwrap();
        s.schedule(&mut First, 10);
        s.remove(0);
        let at_20 = s.schedule(&mut First, 20);
        s.remove(1);
        s.schedule(&mut First, 30);
        (s, at_20)
    };
    let (open, _) = run(false);
    assert!(!held(&open).contains_key("b"), "without the gate a backfills each freed half: {:?}", held(&open));
    let (mut gated, at_20) = run(true);
    assert!(
        reasons(&at_20).iter().any(|(id, code)| *id == 4 && code == "SCHED-QUEUE-FAIR-SHARE"),
        "a's next pod waits at its share: {at_20:?}"
    );
    assert_eq!(held(&gated).get("b"), Some(&8), "b's pod got the node a freed");
    let held_a: Vec<PodId> = gated
        .waiting()
        .filter(|(_, _, why)| why.and_then(|w| w.queue_wait()).map(QueueWait::code) == Some("SCHED-QUEUE-FAIR-SHARE"))
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(held_a, [4, 5, 6, 7]);
    // b leaves: a's fair share is everything again, and its pods run.
    gated.remove(10);
    gated.schedule(&mut First, 40);
    assert_eq!(held(&gated).get("a"), Some(&16), "a's held pods woke when its share grew");
}

/// Two 4-GPU nodes and two equal queues with the gate (reclaim off): w
/// waits with a gang of two 4-GPU members (ids 100, 101), n with ten 4-GPU
/// pods (ids 0–9), all submitted at 0; nothing decided yet.
fn wide_job_scene(half_life: Option<u64>, fairness_target: Option<f64>) -> Scheduler {
    let list =
        vec![queue("n", 1.0, Quota::default(), Quota::default()), queue("w", 1.0, Quota::default(), Quota::default())];
    let mut s = Scheduler::new(vec![node("n0", 4, "A100"), node("n1", 4, "A100")], SchedConfig::default());
    let cfg = QueuesConfig {
        list,
        reclaim: false,
        fair_share_gate: true,
        usage_half_life_s: half_life,
        fairness_target,
        ..QueuesConfig::default()
    };
    s.set_queues(QueueTree::new(&cfg).unwrap());
    let gang = Gang { name: "w".into(), min_member: 2, timeout_s: None };
    for i in 0..2 {
        s.submit(100 + i, Pod { gang: Some(gang.clone()), ..pod(&format!("w{i}"), "w", 4) }, 0).unwrap();
    }
    for k in 0..10 {
        s.submit(k, pod(&format!("n{k}"), "n", 4), 0).unwrap();
    }
    s
}

/// Queue w's one job needs the whole cluster (a gang of two 4-GPU pods on
/// two 4-GPU nodes); queue n keeps a 4-GPU pod running, starting the next
/// as each ends. Each is entitled to half. A gate that looks only at the
/// present holds n at its half, but once n's pod ends n uses nothing and
/// may start the next, so w never finds both nodes free. Remembering use
/// (`usage_half_life_s`), w is owed for the time it was shut out, n's share
/// moves below its half, n waits when its pod ends, and w's job runs.
#[test]
fn remembered_use_lets_a_job_wider_than_its_share_take_its_turn() {
    let run = |half_life: Option<u64>| -> Option<u64> {
        let mut s = wide_job_scene(half_life, None);
        s.schedule(&mut First, 0);
        assert_eq!(held(&s).get("n"), Some(&4), "n starts one pod, then waits at its half");
        for k in 0..9 {
            let t = (k + 1) * 100;
            s.remove(k);
            s.schedule(&mut First, t);
            if held(&s).get("w") == Some(&8) {
                return Some(t);
            }
            assert!(held(&s).get("n").is_some_and(|&g| g <= 4), "n never holds past its half: {:?}", held(&s));
        }
        None
    };
    assert_eq!(run(None), None, "looking at the present only, w's job never finds room");
    assert_eq!(run(Some(100)), Some(100), "owed for its first 100 s, w runs when n's first pod ends");
    assert_eq!(run(Some(100)), run(Some(100)), "deterministic");
}

/// The scene above with a fairness target: the gate holds no one while
/// remembered fairness is at or above the target, so n first takes both
/// nodes (nothing is remembered yet: fair); once n has held everything
/// for 100 s while w waited (Jain 0.5), the gate holds n and w's job runs
/// when n's pods have ended. A target no two queues can fall below (Jain
/// over two is at least 0.5) never holds anyone.
#[test]
fn a_fairness_target_holds_queues_only_once_fairness_falls_below_it() {
    let run = |target: f64| -> (Option<u64>, u32) {
        let mut s = wide_job_scene(Some(100), Some(target));
        s.schedule(&mut First, 0);
        assert_eq!(s.remembered_fairness(), Some(1.0), "nothing remembered yet");
        let first = held(&s).get("n").copied().unwrap_or(0);
        for k in 0..9 {
            let t = (k + 1) * 100;
            s.remove(k);
            s.schedule(&mut First, t);
            if t == 100 {
                let f = s.remembered_fairness().unwrap();
                assert!((f - 0.5).abs() < 1e-9, "n held everything for 100 s, w nothing: {f}");
            }
            if held(&s).get("w") == Some(&8) {
                return (Some(t), first);
            }
        }
        (None, first)
    };
    assert_eq!(run(0.9), (Some(200), 8), "fair at first (n takes all), held once unfair, w runs when n's pods end");
    assert_eq!(run(0.5), (None, 8), "Jain over two queues never falls below 0.5: the gate never holds");
    assert_eq!(run(0.9), run(0.9), "deterministic");
}

#[test]
fn a_fairness_target_is_a_jain_index_and_needs_remembered_use() {
    let base = QueuesConfig { fair_share_gate: true, usage_half_life_s: Some(3600), ..QueuesConfig::default() };
    for bad in [0.0, -1.0, 1.5, f64::NAN] {
        let err = QueueTree::new(&QueuesConfig { fairness_target: Some(bad), ..base.clone() }).unwrap_err();
        assert_eq!(err.field, "fairness_target", "{bad}");
        assert!(err.reason.contains("(0, 1]"), "{err}");
    }
    let err = QueueTree::new(&QueuesConfig { fairness_target: Some(0.9), usage_half_life_s: None, ..base.clone() })
        .unwrap_err();
    assert!(err.field == "fairness_target" && err.reason.contains("usage_half_life_s"), "{err}");
    let tree = QueueTree::new(&QueuesConfig { fairness_target: Some(0.9), ..base }).unwrap();
    assert_eq!(tree.fairness_target(), Some(0.9));
}

#[test]
fn reclaim_to_fair_share_needs_the_gate_and_reclaim_and_a_min_runtime_needs_reclaim() {
    let base = QueuesConfig { fair_share_gate: true, reclaim_to_fair_share: true, ..QueuesConfig::default() };
    for cfg in
        [QueuesConfig { fair_share_gate: false, ..base.clone() }, QueuesConfig { reclaim: false, ..base.clone() }]
    {
        let err = QueueTree::new(&cfg).unwrap_err();
        assert_eq!(err.field, "reclaim_to_fair_share");
        assert!(err.reason.contains("fair_share_gate: true") && err.reason.contains("reclaim: true"), "{err}");
    }
    let tree = QueueTree::new(&base).unwrap();
    assert!(tree.reclaim_to_fair_share());
    assert_eq!(tree.reclaim_min_runtime_s(), 0, "unset: at once");
    let err =
        QueueTree::new(&QueuesConfig { reclaim_min_runtime_s: Some(600), reclaim: false, ..QueuesConfig::default() })
            .unwrap_err();
    assert!(err.field == "reclaim_min_runtime_s" && err.reason.contains("reclaim: true"), "{err}");
    let err =
        QueueTree::new(&QueuesConfig { reclaim_min_runtime_s: Some(u64::MAX), ..QueuesConfig::default() }).unwrap_err();
    assert!(err.field == "reclaim_min_runtime_s" && err.reason.contains("year"), "{err}");
    let tree = QueueTree::new(&QueuesConfig { reclaim_min_runtime_s: Some(600), ..QueuesConfig::default() }).unwrap();
    assert_eq!(tree.reclaim_min_runtime_s(), 600);
    // By name in the `queues:` section; an unknown field is refused.
    let text = r#"{"reclaim_to_fair_share": true, "fair_share_gate": true, "reclaim_min_runtime_s": 1800}"#;
    let cfg: QueuesConfig = serde_json::from_str(text).unwrap();
    assert_eq!((cfg.reclaim_to_fair_share, cfg.reclaim_min_runtime_s), (true, Some(1800)));
    assert!(serde_json::from_str::<QueuesConfig>(r#"{"reclaim_to_share": true}"#).is_err());
}

#[test]
fn remembered_use_needs_the_gate_and_a_sane_half_life() {
    let base = QueuesConfig { fair_share_gate: true, ..QueuesConfig::default() };
    let err = QueueTree::new(&QueuesConfig { usage_half_life_s: Some(3600), fair_share_gate: false, ..base.clone() })
        .unwrap_err();
    assert_eq!(err.field, "usage_half_life_s");
    assert!(err.reason.contains("fair_share_gate"), "{err}");
    let err = QueueTree::new(&QueuesConfig { usage_half_life_s: Some(0), ..base.clone() }).unwrap_err();
    assert_eq!(err.field, "usage_half_life_s");
    assert!(
        QueueTree::new(&QueuesConfig { usage_half_life_s: Some(86_400), ..base }).unwrap().usage_half_life_s()
            == Some(86_400)
    );
}

/// With `smallest_first`, the job asking for the fewest GPUs over its
/// whole gang is decided first, whatever the arrival order; without it,
/// the first to arrive is.
#[test]
fn smallest_first_sizes_a_job_by_its_whole_gang() {
    let run = |smallest_first: bool| {
        let mut cfg = SchedConfig::default();
        cfg.queue.smallest_first = smallest_first;
        let mut s = Scheduler::new(vec![node("n0", 4, "A100")], cfg);
        let gang = Gang { name: "wide".into(), min_member: 2, timeout_s: None };
        // Two members of 2 GPUs (4 over the gang) arrive first; each is
        // smaller than `mid`, but the gang is not.
        for i in 0..2 {
            s.submit(i, Pod { gang: Some(gang.clone()), queue: None, ..pod(&format!("wide-{i}"), "q", 2) }, 0).unwrap();
        }
        s.submit(2, Pod { queue: None, ..pod("mid", "q", 3) }, 1).unwrap();
        s.submit(3, Pod { queue: None, ..pod("narrow", "q", 1) }, 2).unwrap();
        s.schedule(&mut First, 3);
        let mut names: Vec<String> = s.running().map(|(_, p, _)| p.name.clone()).collect();
        names.sort();
        names
    };
    assert_eq!(run(false), ["wide-0", "wide-1"], "arrival order: the gang first");
    assert_eq!(run(true), ["mid", "narrow"], "fewest GPUs over the job first");
}
