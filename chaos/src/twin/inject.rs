//! What the twin injects beside the cluster's own state: plugin faults
//! in the placer, and the extra pods of load spikes.

use std::collections::BTreeSet;

use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use tessera_core::framework::{Choice, Placer};
use tessera_core::model::{Arrival, Node, NodeId, Pod};
use tessera_core::telemetry::DetectionFrame;

use crate::fault::{FaultKind, ResolvedFault};

/// The placer with injected plugin faults.
pub(super) struct Faulty<'a, P: Placer> {
    pub inner: &'a mut P,
    pub trap: f64,
    pub slow: f64,
    pub rng: ChaCha8Rng,
    pub traps: u64,
    pub slows: u64,
}

impl<P: Placer> Placer for Faulty<'_, P> {
    fn nodes_changed(&mut self, nodes: &[&Node]) {
        self.inner.nodes_changed(nodes);
    }
    fn prime(&mut self) {
        self.inner.prime();
    }
    fn zone_carbon(&mut self, zone: &str, g: u32) {
        self.inner.zone_carbon(zone, g);
    }
    fn set_weights(&mut self, w: &[f64]) {
        self.inner.set_weights(w);
    }
    fn detect(&mut self, frame: &DetectionFrame) -> Vec<tessera_core::telemetry::Detection> {
        self.inner.detect(frame)
    }
    fn place(&mut self, pod: &Pod, candidates: &[NodeId]) -> Choice {
        // The host decides alone (its hard filter's first candidate), as
        // the runtime does when every plugin abstains.
        let fallback = |errors, late| Choice {
            node: None,
            gpu_hint: None,
            plugin_errors: errors,
            deadline_hit: late,
            filtered: None,
        };
        if self.trap > 0.0 && self.rng.random_bool(self.trap.min(1.0)) {
            self.traps += 1;
            return fallback(1, false);
        }
        if self.slow > 0.0 && self.rng.random_bool(self.slow.min(1.0)) {
            self.slows += 1;
            return fallback(0, true);
        }
        self.inner.place(pod, candidates)
    }
}

/// Adds each load spike's extra arrivals; their counts per fault.
pub(super) fn spike(arrivals: &mut Vec<Arrival>, faults: &[ResolvedFault], seed: u64) -> Vec<u64> {
    let mut extra = vec![0; faults.len()];
    let base = arrivals.len();
    for (fi, f) in faults.iter().enumerate().filter(|(_, f)| f.kind == FaultKind::LoadSpike) {
        let window: Vec<usize> = (0..base).filter(|&i| (f.start..f.end).contains(&arrivals[i].at)).collect();
        let n = (window.len() as f64 * f.intensity).round() as usize;
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5B1C_E000 ^ fi as u64);
        for k in 0..n {
            let src = arrivals[window[rng.random_range(0..window.len())]].clone();
            let at = rng.random_range(f.start..f.end);
            let mut pod = src.pod.clone();
            pod.name = format!("{}-spike{fi}-{k}", pod.name);
            let leaves_at = src.leaves_at.map(|l| at + l.saturating_sub(src.at));
            arrivals.push(Arrival { pod, at, leaves_at });
        }
        extra[fi] = n as u64;
    }
    extra
}

/// The probability that at least one active fault of `kind` strikes.
pub(super) fn combined(faults: &[ResolvedFault], active: &BTreeSet<usize>, kind: FaultKind) -> f64 {
    1.0 - active.iter().filter(|&&a| faults[a].kind == kind).map(|&a| 1.0 - faults[a].intensity).product::<f64>()
}

pub(super) fn recompute_plugin_faults<P: Placer>(
    placer: &mut Faulty<'_, P>,
    faults: &[ResolvedFault],
    active: &BTreeSet<usize>,
) {
    placer.trap = combined(faults, active, FaultKind::PluginTrap);
    placer.slow = combined(faults, active, FaultKind::PluginSlow);
}
