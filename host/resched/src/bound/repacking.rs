//! The re-packing bound: an upper limit on the GPU share any rescheduler
//! that neither evicts nor overcommits could allocate, keeping every pod
//! the run admitted and letting in any that wait.
//!
//! A configuration LP over *nodes*: each usable node holds one
//! configuration — pods needing whole GPUs (one or several, which must sit
//! on the same node) and, on each GPU left, one packing of sharing pods
//! within a GPU. Pods fall in classes by share, GPUs per pod and allowed
//! models; nodes in types by GPU model and usable GPUs. CPU and memory are
//! left out, so it is generous; putting multi-GPU pods on one node is what
//! a per-GPU bound misses (it lets a 4-GPU pod take four free GPUs on four
//! nodes).
//!
//! Solved through its dual, `min Σ_t N_t·π_t + Σ_c U_c π_c − Σ_c L_c μ_c`
//! subject to `π_t + Σ_c a_c (π_c − μ_c) ≥ Σ_c a_c v_c` for every
//! configuration `a` a node of type `t` can hold (`v_c`: GPU share of a pod
//! of class `c`), adding each type's most violated configuration each
//! round, starting from the configurations the cluster has now (so the
//! admitted pods always fit). Pricing is exact: the best packing of one GPU
//! (a knapsack over shares) repeated on every GPU not given to whole-GPU
//! pods, whose best use of `g` GPUs is a small knapsack over GPU counts. A
//! round that stops early is still a valid bound: each `π_t` raised by its
//! violation.

use std::collections::BTreeMap;

use good_lp::{Expression, ProblemVariables, Solution, constraint, variable};
use tessera_core::cluster::{Cluster, Placement};
use tessera_core::model::{GPU_MILLI, Node, Pod};

use super::{Bound, BoundError, best_packing};
use crate::solver::{Backend, Model};

/// Most rounds of column generation.
const MAX_ROUNDS: usize = 300;

/// A class of pods: share of each GPU (1000: whole GPUs), GPUs per pod
/// (1 for sharing pods), allowed models (sorted; empty: any).
type Class = (u32, u32, Vec<String>);

/// The GPUs of `n` that may hold pods (none on a node that is not ready).
fn usable(n: &Node) -> impl Iterator<Item = (usize, &tessera_core::model::Gpu)> {
    n.gpus.iter().enumerate().filter(move |(_, g)| n.ready && g.health != tessera_core::model::GpuHealth::Failed)
}

/// The most usable GPUs of one node.
fn most_gpus(cluster: &Cluster) -> usize {
    cluster.nodes().iter().map(|n| usable(n).count()).max().unwrap_or(0)
}

/// Class and count of `p` (a sharing pod over several GPUs counts as that
/// many one-GPU pods: a relaxation, they may split).
fn class_of(p: &Pod) -> Option<(Class, u64)> {
    if p.gpu_count == 0 || p.gpu_milli == 0 {
        return None;
    }
    let mut models = p.allowed_models.clone();
    models.sort();
    models.dedup();
    Some(if p.gpu_milli >= GPU_MILLI {
        ((GPU_MILLI, p.gpu_count, models), 1)
    } else {
        ((p.gpu_milli, 1, models), u64::from(p.gpu_count))
    })
}

/// The bound for `admitted` pods where they run on `cluster`, with
/// `waiting` pods free to join.
pub fn repacking_bound(
    cluster: &Cluster,
    admitted: &[(Pod, Placement)],
    waiting: &[Pod],
    backend: Backend,
) -> Result<Bound, BoundError> {
    // Classes: mandatory (admitted) and most (admitted + waiting) of each.
    let mut lower: BTreeMap<Class, u64> = BTreeMap::new();
    let mut upper: BTreeMap<Class, u64> = BTreeMap::new();
    for (p, _) in admitted {
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
        classes.iter().map(|(s, k, _)| f64::from(*s) * f64::from(*k) / f64::from(GPU_MILLI)).collect();
    // Caps on the dual prices keep every round's LP bounded (a dual
    // solution within them is still feasible, so still a valid bound): no
    // price needs to exceed the most a node holds.
    let cap = most_gpus(cluster) as f64 + 1.0;
    let (lo, hi): (Vec<u64>, Vec<u64>) = classes.iter().map(|c| (lower.get(c).copied().unwrap_or(0), upper[c])).unzip();
    let sharing: Vec<usize> = (0..nc).filter(|&c| classes[c].0 < GPU_MILLI).collect();
    // Node types: (model, usable GPUs), with their counts.
    let mut types: BTreeMap<(String, usize), u64> = BTreeMap::new();
    for n in cluster.nodes() {
        let g = usable(n).count();
        if g > 0 {
            *types.entry((n.gpu_model.clone(), g)).or_insert(0) += 1;
        }
    }
    let type_list: Vec<((String, usize), u64)> = types.into_iter().collect();
    let type_of = |n: &Node| {
        let key = (n.gpu_model.clone(), usable(n).count());
        type_list.binary_search_by(|(t, _)| t.cmp(&key))
    };
    let catalog =
        Catalog { sizes: sharing.iter().map(|&c| classes[c].0).collect(), sharing, classes: &classes, hi: &hi };
    let offers: Vec<Offer> = type_list.iter().map(|((model, gpus), _)| catalog.offer(model, *gpus)).collect();
    let total = cluster.nodes().iter().map(|n| n.gpus.len() as f64 * f64::from(GPU_MILLI)).sum::<f64>();

    // Start from the configurations the nodes have now.
    let mut now: BTreeMap<u32, (usize, Vec<u64>)> = BTreeMap::new();
    for (i, n) in cluster.nodes().iter().enumerate() {
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
        for (t, (_, count)) in type_list.iter().enumerate() {
            let (worth_t, column) = catalog.price(&offers[t], &d);
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

/// The pod classes as pricing needs them.
struct Catalog<'a> {
    classes: &'a [Class],
    /// Most pods of each class.
    hi: &'a [u64],
    /// The sharing classes, and their shares.
    sharing: Vec<usize>,
    sizes: Vec<u32>,
}

/// What a node type may hold: its usable GPUs, how many of each sharing
/// class one of its GPUs may pack, the whole-GPU classes it takes.
struct Offer {
    gpus: usize,
    per_gpu: Vec<u64>,
    whole: Vec<usize>,
}

impl Catalog<'_> {
    fn offer(&self, model: &str, gpus: usize) -> Offer {
        let allows = |c: usize| self.classes[c].2.is_empty() || self.classes[c].2.iter().any(|m| m == model);
        Offer {
            gpus,
            per_gpu: self.sharing.iter().map(|&c| if allows(c) { self.hi[c] } else { 0 }).collect(),
            whole: (0..self.classes.len())
                .filter(|&c| self.classes[c].0 >= GPU_MILLI && allows(c) && self.classes[c].1 as usize <= gpus)
                .collect(),
        }
    }

    /// The configuration of a node with offer `o` of greatest reduced
    /// worth `Σ_c a_c d_c`: whole-GPU pods on some GPUs (a knapsack over
    /// GPU counts, each class at most its count), the best packing of one
    /// GPU on each of the others.
    fn price(&self, o: &Offer, d: &[f64]) -> (f64, Vec<u64>) {
        let (nc, gpus, hi) = (d.len(), o.gpus, self.hi);
        // One GPU's best sharing packing.
        let d_sharing: Vec<f64> = self.sharing.iter().map(|&c| d[c]).collect();
        let (one, packing) = best_packing(&self.sizes, &o.per_gpu, &d_sharing);
        let one = one.max(0.0);
        // w[g]: best whole-GPU pods within g GPUs, and the pods.
        let mut w: Vec<(f64, Vec<u64>)> = vec![(0.0, vec![0; nc]); gpus + 1];
        for &c in o.whole.iter().filter(|&&c| d[c] > 0.0) {
            let k = self.classes[c].1.max(1) as usize;
            for _ in 0..(gpus / k).min(hi[c] as usize) {
                for g in (k..=gpus).rev() {
                    let with = w[g - k].0 + d[c];
                    if with > w[g].0 + 1e-12 && w[g - k].1[c] < hi[c] {
                        let mut a = w[g - k].1.clone();
                        a[c] += 1;
                        w[g] = (with, a);
                    }
                }
            }
        }
        // g GPUs for whole-GPU pods (the best within g: entry h ≤ g), the
        // rest each with the best packing.
        let (mut v, mut h, mut g) = (f64::NEG_INFINITY, 0, 0);
        let mut within = 0;
        for k in 0..=gpus {
            if w[k].0 > w[within].0 {
                within = k;
            }
            let here = w[within].0 + (gpus - k) as f64 * one;
            if here > v {
                (v, h, g) = (here, within, k);
            }
        }
        let mut a = w[h].1.clone();
        if one > 0.0 {
            for (i, &c) in self.sharing.iter().enumerate() {
                a[c] += packing[i] * (gpus - g) as u64;
            }
        }
        (v, a)
    }
}
