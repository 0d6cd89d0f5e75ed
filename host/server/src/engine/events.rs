//! What the backend says happened, folded into the loop's model: pods
//! submitted, already running elsewhere, or gone; nodes joining, changing
//! and leaving.

use tessera_core::model::{Node, NodeId};

use super::{Engine, PodMeta};
use crate::backend::ClusterEvent;

impl Engine {
    pub(super) fn arrivals_and_departures(&mut self, now: u64) {
        for event in self.backend.events(now) {
            match event {
                ClusterEvent::Deleted { id } => {
                    let at = self.sched.placement(id);
                    self.sched.remove(id);
                    if let Some(p) = at {
                        self.tracker.update(&self.sched.cluster().nodes()[p.node as usize], &self.workload);
                    }
                    self.pods.remove(&id);
                }
                ClusterEvent::Submitted { id, pod } => {
                    let meta = PodMeta { name: pod.name.clone(), workload: pod.workload.clone(), placed_by: None };
                    match self.sched.submit(id, pod, now) {
                        Ok(()) => {
                            self.pods.insert(id, meta);
                        }
                        Err(e) => {
                            tracing::warn!(backend = self.backend.name(), "pod {}: {e}; ignored", meta.name);
                            self.count_backend_error("BACKEND-DUPLICATE-POD");
                        }
                    }
                }
                ClusterEvent::Running { id, pod, node, gpus } => {
                    let Some(&n) = self.node_ids.get(&node) else {
                        tracing::warn!("pod {} runs on node {node}, which is not known; not counted", pod.name);
                        self.count_backend_error("BACKEND-UNKNOWN-NODE");
                        continue;
                    };
                    let meta = PodMeta { name: pod.name.clone(), workload: pod.workload.clone(), placed_by: None };
                    match self.sched.adopt(id, pod, n, gpus, now) {
                        Ok(_) => {
                            self.pods.insert(id, meta);
                            self.tracker.update(&self.sched.cluster().nodes()[n as usize], &self.workload);
                        }
                        Err(e) => {
                            tracing::warn!("pod {} running on {node} does not fit the model: {e}", meta.name);
                            self.count_backend_error("BACKEND-ADOPT-UNFIT");
                        }
                    }
                }
                ClusterEvent::NodeUpsert { node } => self.upsert_node(node),
                ClusterEvent::NodeRemoved { name } => {
                    if let Some(&id) = self.node_ids.get(&name) {
                        self.sched.update_node(id, |n| n.ready = false);
                    }
                }
            }
        }
    }

    /// A node joins, or what the backend says of a known one changes:
    /// readiness, zone, GPU health, capacity (its free room moves by the
    /// same amount; a changed GPU count is refused).
    fn upsert_node(&mut self, node: Node) {
        let Some(&id) = self.node_ids.get(&node.name) else {
            let name = node.name.clone();
            let id = self.sched.add_node(node);
            self.node_ids.insert(name, id);
            let n = &self.sched.cluster().nodes()[id as usize];
            self.tracker.add_node(n, &self.workload);
            self.shared.metrics.gpus.set(self.sched.cluster().total_gpus() as i64);
            return;
        };
        let known = &self.sched.cluster().nodes()[id as usize];
        if known.gpus.len() != node.gpus.len() {
            tracing::warn!(
                "node {}: {} GPUs now, {} before; the change is ignored until the node rejoins",
                node.name,
                node.gpus.len(),
                known.gpus.len()
            );
            self.count_backend_error("BACKEND-NODE-GPUS-CHANGED");
        }
        self.sched.update_node(id, |n| apply(n, &node));
        self.tracker.update(&self.sched.cluster().nodes()[id as usize], &self.workload);
    }

    /// Node ids by name.
    pub(super) fn index_nodes(nodes: &[Node]) -> std::collections::HashMap<String, NodeId> {
        nodes.iter().enumerate().map(|(i, n)| (n.name.clone(), i as NodeId)).collect()
    }
}

/// What the backend says of a node, onto the model's node (which keeps
/// what its bound pods hold).
fn apply(n: &mut Node, from: &Node) {
    n.ready = from.ready;
    n.zone.clone_from(&from.zone);
    let grow = |free: u64, old: u64, new: u64| (free + new).saturating_sub(old);
    n.free.cpu_milli = grow(n.free.cpu_milli, n.capacity.cpu_milli, from.capacity.cpu_milli);
    n.free.memory_mib = grow(n.free.memory_mib, n.capacity.memory_mib, from.capacity.memory_mib);
    n.capacity = from.capacity;
    if n.gpus.len() == from.gpus.len() {
        for (g, f) in n.gpus.iter_mut().zip(&from.gpus) {
            g.health = f.health;
            if f.memory_mib > 0 {
                g.memory_mib = f.memory_mib;
            }
        }
    }
    if !from.gpu_model.is_empty() {
        n.gpu_model.clone_from(&from.gpu_model);
    }
}
