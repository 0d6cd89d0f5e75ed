//! Settings of the loop: the pending queue, node sampling, preemption
//! (the policy's `scheduling:`).

use serde::{Deserialize, Serialize};

use crate::queue::MlfqConfig;

/// Which nodes a decision looks at (kube-scheduler's
/// `percentageOfNodesToScore`): every feasible node in clusters of up to
/// `all_up_to` nodes; in larger ones the search stops once enough feasible
/// nodes are found, starting where the previous decision stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Sampling {
    /// Share of the cluster's nodes to find, 1..=100; unset: adaptive as
    /// in kube-scheduler, `50 − nodes/125` and at least 5.
    pub percentage: Option<u8>,
    /// Clusters up to this many nodes have every feasible node scored.
    pub all_up_to: usize,
    /// Never fewer feasible nodes than this.
    pub min_nodes: usize,
}

impl Default for Sampling {
    fn default() -> Self {
        Self { percentage: None, all_up_to: 10_000, min_nodes: 100 }
    }
}

impl Sampling {
    /// Feasible nodes to find in a cluster of `total` nodes.
    pub fn nodes_to_find(&self, total: usize) -> usize {
        if total <= self.all_up_to {
            return total;
        }
        let pct = self.percentage.map_or_else(|| 50usize.saturating_sub(total / 125).max(5), usize::from).clamp(1, 100);
        (total * pct / 100).max(self.min_nodes).min(total)
    }
}

/// Settings of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedConfig {
    /// The pending queue.
    pub queue: MlfqConfig,
    /// Node sampling.
    pub sampling: Sampling,
    /// Whether a pod that fits nowhere may preempt.
    pub preemption: bool,
    /// Reserve nodes for a gang that has waited this long for room, s: no
    /// other pod is placed on them until it runs (`sched::reserve`).
    /// Unset: never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserve_after_s: Option<u64>,
    /// With `reserve_after_s`: one gang of each leaf queue may have nodes
    /// kept at once, not one gang in the cluster.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reserve_per_queue: bool,
}

impl Default for SchedConfig {
    fn default() -> Self {
        Self {
            queue: MlfqConfig::default(),
            sampling: Sampling::default(),
            preemption: true,
            reserve_after_s: None,
            reserve_per_queue: false,
        }
    }
}
