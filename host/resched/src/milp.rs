//! The exact re-packing of a restricted candidate set as a MILP (`good_lp`,
//! solved by HiGHS when built in, else by the pure-Rust microlp: see
//! [`crate::solver`]).
//!
//! Candidates: the movable sharing pods on a set of nodes and the usable
//! GPUs of those nodes. `x[p][g] = 1` puts pod `p` on GPU `g` (its own GPU,
//! or a GPU on another node: a pod never changes GPU within its node);
//! `w[g] = 1` says GPU `g` ends up entirely free. Maximise
//! `γ·Σ w[g] − Σ cost(p)·moved(p)` subject to every pod on exactly one GPU,
//! each GPU's share, each node's CPU and memory, allowed models, and at most
//! `max_moves` moves. Pods that are not candidates (whole-GPU, multi-GPU,
//! hard-tier) stay and hold what they hold.
//!
//! The greedy plan is given as the initial solution (warm start); the
//! solver runs under a time limit and the caller falls back to the greedy
//! plan when it returns nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use good_lp::{Expression, ProblemVariables, Solution, Variable, constraint, variable};
use tessera_core::cluster::{Cluster, GpuSet, Placement};
use tessera_core::model::{GPU_MILLI, GpuHealth, NodeId, Pod, Tier};

use crate::cost::CostWeights;
use crate::plan::{Move, Strategy};
use crate::solver::{LpSolver, Model};

/// Why no exact plan came back.
#[derive(Debug, thiserror::Error)]
pub enum MilpError {
    /// More binaries than allowed.
    #[error("{0} binaries, over the limit of {1}")]
    TooLarge(usize, usize),
    /// The solver failed or ran out of time with no solution.
    #[error("solver: {0}")]
    Solver(#[from] good_lp::ResolutionError),
    /// The optimum's moves could not be put in an order in which each fits.
    #[error("no order of the moves keeps every step within capacity")]
    NoOrder,
}

struct Gpu {
    node: NodeId,
    index: u8,
    /// Free share with every candidate pod removed.
    base_free: u32,
}

/// Limits of one solve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Most moves the plan may make.
    pub max_moves: usize,
    /// Instances with more binary variables are refused.
    pub max_binaries: usize,
    /// Wall-clock limit of the solver.
    pub time_limit: Duration,
    /// The solver.
    pub backend: LpSolver,
}

/// Solves the re-packing of `nodes` exactly. `warm` (moves of a plan on the
/// same cluster, e.g. the greedy one) seeds the solver.
pub fn repack(
    cluster: &Cluster,
    running: &[(Pod, Placement)],
    nodes: &[NodeId],
    weights: &CostWeights,
    limits: Limits,
    warm: &[Move],
) -> Result<Vec<Move>, MilpError> {
    let Limits { max_moves, max_binaries, time_limit, backend } = limits;
    let in_set: BTreeMap<NodeId, usize> = nodes.iter().enumerate().map(|(k, &n)| (n, k)).collect();
    let candidate = |i: usize| {
        let (p, at) = &running[i];
        in_set.contains_key(&at.node) && p.tier != Tier::Hard && p.gpu_count == 1 && p.gpu_milli < GPU_MILLI
    };
    let mut gpus: Vec<Gpu> = Vec::new();
    let mut cpu_free: Vec<u64> = Vec::new();
    let mut mem_free: Vec<u64> = Vec::new();
    for &n in nodes {
        let node = &cluster.nodes()[n as usize];
        cpu_free.push(node.free.cpu_milli);
        mem_free.push(node.free.memory_mib);
        for (gi, g) in node.gpus.iter().enumerate() {
            if node.ready && g.health != GpuHealth::Failed {
                gpus.push(Gpu { node: n, index: gi as u8, base_free: g.free_milli });
            }
        }
    }
    let gpu_at = |gpus: &[Gpu], node: NodeId, index: usize| {
        gpus.iter().position(|g| g.node == node && usize::from(g.index) == index)
    };
    // Candidates and their GPUs; a pod on a GPU that has since failed (or
    // a node no longer ready) stays where it is.
    let mut pods: Vec<usize> = Vec::new();
    let mut home: Vec<usize> = Vec::new();
    for i in (0..running.len()).filter(|&i| candidate(i)) {
        let (p, at) = &running[i];
        let Some(g) = at.gpus.indices().next().and_then(|gi| gpu_at(&gpus, at.node, gi)) else { continue };
        let k = in_set[&at.node];
        cpu_free[k] += p.requests.cpu_milli;
        mem_free[k] += p.requests.memory_mib;
        gpus[g].base_free += p.gpu_milli;
        pods.push(i);
        home.push(g);
    }

    // Variables: x for each (pod, GPU) it may sit on; w for GPUs that may end empty.
    let mut vars = ProblemVariables::new();
    let mut x: Vec<Vec<(usize, Variable)>> = Vec::with_capacity(pods.len());
    let mut binaries = 0;
    for (k, &i) in pods.iter().enumerate() {
        let p = &running[i].0;
        let mut row = Vec::new();
        for (g, gpu) in gpus.iter().enumerate() {
            let node = &cluster.nodes()[gpu.node as usize];
            let same_node = gpu.node == running[i].1.node;
            let allowed = (p.allowed_models.is_empty() || p.allowed_models.contains(&node.gpu_model)) && node.admits(p);
            let fits = !same_node
                && allowed
                && p.gpu_milli <= gpu.base_free
                && p.requests.cpu_milli <= cpu_free[in_set[&gpu.node]];
            if g == home[k] || fits {
                row.push((g, vars.add(variable().binary())));
                binaries += 1;
            }
        }
        x.push(row);
    }
    let w: Vec<Option<Variable>> = gpus
        .iter()
        .map(|g| {
            (g.base_free == GPU_MILLI).then(|| {
                binaries += 1;
                vars.add(variable().binary())
            })
        })
        .collect();
    if binaries > max_binaries {
        return Err(MilpError::TooLarge(binaries, max_binaries));
    }
    let stays = |k: usize| x[k].iter().find(|(g, _)| *g == home[k]).map(|&(_, v)| v).expect("home is a choice");
    let cost: Vec<f64> = pods
        .iter()
        .map(|&i| {
            let (p, at) = &running[i];
            weights.move_cost(p, &cluster.nodes()[at.node as usize].gpu_model, 1)
        })
        .collect();
    // Objective: γ per freed GPU, minus each move's cost (moved = 1 − stays).
    let mut objective: Expression = w.iter().flatten().map(|&v| weights.gamma * v).sum();
    for (k, &c) in cost.iter().enumerate() {
        objective += c * stays(k) - c;
    }
    let mut model = Model::maximise(vars, objective).time_limit(time_limit);
    for row in &x {
        let sum: Expression = row.iter().map(|&(_, v)| Expression::from(v)).sum();
        model.with(constraint!(sum == 1));
    }
    for (g, gpu) in gpus.iter().enumerate() {
        let mut load: Expression = Expression::from(0.0);
        for (k, &i) in pods.iter().enumerate() {
            for &(h, v) in &x[k] {
                if h == g {
                    load += f64::from(running[i].0.gpu_milli) * v;
                }
            }
        }
        if let Some(wv) = w[g] {
            load += f64::from(GPU_MILLI) * wv;
        }
        model.with(constraint!(load <= f64::from(gpu.base_free)));
    }
    for (n, &node) in nodes.iter().enumerate() {
        let mut cpu: Expression = Expression::from(0.0);
        let mut mem: Expression = Expression::from(0.0);
        for (k, &i) in pods.iter().enumerate() {
            let p = &running[i].0;
            for &(h, v) in &x[k] {
                if gpus[h].node == node {
                    cpu += p.requests.cpu_milli as f64 * v;
                    mem += p.requests.memory_mib as f64 * v;
                }
            }
        }
        model.with(constraint!(cpu <= cpu_free[n] as f64)).with(constraint!(mem <= mem_free[n] as f64));
    }
    let moved: Expression = (0..pods.len()).map(|k| 1.0 - stays(k)).sum();
    model.with(constraint!(moved <= max_moves as f64));

    // Warm start: the given moves, every other pod home, w where a GPU ends empty.
    let mut start: Vec<(Variable, f64)> = Vec::new();
    let mut dest: Vec<usize> = home.clone();
    for m in warm {
        if let Some(k) = pods.iter().position(|&i| i == m.pod)
            && let Some(g) = m.to.gpus.indices().next().and_then(|gi| gpu_at(&gpus, m.to.node, gi))
        {
            dest[k] = g;
        }
    }
    if dest.iter().enumerate().all(|(k, &g)| x[k].iter().any(|&(h, _)| h == g)) {
        for (k, row) in x.iter().enumerate() {
            start.extend(row.iter().map(|&(h, v)| (v, if h == dest[k] { 1.0 } else { 0.0 })));
        }
        for (g, wv) in w.iter().enumerate() {
            if let Some(v) = wv {
                start.push((*v, if dest.contains(&g) { 0.0 } else { 1.0 }));
            }
        }
        model = model.initial(start);
    }

    let solution = model.solve(backend)?;
    let mut moves: Vec<Move> = Vec::new();
    for (k, &i) in pods.iter().enumerate() {
        let Some(&(g, _)) = x[k].iter().find(|(_, v)| solution.value(*v) > 0.5) else { continue };
        if g != home[k] {
            let to = Placement { node: gpus[g].node, gpus: GpuSet(1 << gpus[g].index) };
            moves.push(Move { pod: i, from: running[i].1, to, strategy: Strategy::FragmentMerge, cost: cost[k] });
        }
    }
    order(cluster, running, moves)
}

/// Puts `moves` in an order in which each fits when it runs.
fn order(cluster: &Cluster, running: &[(Pod, Placement)], mut left: Vec<Move>) -> Result<Vec<Move>, MilpError> {
    let mut c = cluster.clone();
    let mut out = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let before = left.len();
        left.retain(|m| {
            let pod = &running[m.pod].0;
            c.unbind(&m.from, pod);
            if c.bind(m.to.node, pod, m.to.gpus).is_ok() {
                out.push(*m);
                false
            } else {
                c.bind(m.from.node, pod, m.from.gpus).expect("the pod was just there");
                true
            }
        });
        if left.len() == before {
            return Err(MilpError::NoOrder);
        }
    }
    Ok(out)
}
