//! # tessera-core
//!
//! The deterministic core of Tessera: the cluster model and the decision
//! logic that turns plugin scores into a placement. No IO, no clocks, no
//! global state: the same inputs always give the same outputs.

pub mod bandit;
pub mod cluster;
pub mod driver;
pub mod framework;
pub mod hash;
pub mod metrics;
pub mod model;
pub mod preempt;
pub mod queue;
pub mod quota;
pub mod reuse;
pub mod room;
pub mod sched;
pub mod score;
pub mod sim;
pub mod snapshot;
pub mod synthetic;
pub mod telemetry;
pub mod topology;

pub use model::{Arrival, Gpu, GpuHealth, Node, NodeId, Pod, Resources, Tier};
