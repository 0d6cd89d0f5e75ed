//! Reused answers (`tessera:policy/reuse`, contract 0.2.1): a policy whose
//! scorers promise the `node` scope decides exactly as the same policy
//! asking every plugin about every candidate, while asking far less; a
//! plugin that breaks the promise is caught and asked afresh from then
//! on; components built before the promise existed (0.2.0) are asked
//! afresh and decide the same, and those built before the `zone` scope
//! (0.2.1) keep the scope they declared. A scorer of the `zone` scope
//! (0.2.2) is asked about one node per zone and decides as if asked about
//! all; one that breaks that promise is caught too.

use tessera_core::cluster::{Cluster, FilterReason, choose_gpus};
use tessera_core::framework::Placer;
use tessera_core::{Node, Pod};
use tessera_wasm::{CallFault, Decision, Policy};

use crate::{load, member, policy, runtime};

/// Places `pods` one by one on `nodes` through each policy, every policy
/// on its own copy of the cluster, binding what the first chose; between
/// pods, `between(i, cluster)` may change nodes (telemetry, departures),
/// which every policy hears about. Returns each policy's decisions.
fn drive(
    policies: &mut [&mut Policy],
    nodes: Vec<Node>,
    pods: &[Pod],
    mut between: impl FnMut(usize, &mut Cluster) -> Vec<u32>,
) -> Vec<Vec<Decision>> {
    let mut clusters: Vec<Cluster> = policies.iter().map(|_| Cluster::new(nodes.clone())).collect();
    for (p, c) in policies.iter_mut().zip(&clusters) {
        p.nodes_changed(&c.nodes().iter().collect::<Vec<_>>());
    }
    let mut out = vec![Vec::new(); policies.len()];
    let (mut candidates, mut rejected) = (Vec::new(), [0; FilterReason::COUNT]);
    for (i, pod) in pods.iter().enumerate() {
        for (p, c) in policies.iter_mut().zip(clusters.iter_mut()) {
            let changed = between(i, c);
            let refs: Vec<&Node> = changed.iter().filter_map(|&id| c.node(id)).collect();
            p.nodes_changed(&refs);
        }
        clusters[0].feasible(pod, &mut candidates, &mut rejected);
        if candidates.is_empty() {
            continue;
        }
        let decisions: Vec<Decision> = policies.iter().map(|p| p.decide(pod, &candidates)).collect();
        let chosen = decisions[0].chosen;
        for ((p, c), d) in policies.iter_mut().zip(clusters.iter_mut()).zip(&decisions) {
            let Some(node) = chosen else { continue };
            let gpus = choose_gpus(c.node(node).unwrap(), pod, d.gpu_hint).unwrap();
            c.bind(node, pod, gpus).unwrap();
            p.nodes_changed(&[c.node(node).unwrap()]);
        }
        for (o, d) in out.iter_mut().zip(decisions) {
            o.push(d);
        }
    }
    out
}

/// What must be the same whether answers were reused or asked afresh.
fn same(a: &Decision, b: &Decision) -> bool {
    let scores = |d: &Decision| d.outcomes.iter().map(|o| (o.plugin.clone(), o.scores.clone())).collect::<Vec<_>>();
    a.feasible == b.feasible
        && a.rejections == b.rejections
        && a.totals == b.totals
        && a.chosen == b.chosen
        && a.gpu_hint == b.gpu_hint
        && scores(a) == scores(b)
}

#[test]
fn reused_answers_are_the_answers_asked_afresh() {
    let doc = tessera::sim::policy_document("throughput", 1).unwrap();
    let rt = runtime();
    let mut reusing = tessera::load::load_policy(&rt, &doc).unwrap();
    let mut fresh = tessera::load::load_policy(&rt, &doc).unwrap().with_reuse(false, 0);
    for m in reusing.scorers() {
        let v = m.slot.current();
        let shape = ["binpack", "gpu-aware", "hybrid-score"].contains(&m.name.as_str());
        assert!(v.reuse_scope().is_some(), "{}", m.name);
        assert_eq!(v.declared_scope(), if shape { "node-shape" } else { "zone" }, "{}", m.name);
    }
    let nodes = tessera::bench::synthetic_cluster(120);
    let pods = tessera_core::synthetic::pods(900, &[], 3);
    // Telemetry moves one node's utilisation before every pod, besides
    // the node each pod is bound to (zones and membership: the next test).
    let decisions = drive(&mut [&mut reusing, &mut fresh], nodes, &pods, |i, c| {
        let id = (i * 7 % 120) as u32;
        c.update_node(id, |n| {
            n.cpu_util_permille = ((i * 37) % 1000) as u16;
            if let Some(g) = n.gpus.first_mut() {
                g.util_permille = ((i * 53) % 1000) as u16;
            }
        });
        vec![id]
    });
    let (a, b) = (&decisions[0], &decisions[1]);
    assert!(a.len() > 400, "{} decisions", a.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(same(x, y), "decision {i} differs:\nreused {x:?}\nfresh {y:?}");
        assert!(x.errors.is_empty(), "{:?}", x.errors);
    }
    let reused: u64 = a.iter().map(|d| d.reused).sum();
    let answers: u64 = a.iter().map(|d| 3 * d.feasible.len() as u64).sum();
    assert!(reused * 3 > answers, "a third or more of the promising plugins' answers reused: {reused} of {answers}");
    assert!(b.iter().all(|d| d.reused == 0));
}

#[test]
fn zone_signals_and_membership_changes_drop_kept_answers() {
    use tessera_plugins::HYBRID_SCORE;
    let rt = runtime();
    let nodes = crate::cluster(9);
    let config = r#"{"weights": {"efficiency": 1, "sla": 1, "carbon": 1}}"#;
    let mut reusing = policy(vec![member(load(&rt, HYBRID_SCORE, "hybrid-score", config), 1.0)], &nodes);
    let mut fresh =
        policy(vec![member(load(&rt, HYBRID_SCORE, "hybrid-score", config), 1.0)], &nodes).with_reuse(false, 0);
    let pod = Pod { name: "p".into(), gpu_count: 1, gpu_milli: 1000, ..Pod::default() };
    let ids: Vec<u32> = (0..9).collect();
    let check = |reusing: &mut Policy, fresh: &mut Policy, what: &str| {
        let (x, y) = (reusing.decide(&pod, &ids), fresh.decide(&pod, &ids));
        assert!(same(&x, &y), "{what}: {x:?} vs {y:?}");
        x.reused
    };
    assert_eq!(check(&mut reusing, &mut fresh, "first"), 0);
    assert_eq!(check(&mut reusing, &mut fresh, "second: the class's answers are kept from now on"), 0);
    assert_eq!(check(&mut reusing, &mut fresh, "again"), 9, "nothing changed: all reused");
    for p in [&mut reusing, &mut fresh] {
        p.zone_carbon("zone-1", 900);
    }
    assert_eq!(check(&mut reusing, &mut fresh, "carbon moved"), 0);
    for p in [&mut reusing, &mut fresh] {
        p.zone_carbon("zone-1", 900);
    }
    assert_eq!(check(&mut reusing, &mut fresh, "carbon repeated"), 9);
    for p in [&reusing, &fresh] {
        p.remove_nodes([8]);
    }
    let ids: Vec<u32> = (0..8).collect();
    let (x, y) = (reusing.decide(&pod, &ids), fresh.decide(&pod, &ids));
    assert!(same(&x, &y), "a node left: {x:?} vs {y:?}");
    assert_eq!(x.reused, 0, "a node left: the zones' set may have changed");
}

/// Places `pods` on 12 nodes through binpack and `liar` (named `name`),
/// once with reuse on and audits every 4th reusing call, once asking
/// afresh, and checks what every liar must get: caught exactly once with
/// `PLUGIN-REUSE-BROKEN`, asked afresh from then on (the decisions are
/// those of the policy that never reused, and no error follows). Returns
/// the liar as loaded, the decision the audit caught it at and the error.
fn catch_liar(
    liar: tessera_plugins::Artifact,
    name: &str,
    pods: &[Pod],
) -> (std::sync::Arc<tessera_wasm::PluginVersion>, usize, tessera_wasm::CallError) {
    use tessera_plugins::BINPACK;
    let rt = runtime();
    let nodes = crate::cluster(12);
    let version = load(&rt, liar, name, "null");
    assert!(version.reuse_scope().is_some(), "{name} promises a scope");
    let mut caught =
        policy(vec![member(load(&rt, BINPACK, "binpack", "null"), 1.0), member(version.clone(), 1.0)], &nodes)
            .with_reuse(true, 4);
    let mut fresh = policy(
        vec![member(load(&rt, BINPACK, "binpack", "null"), 1.0), member(load(&rt, liar, name, "null"), 1.0)],
        &nodes,
    )
    .with_reuse(false, 0);
    let decisions = drive(&mut [&mut caught, &mut fresh], nodes, pods, |_, _| Vec::new());
    let broken: Vec<(usize, &tessera_wasm::CallError)> = decisions[0]
        .iter()
        .enumerate()
        .flat_map(|(i, d)| d.errors.iter().map(move |e| (i, e)))
        .filter(|(_, e)| matches!(e.kind, CallFault::BrokenPromise { .. }))
        .collect();
    assert_eq!(broken.len(), 1, "{name}: caught once, then never reused again: {broken:?}");
    let (at, e) = broken[0];
    assert_eq!(&*e.plugin, name);
    assert_eq!(e.kind.code(), "PLUGIN-REUSE-BROKEN");
    assert!(version.promise_broken() && version.reuse_scope().is_none(), "{name}");
    // From the audit on, its answers are fresh: the decisions are those of
    // the policy that never reused (binpack still reuses).
    for (x, y) in decisions[0][at..].iter().zip(&decisions[1][at..]) {
        assert!(same(x, y), "{name}: {x:?} vs {y:?}");
    }
    assert!(decisions[0][at + 1..].iter().all(|d| d.errors.is_empty()), "{name}");
    (version, at, e.clone())
}

#[test]
fn a_plugin_that_breaks_its_promise_is_caught_and_asked_afresh() {
    let pods: Vec<Pod> = (0..40)
        .map(|i| Pod {
            name: format!("p{i}"),
            requests: tessera_core::Resources { cpu_milli: 500, memory_mib: 256 },
            ..Pod::default()
        })
        .collect();
    let (liar, at, e) = catch_liar(tessera_plugins::BROKEN_PROMISE, "broken-promise", &pods);
    assert_eq!(liar.declared_scope(), "node", "it declares the node scope");
    assert!(at <= 4, "caught at the first audit (every 4th reusing call), not at decision {at}");
    assert!(e.to_string().contains("had not changed"), "{e}");
}

#[test]
fn components_of_0_2_0_are_asked_afresh_and_decide_the_same() {
    use tessera_plugins::{ALL, CONTRACT_0_2_0};
    let rt = runtime();
    let nodes = tessera::bench::synthetic_cluster(60);
    let pods = tessera_core::synthetic::pods(200, &[], 11);
    for old in CONTRACT_0_2_0.iter().filter(|a| a.name != "overload") {
        let now = ALL.iter().find(|a| a.name == old.name).unwrap();
        let then = load(&rt, *old, old.name, "null");
        assert_eq!(then.contract(), tessera_wasm::ContractVersion::V0_2, "{}", old.name);
        assert!(then.reuse_scope().is_none(), "0.2.0 has no reuse: {}", old.name);
        let current = load(&rt, *now, now.name, "null");
        assert_eq!(current.contract(), tessera_wasm::ContractVersion::V0_2_2);
        assert!(current.reuse_scope().is_some(), "{} promises a reuse scope today", now.name);
        let mut a = policy(vec![member(then, 1.0)], &nodes);
        let mut b = policy(vec![member(current, 1.0)], &nodes);
        let d = drive(&mut [&mut a, &mut b], nodes.clone(), &pods, |_, _| Vec::new());
        assert!(d[0].len() > 100);
        for (x, y) in d[0].iter().zip(&d[1]) {
            assert!(same(x, y), "{}: {x:?} vs {y:?}", old.name);
            assert_eq!(x.reused, 0);
        }
        assert!(d[1].iter().map(|d| d.reused).sum::<u64>() > 0, "{}: today's build reuses", old.name);
    }
    let overload = CONTRACT_0_2_0.iter().find(|a| a.name == "overload").unwrap();
    let v = load(&rt, *overload, "overload", "null");
    assert_eq!((v.kind(), v.contract()), (tessera_wasm::WorldKind::Detector, tessera_wasm::ContractVersion::V0_2));
}

/// Pods of three workloads, some asking for GPUs.
fn workload_pods(n: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| Pod {
            name: format!("p{i}"),
            workload: format!("w{}", i % 3),
            requests: tessera_core::Resources { cpu_milli: 2_000 + (i % 4) as u64 * 500, memory_mib: 1024 },
            gpu_count: (i % 2) as u32,
            gpu_milli: if i % 2 == 1 { 1000 } else { 0 },
            ..Pod::default()
        })
        .collect()
}

#[test]
fn a_zone_scoped_scorer_asked_once_per_zone_decides_as_asked_about_every_node() {
    use tessera_plugins::TOPOLOGY_SPREAD;
    let rt = runtime();
    // 30 nodes in three zones; a hard skew limit (the filter's verdicts
    // are zone-scoped too) and the soft score.
    let nodes = crate::cluster(30);
    for config in [r#"{"max_skew": 1}"#, "null"] {
        let spread = load(&rt, TOPOLOGY_SPREAD, "topology-spread", config);
        assert_eq!(spread.declared_scope(), "zone");
        // Without a skew limit it says it rejects nothing, and is not asked to.
        let reasons: &[&str] = if config == "null" { &[] } else { &["SCHED-ZONE-SPREAD"] };
        assert_eq!(spread.info().filter_reasons, reasons, "{config}");
        let mut reusing = policy(vec![member(spread, 1.0)], &nodes).with_reuse(true, 5);
        let mut fresh = policy(vec![member(load(&rt, TOPOLOGY_SPREAD, "topology-spread", config), 1.0)], &nodes)
            .with_reuse(false, 0);
        let pods = workload_pods(120);
        let d = drive(&mut [&mut reusing, &mut fresh], nodes.clone(), &pods, |_, _| Vec::new());
        assert!(d[0].len() > 100, "{config}: {} decisions", d[0].len());
        for (i, (x, y)) in d[0].iter().zip(&d[1]).enumerate() {
            assert!(same(x, y), "{config}: decision {i}:\nper zone {x:?}\nevery node {y:?}");
            assert!(x.errors.is_empty(), "{config}: {:?}", x.errors);
        }
        // Between audits (every 5th call), 3 nodes asked of the candidates.
        let reused: u64 = d[0].iter().map(|d| d.reused).sum();
        let candidates: u64 = d[0].iter().map(|d| d.feasible.len() as u64).sum();
        assert!(reused * 2 > candidates, "{config}: {reused} of {candidates} answers copied within their zone");
        if config != "null" {
            assert!(d[0].iter().any(|d| !d.rejections.is_empty()), "the skew limit rejected some zones");
        }
    }
}

#[test]
fn a_plugin_that_breaks_its_zone_promise_is_caught_and_asked_afresh() {
    let pods: Vec<Pod> = (0..30)
        .map(|i| Pod {
            name: format!("p{i}"),
            requests: tessera_core::Resources { cpu_milli: 500 + (i % 5) * 700, memory_mib: 256 },
            ..Pod::default()
        })
        .collect();
    let (liar, at, e) = catch_liar(tessera_plugins::BROKEN_ZONE_PROMISE, "broken-zone-promise", &pods);
    assert_eq!(liar.declared_scope(), "zone");
    assert!(at < 4, "caught at the first audit (every 4th copying call), not at decision {at}");
    assert!(e.to_string().contains("another node of that zone in the same call"), "{e}");
}

#[test]
fn components_of_0_2_1_keep_their_scope_and_decide_the_same() {
    use tessera_plugins::{ALL, CONTRACT_0_2_1};
    let rt = runtime();
    let nodes = crate::cluster(30);
    let pods = workload_pods(150);
    for old in CONTRACT_0_2_1 {
        let now = ALL.iter().find(|a| a.name == old.name).unwrap();
        let then = load(&rt, *old, old.name, "null");
        assert_eq!(then.contract(), tessera_wasm::ContractVersion::V0_2_1, "{}", old.name);
        let current = load(&rt, *now, now.name, "null");
        assert_eq!(current.contract(), tessera_wasm::ContractVersion::V0_2_2);
        // binpack promised `node-shape` under 0.2.1 and still does;
        // topology-spread's `zone` did not exist then: it said `fresh`.
        let (then_scope, now_scope) = match old.name {
            "binpack" => ("node-shape", "node-shape"),
            "topology-spread" => ("fresh", "zone"),
            other => panic!("{other}: say what it declares"),
        };
        assert_eq!((then.declared_scope(), current.declared_scope()), (then_scope, now_scope), "{}", old.name);
        let mut a = policy(vec![member(then, 1.0)], &nodes);
        let mut b = policy(vec![member(current, 1.0)], &nodes);
        let d = drive(&mut [&mut a, &mut b], nodes.clone(), &pods, |_, _| Vec::new());
        assert!(d[0].len() > 100);
        for (x, y) in d[0].iter().zip(&d[1]) {
            assert!(same(x, y), "{}: {x:?} vs {y:?}", old.name);
            assert!(x.errors.is_empty() && y.errors.is_empty());
        }
        let reused = |d: &[Decision]| d.iter().map(|d| d.reused).sum::<u64>();
        assert_eq!(reused(&d[0]) > 0, then_scope != "fresh", "{}", old.name);
        assert!(reused(&d[1]) > 0, "{}", old.name);
    }
}
