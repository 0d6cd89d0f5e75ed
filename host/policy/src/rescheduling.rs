//! The `rescheduling:` section of a policy document: the planner's
//! strategy weights, its cost model (`cost = α·migration time +
//! β·disruption − γ·gain`), time limit, thresholds, MILP limits and LP
//! solver. Defined with the document so that reading one needs no solver;
//! `tessera-resched` plans with it.

use std::fmt;

use serde::{Deserialize, Serialize};
use tessera_core::model::{GPU_MILLI, Pod, Tier, device_memory_mib};

/// Weights and constants of the cost model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CostWeights {
    /// `α`: cost per second of migration time.
    pub alpha: f64,
    /// `β`: cost per unit of disruption probability.
    pub beta: f64,
    /// `γ`: value of one GPU-equivalent of utilization gain.
    pub gamma: f64,
    /// Plans (and each strategy's groups of moves) whose `gain − cost` is
    /// under this are dropped.
    pub min_net_gain: f64,
    /// Seconds to stop and start any pod.
    pub restart_s: f64,
    /// Seconds per GiB of host memory copied.
    pub s_per_host_gib: f64,
    /// Seconds per GiB of GPU device memory copied.
    pub s_per_device_gib: f64,
}

impl Default for CostWeights {
    fn default() -> Self {
        Self {
            alpha: 0.002,
            beta: 0.2,
            gamma: 1.0,
            min_net_gain: 0.0,
            restart_s: 10.0,
            s_per_host_gib: 0.5,
            s_per_device_gib: 1.0,
        }
    }
}

/// Largest coefficient of the cost model: sums of a plan's moves stay
/// finite (a plain "finite" check let `1e308` through to an infinite sum).
pub const MAX_COEFFICIENT: f64 = 1e9;

impl CostWeights {
    /// Checks ranges; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("alpha", self.alpha),
            ("beta", self.beta),
            ("gamma", self.gamma),
            ("restart_s", self.restart_s),
            ("s_per_host_gib", self.s_per_host_gib),
            ("s_per_device_gib", self.s_per_device_gib),
        ] {
            if !(0.0..=MAX_COEFFICIENT).contains(&v) {
                return Err(format!("{name} must be within 0..={MAX_COEFFICIENT}, not {v}"));
            }
        }
        if !(-MAX_COEFFICIENT..=MAX_COEFFICIENT).contains(&self.min_net_gain) {
            return Err(format!("min_net_gain must be within ±{MAX_COEFFICIENT}, not {}", self.min_net_gain));
        }
        Ok(())
    }

    /// Estimated seconds to migrate `pod` running on GPUs of `model`.
    pub fn migration_time_s(&self, pod: &Pod, model: &str) -> f64 {
        let host_gib = pod.requests.memory_mib as f64 / 1024.0;
        let device_gib =
            f64::from(pod.gpu_count) * f64::from(pod.gpu_milli.min(GPU_MILLI)) * f64::from(device_memory_mib(model))
                / f64::from(GPU_MILLI)
                / 1024.0;
        self.restart_s + self.s_per_host_gib * host_gib + self.s_per_device_gib * device_gib
    }

    /// Probability that moving `pod` disrupts its service, given the
    /// replicas of its workload running (itself included).
    pub fn disruption_probability(pod: &Pod, replicas: u32) -> f64 {
        let tier = match pod.tier {
            Tier::Hard => 1.0,
            Tier::Soft => 0.5,
            Tier::Opportunistic => 0.1,
        };
        // Priority 0 is neutral; every 1,000 above it makes a pod twice as
        // sensitive, up to 1.
        let priority = 2f64.powf(f64::from(pod.priority.clamp(-10_000, 10_000)) / 1_000.0);
        (tier * priority / f64::from(replicas.max(1))).min(1.0)
    }

    /// `α·time + β·disruption` of moving `pod` (GPUs of `model`).
    pub fn move_cost(&self, pod: &Pod, model: &str, replicas: u32) -> f64 {
        self.alpha * self.migration_time_s(pod, model) + self.beta * Self::disruption_probability(pod, replicas)
    }

    /// `γ·gain`, for a gain in thousandths of a GPU.
    pub fn gain(&self, milli: f64) -> f64 {
        self.gamma * milli / f64::from(GPU_MILLI)
    }
}

/// Which solver the core uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LpSolver {
    /// HiGHS when built in, microlp otherwise.
    #[default]
    Auto,
    /// The pure-Rust simplex and branch-and-bound.
    Microlp,
    /// HiGHS (needs the `highs` feature).
    Highs,
}

impl LpSolver {
    /// Whether this build has HiGHS.
    pub const HIGHS_BUILT_IN: bool = cfg!(feature = "highs");

    /// The solver `Auto` stands for in this build; others as they are.
    pub fn resolved(self) -> LpSolver {
        match self {
            LpSolver::Auto if Self::HIGHS_BUILT_IN => LpSolver::Highs,
            LpSolver::Auto => LpSolver::Microlp,
            b => b,
        }
    }

    /// Refuses HiGHS in a build without it.
    pub fn validate(self) -> Result<(), String> {
        if self == LpSolver::Highs && !Self::HIGHS_BUILT_IN {
            return Err("solver: highs is not built into this binary (build with `--features highs`, \
                        which needs cmake and libclang), use microlp or auto"
                .into());
        }
        Ok(())
    }
}

impl fmt::Display for LpSolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LpSolver::Auto => "auto",
            LpSolver::Microlp => "microlp",
            LpSolver::Highs => "highs",
        })
    }
}

/// Share of the move budget per strategy (any non-negative numbers; 0
/// turns a strategy off).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StrategyWeights {
    /// Load balancing.
    pub load_balance: f64,
    /// Defragmentation.
    pub fragment_merge: f64,
    /// Co-location: emptying low-load nodes.
    pub co_location: f64,
}

impl Default for StrategyWeights {
    fn default() -> Self {
        Self { load_balance: 1.0, fragment_merge: 2.0, co_location: 1.0 }
    }
}

/// The planner's settings (the policy document's `rescheduling:` section).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlannerConfig {
    /// Budget shares of the strategies.
    pub strategy_weights: StrategyWeights,
    /// The cost model.
    pub cost: CostWeights,
    /// Hard limit on planning time; the best plan so far is returned.
    pub time_limit_ms: u64,
    /// Most moves in one plan.
    pub max_moves: usize,
    /// Load balancing: nodes with measured load over this (0..=1) are
    /// relieved.
    pub load_threshold: f64,
    /// Co-location: nodes with allocation at or under this (0..=1) are
    /// emptied.
    pub low_load_threshold: f64,
    /// Instances with at most this many nodes are also solved exactly.
    pub milp_max_nodes: usize,
    /// The MILP is refused above this many binary variables.
    pub milp_max_binaries: usize,
    /// The LP/MILP solver: `auto` (HiGHS when built in), `microlp` or
    /// `highs`.
    pub solver: LpSolver,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        Self {
            strategy_weights: StrategyWeights::default(),
            cost: CostWeights::default(),
            time_limit_ms: 1_000,
            max_moves: 1_000,
            load_threshold: 0.9,
            low_load_threshold: 0.1,
            milp_max_nodes: 8,
            milp_max_binaries: 400,
            solver: LpSolver::Auto,
        }
    }
}

impl PlannerConfig {
    /// Checks ranges; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        self.cost.validate().map_err(|e| format!("cost.{e}"))?;
        let w = &self.strategy_weights;
        for (name, v) in
            [("load_balance", w.load_balance), ("fragment_merge", w.fragment_merge), ("co_location", w.co_location)]
        {
            if !crate::validate::weight_ok(v) {
                return Err(format!(
                    "strategy_weights.{name} must be within 0..={}, not {v}",
                    crate::validate::MAX_WEIGHT
                ));
            }
        }
        for (name, v) in [("load_threshold", self.load_threshold), ("low_load_threshold", self.low_load_threshold)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name} must be within 0..=1, not {v}"));
            }
        }
        if self.time_limit_ms == 0 {
            return Err("time_limit_ms must be > 0".into());
        }
        self.solver.validate()
    }
}

#[cfg(test)]
mod tests {
    use tessera_core::model::Resources;

    use super::*;

    fn pod(tier: Tier, memory_mib: u64, milli: u32) -> Pod {
        Pod {
            tier,
            requests: Resources { cpu_milli: 1000, memory_mib },
            gpu_count: 1,
            gpu_milli: milli,
            ..Pod::default()
        }
    }

    #[test]
    fn bigger_pods_take_longer_to_move() {
        let w = CostWeights::default();
        let small = w.migration_time_s(&pod(Tier::Soft, 1024, 100), "A100");
        let big = w.migration_time_s(&pod(Tier::Soft, 65_536, 1000), "A100");
        assert!(big > small + 30.0, "{small} vs {big}");
        // The device memory counts: the same share of a larger GPU is more.
        assert!(
            w.migration_time_s(&pod(Tier::Soft, 1024, 500), "A100")
                > w.migration_time_s(&pod(Tier::Soft, 1024, 500), "T4")
        );
    }

    #[test]
    fn disruption_follows_tier_priority_and_replicas() {
        let d = CostWeights::disruption_probability;
        assert!(d(&pod(Tier::Soft, 1, 1), 1) > d(&pod(Tier::Opportunistic, 1, 1), 1));
        assert!(d(&pod(Tier::Soft, 1, 1), 1) > d(&pod(Tier::Soft, 1, 1), 4));
        let mut high = pod(Tier::Soft, 1, 1);
        high.priority = 1000;
        assert!(d(&high, 1) > d(&pod(Tier::Soft, 1, 1), 1));
        assert!(d(&high, 1) <= 1.0);
    }

    #[test]
    fn validation_names_the_field() {
        let w = CostWeights { beta: -1.0, ..CostWeights::default() };
        assert!(w.validate().unwrap_err().contains("beta"));
        assert!(CostWeights::default().validate().is_ok());
    }
}
