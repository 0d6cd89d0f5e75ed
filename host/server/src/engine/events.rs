//! What the backend says happened, folded into the loop's model: pods
//! submitted, already running elsewhere, or gone; nodes joining, changing
//! and leaving.

use std::time::{Duration, Instant};

use tessera_core::model::{Node, NodeId, Pod};
use tessera_core::sched::PodId;

use super::{Engine, PodMeta};
use crate::backend::ClusterEvent;

/// A pod whose bind the backend refused, out of the queue until `until`.
pub(super) struct Held {
    id: PodId,
    pod: Pod,
    until: Instant,
}

/// Wait after a pod's `n`-th refused bind: 1, 2, 4, 8, then 10 s
/// (kube-scheduler's pod backoff), so a refusing backend is not hammered.
pub(super) fn backoff(n: u32) -> Duration {
    Duration::from_secs((1u64 << n.saturating_sub(1).min(4)).min(10))
}

impl Engine {
    /// A decision the backend could not carry out: the pod leaves the
    /// model's node and waits out a backoff before it is queued again (if
    /// someone else bound it, the backend's events say where it runs).
    pub(super) fn requeue(&mut self, id: PodId) {
        let at = self.sched.placement(id);
        if let Some(pod) = self.sched.remove(id) {
            let n = self.bind_failures.entry(id).or_insert(0);
            *n += 1;
            self.held.push(Held { id, pod, until: Instant::now() + backoff(*n) });
        }
        if let Some(p) = at {
            self.tracker.update(&self.sched.cluster().nodes()[p.node as usize], &self.workload);
        }
    }

    /// Queues again the held pods whose backoff is over.
    pub(super) fn release_held(&mut self, now: u64) {
        if self.held.is_empty() {
            return;
        }
        let t = Instant::now();
        let (due, wait): (Vec<Held>, Vec<Held>) =
            std::mem::take(&mut self.held).into_iter().partition(|h| h.until <= t);
        self.held = wait;
        for h in due {
            if self.sched.submit(h.id, h.pod, now).is_err() {
                self.pods.remove(&h.id);
            }
        }
    }

    pub(super) fn arrivals_and_departures(&mut self, now: u64) {
        for event in self.backend.events(now) {
            // Whatever the backend says of a held pod supersedes the hold.
            if let ClusterEvent::Deleted { id }
            | ClusterEvent::Running { id, .. }
            | ClusterEvent::Submitted { id, .. } = &event
            {
                self.held.retain(|h| h.id != *id);
                if matches!(event, ClusterEvent::Deleted { .. }) {
                    self.bind_failures.remove(id);
                }
            }
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
                ClusterEvent::Protected { id, protected } => self.sched.protect(id, protected),
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
    n.labels.clone_from(&from.labels);
    n.taints.clone_from(&from.taints);
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

#[cfg(test)]
mod tests {
    #[test]
    fn bind_backoff_doubles_to_ten_seconds() {
        let secs: Vec<u64> = (1..=7).map(|n| super::backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 10, 10, 10]);
    }
}
