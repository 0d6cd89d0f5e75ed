//! The subcommands of `tessera`, one module each.

pub mod bench;
pub mod chaos;
pub mod plan;
pub mod plugin;
pub mod policy;
pub mod sim;
pub mod train;
pub mod workload;
