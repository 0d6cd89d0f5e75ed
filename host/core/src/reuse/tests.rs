use super::*;

/// A cache of the `node` scope (as a plugin version with id 1).
fn cache(audit_every: u64) -> AnswerCache {
    let mut c = AnswerCache::new(audit_every);
    c.owned_by(1, Scope::Node);
    c
}

/// Asks `cache` about `pod` once without keeping (a class's answers are
/// kept from its second call on).
fn seen(cache: &mut AnswerCache, pod: &Pod, changes: &Changes, ids: &[NodeId]) {
    let r = cache.lookup(Kind::Score, pod, changes, ids);
    assert_eq!(r.ask.len(), ids.len(), "a class seen for the first time is asked about everything");
}

fn pod(name: &str, cpu: u64) -> Pod {
    Pod {
        name: name.into(),
        namespace: "ns".into(),
        requests: Resources { cpu_milli: cpu, memory_mib: 1024 },
        ..Pod::default()
    }
}

/// A node-scoped "plugin": the score of node `id` is its state.
fn ask(state: &[i64], ids: &[NodeId], r: &Reused) -> Vec<i64> {
    r.ask.iter().map(|&k| state[ids[k] as usize]).collect()
}

#[test]
fn a_class_is_every_field_a_plugin_sees_but_the_name() {
    let a = pod("a", 1000);
    let mut b = pod("b", 1000);
    b.namespace = "other".into();
    assert!(PodClass::of(&a, Scope::Node).holds(&b, Scope::Node));
    assert_eq!(PodClass::of(&a, Scope::Node), PodClass::of(&b, Scope::Node));
    let mut w = pod("w", 1000);
    w.workload = "other".into();
    assert!(!PodClass::of(&a, Scope::Node).holds(&w, Scope::Node));
    assert!(PodClass::of(&a, Scope::NodeShape).holds(&w, Scope::NodeShape), "a shape ignores the workload");
    for change in [
        |p: &mut Pod| p.requests.cpu_milli += 1,
        |p: &mut Pod| p.gpu_milli = 500,
        |p: &mut Pod| p.workload = "w".into(),
        |p: &mut Pod| p.allowed_models = vec!["A100".into()],
        |p: &mut Pod| p.priority = 7,
        |p: &mut Pod| p.tier = Tier::Opportunistic,
    ] {
        let mut c = pod("c", 1000);
        change(&mut c);
        assert!(!PodClass::of(&a, Scope::Node).holds(&c, Scope::Node), "{c:?}");
        if c.workload.is_empty() {
            assert!(!PodClass::of(&a, Scope::NodeShape).holds(&c, Scope::NodeShape), "{c:?}");
        }
    }
}

/// Asks `cache` about `p` on `ids`, answering from `state`; keeps the
/// answers; returns how many were asked.
fn call(cache: &mut AnswerCache, changes: &Changes, state: &[i64], p: &Pod, ids: &[NodeId]) -> usize {
    let mut r = cache.lookup(Kind::Score, p, changes, ids);
    let fresh = ask(state, ids, &r);
    r.fill(&fresh, &[]);
    let want: Vec<i64> = ids.iter().map(|&id| state[id as usize]).collect();
    assert_eq!(r.values, want, "reused plus asked = everything asked afresh");
    cache.keep(Kind::Score, p, changes, ids, &r);
    r.ask.len()
}

#[test]
fn only_changed_nodes_are_asked_and_answers_equal_fresh_ones() {
    let mut changes = Changes::default();
    let mut state: Vec<i64> = (0..6).map(|i| 10 * i).collect();
    for id in 0..6 {
        changes.changed(id, true);
    }
    let mut cache = cache(0);
    let ids: Vec<NodeId> = (0..6).collect();
    let p = pod("p", 1000);
    assert_eq!(call(&mut cache, &changes, &state, &p, &ids), 6, "a class seen once: nothing kept");
    assert_eq!(call(&mut cache, &changes, &state, &p, &ids), 6, "its second call: asked, and kept");
    assert_eq!(call(&mut cache, &changes, &state, &p, &ids), 0);

    // Node 2 changes; a pod of the same class asks only about it.
    state[2] = 99;
    changes.changed(2, false);
    let q = pod("q", 1000);
    assert_eq!(call(&mut cache, &changes, &state, &q, &ids), 1);
    assert_eq!(call(&mut cache, &changes, &state, &q, &ids), 0);
    let r = cache.lookup(Kind::Score, &q, &changes, &[4, 2]);
    assert_eq!((r.ask.len(), r.values), (0, vec![40, 99]), "any subset, in its order");

    // Another class starts empty; verdicts are kept apart from scores.
    assert_eq!(cache.lookup(Kind::Score, &pod("big", 2000), &changes, &ids).ask.len(), 6);
    assert_eq!(cache.lookup(Kind::Verdict, &q, &changes, &ids).ask.len(), 6);
}

#[test]
fn joins_leaves_and_zone_signals_drop_everything() {
    let mut changes = Changes::default();
    for id in 0..3 {
        changes.changed(id, true);
    }
    let ids: Vec<NodeId> = (0..3).collect();
    let state = vec![1; 8];
    let p = pod("p", 1000);
    let mut cache = cache(0);
    seen(&mut cache, &p, &changes, &ids);
    assert_eq!(call(&mut cache, &changes, &state, &p, &ids), 3);
    assert_eq!(call(&mut cache, &changes, &state, &p, &ids), 0);
    changes.changed(7, true);
    assert_eq!(call(&mut cache, &changes, &state, &p, &ids), 3, "a node joined");
    changes.left(7);
    assert_eq!(call(&mut cache, &changes, &state, &p, &ids), 3, "a node left");
    changes.everything();
    assert_eq!(call(&mut cache, &changes, &state, &p, &ids), 3, "a zone signal moved");
    assert_eq!(call(&mut cache, &changes, &state, &p, &ids), 0);
    cache.owned_by(42, Scope::Node);
    seen(&mut cache, &p, &changes, &ids);
    assert_eq!(call(&mut cache, &changes, &state, &p, &ids), 3, "another plugin version starts over");
    cache.owned_by(42, Scope::NodeShape);
    assert_eq!(call(&mut cache, &changes, &state, &p, &ids), 3, "another scope starts over");
}

#[test]
fn a_shape_shares_answers_across_workloads() {
    let mut changes = Changes::default();
    for id in 0..4 {
        changes.changed(id, true);
    }
    let ids: Vec<NodeId> = (0..4).collect();
    let state = vec![3, 1, 4, 1];
    let (mut web, mut db) = (pod("web-1", 500), pod("db-1", 500));
    web.workload = "web".into();
    db.workload = "db".into();
    let mut shape = AnswerCache::new(0);
    shape.owned_by(1, Scope::NodeShape);
    assert_eq!(call(&mut shape, &changes, &state, &web, &ids), 4);
    assert_eq!(call(&mut shape, &changes, &state, &db, &ids), 4, "second call of the shape: kept");
    assert_eq!(call(&mut shape, &changes, &state, &web, &ids), 0, "another workload, same shape");
    let mut node = cache(0);
    for p in [&web, &db, &web] {
        call(&mut node, &changes, &state, p, &ids);
    }
    assert_eq!(call(&mut node, &changes, &state, &db, &ids), 4, "node scope: the workload is part of the class");
}

#[test]
fn hints_come_back_as_a_fresh_call_gives_them() {
    let mut changes = Changes::default();
    for id in 0..3 {
        changes.changed(id, true);
    }
    let ids: Vec<NodeId> = (0..3).collect();
    let p = pod("p", 1000);
    let mut cache = cache(0);
    let mut r = cache.lookup(Kind::Score, &p, &changes, &ids);
    r.fill(&[5, 6, 7], &[]);
    assert!(r.hints().is_empty(), "no list given, none returned");
    let s = pod("s", 5);
    seen(&mut cache, &s, &changes, &ids);
    let mut r = cache.lookup(Kind::Score, &s, &changes, &ids);
    r.fill(&[5, 6, 7], &[1, 255, 3]);
    assert_eq!(r.hints(), [1, 255, 3]);
    cache.keep(Kind::Score, &s, &changes, &ids, &r);
    changes.changed(1, false);
    let mut r = cache.lookup(Kind::Score, &s, &changes, &ids);
    assert_eq!(r.ask, [1]);
    r.fill(&[6], &[2]);
    assert_eq!(r.hints(), [1, 2, 3]);
}

#[test]
fn least_recently_used_classes_go_first() {
    let mut changes = Changes::default();
    changes.changed(0, true);
    let ids = [0];
    let state = [1];
    let mut cache = cache(0).with_classes(2);
    let (a, b, c) = (pod("a", 1), pod("b", 2), pod("c", 3));
    for p in [&a, &b] {
        seen(&mut cache, p, &changes, &ids);
        assert_eq!(call(&mut cache, &changes, &state, p, &ids), 1);
    }
    assert_eq!(call(&mut cache, &changes, &state, &a, &ids), 0, "a used last");
    seen(&mut cache, &c, &changes, &ids);
    assert_eq!(call(&mut cache, &changes, &state, &c, &ids), 1, "b dropped for c");
    assert_eq!(call(&mut cache, &changes, &state, &a, &ids), 0);
    assert_eq!(call(&mut cache, &changes, &state, &b, &ids), 1, "b was dropped");
}

#[test]
fn audits_fall_on_counted_calls_and_catch_a_broken_promise() {
    let mut changes = Changes::default();
    for id in 0..4 {
        changes.changed(id, true);
    }
    let ids: Vec<NodeId> = (0..4).collect();
    let p = pod("p", 1);
    let mut cache = cache(3);
    let due: Vec<bool> = (0..7)
        .map(|_| {
            let _ = cache.lookup(Kind::Score, &p, &changes, &ids);
            cache.audit_due()
        })
        .collect();
    assert_eq!(due, [false, false, true, false, false, true, false]);

    let mut r = cache.lookup(Kind::Score, &p, &changes, &ids);
    r.fill(&[1, 2, 3, 4], &[]);
    cache.keep(Kind::Score, &p, &changes, &ids, &r);
    let r = cache.lookup(Kind::Score, &p, &changes, &ids);
    assert!(r.ask.is_empty());
    assert_eq!(first_mismatch(&r, &[1, 2, 3, 4], &[]), None);
    assert_eq!(first_mismatch(&r, &[1, 2, 9, 4], &[]), Some(2), "node 2's score moved though node 2 did not");
    assert_eq!(first_mismatch(&r, &[1, 2, 3, 4], &[0, 0, 0, 0]), Some(0), "hints appeared");
}

#[test]
fn answer_asks_only_what_it_cannot_reuse_and_audits_on_schedule() {
    let mut changes = Changes::default();
    for id in 0..5 {
        changes.changed(id, true);
    }
    let ids: Vec<NodeId> = (0..5).collect();
    let p = pod("p", 1);
    let mut state: Vec<i64> = vec![5, 4, 3, 2, 1];
    let mut cache = cache(4);
    let mut asked = Vec::new();
    let run = |cache: &mut AnswerCache, changes: &Changes, state: &[i64], asked: &mut Vec<usize>| {
        let a = answer(cache, changes, Kind::Score, &p, &ids, |q| {
            asked.push(q.len());
            Ok::<_, ()>((q.iter().map(|&id| state[id as usize]).collect(), Vec::new()))
        })
        .unwrap();
        assert_eq!(a.values, state);
        a
    };
    for _ in 0..3 {
        run(&mut cache, &changes, &state, &mut asked);
    }
    assert_eq!(asked, [5, 5], "first two calls ask everything, the third nothing");
    let a = run(&mut cache, &changes, &state, &mut asked);
    assert_eq!((a.reused, a.broken), (0, None), "the fourth call is an audit: all asked, all agree");
    assert_eq!(asked, [5, 5, 5]);
    // The "plugin" breaks its promise: node 3's answer moves, unannounced.
    state[3] = 99;
    for _ in 0..3 {
        let a = run_stale(&mut cache, &changes, &state);
        assert_eq!(a.values[3], 2, "reused between audits");
    }
    let a = run(&mut cache, &changes, &state, &mut asked);
    assert_eq!(a.broken, Some((3, 2, 99)), "the audit finds it");
    // Errors from the plugin are passed on, nothing kept.
    let e =
        answer(&mut cache, &changes, Kind::Score, &pod("other", 7), &ids, |_| Err::<(Vec<i64>, Vec<u8>), _>("trap"));
    assert_eq!(e, Err("trap"));
}

/// A call that reuses without checking what it gets.
fn run_stale(cache: &mut AnswerCache, changes: &Changes, state: &[i64]) -> Answered {
    let ids: Vec<NodeId> = (0..state.len() as NodeId).collect();
    answer(cache, changes, Kind::Score, &pod("p", 1), &ids, |q| {
        Ok::<_, ()>((q.iter().map(|&id| state[id as usize]).collect(), Vec::new()))
    })
    .unwrap()
}

/// A cluster of `zones` as given (node id = position), in `changes`.
fn zoned(zones: &[&str]) -> Changes {
    let mut changes = Changes::default();
    for (id, z) in zones.iter().enumerate() {
        changes.changed(id as NodeId, true);
        changes.set_zone(id as NodeId, z);
    }
    changes
}

#[test]
fn zones_are_indexed_by_name_and_follow_a_node_that_moves() {
    let mut changes = zoned(&["a", "b", "a", ""]);
    assert_eq!(changes.zone_of(0), changes.zone_of(2));
    assert_ne!(changes.zone_of(0), changes.zone_of(1));
    assert_ne!(changes.zone_of(3), changes.zone_of(0), "no zone is a zone of its own");
    assert_eq!(changes.zone_of(9), None, "never seen");
    changes.set_zone(2, "b");
    assert_eq!(changes.zone_of(2), changes.zone_of(1));
    changes.set_zone(7, "c");
    assert_eq!(changes.zone_of(5), None, "ids skipped over have no zone until told");
    assert_eq!(changes.zone_count(), 4);
}

#[test]
fn the_zone_scope_asks_one_node_per_zone_and_audits_every_node() {
    let changes = zoned(&["a", "b", "a", "c", "b", "a"]);
    let mut cache = AnswerCache::new(3);
    cache.owned_by(1, Scope::Zone);
    let p = pod("p", 1);
    // A zone-scoped "plugin": a node's score is its zone's.
    let by_zone = |id: NodeId| i64::from(changes.zone_of(id).unwrap()) * 10;
    let ids: Vec<NodeId> = vec![5, 4, 3, 2, 1, 0];
    let mut asked = Vec::new();
    for call in 1..=3 {
        let a = answer(&mut cache, &changes, Kind::Score, &p, &ids, |q| {
            asked.push(q.to_vec());
            Ok::<_, ()>((q.iter().map(|&id| by_zone(id)).collect(), q.iter().map(|&id| by_zone(id) as u8).collect()))
        })
        .unwrap();
        assert_eq!(a.values, ids.iter().map(|&id| by_zone(id)).collect::<Vec<_>>(), "call {call}");
        if call < 3 {
            assert_eq!(a.reused, 3, "call {call}: three zones, six candidates");
        } else {
            assert_eq!((a.reused, a.broken), (0, None), "the third is an audit, and the promise holds");
        }
        assert_eq!(a.hints, a.values.iter().map(|&v| v as u8).collect::<Vec<_>>(), "call {call}: hints too");
    }
    assert_eq!(asked[0], [5, 4, 3], "the first candidate of each zone, in candidate order");
    assert_eq!(asked[3], ids, "the audit asks about every candidate");

    // A plugin whose answers differ inside a zone is caught at the audit.
    let mut liar = AnswerCache::new(2);
    liar.owned_by(1, Scope::Zone);
    let ask_liar = |q: &[NodeId]| Ok::<_, ()>((q.iter().map(|&id| i64::from(id)).collect(), Vec::new()));
    let a = answer(&mut liar, &changes, Kind::Score, &p, &ids, ask_liar).unwrap();
    assert_eq!((a.values, a.broken), (vec![5, 4, 3, 5, 4, 5], None), "copied, not yet audited");
    let a = answer(&mut liar, &changes, Kind::Score, &p, &ids, ask_liar).unwrap();
    assert_eq!(a.broken, Some((3, 5, 2)), "node 2 answered 2 where node 5 of its zone answered 5");
    assert_eq!(a.values, [5, 4, 3, 2, 1, 0], "the decision takes the fresh answers");
    // A hint that differs inside a zone breaks the promise as a score does.
    let mut hinted = AnswerCache::new(1);
    hinted.owned_by(1, Scope::Zone);
    let a = answer(&mut hinted, &changes, Kind::Score, &p, &ids, |q| {
        Ok::<_, ()>((vec![7; q.len()], q.iter().map(|&id| id as u8).collect()))
    })
    .unwrap();
    assert_eq!(a.broken, Some((3, 7, 7)), "same score, node 2's hint differs from node 5's");
    // A candidate whose zone was never told: everything asked afresh.
    let mut unknown = zoned(&["a", "a"]);
    unknown.changed(2, true);
    let mut cache = AnswerCache::new(0);
    cache.owned_by(1, Scope::Zone);
    let mut asked = Vec::new();
    let a = answer(&mut cache, &unknown, Kind::Score, &p, &[0, 1, 2], |q| {
        asked.push(q.len());
        Ok::<_, ()>((q.iter().map(|&id| i64::from(id)).collect(), Vec::new()))
    })
    .unwrap();
    assert_eq!((a.values, a.reused, asked), (vec![0, 1, 2], 0, vec![3]));
    // One candidate per zone: nothing to copy, asked as it is.
    let a = answer(&mut liar, &changes, Kind::Score, &p, &[0, 1, 3], ask_liar).unwrap();
    assert_eq!((a.values, a.reused), (vec![0, 1, 3], 0));
}
