//! What a twin run comes to (the accounting a verdict needs), and the
//! rescheduler the twin can make fail.

use serde::{Deserialize, Serialize};
use tessera_core::framework::{Reschedule, Rescheduler};
use tessera_core::sched::Event;

use crate::fault::FaultKind;

/// A rescheduler whose moves the twin can make fail: it plans and
/// executes the moves (through [`Reschedule`]) on an actuator whose
/// failure rate the `actuator-errors` fault sets.
pub trait TwinRescheduler: Reschedule {
    /// Probability that one step of a move (evict, start) fails, from now.
    fn set_move_failure_rate(&mut self, p: f64);
    /// Moves that did not end done so far (failed, rolled back, dropped).
    fn moves_failed(&self) -> u64;
}

impl<R: Rescheduler> TwinRescheduler for tessera_movement::simulated::Executing<R> {
    fn set_move_failure_rate(&mut self, p: f64) {
        self.set_failure_rate(p);
    }

    fn moves_failed(&self) -> u64 {
        let t = self.totals();
        t.failed + t.rolled_back + t.dropped
    }
}

/// Smallest utilisation change (‰) a node's telemetry reports to the
/// scheduler in a campaign's twin (a node agent's dead band; the loop's
/// `dead_band_permille`).
pub const DEAD_BAND_PERMILLE: u16 = 20;

/// Longest telemetry delay, intervals.
pub const MAX_DELAY_INTERVALS: usize = 10;

/// What one fault did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultReport {
    /// Kind.
    pub kind: FaultKind,
    /// Window, seconds.
    pub start: u64,
    /// End of the window.
    pub end: u64,
    /// Nodes hit.
    pub nodes: usize,
    /// GPUs hit.
    pub gpus: usize,
    /// Pods it took off their nodes.
    pub displaced: u64,
    /// Seconds from its start until the last displaced pod ran again.
    pub recovery_s: u64,
    /// Displaced pods still not running at the end.
    pub unrecovered: u64,
    /// Extra pods a load spike brought.
    pub extra_arrivals: u64,
    /// Whether it struck a twin with pods in it (running or waiting) at its
    /// start or while it lasted: a fault scheduled after the workload ended
    /// tests nothing, and the verdict counts it (`faults_exercised`).
    #[serde(default)]
    pub exercised: bool,
}

/// The outcome of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Pods that arrived (load spikes included).
    pub submitted: u64,
    /// Pods that ran and left.
    pub completed: u64,
    /// Pods that left before they could run.
    pub abandoned: u64,
    /// Pods running at the end.
    pub running: u64,
    /// Pods waiting at the end.
    pub waiting: u64,
    /// Pods in none of the above: lost by the scheduler's bookkeeping.
    pub lost: u64,
    /// Pods faults took off their nodes (each time).
    pub displaced: u64,
    /// Median wait from (re)submission to bind, seconds.
    pub pending_p50_s: u64,
    /// 99th percentile wait.
    pub pending_p99_s: u64,
    /// Soft-tier pods on a node at or above the SLA threshold, per interval.
    pub sla_violations: u64,
    /// GPU allocation, %, averaged over the intervals while pods arrived.
    pub mean_allocation_pct: f64,
    /// Fragmentation rate, %, averaged likewise.
    pub mean_fragmentation_pct: f64,
    /// Pods moved by the rescheduler.
    pub migrations: u64,
    /// Moves that failed, were rolled back or dropped.
    #[serde(default)]
    pub migrations_failed: u64,
    /// Longest recovery of a fault that displaced pods, seconds.
    pub recovery_s: u64,
    /// Displaced pods never running again.
    pub unrecovered: u64,
    /// Decisions whose plugins faulted (injected traps and real faults).
    pub plugin_faults: u64,
    /// Decisions past their time budget (injected and real).
    pub deadline_hits: u64,
    /// Telemetry samples lost or not yet delivered.
    pub telemetry_withheld: u64,
    /// Each fault.
    pub faults: Vec<FaultReport>,
    /// Every decision of the run in order: each pass's events with the
    /// time of the pass (not written: a campaign's runs stay small).
    #[serde(skip)]
    pub decisions: Vec<(u64, Event)>,
    /// The bandit's arms, when the policy's weights are adaptive.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bandit: Vec<tessera_core::bandit::ArmReport>,
    /// Time of the last event, seconds.
    pub end_s: u64,
}
