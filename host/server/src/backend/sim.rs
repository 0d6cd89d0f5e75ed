//! The embedded simulator as a backend: a cluster (built-in or an openb
//! node list), the built-in workload arriving as a Poisson stream at the
//! configured load and leaving after its run time, modelled telemetry and
//! carbon, and moves on a simulated actuator with configurable failures.
//! Backend time runs `speed` times faster than the wall clock.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use tessera_core::cluster::Placement;
use tessera_core::metrics::TargetWorkload;
use tessera_core::model::{Node, Pod};
use tessera_core::sched::PodId;
use tessera_core::telemetry::{NodeSample, TelemetryConfig, TelemetryModel};
use tessera_movement::sim::SimActuatorConfig;

use super::contract::{Backend, BackendError, ClusterEvent, Moves};
use super::stream::ArrivalStream;
use crate::config::SimBackendConfig;

/// The simulator backend.
pub struct SimBackend {
    nodes: Vec<Node>,
    workload: TargetWorkload,
    cfg: SimBackendConfig,
    stream: ArrivalStream,
    departures: BinaryHeap<Reverse<(u64, PodId)>>,
    telemetry: TelemetryModel,
    backend_ms: f64,
}

impl std::fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimBackend").field("nodes", &self.nodes.len()).field("cfg", &self.cfg).finish_non_exhaustive()
    }
}

impl SimBackend {
    /// A simulated cluster of `nodes`; fragmentation is measured against
    /// `workload`; telemetry intervals are `telemetry_interval_s` long.
    pub fn new(nodes: Vec<Node>, workload: TargetWorkload, cfg: SimBackendConfig, telemetry_interval_s: u64) -> Self {
        let stream = ArrivalStream::new(&nodes, cfg.load, cfg.seed);
        let telemetry = TelemetryModel::new(
            TelemetryConfig { interval_s: telemetry_interval_s, ..TelemetryConfig::default() },
            cfg.seed,
        );
        Self { nodes, workload, cfg, stream, departures: BinaryHeap::new(), telemetry, backend_ms: 0.0 }
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &'static str {
        "simulator"
    }

    fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    fn workload(&self) -> &TargetWorkload {
        &self.workload
    }

    fn advance(&mut self, tick: Duration) -> u64 {
        self.backend_ms += tick.as_secs_f64() * 1000.0 * self.cfg.speed;
        (self.backend_ms / 1000.0) as u64
    }

    fn events(&mut self, now: u64) -> Vec<(u64, ClusterEvent)> {
        // Arrivals first, so a pod that comes and goes within the pass
        // leaves in it too; then in time order, departures first at equal
        // times (capacity frees before pods arrive).
        let mut out = Vec::new();
        for (id, pod, at, leaves_at) in self.stream.until(now) {
            self.departures.push(Reverse((leaves_at.max(at), id)));
            out.push((at, 1, ClusterEvent::Submitted { id, pod }));
        }
        while let Some(&Reverse((at, id))) = self.departures.peek() {
            if at > now {
                break;
            }
            self.departures.pop();
            out.push((at, 0, ClusterEvent::Deleted { id }));
        }
        out.sort_by_key(|&(at, order, _)| (at, order));
        out.into_iter().map(|(at, _, e)| (at, e)).collect()
    }

    fn sample(&mut self, node: &Node, pods: &[(&Pod, Placement)], t: u64) -> NodeSample {
        self.telemetry.sample(node, pods.iter().copied(), t)
    }

    fn zone_carbon(&mut self, zone: &str, t: u64) -> u32 {
        self.telemetry.carbon(zone, t)
    }

    fn bind(&mut self, _id: PodId, _at: Placement) -> Result<(), BackendError> {
        // The loop's cluster model is the simulated cluster.
        Ok(())
    }

    fn evict(&mut self, _id: PodId) -> Result<(), BackendError> {
        Ok(())
    }

    fn moves(&self) -> Moves {
        let rate = self.cfg.move_failure_rate;
        Moves::Simulated(SimActuatorConfig {
            evict_failure: rate,
            start_failure: rate,
            seed: self.cfg.seed,
            ..SimActuatorConfig::default()
        })
    }
}
