//! Rescheduling moves on Kubernetes. A move there is an eviction through
//! the Eviction API followed by the owner's replacement pod landing on the
//! reserved node; until that replacement is steered, this actuator refuses
//! every move at its first step (the reservation), so the Movement Manager
//! records the moves as failed, evicts nothing and leaves every pod where
//! it runs.

use std::collections::{BTreeMap, HashMap};

use tessera_core::cluster::{Cluster, Placement};
use tessera_core::model::{NodeId, Pod};
use tessera_core::sched::PodId;
use tessera_movement::exec::{ActError, Actuator, Health, Location};
use tessera_server::backend::MoveActuator;

/// Why every move is refused.
pub const NOT_YET: &str = "moves on Kubernetes need the replacement pod steered to the reserved node, which Tessera does not do yet; nothing was evicted";

/// Refuses moves; reports every pod where it runs.
#[derive(Debug)]
pub struct Refusing {
    at: HashMap<PodId, Placement>,
    workloads: HashMap<String, u32>,
    per_node: HashMap<NodeId, u32>,
}

impl Refusing {
    /// Over the pods running now.
    pub fn new(_cluster: &Cluster, pods: Vec<(PodId, Pod, Placement)>) -> Self {
        let mut workloads = HashMap::new();
        let mut per_node = HashMap::new();
        let mut at = HashMap::new();
        for (id, pod, p) in pods {
            *workloads.entry(pod.workload).or_insert(0) += 1;
            *per_node.entry(p.node).or_insert(0) += 1;
            at.insert(id, p);
        }
        Self { at, workloads, per_node }
    }
}

impl Actuator for Refusing {
    fn reserve(&mut self, pod: PodId, _: &Pod, _: NodeId, _: Option<u8>, _: u64) -> Result<(), ActError> {
        Err(ActError { op: "reserve", pod, reason: NOT_YET.into() })
    }
    fn unreserve(&mut self, _pod: PodId) {}
    fn reservation(&self, _pod: PodId) -> Option<NodeId> {
        None
    }
    fn evict(&mut self, pod: PodId, _now: u64) -> Result<(), ActError> {
        Err(ActError { op: "evict", pod, reason: NOT_YET.into() })
    }
    fn start(&mut self, pod: PodId, _now: u64) -> Result<(), ActError> {
        Err(ActError { op: "start", pod, reason: NOT_YET.into() })
    }
    fn locate(&self, pod: PodId, _now: u64) -> Location {
        self.at.get(&pod).map_or(Location::Nowhere, |p| Location::Running { node: p.node, ready: true })
    }
    fn workload_size(&self, workload: &str) -> u32 {
        self.workloads.get(workload).copied().unwrap_or(0)
    }
    fn pods_on(&self, node: NodeId) -> u32 {
        self.per_node.get(&node).copied().unwrap_or(0)
    }
    fn health(&mut self, _now: u64) -> Health {
        Health::default()
    }
}

impl MoveActuator for Refusing {
    fn placements(&self) -> BTreeMap<PodId, Option<Placement>> {
        self.at.iter().map(|(&id, &p)| (id, Some(p))).collect()
    }
}
