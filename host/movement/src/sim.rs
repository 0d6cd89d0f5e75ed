//! The simulator's actuator: moves pods on a [`Cluster`] with delays,
//! seeded failure rates and an injectable error rate for the health gates.

use std::collections::BTreeMap;

use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tessera_core::cluster::{Cluster, Placement, choose_gpus};
use tessera_core::model::{NodeId, Pod};
use tessera_core::sched::PodId;

use crate::step::{ActError, Actuator, Health, Location};

/// Delays, failure rates and health of the simulated cluster.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimActuatorConfig {
    /// Seconds from start to ready.
    pub ready_delay_s: u64,
    /// Probability that a reservation fails.
    pub reserve_failure: f64,
    /// Probability that an eviction fails.
    pub evict_failure: f64,
    /// Probability that a start fails.
    pub start_failure: f64,
    /// Error rate reported with no moves.
    pub base_error_rate: f64,
    /// Error rate added per pod moved since the last health reading.
    pub error_rate_per_move: f64,
    /// Seed of the failures.
    pub seed: u64,
}

impl Default for SimActuatorConfig {
    fn default() -> Self {
        Self {
            ready_delay_s: 10,
            reserve_failure: 0.0,
            evict_failure: 0.0,
            start_failure: 0.0,
            base_error_rate: 0.001,
            error_rate_per_move: 0.0,
            seed: 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct SimPod {
    spec: Pod,
    at: Option<Placement>,
    ready_at: u64,
}

/// A cluster the executor moves pods on.
#[derive(Debug, Clone)]
pub struct SimActuator {
    cluster: Cluster,
    pods: BTreeMap<PodId, SimPod>,
    reservations: BTreeMap<PodId, Placement>,
    cfg: SimActuatorConfig,
    rng: ChaCha8Rng,
    moved: u32,
}

impl SimActuator {
    /// Pods already bound on `cluster` at the given placements.
    pub fn new(cluster: Cluster, pods: Vec<(PodId, Pod, Placement)>, cfg: SimActuatorConfig) -> Self {
        let pods = pods.into_iter().map(|(id, spec, at)| (id, SimPod { spec, at: Some(at), ready_at: 0 })).collect();
        Self { cluster, pods, reservations: BTreeMap::new(), rng: ChaCha8Rng::seed_from_u64(cfg.seed), cfg, moved: 0 }
    }

    /// The cluster (reservations hold capacity in it).
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Where every pod runs (`None`: nowhere).
    pub fn placements(&self) -> BTreeMap<PodId, Option<Placement>> {
        self.pods.iter().map(|(&id, p)| (id, p.at)).collect()
    }

    /// Outstanding reservations.
    pub fn reservations(&self) -> &BTreeMap<PodId, Placement> {
        &self.reservations
    }

    /// Changes the failure and health settings (e.g. to inject errors).
    pub fn set_config(&mut self, cfg: SimActuatorConfig) {
        self.cfg = cfg;
    }

    fn fails(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.random_bool(p.min(1.0))
    }

    fn err(op: &'static str, pod: PodId, reason: impl Into<String>) -> ActError {
        ActError { op, pod, reason: reason.into() }
    }
}

impl Actuator for SimActuator {
    fn reserve(
        &mut self,
        pod: PodId,
        spec: &Pod,
        node: NodeId,
        gpu_hint: Option<u8>,
        _now: u64,
    ) -> Result<(), ActError> {
        if self.reservations.contains_key(&pod) {
            return Err(Self::err("reserve", pod, "already holds a reservation"));
        }
        if self.fails(self.cfg.reserve_failure) {
            return Err(Self::err("reserve", pod, "injected failure"));
        }
        let n = self.cluster.node(node).ok_or_else(|| Self::err("reserve", pod, format!("no node {node}")))?;
        let gpus = choose_gpus(n, spec, gpu_hint)
            .ok_or_else(|| Self::err("reserve", pod, format!("no room on node {node}")))?;
        let placement = self.cluster.bind(node, spec, gpus).map_err(|e| Self::err("reserve", pod, e.to_string()))?;
        self.reservations.insert(pod, placement);
        Ok(())
    }

    fn unreserve(&mut self, pod: PodId) {
        if let (Some(r), Some(p)) = (self.reservations.remove(&pod), self.pods.get(&pod)) {
            self.cluster.unbind(&r, &p.spec);
        }
    }

    fn reservation(&self, pod: PodId) -> Option<NodeId> {
        self.reservations.get(&pod).map(|p| p.node)
    }

    fn evict(&mut self, pod: PodId, _now: u64) -> Result<(), ActError> {
        if self.pods.get(&pod).and_then(|p| p.at).is_none() {
            return Err(Self::err("evict", pod, "not running"));
        }
        if self.fails(self.cfg.evict_failure) {
            return Err(Self::err("evict", pod, "injected failure"));
        }
        let p = self.pods.get_mut(&pod).expect("checked");
        let at = p.at.take().expect("checked");
        self.cluster.unbind(&at, &p.spec);
        Ok(())
    }

    fn start(&mut self, pod: PodId, now: u64) -> Result<(), ActError> {
        let Some(&r) = self.reservations.get(&pod) else { return Err(Self::err("start", pod, "no reservation")) };
        if self.pods.get(&pod).is_none_or(|p| p.at.is_some()) {
            return Err(Self::err("start", pod, "unknown or still running"));
        }
        if self.fails(self.cfg.start_failure) {
            return Err(Self::err("start", pod, "injected failure"));
        }
        self.reservations.remove(&pod);
        let p = self.pods.get_mut(&pod).expect("checked");
        p.at = Some(r);
        p.ready_at = now + self.cfg.ready_delay_s;
        self.moved += 1;
        Ok(())
    }

    fn locate(&self, pod: PodId, now: u64) -> Location {
        match self.pods.get(&pod).and_then(|p| p.at.map(|a| (a, p.ready_at))) {
            Some((a, ready_at)) => Location::Running { node: a.node, ready: now >= ready_at },
            None => Location::Nowhere,
        }
    }

    fn workload_size(&self, workload: &str) -> u32 {
        self.pods.values().filter(|p| p.spec.workload == workload).count() as u32
    }

    fn pods_on(&self, node: NodeId) -> u32 {
        self.pods.values().filter(|p| p.at.is_some_and(|a| a.node == node)).count() as u32
    }

    fn health(&mut self, _now: u64) -> Health {
        let error_rate = self.cfg.base_error_rate + self.cfg.error_rate_per_move * f64::from(self.moved);
        self.moved = 0;
        Health { error_rate, latency_p99_ms: 50.0 + 1_000.0 * error_rate }
    }
}
