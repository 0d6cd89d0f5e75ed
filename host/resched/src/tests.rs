//! Strategies on small clusters with a known optimum, the MILP against
//! brute force, the time limit, and a property test: no plan ever breaks a
//! hard constraint of placement.

use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use tessera_core::cluster::{Cluster, GpuSet, Placement, choose_gpus};
use tessera_core::metrics::{Shape, TargetWorkload};
use tessera_core::model::{GPU_MILLI, Node, NodeId, Pod, Resources, Tier};

use crate::controller::{Planner, PlannerConfig, StrategyWeights};
use crate::plan::{self, Solver, Strategy};

pub(crate) fn node(id: NodeId, gpus: usize) -> Node {
    Node::new(id, format!("n{id}"), Resources { cpu_milli: 32_000, memory_mib: 256 * 1024 }, gpus, "A100")
}

pub(crate) fn pod(name: &str, milli: u32) -> Pod {
    Pod {
        name: name.into(),
        workload: name.into(),
        requests: Resources { cpu_milli: 1_000, memory_mib: 1024 },
        gpu_count: 1,
        gpu_milli: milli,
        tier: Tier::Soft,
        ..Pod::default()
    }
}

/// Binds each `(pod, node, gpu)` and returns the cluster and running pods.
pub(crate) fn build(nodes: Vec<Node>, pods: Vec<(Pod, NodeId, usize)>) -> (Cluster, Vec<(Pod, Placement)>) {
    let mut c = Cluster::new(nodes);
    let mut running = Vec::new();
    for (p, n, g) in pods {
        let gpus = if p.gpu_count == 0 {
            GpuSet::default()
        } else if p.gpu_milli < GPU_MILLI {
            GpuSet(1 << g)
        } else {
            choose_gpus(c.node(n).unwrap(), &p, None).unwrap()
        };
        let at = c.bind(n, &p, gpus).unwrap();
        running.push((p, at));
    }
    (c, running)
}

/// A workload of whole-GPU pods: every fraction of a GPU left free is a
/// fragment.
fn whole_gpu_workload() -> TargetWorkload {
    TargetWorkload {
        shapes: vec![(Shape { cpu_milli: 1_000, gpu_count: 1, gpu_milli: GPU_MILLI, allowed_models: vec![] }, 1.0)],
    }
}

pub(crate) fn only(s: Strategy) -> PlannerConfig {
    let w = |t| if t == s { 1.0 } else { 0.0 };
    PlannerConfig {
        strategy_weights: StrategyWeights {
            load_balance: w(Strategy::LoadBalance),
            fragment_merge: w(Strategy::FragmentMerge),
            co_location: w(Strategy::CoLocation),
        },
        milp_max_nodes: 0,
        ..PlannerConfig::default()
    }
}

#[test]
fn defrag_merges_two_halves_into_one_gpu() {
    // Three one-GPU nodes each half used: the optimum frees one GPU with
    // one move (a third half has nowhere to go).
    let (c, running) = build(
        (0..3).map(|i| node(i, 1)).collect(),
        vec![(pod("a", 500), 0, 0), (pod("b", 500), 1, 0), (pod("c", 500), 2, 0)],
    );
    let p = Planner::new(only(Strategy::FragmentMerge)).plan(&c, &running, &whole_gpu_workload(), 10, None);
    assert_eq!(p.moves.len(), 1, "{p:?}");
    assert_eq!(p.freed_gpus(), 1);
    assert!(p.fragmentation_after < p.fragmentation_before);
    plan::validate(&c, &running, &p.moves).unwrap();
}

#[test]
fn defrag_frees_the_most_gpus_around_an_unmovable_pod() {
    // Node 0's GPU holds an unmovable 400 (hard tier): a hole of 600. Pods
    // of 300, 300 and 500 each sit alone on a GPU. The optimum frees two
    // GPUs with two moves (both 300s into the hole, or one 300 beside the
    // other and the 500 into the hole); three GPUs cannot be freed.
    let mut hard = pod("h", 400);
    hard.tier = Tier::Hard;
    let (c, running) = build(
        (0..4).map(|i| node(i, 1)).collect(),
        vec![(hard, 0, 0), (pod("x", 500), 1, 0), (pod("y", 300), 2, 0), (pod("z", 300), 3, 0)],
    );
    let p = Planner::new(only(Strategy::FragmentMerge)).plan(&c, &running, &whole_gpu_workload(), 10, None);
    plan::validate(&c, &running, &p.moves).unwrap();
    assert_eq!(p.freed_gpus(), 2, "{p:?}");
    assert_eq!(p.moves.len(), 2, "{p:?}");
    assert!(p.moves.iter().all(|m| running[m.pod].0.tier != Tier::Hard));
}

#[test]
fn defrag_never_moves_when_it_does_not_pay() {
    // Moving costs more than a GPU is worth.
    let (c, running) = build((0..2).map(|i| node(i, 1)).collect(), vec![(pod("a", 500), 0, 0), (pod("b", 500), 1, 0)]);
    let mut cfg = only(Strategy::FragmentMerge);
    cfg.cost.beta = 10.0;
    let p = Planner::new(cfg).plan(&c, &running, &whole_gpu_workload(), 10, None);
    assert!(p.moves.is_empty(), "{p:?}");
}

/// A workload of the given `(GPU share, weight)` shapes.
fn shares(shapes: &[(u32, f64)]) -> TargetWorkload {
    let shape = |milli| Shape { cpu_milli: 1_000, gpu_count: 1, gpu_milli: milli, allowed_models: vec![] };
    TargetWorkload { shapes: shapes.iter().map(|&(milli, w)| (shape(milli), w)).collect() }
}

#[test]
fn repair_pairs_a_pod_where_it_completes_a_tight_packing() {
    // GPU 0 holds 0.32 + 0.47 (0.21 left, which nothing common fills), GPU
    // 1 a lone 0.47. The one move that pays, the 0.47 to GPU 1, leaves 0.06
    // there and 0.68 beside the 0.32, which a 0.65 pod fills. It empties no
    // GPU: only the re-pairing finds it.
    let (c, running) =
        build(vec![node(0, 1), node(1, 1)], vec![(pod("a", 320), 0, 0), (pod("b", 470), 0, 0), (pod("c", 470), 1, 0)]);
    let workload = shares(&[(GPU_MILLI, 0.5), (470, 0.2), (320, 0.15), (650, 0.15)]);
    let p = Planner::new(only(Strategy::FragmentMerge)).plan(&c, &running, &workload, 10, None);
    assert_eq!(p.moves.len(), 1, "{p:?}");
    assert_eq!((p.moves[0].pod, p.moves[0].to.node), (1, 1));
    assert!(p.net_gain() > 0.0);
    // With the exact MILP on too (a two-node cluster is small enough), the
    // move stands: the MILP frees no more GPUs.
    let cfg = PlannerConfig { milp_max_nodes: 8, ..only(Strategy::FragmentMerge) };
    let p = Planner::new(cfg).plan(&c, &running, &workload, 10, None);
    assert_eq!(p.moves.len(), 1, "{p:?}");
    // A budget of one move, shared by weight with a strategy that has
    // nothing to do, still reaches the re-pairing (it was rounded away).
    let mut cfg = only(Strategy::FragmentMerge);
    cfg.strategy_weights = StrategyWeights { load_balance: 1.0, fragment_merge: 2.0, co_location: 0.0 };
    let p = Planner::new(cfg).plan(&c, &running, &workload, 1, None);
    assert_eq!(p.moves.len(), 1, "{p:?}");
    // No pod of the workload fits 0.68 better than 0.53: nothing to gain.
    let p = Planner::new(only(Strategy::FragmentMerge)).plan(&c, &running, &whole_gpu_workload(), 10, None);
    assert!(p.moves.is_empty(), "{p:?}");
}

#[test]
fn the_global_repacking_reaches_its_packing_in_the_fewest_moves() {
    // A {500, 250}, B {500}, C {250, 250}, one GPU per node. FFD packs
    // {500, 500} and {250, 250, 250} and, placing pod by pod, makes four
    // moves (A's 250 and both of C's go to B, B's 500 to A); giving
    // {500, 500} to A and {250, 250, 250} to C needs two.
    let (c, running) = build(
        (0..3).map(|i| node(i, 1)).collect(),
        vec![
            (pod("a1", 500), 0, 0),
            (pod("a2", 250), 0, 0),
            (pod("b", 500), 1, 0),
            (pod("c1", 250), 2, 0),
            (pod("c2", 250), 2, 0),
        ],
    );
    let w = whole_gpu_workload();
    let mut s = crate::scratch::Scratch::new(&c, &running, &w, crate::cost::CostWeights::default(), None);
    assert_eq!(crate::repack::run(&mut s, 10), 2, "{:?}", s.moves);
    let after = plan::validate(&c, &running, &s.moves).unwrap();
    assert_eq!(plan::whole_free_gpus(&after), 1);
    // (Or {500, 500} on B, as few moves: both A's pods leave.)
    let mut used: Vec<u32> = after.nodes().iter().map(|n| GPU_MILLI - n.gpus[0].free_milli).collect();
    assert_eq!(used[2], 750);
    used.sort_unstable();
    assert_eq!(used, vec![0, 750, 1000]);
}

#[test]
fn consolidation_empties_the_low_load_node() {
    // Node 1 holds one small pod; node 0 is busy and has room.
    let mut busy = pod("busy", 1000);
    busy.gpu_count = 6;
    let (c, running) = build(vec![node(0, 8), node(1, 8)], vec![(busy, 0, 0), (pod("small", 200), 1, 3)]);
    let p = Planner::new(only(Strategy::CoLocation)).plan(&c, &running, &whole_gpu_workload(), 10, None);
    assert_eq!(p.moves.len(), 1, "{p:?}");
    assert_eq!(p.moves[0].to.node, 0);
    assert_eq!(p.empty_nodes_after, p.empty_nodes_before + 1);
    plan::validate(&c, &running, &p.moves).unwrap();
}

#[test]
fn load_balance_relieves_the_hot_node_at_least_cost() {
    // Node 0 runs hot (GPU util 95%) with a cheap opportunistic pod and a
    // costly soft one; node 1 is cool. One move suffices: the cheap one.
    let mut cheap = pod("batch", 500);
    cheap.tier = Tier::Opportunistic;
    let (mut c, running) = build(vec![node(0, 1), node(1, 1)], vec![(cheap, 0, 0), (pod("online", 500), 0, 0)]);
    c.update_node(0, |n| n.gpus[0].util_permille = 950);
    let p = Planner::new(only(Strategy::LoadBalance)).plan(&c, &running, &whole_gpu_workload(), 10, None);
    assert_eq!(p.overloaded_before, 1);
    assert_eq!(p.overloaded_after, 0, "{p:?}");
    assert_eq!(p.moves.len(), 1);
    assert_eq!(running[p.moves[0].pod].0.name, "batch");
    plan::validate(&c, &running, &p.moves).unwrap();
}

#[test]
fn the_move_budget_and_weights_are_kept() {
    let (c, running) = build(
        (0..8).map(|i| node(i, 1)).collect(),
        (0..8).map(|i| (pod(&format!("p{i}"), 300), i as NodeId, 0)).collect(),
    );
    let p = Planner::new(only(Strategy::FragmentMerge)).plan(&c, &running, &whole_gpu_workload(), 2, None);
    assert!(p.moves.len() <= 2 && !p.moves.is_empty(), "{p:?}");
    let off = PlannerConfig {
        strategy_weights: StrategyWeights { load_balance: 0.0, fragment_merge: 0.0, co_location: 0.0 },
        ..PlannerConfig::default()
    };
    assert!(Planner::new(off).plan(&c, &running, &whole_gpu_workload(), 100, None).moves.is_empty());
}

#[test]
fn warm_start_keeps_the_previous_plan_where_it_holds() {
    let (c, running) = build(
        (0..3).map(|i| node(i, 1)).collect(),
        vec![(pod("a", 500), 0, 0), (pod("b", 500), 1, 0), (pod("c", 500), 2, 0)],
    );
    let planner = Planner::new(only(Strategy::FragmentMerge));
    let first = planner.plan(&c, &running, &whole_gpu_workload(), 10, None);
    let again = planner.plan(&c, &running, &whole_gpu_workload(), 10, Some(&first));
    assert_eq!(again.warm_moves, first.moves.len());
    assert_eq!(again.moves, first.moves);
}

/// Brute force over every assignment of the sharing pods to GPUs (their own
/// or one on another node): the best `γ·freed − cost`.
fn brute_force(c: &Cluster, running: &[(Pod, Placement)], cfg: &PlannerConfig) -> f64 {
    let gpus: Vec<(NodeId, usize)> = c.nodes().iter().flat_map(|n| (0..n.gpus.len()).map(move |g| (n.id, g))).collect();
    let n = running.len();
    let mut best = f64::NEG_INFINITY;
    let mut choice = vec![0usize; n];
    let total = gpus.len().pow(n as u32);
    let before = plan::whole_free_gpus(c);
    for code in 0..total {
        let mut k = code;
        for ch in choice.iter_mut() {
            *ch = k % gpus.len();
            k /= gpus.len();
        }
        let mut moves = Vec::new();
        let mut ok = true;
        let mut cost = 0.0;
        for (i, &g) in choice.iter().enumerate() {
            let (p, at) = &running[i];
            let to = Placement { node: gpus[g].0, gpus: GpuSet(1 << gpus[g].1) };
            if to == *at {
                continue;
            }
            if to.node == at.node {
                ok = false;
                break;
            }
            let m = cfg.cost.move_cost(p, "A100", 1);
            cost += m;
            moves.push(plan::Move { pod: i, from: *at, to, strategy: Strategy::FragmentMerge, cost: m });
        }
        if !ok {
            continue;
        }
        // Feasible in some order: apply the moves into a copy with every
        // moved pod lifted first.
        let mut after = c.clone();
        for m in &moves {
            after.unbind(&m.from, &running[m.pod].0);
        }
        if moves.iter().all(|m| after.bind(m.to.node, &running[m.pod].0, m.to.gpus).is_ok()) {
            let freed = plan::whole_free_gpus(&after) as f64 - before as f64;
            best = best.max(cfg.cost.gamma * freed - cost);
        }
    }
    best
}

#[test]
fn milp_finds_the_brute_force_optimum() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut solved = 0;
    for _ in 0..30 {
        let nodes: Vec<Node> = (0..3).map(|i| node(i, 1 + rng.random_range(0..2))).collect();
        let gpus: Vec<(NodeId, usize)> = nodes.iter().flat_map(|n| (0..n.gpus.len()).map(move |g| (n.id, g))).collect();
        let mut c = Cluster::new(nodes.clone());
        let mut pods = Vec::new();
        for k in 0..rng.random_range(2..6) {
            let p = pod(&format!("p{k}"), 100 * rng.random_range(1..7));
            let (n, g) = gpus[rng.random_range(0..gpus.len())];
            if c.bind(n, &p, GpuSet(1 << g)).is_ok() {
                pods.push((p, n, g));
            }
        }
        let (c, running) = build(nodes, pods);
        let cfg = PlannerConfig { milp_max_nodes: 16, ..only(Strategy::FragmentMerge) };
        let p = Planner::new(cfg.clone()).plan(&c, &running, &whole_gpu_workload(), 100, None);
        plan::validate(&c, &running, &p.moves).unwrap();
        let freed = p.freed_gpus() as f64;
        let got = cfg.cost.gamma * freed - p.cost;
        let best = brute_force(&c, &running, &cfg);
        if p.solver == Solver::Milp || p.solver == Solver::Greedy {
            assert!(got >= best - 1e-6 || p.moves.is_empty() && best <= 1e-6, "got {got} best {best}: {p:?}");
            solved += 1;
        }
    }
    assert!(solved >= 25, "only {solved} instances solved");
}

#[test]
fn the_time_limit_returns_a_valid_plan() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (c, running) = random_cluster(&mut rng, 2_000, 12_000);
    let cfg = PlannerConfig { time_limit_ms: 1, ..PlannerConfig::default() };
    let p = Planner::new(cfg).plan(
        &c,
        &running,
        &TargetWorkload::from_pods(running.iter().map(|r| &r.0), 0.95),
        5_000,
        None,
    );
    assert!(p.timed_out, "2,000 nodes in 1 ms");
    plan::validate(&c, &running, &p.moves).unwrap();
}

/// A random cluster of mixed nodes and pods (sharing, whole, multi-GPU,
/// CPU-only; some hard-tier, some pinned to a model), filled first-fit.
fn random_cluster(rng: &mut ChaCha8Rng, nodes: usize, pods: usize) -> (Cluster, Vec<(Pod, Placement)>) {
    let ns: Vec<Node> = (0..nodes)
        .map(|i| {
            let model = ["A100", "V100"][rng.random_range(0..2)];
            let mut n = Node::new(
                i as NodeId,
                format!("n{i}"),
                Resources { cpu_milli: 8_000 * rng.random_range(1..9), memory_mib: 65_536 * rng.random_range(1..5) },
                rng.random_range(0..9),
                model,
            );
            n.ready = rng.random_range(0..50) != 0;
            n
        })
        .collect();
    let mut c = Cluster::new(ns);
    let mut running = Vec::new();
    let (mut cand, mut rej) = (Vec::new(), [0u32; tessera_core::cluster::FilterReason::COUNT]);
    for k in 0..pods {
        let kind = rng.random_range(0..10);
        let mut p = pod(&format!("p{k}"), 100 * rng.random_range(1..10));
        p.workload = format!("w{}", rng.random_range(0..50));
        p.requests.cpu_milli = 500 * rng.random_range(1..16);
        if kind == 0 {
            p.gpu_count = 0;
            p.gpu_milli = 0;
        } else if kind <= 2 {
            p.gpu_milli = GPU_MILLI;
            p.gpu_count = rng.random_range(1..4);
        }
        if rng.random_range(0..8) == 0 {
            p.tier = Tier::Hard;
            if p.gpu_count > 0 {
                p.gpu_milli = GPU_MILLI;
            }
        }
        if rng.random_range(0..6) == 0 {
            p.allowed_models = vec!["V100".into()];
        }
        c.feasible(&p, &mut cand, &mut rej);
        if cand.is_empty() {
            continue;
        }
        let n = cand[rng.random_range(0..cand.len())];
        let gpus = choose_gpus(c.node(n).unwrap(), &p, None).unwrap();
        let at = c.bind(n, &p, gpus).unwrap();
        running.push((p, at));
    }
    // Telemetry: some nodes run hot.
    for n in 0..nodes as NodeId {
        let util = rng.random_range(0..1000);
        c.update_node(n, |node| {
            node.cpu_util_permille = util;
            for g in &mut node.gpus {
                g.util_permille = util;
            }
        });
    }
    (c, running)
}

#[test]
fn no_plan_breaks_a_hard_constraint() {
    for seed in 0..40 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let nodes = rng.random_range(1..40);
        let pods = rng.random_range(0..400);
        let (c, running) = random_cluster(&mut rng, nodes, pods);
        let cfg = PlannerConfig {
            strategy_weights: StrategyWeights {
                load_balance: rng.random_range(0..3) as f64,
                fragment_merge: rng.random_range(0..3) as f64,
                co_location: rng.random_range(0..3) as f64,
            },
            low_load_threshold: 0.3,
            load_threshold: 0.7,
            milp_max_nodes: 4,
            ..PlannerConfig::default()
        };
        // Budgets from none to enough for the global re-packing.
        let budget = if rng.random_bool(0.5) { rng.random_range(0..60) } else { rng.random_range(64..400) };
        let workload = TargetWorkload::from_pods(running.iter().map(|r| &r.0), 0.95);
        let p = Planner::new(cfg).plan(&c, &running, &workload, budget, None);
        assert!(p.moves.len() <= budget, "seed {seed}: {} moves over {budget}", p.moves.len());
        // Capacity, model, GPU share and readiness: every move binds.
        let after = plan::validate(&c, &running, &p.moves).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        // Tier: no hard-tier pod moves; no pod moves twice.
        let mut seen = std::collections::HashSet::new();
        for m in &p.moves {
            assert_ne!(running[m.pod].0.tier, Tier::Hard, "seed {seed}");
            assert!(seen.insert(m.pod), "seed {seed}: pod {} moved twice", m.pod);
        }
        // Nothing lost: every pod's resources are still accounted for.
        let used = |c: &Cluster| -> (u64, u64) {
            c.nodes().iter().fold((0, 0), |(cpu, gpu), n| {
                (
                    cpu + n.capacity.cpu_milli - n.free.cpu_milli,
                    gpu + n.gpus.iter().map(|g| u64::from(GPU_MILLI - g.free_milli)).sum::<u64>(),
                )
            })
        };
        assert_eq!(used(&c), used(&after), "seed {seed}");
        // The figures the plan reports are those of the cluster after it.
        let frag: f64 = after.nodes().iter().map(|n| tessera_core::metrics::node_fragment_weighted(n, &workload)).sum();
        assert!((p.fragmentation_after - frag).abs() < 1e-6, "seed {seed}: {} vs {frag}", p.fragmentation_after);
        assert_eq!(p.whole_free_after, plan::whole_free_gpus(&after), "seed {seed}");
        assert!(p.net_gain() >= 0.0 || p.moves.is_empty(), "seed {seed}: {p:?}");
    }
}

/// Places each pod on the candidate with the most free GPU share (worst
/// fit: it spreads, so it fragments).
struct Spread {
    free: Vec<u32>,
}

impl tessera_core::framework::Placer for Spread {
    fn nodes_changed(&mut self, nodes: &[&Node]) {
        for n in nodes {
            if self.free.len() <= n.id as usize {
                self.free.resize(n.id as usize + 1, 0);
            }
            self.free[n.id as usize] = n.free_gpu_milli();
        }
    }

    fn place(&mut self, _: &Pod, candidates: &[NodeId]) -> tessera_core::framework::Choice {
        let node = candidates.iter().copied().max_by_key(|&n| (self.free[n as usize], std::cmp::Reverse(n)));
        tessera_core::framework::Choice { node, ..Default::default() }
    }
}

#[test]
fn the_simulator_runs_the_planner_on_its_period() {
    let nodes: Vec<Node> = (0..3).map(|i| node(i, 1)).collect();
    let pods = vec![pod("a", 500), pod("b", 500), pod("c", 500), {
        let mut w = pod("w", GPU_MILLI);
        w.workload = "w".into();
        w
    }];
    // Without rescheduling the spread leaves no whole GPU for `w`.
    let mut placer = Spread { free: Vec::new() };
    let r = tessera_core::sim::Simulator::new(nodes.clone(), whole_gpu_workload(), &mut placer).run_submissions(&pods);
    assert_eq!(r.failed, 1);
    // With the planner every submission, two halves merge before `w` comes.
    let mut placer = Spread { free: Vec::new() };
    let mut planner = crate::SimPlanner::new(Planner::new(only(Strategy::FragmentMerge)), whole_gpu_workload());
    let r = tessera_core::sim::Simulator::new(nodes, whole_gpu_workload(), &mut placer)
        .with_rescheduling(1.0)
        .with_planner(&mut planner, 1)
        .run_submissions(&pods);
    assert_eq!(r.failed, 0, "{r:?}");
    assert!(r.planned_migrations >= 1 && r.planned_migrations == r.migrations, "{r:?}");
    assert_eq!(r.rescued, 0, "room was made before `w` failed");
    assert_eq!(planner.totals().moves_by_strategy.get("fragment-merge").copied(), Some(r.planned_migrations));
}

/// A plan for what the detectors flagged moves pods off those nodes only.
#[test]
fn plans_for_anomalies_move_pods_off_the_flagged_nodes_only() {
    use tessera_core::framework::Rescheduler as _;
    let (c, running) = build(
        (0..6).map(|i| node(i, 1)).collect(),
        (0..6).map(|i| (pod(&format!("p{i}"), 400), i as NodeId, 0)).collect(),
    );
    let flagged = tessera_core::telemetry::Detection {
        detector: "rebalance".into(),
        node: 4,
        kind: "fragmentation".into(),
        severity: 900,
        message: String::new(),
    };
    let mut sp = crate::SimPlanner::new(Planner::new(only(Strategy::FragmentMerge)), whole_gpu_workload());
    let moves = sp.plan_for(&c, &running, 10, &[flagged]);
    assert!(!moves.is_empty());
    assert!(moves.iter().all(|&(i, _)| running[i].1.node == 4), "{moves:?}");
    // Unfocused, the same planner drains more than one node.
    let all = sp.plan(&c, &running, 10);
    assert!(all.iter().any(|&(i, _)| running[i].1.node != 4), "{all:?}");
}

/// Pods on a GPU that failed after they were placed, or on a node that is
/// no longer ready, are left where they are; planning never panics on them.
#[test]
fn failed_gpus_and_unready_nodes_under_running_pods_are_tolerated() {
    let (mut c, running) = build(
        (0..4).map(|i| node(i, 2)).collect(),
        (0..8).map(|i| (pod(&format!("p{i}"), 300), (i / 2) as NodeId, i % 2)).collect(),
    );
    c.update_node(0, |n| n.gpus[1].health = tessera_core::model::GpuHealth::Failed);
    c.update_node(1, |n| n.ready = false);
    for milp_max_nodes in [0, 8] {
        let cfg = PlannerConfig { milp_max_nodes, ..PlannerConfig::default() };
        let p = Planner::new(cfg).plan(&c, &running, &whole_gpu_workload(), 8, None);
        let after = plan::validate(&c, &running, &p.moves).unwrap();
        assert!(p.moves.iter().all(|m| m.to.node != 1), "nothing lands on the unready node");
        assert!(plan::whole_free_gpus(&after) >= plan::whole_free_gpus(&c));
    }
}
