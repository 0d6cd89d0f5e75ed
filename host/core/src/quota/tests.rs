use std::collections::BTreeMap;

use super::*;

fn spec(name: &str, parent: Option<&str>, weight: f64, guarantee: Quota, limit: Quota) -> QueueSpec {
    QueueSpec { name: name.into(), parent: parent.map(Into::into), weight, guarantee, limit }
}

fn gpus(n: u32) -> Quota {
    Quota { gpus: Some(n), ..Quota::default() }
}

fn tree(list: Vec<QueueSpec>) -> Result<QueueTree, QueuesError> {
    QueueTree::new(&QueuesConfig { list, ..QueuesConfig::default() })
}

fn err(list: Vec<QueueSpec>) -> String {
    tree(list).unwrap_err().to_string()
}

fn gpu_amounts(n: u64) -> Amounts {
    Amounts(BTreeMap::from([(Dim::Gpu, n * 1000)]))
}

#[test]
fn no_section_is_one_default_queue_with_nothing_set() {
    let t = QueueTree::default();
    assert!(t.is_trivial());
    assert_eq!(t.leaf_of(&Pod::default()), Ok(0));
    assert_eq!(t.nodes()[0].name, DEFAULT_QUEUE);
    let named = Pod { queue: Some("ml".into()), ..Pod::default() };
    assert_eq!(t.leaf_of(&named), Err("ml"), "a queue not listed is unknown");
}

#[test]
fn a_tree_is_checked_naming_the_field() {
    let q = |n: &str| spec(n, None, 1.0, Quota::default(), Quota::default());
    assert_eq!(err(vec![q("a"), q("a")]), "list[1].name: queue `a` is listed twice");
    assert_eq!(err(vec![q("A")]), "list[0].name: queue name `A` must be 1-63 of [a-z0-9-_.]");
    assert_eq!(
        err(vec![spec("a", Some("nope"), 1.0, Quota::default(), Quota::default())]),
        "list[0].parent: queue `a`: no queue `nope`"
    );
    assert_eq!(
        err(vec![
            spec("a", Some("b"), 1.0, Quota::default(), Quota::default()),
            spec("b", Some("a"), 1.0, Quota::default(), Quota::default()),
        ]),
        "list[0].parent: queue `a` is its own ancestor"
    );
    assert_eq!(
        err(vec![spec("a", None, 0.0, Quota::default(), Quota::default())]),
        "list[0].weight: 0 must be within (0, 1000000]"
    );
    assert_eq!(
        err(vec![spec("a", None, f64::NAN, Quota::default(), Quota::default())]).split(':').next(),
        Some("list[0].weight")
    );
    assert_eq!(
        err(vec![spec("a", None, 1.0, gpus(8), gpus(4))]),
        "list[0].guarantee.gpus: queue `a`: guarantee 8 is above its limit 4"
    );
    assert_eq!(
        err(vec![
            spec("org", None, 1.0, gpus(8), Quota::default()),
            spec("a", Some("org"), 1.0, gpus(6), Quota::default()),
            spec("b", Some("org"), 1.0, gpus(4), Quota::default()),
        ]),
        "list[0].guarantee.gpus: queue `org` guarantees 8 but its children are guaranteed 10 together"
    );
    let by_model = Quota { gpus_by_model: BTreeMap::from([("V100".into(), 2)]), ..Quota::default() };
    assert_eq!(
        err(vec![
            spec("org", None, 1.0, Quota::default(), Quota::default()),
            spec("a", Some("org"), 1.0, by_model, Quota::default())
        ]),
        "list[0].guarantee.gpus_by_model.V100: queue `org` guarantees 0 but its children are guaranteed 2 together"
    );
    let cfg = QueuesConfig {
        default_queue: "org".into(),
        list: vec![q("org"), spec("a", Some("org"), 1.0, Quota::default(), Quota::default())],
        ..QueuesConfig::default()
    };
    assert_eq!(
        QueueTree::new(&cfg).unwrap_err().to_string(),
        "default_queue: `org` has child queues; pods wait in leaves"
    );
}

#[test]
fn pods_wait_in_leaves_and_limits_are_checked_up_the_tree() {
    let t = tree(vec![
        spec("org", None, 1.0, Quota::default(), gpus(4)),
        spec("a", Some("org"), 1.0, Quota::default(), gpus(3)),
        spec("b", Some("org"), 1.0, Quota::default(), Quota::default()),
    ])
    .unwrap();
    let pod = |q: &str| Pod { queue: Some(q.into()), ..Pod::default() };
    let (org, a, b) = (t.index("org").unwrap(), t.index("a").unwrap(), t.index("b").unwrap());
    assert_eq!(t.leaf_of(&pod("org")), Err("org"), "an inner queue holds no pods");
    assert_eq!(t.leaf_of(&pod("a")), Ok(a));
    assert_eq!(t.path(a).collect::<Vec<_>>(), [a, org]);
    let mut used = vec![Amounts::default(); t.nodes().len()];
    used[a] = gpu_amounts(2);
    used[org] = gpu_amounts(3);
    assert_eq!(t.over_limit(a, &used, &gpu_amounts(1)), None, "a: 3 of 3, org: 4 of 4");
    assert_eq!(t.over_limit(a, &used, &gpu_amounts(2)), Some((a, Dim::Gpu)), "a's own limit first");
    assert_eq!(t.over_limit(b, &used, &gpu_amounts(2)), Some((org, Dim::Gpu)), "b has none, its parent does");
    assert_eq!(t.over_limit(b, &used, &Amounts(BTreeMap::from([(Dim::Cpu, 10)]))), None, "no CPU limit");
}

#[test]
fn below_guarantee_ranks_first_then_weighted_dominant_share() {
    let t = tree(vec![
        spec("a", None, 1.0, gpus(4), Quota::default()),
        spec("b", None, 2.0, Quota::default(), Quota::default()),
    ])
    .unwrap();
    let cap = Amounts(BTreeMap::from([(Dim::Gpu, 8000), (Dim::Cpu, 100_000)]));
    let (a, b) = (t.index("a").unwrap(), t.index("b").unwrap());
    assert_eq!(t.rank(a, &gpu_amounts(2), &cap), (false, 0.5), "half its guarantee");
    assert_eq!(t.rank(a, &gpu_amounts(4), &cap), (true, 0.5), "at its guarantee: 4 of 8 GPUs, weight 1");
    let mixed = Amounts(BTreeMap::from([(Dim::Gpu, 2000), (Dim::Cpu, 50_000)]));
    assert_eq!(t.rank(b, &mixed, &cap), (true, 0.25), "dominant: half the CPU, over weight 2");
}

#[test]
fn fair_shares_give_guarantees_first_then_the_rest_by_weight() {
    let t = tree(vec![
        spec("a", None, 1.0, gpus(4), Quota::default()),
        spec("b", None, 3.0, Quota::default(), Quota::default()),
        spec("c", None, 1.0, Quota::default(), gpus(1)),
    ])
    .unwrap();
    let (a, b, c) = (t.index("a").unwrap(), t.index("b").unwrap(), t.index("c").unwrap());
    let cap = gpu_amounts(16);
    let mut demand = vec![Amounts::default(); t.nodes().len()];
    demand[a] = gpu_amounts(16);
    demand[b] = gpu_amounts(16);
    demand[c] = gpu_amounts(16);
    let f = fair_shares(&t, &cap, &demand);
    // a: 4 guaranteed; 12 left by weight 1:3:1, c capped at 1 by its
    // limit, the rest water-filled between a and b 1:3.
    assert_eq!(f[c].get(&Dim::Gpu), 1000);
    assert_eq!(f[a].get(&Dim::Gpu) + f[b].get(&Dim::Gpu) + f[c].get(&Dim::Gpu), 16_000, "{f:?}");
    assert_eq!(f[a].get(&Dim::Gpu), 4000 + 2750, "{f:?}");
    demand[b] = gpu_amounts(2);
    let f = fair_shares(&t, &cap, &demand);
    assert_eq!(f[b].get(&Dim::Gpu), 2000, "never more than asked for");
    assert_eq!(f[a].get(&Dim::Gpu), 13_000, "{f:?}");
    demand[a] = gpu_amounts(1);
    let f = fair_shares(&t, &cap, &demand);
    assert_eq!(f[a].get(&Dim::Gpu), 1000, "a guarantee not asked for is not a share");
}

#[test]
fn fair_shares_divide_a_parents_share_among_its_children() {
    let t = tree(vec![
        spec("org", None, 1.0, gpus(8), Quota::default()),
        spec("x", Some("org"), 1.0, Quota::default(), Quota::default()),
        spec("y", Some("org"), 1.0, Quota::default(), Quota::default()),
        spec("other", None, 1.0, Quota::default(), Quota::default()),
    ])
    .unwrap();
    let ix = |n: &str| t.index(n).unwrap();
    let mut demand = vec![Amounts::default(); t.nodes().len()];
    for (q, d) in [("x", 10), ("y", 10), ("other", 10)] {
        demand[ix(q)] = gpu_amounts(d);
    }
    demand[ix("org")] = gpu_amounts(20);
    let f = fair_shares(&t, &gpu_amounts(12), &demand);
    assert_eq!(f[ix("org")].get(&Dim::Gpu), 10_000, "8 guaranteed + half of 4");
    assert_eq!(f[ix("other")].get(&Dim::Gpu), 2000);
    assert_eq!((f[ix("x")].get(&Dim::Gpu), f[ix("y")].get(&Dim::Gpu)), (5000, 5000));
}

#[test]
fn a_pod_is_accounted_on_the_model_it_runs_on() {
    let pod = Pod {
        requests: crate::model::Resources { cpu_milli: 500, memory_mib: 0 },
        gpu_count: 2,
        gpu_milli: 500,
        ..Pod::default()
    };
    let a = Amounts::of(&pod, "V100");
    assert_eq!(
        a.0,
        BTreeMap::from([(Dim::Cpu, 500), (Dim::Gpu, 1000), (Dim::Model("V100".into()), 1000)]),
        "two half GPUs are one GPU; no memory asked, none accounted"
    );
    assert_eq!(Amounts::anywhere(&pod).0.len(), 2);
    assert_eq!(Dim::Model("V100".into()).show(1500), "1.500");
    assert_eq!(Dim::Gpu.show(2000), "2");
}
