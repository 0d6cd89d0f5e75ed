//! The re-packing bound: an upper limit on the GPU share any rescheduler
//! that neither evicts nor overcommits could allocate, keeping every pod
//! the run admitted and letting in any that wait.
//!
//! A configuration LP over *nodes*: each usable node holds one
//! configuration — pods needing whole GPUs (one or several, which must sit
//! on the same node) and, on each GPU left, one packing of sharing pods
//! within a GPU. Pods fall in classes by share, GPUs per pod and allowed
//! models and CPU; nodes in types by GPU model, usable GPUs and CPU. Each
//! configuration fits its node's CPU, so a node whose cores the pods on it
//! use up leaves its free GPUs out (and CPU-only pods, worth nothing, still
//! take their cores); memory is left out, so it is generous. Putting
//! multi-GPU pods on one node is what a per-GPU bound misses (it lets a
//! 4-GPU pod take four free GPUs on four nodes).
//!
//! Solved through its dual, `min Σ_t N_t·π_t + Σ_c U_c π_c − Σ_c L_c μ_c`
//! subject to `π_t + Σ_c a_c (π_c − μ_c) ≥ Σ_c a_c v_c` for every
//! configuration `a` a node of type `t` can hold (`v_c`: GPU share of a pod
//! of class `c`), adding each type's most violated configuration each
//! round, starting from the configurations the cluster has now (so the
//! admitted pods always fit). Pricing ([`super::pricing`]) is exact for a
//! relaxation (CPU in whole cores, shares in hundredths, both rounded down
//! for pods and nodes). A round that stops early is still a valid bound:
//! each `π_t` raised by its violation.

use std::collections::BTreeMap;

use good_lp::{Expression, ProblemVariables, Solution, constraint, variable};
use tessera_core::cluster::{Cluster, Placement};
use tessera_core::model::{GPU_MILLI, Node, Pod};

use super::pricing::{CPU_UNIT, Catalog, Class};
use super::{Bound, BoundError};
use crate::solver::{LpSolver, Model};

/// Most rounds of column generation.
const MAX_ROUNDS: usize = 300;

/// The GPUs of `n` that may hold pods (none on a node that is not ready).
fn usable(n: &Node) -> impl Iterator<Item = (usize, &tessera_core::model::Gpu)> {
    n.gpus.iter().enumerate().filter(move |(_, g)| n.ready && g.health != tessera_core::model::GpuHealth::Failed)
}

/// The most usable GPUs of one node.
fn most_gpus(cluster: &Cluster) -> usize {
    cluster.nodes().iter().map(|n| usable(n).count()).max().unwrap_or(0)
}

/// A node's CPU in units of [`CPU_UNIT`] (rounded down).
fn cpu_units(n: &Node) -> usize {
    (n.capacity.cpu_milli / CPU_UNIT) as usize
}

/// Class and count of `p` (a sharing pod over several GPUs counts as that
/// many one-GPU pods, each with its part of the CPU: a relaxation, they
/// may split). None for a pod that takes neither GPUs nor a CPU unit.
fn class_of(p: &Pod) -> Option<(Class, u64)> {
    let cpu = p.requests.cpu_milli / CPU_UNIT;
    if p.gpu_count == 0 || p.gpu_milli == 0 {
        return (cpu > 0).then(|| ((0, 0, Vec::new(), cpu as u32), 1));
    }
    let mut models = p.allowed_models.clone();
    models.sort();
    models.dedup();
    Some(if p.gpu_milli >= GPU_MILLI {
        ((GPU_MILLI, p.gpu_count, models, cpu as u32), 1)
    } else {
        ((p.gpu_milli, 1, models, (cpu / u64::from(p.gpu_count)) as u32), u64::from(p.gpu_count))
    })
}

/// The bound for `admitted` pods where they run on `cluster`, with
/// `waiting` pods free to join.
pub fn repacking_bound(
    cluster: &Cluster,
    admitted: &[(Pod, Placement)],
    waiting: &[Pod],
    backend: LpSolver,
) -> Result<Bound, BoundError> {
    // Classes: mandatory (admitted) and most (admitted + waiting) of each.
    let mut lower: BTreeMap<Class, u64> = BTreeMap::new();
    let mut upper: BTreeMap<Class, u64> = BTreeMap::new();
    // (A pod on a node that is not ready may go anywhere or nowhere.)
    let ready = |at: &Placement| cluster.node(at.node).is_some_and(|n| n.ready);
    for (p, _) in admitted.iter().filter(|(_, at)| ready(at)) {
        if let Some((c, k)) = class_of(p) {
            *lower.entry(c).or_insert(0) += k;
        }
    }
    for p in admitted.iter().map(|(p, _)| p).chain(waiting) {
        if let Some((c, k)) = class_of(p) {
            *upper.entry(c).or_insert(0) += k;
        }
    }
    let classes: Vec<Class> = upper.keys().cloned().collect();
    let nc = classes.len();
    // Worth in GPUs (not thousandths): the LP is better conditioned.
    let value: Vec<f64> =
        classes.iter().map(|(s, k, _, _)| f64::from(*s) * f64::from(*k) / f64::from(GPU_MILLI)).collect();
    // Caps on the dual prices keep every round's LP bounded (a dual
    // solution within them is still feasible, so still a valid bound): no
    // price needs to exceed the most a node holds.
    let cap = most_gpus(cluster) as f64 + 1.0;
    let (lo, hi): (Vec<u64>, Vec<u64>) = classes.iter().map(|c| (lower.get(c).copied().unwrap_or(0), upper[c])).unzip();
    // Node types: (model, usable GPUs, CPU units) of the ready nodes,
    // with their counts.
    let mut types: BTreeMap<(String, usize, usize), u64> = BTreeMap::new();
    for n in cluster.nodes().iter().filter(|n| n.ready) {
        *types.entry((n.gpu_model.clone(), usable(n).count(), cpu_units(n))).or_insert(0) += 1;
    }
    let type_list: Vec<((String, usize, usize), u64)> = types.into_iter().collect();
    let type_of = |n: &Node| {
        let key = (n.gpu_model.clone(), usable(n).count(), cpu_units(n));
        type_list.binary_search_by(|(t, _)| t.cmp(&key))
    };
    // Each GPU model, the sharing classes it may hold, its nodes' most CPU.
    let mut models: Vec<(String, Vec<usize>, usize)> = Vec::new();
    for ((model, _, cpu), _) in type_list.iter().filter(|((_, gpus, _), _)| *gpus > 0) {
        match models.iter_mut().find(|(m, _, _)| m == model) {
            Some((_, _, most)) => *most = (*most).max(*cpu),
            None => {
                let sharing = (0..nc)
                    .filter(|&c| {
                        let (share, _, allowed, _) = &classes[c];
                        *share > 0 && *share < GPU_MILLI && (allowed.is_empty() || allowed.contains(model))
                    })
                    .collect();
                models.push((model.clone(), sharing, *cpu));
            }
        }
    }
    let catalog = Catalog { classes: &classes, hi: &hi, models };
    let offers: Vec<_> = type_list.iter().map(|((model, gpus, cpu), _)| catalog.offer(model, *gpus, *cpu)).collect();
    let total = cluster.nodes().iter().map(|n| n.gpus.len() as f64 * f64::from(GPU_MILLI)).sum::<f64>();

    // Start from the configurations the nodes have now.
    let mut now: BTreeMap<u32, (usize, Vec<u64>)> = BTreeMap::new();
    for (i, n) in cluster.nodes().iter().enumerate().filter(|(_, n)| n.ready) {
        if let Ok(t) = type_of(n) {
            now.insert(i as u32, (t, vec![0; nc]));
        }
    }
    for (p, at) in admitted {
        if let (Some((c, k)), Some((_, a))) = (class_of(p), now.get_mut(&at.node)) {
            let c = classes.binary_search(&c).expect("every admitted pod's class is a class");
            a[c] += k;
        }
    }
    let mut columns: Vec<(usize, Vec<u64>)> = now.into_values().collect();
    columns.sort();
    columns.dedup();
    let worth = |a: &[u64]| a.iter().zip(&value).map(|(&k, &v)| k as f64 * v).sum::<f64>();
    let mut best = f64::INFINITY;
    for _ in 0..MAX_ROUNDS {
        let mut vars = ProblemVariables::new();
        let pi_t: Vec<_> = type_list.iter().map(|_| vars.add(variable().min(0.0))).collect();
        let pi: Vec<_> = (0..nc).map(|_| vars.add(variable().min(0.0).max(cap))).collect();
        let mu: Vec<_> = (0..nc).map(|_| vars.add(variable().min(0.0).max(cap))).collect();
        let mut objective: Expression = Expression::from(0.0);
        for (t, (_, count)) in type_list.iter().enumerate() {
            objective += *count as f64 * pi_t[t];
        }
        for c in 0..nc {
            objective += hi[c] as f64 * pi[c] - lo[c] as f64 * mu[c];
        }
        let mut model = Model::minimise(vars, objective.clone());
        for (t, a) in &columns {
            let mut lhs: Expression = Expression::from(pi_t[*t]);
            for c in (0..nc).filter(|&c| a[c] > 0) {
                lhs += a[c] as f64 * (pi[c] - mu[c]);
            }
            model.with(constraint!(lhs >= worth(a)));
        }
        let sol = model.solve(backend)?;
        // Reduced worth of one pod of each class.
        let d: Vec<f64> = (0..nc).map(|c| value[c] - sol.value(pi[c]) + sol.value(mu[c])).collect();
        let mut raised = 0.0;
        let mut added = false;
        let tables = catalog.tables(&d);
        for (t, (_, count)) in type_list.iter().enumerate() {
            let (worth_t, column) = catalog.price(&offers[t], &tables, &d);
            let violation = (worth_t - sol.value(pi_t[t])).max(0.0);
            raised += *count as f64 * violation;
            let column = (t, column);
            if violation > 1e-6 && !columns.contains(&column) {
                columns.push(column);
                added = true;
            }
        }
        best = best.min(sol.eval(&objective) + raised);
        if !added {
            break;
        }
    }
    let gpu_milli = (best * f64::from(GPU_MILLI)).min(total);
    Ok(Bound {
        gpu_milli,
        allocation_pct: if total > 0.0 { 100.0 * gpu_milli / total } else { 0.0 },
        node_types: type_list.len(),
        pod_shapes: nc,
    })
}
