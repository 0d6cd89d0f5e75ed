//! The `movement:` section of a policy document: how the Movement Manager
//! executes a plan (batches, pauses, concurrency, cooldowns, caps,
//! disruption budgets, rollback gates).

use serde::{Deserialize, Serialize};

/// How many moves a batch takes: a count (`batch_size: 5`) or a share of
/// the plan (`batch_size: "20%"`), as Kubernetes writes `maxUnavailable`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "IntOrPercent", into = "IntOrPercent")]
pub enum BatchSize {
    /// At most this many moves.
    Count(u32),
    /// At most this percentage of the plan's moves (at least one).
    Percent(f64),
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum IntOrPercent {
    Int(u32),
    Text(String),
}

impl TryFrom<IntOrPercent> for BatchSize {
    type Error = String;
    fn try_from(v: IntOrPercent) -> Result<Self, String> {
        match v {
            IntOrPercent::Int(n) => Ok(BatchSize::Count(n)),
            IntOrPercent::Text(s) => {
                let t = s.trim();
                match t.strip_suffix('%') {
                    Some(p) => p.trim().parse::<f64>().map(BatchSize::Percent).ok(),
                    None => t.parse::<u32>().map(BatchSize::Count).ok(),
                }
                .ok_or_else(|| format!("`{s}` is neither a count nor a percentage like \"20%\""))
            }
        }
    }
}

impl From<BatchSize> for IntOrPercent {
    fn from(b: BatchSize) -> Self {
        match b {
            BatchSize::Count(n) => IntOrPercent::Int(n),
            BatchSize::Percent(p) => IntOrPercent::Text(format!("{p}%")),
        }
    }
}

/// A PodDisruptionBudget-style limit on one workload's pods being
/// unavailable (evicted and not yet ready elsewhere).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// The workload.
    pub workload: String,
    /// At most this many pods unavailable at once.
    #[serde(default)]
    pub max_unavailable: Option<u32>,
    /// At least this many pods available at all times.
    #[serde(default)]
    pub min_available: Option<u32>,
}

impl Budget {
    /// Pods of the workload that may be unavailable at once when it has
    /// `total` pods.
    pub fn allowed_unavailable(&self, total: u32) -> u32 {
        match (self.max_unavailable, self.min_available) {
            (Some(m), Some(a)) => m.min(total.saturating_sub(a)),
            (Some(m), None) => m,
            (None, Some(a)) => total.saturating_sub(a),
            (None, None) => u32::MAX,
        }
    }
}

/// When to stop a plan and roll back the batch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RollbackConditions {
    /// Stop when the observed error rate exceeds this (0.01 = 1%).
    pub error_rate: f64,
    /// Stop when the observed p99 latency exceeds this, ms.
    pub latency_p99_ms: f64,
    /// Stop when a moved pod is not ready this long after it started, s.
    pub ready_timeout_s: u64,
}

impl Default for RollbackConditions {
    fn default() -> Self {
        Self { error_rate: 0.01, latency_p99_ms: 500.0, ready_timeout_s: 300 }
    }
}

/// Caps per cycle (plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Caps {
    /// Moves out of or into one node.
    pub per_node: u32,
    /// Moves of one namespace's pods.
    pub per_namespace: u32,
    /// Moves of one workload's pods.
    pub per_workload: u32,
}

impl Default for Caps {
    fn default() -> Self {
        Self { per_node: 8, per_namespace: 50, per_workload: 10 }
    }
}

/// Settings of the Movement Manager.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MovementConfig {
    /// Moves per batch.
    pub batch_size: BatchSize,
    /// Pause between batches, s.
    pub pause_duration_s: u64,
    /// Moves in flight at once.
    pub concurrency_limit: u32,
    /// A pod moved (or a node emptied) this recently is left alone, s.
    pub cooldown_period_s: u64,
    /// Caps per cycle.
    pub caps: Caps,
    /// A reservation not used this long after it was made expires, s.
    pub reservation_ttl_s: u64,
    /// Disruption budgets by workload.
    pub budgets: Vec<Budget>,
    /// Health gates.
    pub rollback: RollbackConditions,
}

impl Default for MovementConfig {
    fn default() -> Self {
        Self {
            batch_size: BatchSize::Percent(20.0),
            pause_duration_s: 30,
            concurrency_limit: 4,
            cooldown_period_s: 600,
            caps: Caps::default(),
            reservation_ttl_s: 120,
            budgets: Vec::new(),
            rollback: RollbackConditions::default(),
        }
    }
}

impl MovementConfig {
    /// Moves per batch for a plan of `moves` moves.
    pub fn batch_len(&self, moves: usize) -> usize {
        match self.batch_size {
            BatchSize::Count(n) => n.max(1) as usize,
            BatchSize::Percent(p) => ((moves as f64 * p.clamp(0.0, 100.0) / 100.0).ceil() as usize).max(1),
        }
    }

    /// Checks ranges: `Err` names the field.
    pub fn validate(&self) -> Result<(), String> {
        if let BatchSize::Percent(p) = self.batch_size
            && !(p > 0.0 && p <= 100.0)
        {
            return Err(format!("batch_size: percent must be in (0, 100], not {p}"));
        }
        if self.batch_size == BatchSize::Count(0) {
            return Err("batch_size must be at least 1".into());
        }
        if self.concurrency_limit == 0 {
            return Err("concurrency_limit must be at least 1".into());
        }
        for b in &self.budgets {
            if b.max_unavailable.is_none() && b.min_available.is_none() {
                return Err(format!("budget of `{}`: set max_unavailable or min_available", b.workload));
            }
        }
        Ok(())
    }
}
