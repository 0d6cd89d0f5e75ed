//! A plugin's slot: the version that serves now (swapped atomically while
//! calls are in flight) and its fault accounting over a sliding window of
//! calls, which quarantines a plugin over its budget.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::error::{CallError, CallFault};
use crate::plugin::PluginVersion;

/// Fault accounting over a sliding window of calls.
#[derive(Debug, Default)]
struct FaultWindow {
    calls: u64,
    faults_total: u64,
    /// Call numbers of recent faults.
    recent: VecDeque<u64>,
    quarantined: Option<u32>,
}

/// Counters of one plugin slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotStats {
    /// Calls made (including failed ones).
    pub calls: u64,
    /// Faults counted (not guest errors).
    pub faults: u64,
    /// Whether the plugin is quarantined.
    pub quarantined: bool,
    /// Versions loaded into this slot so far.
    pub versions: u64,
    /// Calls of the current version the host starved (host overload, not
    /// the plugin's fault).
    pub host_starved: u64,
}

/// The current version of a plugin, swappable while calls are in flight.
pub struct PluginSlot {
    current: ArcSwap<PluginVersion>,
    faults: Mutex<FaultWindow>,
    versions: AtomicU64,
}

impl std::fmt::Debug for PluginSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginSlot").field("current", &self.current.load()).finish_non_exhaustive()
    }
}

impl PluginSlot {
    /// A slot holding `version`.
    pub fn new(version: Arc<PluginVersion>) -> Self {
        Self { current: ArcSwap::new(version), faults: Mutex::default(), versions: AtomicU64::new(1) }
    }

    /// The version serving new calls.
    pub fn current(&self) -> Arc<PluginVersion> {
        self.current.load_full()
    }

    /// Swaps in a checked new version: calls already running finish on the
    /// old one; the fault record and any quarantine start afresh.
    pub fn swap(&self, version: Arc<PluginVersion>) -> Arc<PluginVersion> {
        let old = self.current.swap(version);
        *self.faults.lock().unwrap_or_else(|p| p.into_inner()) = FaultWindow::default();
        self.versions.fetch_add(1, Ordering::Relaxed);
        old.drain();
        old
    }

    /// Counters.
    pub fn stats(&self) -> SlotStats {
        let w = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        SlotStats {
            calls: w.calls,
            faults: w.faults_total,
            quarantined: w.quarantined.is_some(),
            versions: self.versions.load(Ordering::Relaxed),
            host_starved: self.current().starved_calls(),
        }
    }

    /// Runs a call on the current version with fault accounting.
    pub fn call<R>(&self, f: impl FnOnce(&Arc<PluginVersion>) -> Result<R, CallError>) -> Result<R, CallError> {
        let version = self.current();
        if let Some(faults) = self.faults.lock().unwrap_or_else(|p| p.into_inner()).quarantined {
            return Err(CallError {
                plugin: version.name.clone(),
                version: version.version.clone(),
                call: "any",
                kind: CallFault::Quarantined { faults },
            });
        }
        let result = f(&version);
        let mut w = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        // A result from a version that was swapped out meanwhile does not
        // count against the new one.
        if !Arc::ptr_eq(&version, &self.current.load()) {
            return result;
        }
        w.calls += 1;
        if let Err(e) = &result
            && e.is_fault()
        {
            w.faults_total += 1;
            let now = w.calls;
            w.recent.push_back(now);
            let window = version.limits.fault_window.0;
            while w.recent.front().is_some_and(|&c| c + window <= now) {
                w.recent.pop_front();
            }
            let count = w.recent.len() as u32;
            if u64::from(count) > version.limits.fault_budget.0 && w.quarantined.is_none() {
                w.quarantined = Some(count);
                tracing::error!(plugin = %version.name, version = %version.version, faults = count,
                        "plugin quarantined: over its fault budget of {} in {window} calls", version.limits.fault_budget.0);
            }
        }
        result
    }
}
