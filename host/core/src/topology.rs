//! How a node's GPUs are connected: [`tessera_topology`], the one
//! implementation the host and plugins share, re-exported with a helper
//! over the model's [`Gpu`]s.

pub use tessera_topology::{
    Distance, EXACT_UP_TO, GpuLink, best_set, cost, distance, format, in_whole_islands, parse, wholeness_after,
};

use crate::model::Gpu;

/// The links of a node's GPUs, by index.
pub fn links(gpus: &[Gpu]) -> Vec<GpuLink> {
    gpus.iter().map(|g| g.link).collect()
}
