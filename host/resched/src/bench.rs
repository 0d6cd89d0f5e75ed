//! `tessera bench reschedule`: planning time and plan quality on a large,
//! fragmented synthetic cluster, and an upper bound on what any re-packing
//! could free.
//!
//! The planner plans with no move cap and `γ = 10` (a GPU worth ten times
//! the default), so the figures say how close a thorough plan comes to the
//! bound. The cluster has 8-GPU nodes; pods (openb's mix of GPU shares) are bound
//! to random nodes that take them, sharing pods to a random GPU that holds
//! them, so free share is scattered the way a fragmenting placer leaves it. The planner (default strategy weights,
//! no move cap) plans `reps` times; then, `reps` times, 1% of the pods are
//! replaced by new ones and the planner re-plans from its last plan,
//! looking for new moves only on the nodes that changed.

use std::time::Instant;

use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use tessera_core::cluster::{Cluster, GpuSet, Placement, check};
use tessera_core::metrics::{TargetWorkload, percentile};
use tessera_core::model::{GPU_MILLI, GpuHealth, NodeId, Pod, Tier};

use crate::controller::{Planner, PlannerConfig};
use crate::plan::{self, Plan};
use crate::solver::LpSolver;

/// The figures `tessera bench reschedule` prints.
#[derive(Debug, Clone, Serialize)]
pub struct RescheduleBench {
    /// Nodes.
    pub nodes: usize,
    /// Pods bound (of those generated, the ones some node took).
    pub pods: usize,
    /// Median planning time, ms.
    pub plan_ms_p50: f64,
    /// 99th percentile planning time, ms.
    pub plan_ms_p99: f64,
    /// Median time of a re-plan after 1% of the pods changed, ms.
    pub incremental_ms_p50: f64,
    /// Moves of the plan.
    pub moves: usize,
    /// Whole GPUs the plan frees.
    pub freed_gpus: i64,
    /// How far the whole free GPUs after the plan are under the LP bound on
    /// what any re-packing could leave free, % of the bound.
    pub lp_bound_gap_pct: f64,
    /// Usable GPUs entirely free before the plan.
    pub whole_free_before: u64,
    /// The same after.
    pub whole_free_after: u64,
    /// The bound on whole free GPUs.
    pub whole_free_bound: u64,
    /// Moves of the last incremental re-plan (kept from the previous plan
    /// plus new).
    pub incremental_moves: usize,
    /// Plans cut short by the time limit.
    pub timed_out: usize,
    /// Repetitions of each measurement.
    pub reps: usize,
    /// The LP/MILP solver the bound (and any MILP) used.
    pub solver: String,
}

/// Binds `pod` on a random node that takes it (at most `tries` draws),
/// a sharing pod on a random GPU that holds it.
fn bind_random(c: &mut Cluster, rng: &mut ChaCha8Rng, pod: &Pod, tries: usize) -> Option<Placement> {
    let n = c.nodes().len();
    for _ in 0..tries {
        let id = rng.random_range(0..n) as NodeId;
        let node = c.node(id)?;
        if check(node, pod).is_err() {
            continue;
        }
        let gpus = if pod.gpu_count == 1 && pod.gpu_milli < GPU_MILLI {
            let fits: Vec<usize> = (0..node.gpus.len())
                .filter(|&i| node.gpus[i].health != GpuHealth::Failed && node.gpus[i].free_milli >= pod.gpu_milli)
                .collect();
            GpuSet(1 << fits[rng.random_range(0..fits.len())])
        } else {
            tessera_core::cluster::choose_gpus(node, pod, None)?
        };
        if let Ok(p) = c.bind(id, pod, gpus) {
            return Some(p);
        }
    }
    None
}

/// `(weight, share)` of sharing pods: the openb `default` mix.
const SHARES: [(u32, u32); 8] =
    [(7, 50), (99, 150), (207, 250), (388, 350), (899, 450), (147, 550), (253, 650), (1078, 850)];

/// A fragmented cluster: `nodes` nodes of 8 GPUs (128 cores, 1 TiB, three
/// zones) and `pods` pods drawn to fill about 80% of the GPUs (65% sharing
/// one GPU in the openb mix of shares, 25% one whole GPU, 10% CPU-only; 2
/// to 8 cores each), bound at random. Returns the cluster, the pods bound
/// and every pod drawn.
pub fn fragmented(nodes: usize, pods: usize, seed: u64) -> (Cluster, Vec<(Pod, Placement)>, Vec<Pod>) {
    let mut c = Cluster::new(
        (0..nodes)
            .map(|i| {
                let mut n = tessera_core::model::Node::new(
                    i as NodeId,
                    format!("node-{i:05}"),
                    tessera_core::model::Resources { cpu_milli: 128_000, memory_mib: 1 << 20 },
                    8,
                    "A100",
                );
                n.zone = ["zone-a", "zone-b", "zone-c"][i % 3].to_string();
                n
            })
            .collect(),
    );
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xF4A6);
    let shapes: Vec<Pod> = (0..pods)
        .map(|i| {
            let kind = rng.random_range(0..100);
            let (gpu_count, gpu_milli) = match kind {
                0..10 => (0, 0),
                10..35 => (1, GPU_MILLI),
                _ => (1, tessera_core::synthetic::pick(&mut rng, &SHARES)),
            };
            // Hard-tier pods get exclusive GPUs, as the scheduler gives them.
            let tier = if rng.random_range(0..20) == 0 { Tier::Hard } else { Tier::Soft };
            let gpu_milli = if tier == Tier::Hard && gpu_count > 0 { GPU_MILLI } else { gpu_milli };
            let cpu = 1_000 * rng.random_range(2..=8);
            Pod {
                name: format!("pod-{i:06}"),
                namespace: "default".into(),
                workload: format!("job-{}", i % 997),
                requests: tessera_core::model::Resources { cpu_milli: cpu, memory_mib: cpu * 4 },
                gpu_count,
                gpu_milli,
                tier,
                ..Pod::default()
            }
        })
        .collect();
    let mut running = Vec::with_capacity(pods);
    for p in &shapes {
        if let Some(at) = bind_random(&mut c, &mut rng, p, 32) {
            running.push((p.clone(), at));
        }
    }
    (c, running, shapes)
}

/// An upper bound on the usable GPUs that any re-packing of the movable
/// sharing pods could leave entirely free (the LP relaxation of the
/// re-packing, with valid cuts): GPUs holding a pod that does not move
/// (whole-GPU, multi-GPU or hard-tier) never come free; the movable
/// sharing pods need at least their total share, less what fits beside
/// the unmovable ones; pods over half a GPU need a GPU each, less one per
/// unmovable GPU with room for them; and at least Martello–Toth's L2 bound
/// of GPUs, less one per unmovable GPU with any room.
pub fn whole_free_bound(c: &Cluster, running: &[(Pod, Placement)], backend: LpSolver) -> u64 {
    // Share held by unmovable pods, per GPU.
    let mut held: std::collections::HashMap<(NodeId, usize), u64> = std::collections::HashMap::new();
    let (mut share, mut big) = (0u64, 0u64);
    let mut shares: Vec<u32> = Vec::new();
    for (p, at) in running {
        if p.gpu_count == 0 {
            continue;
        }
        if p.gpu_milli >= GPU_MILLI || p.tier == Tier::Hard {
            for g in at.gpus.indices() {
                *held.entry((at.node, g)).or_insert(0) += u64::from(p.gpu_milli.min(GPU_MILLI));
            }
        } else {
            share += u64::from(p.gpu_milli);
            big += u64::from(p.gpu_milli > GPU_MILLI / 2);
            shares.push(p.gpu_milli);
        }
    }
    // GPUs beside unmovable pods: their room, how many have room for a pod
    // over half a GPU, and how many have room at all (each is at most one
    // more bin for the L2 bound).
    let (mut gpus, mut room, mut big_room, mut rooms) = (0u64, 0u64, 0u64, 0u64);
    for n in c.nodes().iter().filter(|n| n.ready) {
        for (i, g) in n.gpus.iter().enumerate() {
            if g.health == GpuHealth::Failed {
                continue;
            }
            if let Some(&unmovable) = held.get(&(n.id, i)) {
                // Room beside unmovable pods, counting the movable ones
                // there as gone.
                let r = u64::from(GPU_MILLI).saturating_sub(unmovable);
                room += r;
                big_room += u64::from(r > u64::from(GPU_MILLI / 2));
                rooms += u64::from(r > 0);
            } else {
                gpus += 1;
            }
        }
    }
    let need = share
        .saturating_sub(room)
        .div_ceil(u64::from(GPU_MILLI))
        .max(big.saturating_sub(big_room))
        .max(martello_toth_l2(&shares).saturating_sub(rooms))
        .max(configuration_lp_bins(&shares, backend).saturating_sub(rooms));
    gpus.saturating_sub(need)
}

/// Most rounds of pattern generation before the bound is taken as it
/// stands (always valid: the duals are scaled to be feasible).
const MAX_PATTERN_ROUNDS: usize = 200;

/// The configuration LP's lower bound on the GPUs (bins of 1000) these
/// shares need (Gilmore and Gomory): `min Σ z_p` over packings `p` of one
/// GPU with `Σ_p a_cp z_p ≥ n_c` for each share `c`, whose optimum is
/// within a GPU or so of the true minimum for bin packing. Solved through
/// its dual `max Σ n_c y_c` s.t. `Σ_c a_cp y_c ≤ 1` for every packing,
/// adding the most violated packing (a knapsack over the shares with values
/// `y_c`) until none is; the duals, scaled by the most violated packing's
/// value, are feasible, so every round's figure is a valid bound.
pub fn configuration_lp_bins(items: &[u32], backend: LpSolver) -> u64 {
    use good_lp::{Expression, ProblemVariables, Solution, constraint, variable};

    use crate::solver::Model;
    let mut classes: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
    for &x in items.iter().filter(|&&x| x > 0) {
        *classes.entry(x.min(GPU_MILLI)).or_insert(0) += 1;
    }
    if classes.is_empty() {
        return 0;
    }
    let sizes: Vec<u32> = classes.keys().copied().collect();
    let counts: Vec<u64> = classes.values().copied().collect();
    // Start from one-share packings.
    let mut patterns: Vec<Vec<u64>> = (0..sizes.len())
        .map(|c| {
            let mut a = vec![0; sizes.len()];
            a[c] = u64::from(GPU_MILLI / sizes[c]).min(counts[c]).max(1);
            a
        })
        .collect();
    let mut best = 0.0f64;
    for _ in 0..MAX_PATTERN_ROUNDS {
        let mut vars = ProblemVariables::new();
        let y: Vec<_> = (0..sizes.len()).map(|_| vars.add(variable().min(0.0))).collect();
        let objective: Expression = y.iter().zip(&counts).map(|(&v, &n)| n as f64 * v).sum();
        let mut model = Model::maximise(vars, objective.clone());
        for a in &patterns {
            let used: Expression = y.iter().zip(a).map(|(&v, &k)| k as f64 * v).sum();
            model.with(constraint!(used <= 1.0));
        }
        let Ok(sol) = model.solve(backend) else { break };
        let duals: Vec<f64> = y.iter().map(|&v| sol.value(v).max(0.0)).collect();
        let value = sol.eval(&objective);
        // Pricing: the packing of one GPU of greatest dual value.
        let (worth, packing) = crate::bound::best_packing(&sizes, &counts, &duals);
        best = best.max(value / worth.max(1.0));
        if worth <= 1.0 + 1e-9 || patterns.contains(&packing) {
            break;
        }
        patterns.push(packing);
    }
    (best - 1e-6).ceil().max(0.0) as u64
}

/// Martello and Toth's L2 lower bound on the bins of capacity 1000 that
/// items of these sizes need: for each `α ≤ 500`, items over `1000 − α`
/// and items over 500 each need a bin, and items of at least `α` that do
/// not fit beside the latter need bins of their own.
pub fn martello_toth_l2(items: &[u32]) -> u64 {
    let cap = u64::from(GPU_MILLI);
    let mut alphas: Vec<u32> = items.iter().copied().filter(|&x| x <= GPU_MILLI / 2).collect();
    alphas.push(0);
    alphas.sort_unstable();
    alphas.dedup();
    let mut best = 0;
    for a in alphas {
        let (mut j1, mut j2, mut j2_sum, mut j3_sum) = (0u64, 0u64, 0u64, 0u64);
        for &x in items {
            if x > GPU_MILLI - a {
                j1 += 1;
            } else if x > GPU_MILLI / 2 {
                j2 += 1;
                j2_sum += u64::from(x);
            } else if x >= a {
                j3_sum += u64::from(x);
            }
        }
        let spare = j2 * cap - j2_sum;
        best = best.max(j1 + j2 + j3_sum.saturating_sub(spare).div_ceil(cap));
    }
    best
}

/// Runs the bench.
pub fn run(nodes: usize, pods: usize, seed: u64, reps: usize) -> RescheduleBench {
    let reps = reps.max(1);
    let (cluster, running, shapes) = fragmented(nodes, pods, seed);
    let workload = TargetWorkload::from_pods(&shapes, 0.95);
    // No move cap, and a GPU worth ten times the default: the bench asks
    // how close a thorough plan comes to the bound, and how fast.
    let planner = Planner::new(PlannerConfig {
        max_moves: usize::MAX,
        time_limit_ms: 30_000,
        cost: crate::cost::CostWeights { gamma: 10.0, ..crate::cost::CostWeights::default() },
        ..PlannerConfig::default()
    });
    let mut times = Vec::with_capacity(reps);
    let mut last: Option<Plan> = None;
    let mut timed_out = 0;
    for _ in 0..reps {
        let t = Instant::now();
        let p = planner.plan(&cluster, &running, &workload, usize::MAX, None);
        times.push(t.elapsed().as_secs_f64() * 1e3);
        timed_out += usize::from(p.timed_out);
        last = Some(p);
    }
    let plan = last.expect("reps ≥ 1");
    let after = plan::validate(&cluster, &running, &plan.moves).expect("the planner's moves hold");
    let bound = whole_free_bound(&cluster, &running, planner.config().solver);
    let whole_after = plan::whole_free_gpus(&after);

    // Incremental: replace 1% of the pods, re-plan from the last plan.
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x1BC3);
    let mut inc = Vec::with_capacity(reps);
    let mut inc_moves = 0;
    for _ in 0..reps {
        let mut c = cluster.clone();
        let mut r = running.clone();
        let mut changed: Vec<NodeId> = Vec::new();
        for _ in 0..(r.len() / 100).max(1) {
            let i = rng.random_range(0..r.len());
            let (old, at) = r[i].clone();
            c.unbind(&at, &old);
            changed.push(at.node);
            let new = shapes[rng.random_range(0..shapes.len())].clone();
            match bind_random(&mut c, &mut rng, &new, 32) {
                Some(p) => {
                    changed.push(p.node);
                    r[i] = (new, p);
                }
                None => {
                    // Nowhere for the new pod: the old one comes back.
                    r[i].1 = c.bind(at.node, &old, at.gpus).expect("it was just there");
                }
            }
        }
        let t = Instant::now();
        let p = planner.replan(&c, &r, &workload, usize::MAX, &plan, &changed);
        inc.push(t.elapsed().as_secs_f64() * 1e3);
        timed_out += usize::from(p.timed_out);
        inc_moves = p.moves.len();
    }
    times.sort_by(f64::total_cmp);
    inc.sort_by(f64::total_cmp);
    RescheduleBench {
        nodes,
        pods: running.len(),
        plan_ms_p50: percentile(&times, 0.5),
        plan_ms_p99: percentile(&times, 0.99),
        incremental_ms_p50: percentile(&inc, 0.5),
        moves: plan.moves.len(),
        freed_gpus: plan.freed_gpus(),
        lp_bound_gap_pct: if bound == 0 {
            0.0
        } else {
            100.0 * (bound.saturating_sub(whole_after)) as f64 / bound as f64
        },
        whole_free_before: plan.whole_free_before,
        whole_free_after: whole_after,
        whole_free_bound: bound,
        incremental_moves: inc_moves,
        timed_out,
        reps,
        solver: planner.config().solver.resolved().to_string(),
    }
}

impl RescheduleBench {
    /// A two-column table.
    pub fn to_table(&self) -> String {
        let rows = [
            ("nodes / pods bound", format!("{} / {}", self.nodes, self.pods)),
            ("plan p50 / p99", format!("{:.0} ms / {:.0} ms ({} reps)", self.plan_ms_p50, self.plan_ms_p99, self.reps)),
            ("re-plan after 1% change p50", format!("{:.0} ms", self.incremental_ms_p50)),
            ("moves", self.moves.to_string()),
            (
                "whole free GPUs",
                format!(
                    "{} → {} (+{}); bound {}",
                    self.whole_free_before, self.whole_free_after, self.freed_gpus, self.whole_free_bound
                ),
            ),
            ("gap to the LP bound", format!("{:.2}%", self.lp_bound_gap_pct)),
            ("plans cut by the time limit", self.timed_out.to_string()),
            ("LP/MILP solver", self.solver.clone()),
        ];
        rows.iter().map(|(k, v)| format!("{k:<30} {v}\n")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn l2_counts_what_does_not_fit_beside_the_big_items() {
        // Three 0.6s can each take one 0.4: three bins.
        assert_eq!(martello_toth_l2(&[600, 600, 600, 400, 400, 400]), 3);
        // Three 0.85s cannot take a 0.45: 3 + ceil(1.35) = 5 (the sum says 4).
        assert_eq!(martello_toth_l2(&[850, 850, 850, 450, 450, 450]), 5);
        assert_eq!(martello_toth_l2(&[]), 0);
    }

    #[test]
    fn the_configuration_lp_bounds_bin_packing_from_below_and_is_tight_here() {
        // 0.35 × 3 does not fit one GPU; pairs do: 4 items need 2 GPUs,
        // where the sum (1.4) and L2 say 2 as well; 5 need 3 (sum: 2).
        assert_eq!(configuration_lp_bins(&[350; 4], LpSolver::Auto), 2);
        assert_eq!(configuration_lp_bins(&[350; 5], LpSolver::Auto), 3);
        // 0.45 and 0.65: pairs of 0.45, 0.65 alone (nothing fits beside it
        // but nothing): 4 × 0.45 → 2, 3 × 0.65 → 3.
        let items = [450, 450, 450, 450, 650, 650, 650];
        assert_eq!(configuration_lp_bins(&items, LpSolver::Auto), 5);
        assert!(martello_toth_l2(&items) <= 5);
        assert_eq!(configuration_lp_bins(&[], LpSolver::Auto), 0);
        // Never above first-fit decreasing on random instances.
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for _ in 0..30 {
            let items: Vec<u32> = (0..40)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    [150, 250, 350, 450, 550, 650, 850][(x % 7) as usize]
                })
                .collect();
            let mut sorted = items.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            let mut bins: Vec<u32> = Vec::new();
            for s in sorted {
                match bins.iter_mut().find(|b| **b + s <= 1000) {
                    Some(b) => *b += s,
                    None => bins.push(s),
                }
            }
            let lp = configuration_lp_bins(&items, LpSolver::Auto);
            let sum = items.iter().map(|&s| u64::from(s)).sum::<u64>().div_ceil(1000);
            assert!(lp <= bins.len() as u64 && lp >= sum, "{lp} vs FFD {} and the sum {sum}", bins.len());
        }
    }

    #[test]
    fn the_bound_bounds_the_planner_and_the_bench_plans() {
        let r = run(200, 2_000, 3, 1);
        assert!(r.whole_free_after <= r.whole_free_bound, "{r:?}");
        assert!(r.whole_free_after > r.whole_free_before && r.moves > 0, "{r:?}");
        // The global re-packing reaches (nearly) the configuration LP's bound.
        assert!(r.lp_bound_gap_pct >= 0.0 && r.lp_bound_gap_pct < 2.0, "{r:?}");
    }
}
