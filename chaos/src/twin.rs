//! The simulated twin: a workload replayed through the scheduling loop
//! ([`tessera_core::driver`], the loop `tessera serve` runs) on a copy of
//! the cluster while faults strike, with the accounting a verdict needs.
//! The faults reach the loop as a [`World`](tessera_core::driver::World)
//! of it: node and GPU changes,
//! displaced pods, telemetry lost or late, load spikes, plugin faults in
//! the placer, failing moves. Deterministic: the same inputs and seed give
//! the same outcome, bit for bit; no clock, no IO.
//!
//! Every pod is accounted for at the end: running, waiting, completed or
//! abandoned (it left before it could run). A pod in none of these is
//! *lost* — the gate every campaign holds at zero.

use tessera_core::driver::{Driver, DriverConfig};
use tessera_core::framework::Placer;
use tessera_core::metrics::{TargetWorkload, percentile};
use tessera_core::model::{Arrival, Node};

use crate::fault::ResolvedFault;

mod inject;
mod outcome;
mod world;

pub use outcome::{DEAD_BAND_PERMILLE, FaultReport, MAX_DELAY_INTERVALS, Outcome, TwinRescheduler};
use world::Twin;

/// Runs `arrivals` on `nodes` through the loop (settings `cfg`) with
/// `placer` deciding, while `faults` strike.
pub fn run<'a>(
    nodes: Vec<Node>,
    workload: &TargetWorkload,
    arrivals: Vec<Arrival>,
    faults: &'a [ResolvedFault],
    placer: &'a mut impl Placer,
    rescheduler: Option<&'a mut dyn TwinRescheduler>,
    cfg: &DriverConfig,
) -> Outcome {
    let mut driver = Driver::new(nodes, workload.clone(), cfg.clone());
    let mut twin = Twin::new(driver.model(), arrivals, faults, placer, rescheduler, cfg);
    driver.run_to_end(&mut twin);

    let model = driver.model();
    let report = driver.report();
    let mut r = twin.outcome(model);
    r.submitted = report.submitted;
    let waits = driver.waits();
    r.pending_p50_s = percentile(&waits, 0.5);
    r.pending_p99_s = percentile(&waits, 0.99);
    r.sla_violations = report.sla_violations;
    r.mean_allocation_pct = report.mean_allocation;
    r.mean_fragmentation_pct = report.mean_fragmentation_rate;
    r.migrations = report.migrations;
    r.plugin_faults = report.plugin_errors;
    r.deadline_hits = report.deadline_hits;
    r.bandit = report.bandit;
    debug_assert!(twin.injected_traps() <= r.plugin_faults && twin.injected_slows() <= r.deadline_hits);
    r.decisions = twin.take_log();
    r
}

#[cfg(test)]
mod tests;
