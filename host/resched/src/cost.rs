//! The cost evaluator: `cost = α·migration_time + β·disruption_probability
//! − γ·utilization_gain`.
//!
//! - *Migration time* of a pod grows with what has to be moved: a fixed
//!   restart, its host memory and the device memory its GPU share holds
//!   (a checkpoint of both is copied).
//! - *Disruption probability* grows with the pod's tier and priority and
//!   falls with the replicas of its workload (one replica down of many is
//!   rarely felt; the only replica always is).
//! - *Utilization gain* is what a strategy wins, in GPU-equivalents:
//!   fragmentation removed (GPU share that the target workload can use
//!   again), nodes emptied, load taken off hot nodes.

pub use tessera_policy::rescheduling::CostWeights;
