//! Plans: the moves a strategy proposes, what they cost and gain, and their
//! validation against every hard constraint of placement.

use serde::{Deserialize, Serialize};
use tessera_core::cluster::{BindError, Cluster, Placement};
use tessera_core::model::{Pod, Tier};

/// The strategy a move serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Minimum-cost moves off nodes over the load threshold.
    LoadBalance,
    /// Empty low-load nodes (`co_location` in the strategy weights).
    CoLocation,
    /// Re-pack fractional pods so that free share merges into whole GPUs.
    FragmentMerge,
}

impl Strategy {
    /// Every strategy, in the order the controller runs them.
    pub const ALL: [Strategy; 3] = [Strategy::LoadBalance, Strategy::CoLocation, Strategy::FragmentMerge];

    /// Stable name (reports, traces).
    pub fn name(self) -> &'static str {
        match self {
            Strategy::LoadBalance => "load-balance",
            Strategy::CoLocation => "co-location",
            Strategy::FragmentMerge => "fragment-merge",
        }
    }
}

/// One move: the running pod at index `pod` (of the slice the planner was
/// given) from `from` to `to`. Moves of a plan apply in order.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Move {
    /// Index of the pod in the running slice.
    pub pod: usize,
    /// Where it runs.
    pub from: Placement,
    /// Where it goes (node and GPUs).
    pub to: Placement,
    /// The strategy that proposed it.
    pub strategy: Strategy,
    /// Its cost by the cost model (`α·time + β·disruption`).
    pub cost: f64,
}

/// How a plan was found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Solver {
    /// The greedy strategies only.
    #[default]
    Greedy,
    /// The exact MILP over the whole candidate set (proved optimal).
    Milp,
    /// The MILP ran out of time; the best of its incumbent and the greedy
    /// plan.
    MilpTimeLimit,
}

/// A plan and what it is worth.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The moves, in order.
    pub moves: Vec<Move>,
    /// Fragmentation of the cluster (weighted by the target workload, GPU
    /// share in thousandths) before the plan.
    pub fragmentation_before: f64,
    /// The same after it.
    pub fragmentation_after: f64,
    /// Usable GPUs entirely free before.
    pub whole_free_before: u64,
    /// The same after.
    pub whole_free_after: u64,
    /// Nodes with no pod before.
    pub empty_nodes_before: u64,
    /// The same after.
    pub empty_nodes_after: u64,
    /// Nodes over the load threshold before.
    pub overloaded_before: u64,
    /// The same after (by the planner's load estimate).
    pub overloaded_after: u64,
    /// Gain by the cost model, in GPU-equivalents (`γ` applied).
    pub gain: f64,
    /// Cost of the moves (`α·time + β·disruption`).
    pub cost: f64,
    /// Estimated migration time of all moves, seconds.
    pub migration_time_s: f64,
    /// How it was found.
    pub solver: Solver,
    /// The time limit cut the search short (the plan is the best so far).
    pub timed_out: bool,
    /// Moves of the previous plan kept (warm start).
    pub warm_moves: usize,
    /// Dropped because its net gain was under the minimum.
    pub dropped_below_min_gain: bool,
    /// How long each phase of planning took (for traces; not part of the
    /// plan's identity nor of its serialized form).
    #[serde(skip)]
    pub phases: Phases,
}

/// One phase of planning: a strategy or the exact solver.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// `load-balance`, `consolidation`, `fragment-merge`, `milp`.
    pub name: &'static str,
    /// Start, from the start of planning.
    pub start: std::time::Duration,
    /// Duration.
    pub took: std::time::Duration,
    /// Moves it contributed (the exact solver: the moves of its plan).
    pub moves: usize,
}

/// The phases of a plan, in order. Equal whatever the timings: two plans
/// with the same moves are the same plan however long they took.
#[derive(Debug, Clone, Default)]
pub struct Phases(pub Vec<Phase>);

impl PartialEq for Phases {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Plan {
    /// `gain − cost`.
    pub fn net_gain(&self) -> f64 {
        self.gain - self.cost
    }

    /// Whole GPUs the plan frees (may be negative for a load-balancing plan).
    pub fn freed_gpus(&self) -> i64 {
        self.whole_free_after as i64 - self.whole_free_before as i64
    }

    /// Moves per strategy.
    pub fn moves_by_strategy(&self, s: Strategy) -> usize {
        self.moves.iter().filter(|m| m.strategy == s).count()
    }
}

/// A plan that cannot be carried out.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A move names a pod that is not in the running slice.
    #[error("move {index}: no running pod {pod}")]
    NoSuchPod {
        /// Position of the move in the plan.
        index: usize,
        /// The pod index.
        pod: usize,
    },
    /// A move's source is not where the pod runs at that point of the plan.
    #[error("move {index}: pod {pod} does not run at {from:?}")]
    NotThere {
        /// Position of the move in the plan.
        index: usize,
        /// The pod name.
        pod: String,
        /// The source given.
        from: Placement,
    },
    /// A hard-tier pod may not be moved.
    #[error("move {index}: pod {pod} is hard-tier and never moved")]
    HardTier {
        /// Position of the move in the plan.
        index: usize,
        /// The pod name.
        pod: String,
    },
    /// The move does not fit (capacity, model, GPU share, readiness).
    #[error("move {index}: {source}")]
    DoesNotFit {
        /// Position of the move in the plan.
        index: usize,
        /// Why the bind fails.
        source: BindError,
    },
    /// A move goes nowhere.
    #[error("move {index}: pod {pod} would stay where it is")]
    NoOp {
        /// Position of the move in the plan.
        index: usize,
        /// The pod name.
        pod: String,
    },
}

/// Applies `moves` in order to `cluster`, checking each against the hard
/// filter as the cluster stands at that point; `at` holds where each pod of
/// `running` is and is updated. On error, the moves before the failing one
/// stay applied.
pub fn apply(
    cluster: &mut Cluster,
    running: &[(Pod, Placement)],
    at: &mut [Placement],
    moves: &[Move],
) -> Result<(), PlanError> {
    for (index, m) in moves.iter().enumerate() {
        let Some((pod, _)) = running.get(m.pod) else {
            return Err(PlanError::NoSuchPod { index, pod: m.pod });
        };
        if pod.tier == Tier::Hard {
            return Err(PlanError::HardTier { index, pod: pod.name.clone() });
        }
        if at[m.pod] != m.from {
            return Err(PlanError::NotThere { index, pod: pod.name.clone(), from: m.from });
        }
        if m.from == m.to {
            return Err(PlanError::NoOp { index, pod: pod.name.clone() });
        }
        cluster.unbind(&m.from, pod);
        match cluster.bind(m.to.node, pod, m.to.gpus) {
            Ok(p) => at[m.pod] = p,
            Err(source) => {
                cluster.bind(m.from.node, pod, m.from.gpus).expect("the pod was just there");
                return Err(PlanError::DoesNotFit { index, source });
            }
        }
    }
    Ok(())
}

/// Checks a whole plan on a copy of `cluster`.
pub fn validate(cluster: &Cluster, running: &[(Pod, Placement)], moves: &[Move]) -> Result<Cluster, PlanError> {
    let mut c = cluster.clone();
    let mut at: Vec<Placement> = running.iter().map(|(_, p)| *p).collect();
    apply(&mut c, running, &mut at, moves)?;
    Ok(c)
}

/// Usable GPUs of the cluster that are entirely free.
pub fn whole_free_gpus(cluster: &Cluster) -> u64 {
    cluster.nodes().iter().filter(|n| n.ready).map(|n| u64::from(n.whole_free_gpus())).sum()
}
