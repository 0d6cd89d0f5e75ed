//! The policy controller: runs the strategies in turn on one working copy
//! of the cluster, shares the move budget among them by
//! `strategy_weights`, keeps to a hard time limit, starts from the
//! previous plan where it still holds, and judges the whole plan by the
//! cost model.
//!
//! Order: load balancing first (hot nodes hurt now), then consolidation,
//! then defragmentation, each seeing the cluster as the moves before it
//! left it. A small instance (at most `milp_max_nodes` nodes) is also solved
//! exactly by the MILP, warm-started from the greedy plan, and the better
//! of the two by net gain is kept.

use std::time::{Duration, Instant};

use tessera_core::cluster::{Cluster, Placement};
use tessera_core::metrics::{TargetWorkload, node_fragment_weighted};
use tessera_core::model::{NodeId, Pod};

pub use tessera_policy::rescheduling::{PlannerConfig, StrategyWeights};

use crate::plan::{self, Plan, Solver, Strategy};
use crate::scratch::Scratch;
use crate::{balance, co_location, defrag, milp, repack, repair};

/// Move budgets from which a global re-packing is also tried.
const REPACK_MIN_MOVES: usize = 64;

/// A strategy's share of the move budget.
fn weight_of(w: &StrategyWeights, s: Strategy) -> f64 {
    match s {
        Strategy::LoadBalance => w.load_balance,
        Strategy::CoLocation => w.co_location,
        Strategy::FragmentMerge => w.fragment_merge,
    }
}

/// The policy controller.
#[derive(Debug, Clone, Default)]
pub struct Planner {
    cfg: PlannerConfig,
}

impl Planner {
    /// A planner with `cfg` (validate it first).
    pub fn new(cfg: PlannerConfig) -> Self {
        Self { cfg }
    }

    /// The settings.
    pub fn config(&self) -> &PlannerConfig {
        &self.cfg
    }

    /// Plans for `cluster`, where `running` are the pods bound on it, with
    /// at most `max_moves` moves (and the configured maximum). `workload`
    /// weighs fragmentation (the FGD measure); `warm` is the previous plan,
    /// whose moves that still apply are kept first.
    pub fn plan(
        &self,
        cluster: &Cluster,
        running: &[(Pod, Placement)],
        workload: &TargetWorkload,
        max_moves: usize,
        warm: Option<&Plan>,
    ) -> Plan {
        self.plan_with(cluster, running, workload, max_moves, warm, None)
    }

    /// Plans moves off the `focus` nodes only (say, the nodes a detector
    /// flagged); every node may still receive.
    pub fn plan_focused(
        &self,
        cluster: &Cluster,
        running: &[(Pod, Placement)],
        workload: &TargetWorkload,
        max_moves: usize,
        focus: &[NodeId],
    ) -> Plan {
        self.plan_with(cluster, running, workload, max_moves, None, Some(focus))
    }

    /// Re-plans after a change: keeps the moves of `previous` that still
    /// apply and looks for new moves only from the `changed` nodes (every
    /// node may still receive). Indices into `running` must mean the same
    /// pods as for `previous` where they still run where it saw them.
    pub fn replan(
        &self,
        cluster: &Cluster,
        running: &[(Pod, Placement)],
        workload: &TargetWorkload,
        max_moves: usize,
        previous: &Plan,
        changed: &[NodeId],
    ) -> Plan {
        self.plan_with(cluster, running, workload, max_moves, Some(previous), Some(changed))
    }

    fn plan_with(
        &self,
        cluster: &Cluster,
        running: &[(Pod, Placement)],
        workload: &TargetWorkload,
        max_moves: usize,
        warm: Option<&Plan>,
        focus: Option<&[NodeId]>,
    ) -> Plan {
        let started = Instant::now();
        let deadline = started + Duration::from_millis(self.cfg.time_limit_ms);
        // A pod moves at most once per plan.
        let budget = max_moves.min(self.cfg.max_moves).min(running.len());
        let mut s = Scratch::new(cluster, running, workload, self.cfg.cost, Some(deadline));
        // Only these nodes are sources of moves.
        s.focus = focus.map(|nodes| {
            let mut mask = vec![false; cluster.nodes().len()];
            for &n in nodes {
                if let Some(m) = mask.get_mut(n as usize) {
                    *m = true;
                }
            }
            mask
        });
        let mut loads: Vec<f64> = cluster.nodes().iter().map(balance::load).collect();
        let mut out = Plan {
            fragmentation_before: s.frag.iter().sum(),
            whole_free_before: plan::whole_free_gpus(cluster),
            empty_nodes_before: empty_nodes(&s),
            overloaded_before: balance::overloaded(&loads, self.cfg.load_threshold),
            ..Plan::default()
        };

        // Warm start: the previous plan's moves that still apply.
        if let Some(prev) = warm {
            for m in &prev.moves {
                if s.moves.len() >= budget {
                    break;
                }
                if m.pod < running.len() && s.at[m.pod] == m.from && s.try_move(m.pod, m.to.node, m.to.gpus, m.strategy)
                {
                    out.warm_moves += 1;
                }
            }
            let touched = s.touched_since(0);
            let removed = -s.frag_delta(&touched, true);
            s.gain += s.weights.gain(removed.max(0.0));
        }

        // Budget per strategy by weight; what one leaves goes to the next.
        // Shares are rounded on the running total, so together they are
        // the whole budget (a budget of one move is not rounded away).
        let total_w: f64 = Strategy::ALL.iter().map(|&st| weight_of(&self.cfg.strategy_weights, st)).sum();
        if total_w > 0.0 {
            let mut carry = 0usize;
            let left_at_start = budget - s.moves.len();
            let (mut w_before, mut given) = (0.0, 0usize);
            for st in Strategy::ALL {
                let w = weight_of(&self.cfg.strategy_weights, st);
                if w <= 0.0 {
                    continue;
                }
                w_before += w;
                let upto = ((left_at_start as f64) * w_before / total_w).round() as usize;
                let share = upto.min(left_at_start).saturating_sub(given).saturating_add(carry);
                given = upto.min(left_at_start);
                let share = share.min(budget - s.moves.len());
                let phase_start = started.elapsed();
                let used = match st {
                    Strategy::LoadBalance => balance::run(&mut s, share, self.cfg.load_threshold, &mut loads),
                    Strategy::CoLocation => co_location::run(&mut s, share, self.cfg.low_load_threshold),
                    Strategy::FragmentMerge => {
                        // The drains, and a global re-packing on a copy;
                        // the one that nets more is kept.
                        let (mark, gain) = (s.moves.len(), s.gain);
                        // (Not when re-planning a few changed nodes: the
                        // warm start carries the last re-packing.)
                        let mut alt = (share >= REPACK_MIN_MOVES && s.focus.is_none()).then(|| s.clone());
                        let paired = repair::run(&mut s, share);
                        let used = paired + defrag::run(&mut s, share - paired);
                        let drained = s.gain - gain - s.cost_since(mark);
                        match alt.as_mut().map(|a| (repack::run(a, share), a)) {
                            Some((u, a)) if a.gain - gain - a.cost_since(mark) > drained => {
                                s = alt.expect("just used");
                                u
                            }
                            _ => used,
                        }
                    }
                };
                carry = share - used;
                out.phases.0.push(plan::Phase {
                    name: st.name(),
                    start: phase_start,
                    took: started.elapsed() - phase_start,
                    moves: used,
                });
            }
        }
        out.timed_out = s.timed_out;
        out.gain = s.gain;
        out.overloaded_after = balance::overloaded(&loads, self.cfg.load_threshold);
        out.moves = std::mem::take(&mut s.moves);
        // The working copy is the cluster after the greedy plan, its cache
        // the fragmentation there (every kept move refreshed it).
        let frag_after: f64 = s.frag.iter().sum();
        let timed_out = s.timed_out;
        let mut after = Some((s.cluster, frag_after));

        // Small instance: the exact MILP over all nodes, warm-started.
        if self.cfg.strategy_weights.fragment_merge > 0.0
            && cluster.nodes().len() <= self.cfg.milp_max_nodes
            && !timed_out
            && out.warm_moves == 0
        {
            let nodes: Vec<NodeId> = cluster.nodes().iter().map(|n| n.id).collect();
            let left = deadline.saturating_duration_since(Instant::now());
            let limits = milp::Limits {
                max_moves: budget,
                max_binaries: self.cfg.milp_max_binaries,
                time_limit: left,
                backend: self.cfg.solver,
            };
            let phase_start = started.elapsed();
            let solved = milp::repack(cluster, running, &nodes, &self.cfg.cost, limits, &out.moves);
            out.phases.0.push(plan::Phase {
                name: "milp",
                start: phase_start,
                took: started.elapsed() - phase_start,
                moves: solved.as_ref().map_or(0, Vec::len),
            });
            match solved {
                Ok(moves) => {
                    let score = |moves: &[plan::Move]| {
                        let after = plan::validate(cluster, running, moves).expect("checked moves");
                        let frag: f64 = after.nodes().iter().map(|n| node_fragment_weighted(n, workload)).sum();
                        let cost: f64 = moves.iter().map(|m| m.cost).sum();
                        (plan::whole_free_gpus(&after), cost, frag)
                    };
                    let (exact, greedy) = (score(&moves), score(&out.moves));
                    let removed = out.fragmentation_before - exact.2;
                    let whole = (exact.0 - out.whole_free_before) as f64 * f64::from(tessera_core::model::GPU_MILLI);
                    let exact_gain = self.cfg.cost.gain(removed.max(whole));
                    // More GPUs freed, or as many for more net gain (the
                    // greedy plan's re-pairing gains without freeing any).
                    if exact.0 > greedy.0 || (exact.0 == greedy.0 && exact_gain - exact.1 > out.gain - greedy.1) {
                        out.gain = exact_gain;
                        out.moves = moves;
                        out.solver = Solver::Milp;
                        after = None;
                        out.overloaded_after = out.overloaded_before;
                    }
                }
                Err(milp::MilpError::Solver(_)) => out.solver = Solver::MilpTimeLimit,
                Err(_) => {}
            }
        }
        finish(cluster, running, workload, &self.cfg, out, after)
    }
}

fn empty_nodes(s: &Scratch<'_>) -> u64 {
    s.on_node.iter().filter(|v| v.is_empty()).count() as u64
}

/// Fills in the after-figures and cost; drops a plan under the minimum net
/// gain.
fn finish(
    cluster: &Cluster,
    running: &[(Pod, Placement)],
    workload: &TargetWorkload,
    cfg: &PlannerConfig,
    mut p: Plan,
    after: Option<(Cluster, f64)>,
) -> Plan {
    // `+ 0.0`: an empty f64 sum is -0.0.
    p.cost = p.moves.iter().map(|m| m.cost).sum::<f64>() + 0.0;
    let mut after = after;
    if !p.moves.is_empty() && p.net_gain() < cfg.cost.min_net_gain {
        p.moves.clear();
        p.dropped_below_min_gain = true;
        p.cost = 0.0;
        p.gain = 0.0;
        after = None;
    }
    let frag = |c: &Cluster| -> f64 { c.nodes().iter().map(|n| node_fragment_weighted(n, workload)).sum() };
    p.whole_free_before = plan::whole_free_gpus(cluster);
    if p.moves.is_empty() {
        p.fragmentation_after = p.fragmentation_before;
        p.whole_free_after = p.whole_free_before;
    } else {
        let (c, f) = after.unwrap_or_else(|| {
            let c = plan::validate(cluster, running, &p.moves).expect("the planner's moves were each checked");
            let f = frag(&c);
            (c, f)
        });
        p.fragmentation_after = f;
        p.whole_free_after = plan::whole_free_gpus(&c);
    }
    let mut on: Vec<u32> = vec![0; cluster.nodes().len()];
    for (_, at) in running {
        on[at.node as usize] += 1;
    }
    let mut on_after = on.clone();
    for m in &p.moves {
        on_after[m.from.node as usize] -= 1;
        on_after[m.to.node as usize] += 1;
    }
    p.empty_nodes_before = on.iter().filter(|&&c| c == 0).count() as u64;
    p.empty_nodes_after = on_after.iter().filter(|&&c| c == 0).count() as u64;
    p.migration_time_s = p
        .moves
        .iter()
        .map(|m| cfg.cost.migration_time_s(&running[m.pod].0, &cluster.nodes()[m.from.node as usize].gpu_model))
        .sum::<f64>()
        + 0.0;
    p
}
