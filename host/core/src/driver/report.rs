//! What an online run of the loop came to: pods in and out, waits by
//! tier, SLA violations, allocation and fragmentation over time, the
//! bandit's arms, detection and rescheduling.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::bandit::ArmReport;
use crate::metrics::Reading;

/// Waiting times of one tier.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Waits {
    /// Pods bound.
    pub bound: u64,
    /// Median wait from arrival to bind, seconds.
    pub p50_s: u64,
    /// 99th percentile wait, seconds.
    pub p99_s: u64,
}

/// What an online run of the loop came to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoopReport {
    /// Pods that arrived.
    pub submitted: u64,
    /// Binds (a pod preempted and bound again counts twice).
    pub binds: u64,
    /// Pods that left after running.
    pub departed: u64,
    /// Pods that left before they could run.
    pub abandoned: u64,
    /// Pods still waiting at the end, by the reason code of their last
    /// failure ("" if not yet tried).
    pub waiting_by_reason: BTreeMap<String, u64>,
    /// Preemptions and the pods they evicted.
    pub preemptions: u64,
    /// Pods evicted by preemption.
    pub evicted: u64,
    /// Gangs placed whole (`min_member` bound in one pass).
    #[serde(default)]
    pub gangs_admitted: u64,
    /// Gang attempts that could not place `min_member` and released what
    /// they held.
    #[serde(default)]
    pub gang_rollbacks: u64,
    /// Gangs nodes were reserved for (`scheduling.reserve_after_s`).
    #[serde(default)]
    pub gang_reservations: u64,
    /// GPU-seconds held by running members of gangs short of their
    /// `min_member`.
    #[serde(default)]
    pub partial_gang_gpu_s: u64,
    /// Waiting times by tier.
    pub waits: BTreeMap<String, Waits>,
    /// Soft-tier pods on a node at or above the SLA threshold, counted per
    /// telemetry interval.
    pub sla_violations: u64,
    /// Mean carbon intensity (gCO₂/kWh) of the zones GPU pods were bound
    /// in, at bind time, weighted by GPUs.
    pub mean_bind_carbon: f64,
    /// Highest number of pods waiting at once.
    pub peak_waiting: u64,
    /// Telemetry intervals simulated.
    pub intervals: u64,
    /// Plugin errors and faults.
    pub plugin_errors: u64,
    /// Decisions past their time budget.
    pub deadline_hits: u64,
    /// Mean feasible nodes handed to the placer per decision.
    pub nodes_scored_per_decision: f64,
    /// Total GPUs.
    pub total_gpus: u64,
    /// Fragmentation and allocation after the last event.
    pub last: Reading,
    /// GPU allocation, %, averaged over the telemetry intervals while pods
    /// were arriving (not over the drain after the last arrival).
    pub mean_allocation: f64,
    /// Fragmentation rate (% of free GPU share), averaged likewise.
    pub mean_fragmentation_rate: f64,
    /// The bandit's arms, if weights were adaptive.
    pub bandit: Vec<ArmReport>,
    /// Detection rounds run.
    pub detection_rounds: u64,
    /// Plans made because a detection round found anomalies.
    #[serde(default)]
    pub reschedule_plans: u64,
    /// Pods moved by those plans.
    #[serde(default)]
    pub migrations: u64,
    /// Anomalies (findings at or above the threshold) by kind, summed over
    /// rounds.
    pub anomalies: BTreeMap<String, u64>,
}
