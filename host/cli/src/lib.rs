//! The `tessera` binary's library: command implementations and the glue
//! between the policy document, the built-in plugins and the runtime.

pub mod agent;
pub mod bench;
pub mod bench_api;
pub mod bench_serve;
pub mod chaos;
pub mod check;
pub mod distribute;
pub mod fidelity;
pub mod gang_bench;
pub mod generate;
pub mod guest;
pub mod jobs;
pub mod load;
pub mod native;
pub mod online;
pub mod plan;
pub mod plot;
pub mod quality;
pub mod replay;
pub mod report;
pub mod scaffold;
pub mod serve;
pub mod sim;
pub mod throughput;
pub mod train;
