//! # tessera-resched
//!
//! The rescheduler's Policy Manager core: given the cluster as it stands
//! and the pods running on it, find a *plan* — pods to move and where —
//! that leaves the cluster better packed, cooler or emptier, weigh what the
//! moves cost against what they gain, and hand the plan to the Movement
//! Manager. Deterministic; no IO; time limits read a monotonic clock only to
//! stop early.
//!
//! - [`controller::Planner`] coordinates the strategies under
//!   `strategy_weights {load_balance, fragment_merge, co_location}`, a move
//!   budget and a hard time limit, warm-started from the previous plan.
//! - Strategies: [`defrag`] (re-pack fractional pods so that free GPU share
//!   merges into whole GPUs), [`balance`] (minimum-cost moves until nodes
//!   are under a load threshold), [`co_location`] (empty low-load nodes).
//! - [`flow`]: min-cost flow over grouped GPUs and packings (which GPU
//!   takes which packing of a global re-packing, in the fewest moves).
//! - [`milp`]: the exact re-packing of a restricted candidate set as a
//!   MILP through `good_lp`; [`knapsack`]: the DP that fills one GPU.
//! - [`cost`]: `cost = α·migration_time + β·disruption − γ·gain`.
//! - [`plan`]: moves, their validation against every hard constraint of
//!   placement, and plan statistics.
//! - [`bound`]: the offline LP bound on GPU allocation.
//! - [`solver`]: the backends every model goes to (HiGHS when built with
//!   the `highs` feature, the pure-Rust microlp otherwise).

pub mod adapter;
pub mod balance;
pub mod bench;
pub mod bound;
pub mod co_location;
pub mod controller;
pub mod cost;
pub mod defrag;
pub mod flow;
pub mod knapsack;
pub mod milp;
pub mod plan;
mod relief;
mod repack;
mod repair;
mod scratch;
pub mod solver;

pub use adapter::{PlanTotals, SimPlanner};
pub use bound::{Bound, BoundError, gpu_allocation_bound};
pub use controller::{Planner, PlannerConfig, StrategyWeights};
pub use cost::CostWeights;
pub use plan::{Move, Plan, PlanError, Strategy};
pub use solver::LpSolver;

#[cfg(test)]
mod tests;
