//! A cluster as a running service sees it at one moment: its nodes, the
//! pods running on them and the pods waiting. `tessera serve` hands it out
//! (`GET /v1/snapshot`) so that a chaos campaign can run on a twin of the
//! live cluster.

use serde::{Deserialize, Serialize};

use crate::cluster::Placement;
use crate::model::Arrival;
use crate::model::{GPU_MILLI, Node, Pod};

/// A pod running at the snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningPod {
    /// The pod.
    pub pod: Pod,
    /// Where it runs.
    pub placement: Placement,
}

/// The cluster at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The backend it was taken from (`simulator`, `kubernetes`).
    pub backend: String,
    /// Backend time, seconds.
    pub backend_time_s: u64,
    /// Wall-clock time, Unix milliseconds.
    pub taken_at_unix_ms: u64,
    /// The nodes, with what is bound on them.
    pub nodes: Vec<Node>,
    /// The pods running.
    pub running: Vec<RunningPod>,
    /// The pods waiting to be placed.
    pub waiting: Vec<Pod>,
}

/// A snapshot that does not describe a cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// No nodes.
    #[error("the snapshot holds no node")]
    Empty,
    /// Node ids must be 0, 1, 2, … in order.
    #[error("node {name} has id {id}, expected {expected} (ids are dense and in order)")]
    Ids {
        /// Node name.
        name: String,
        /// Its id.
        id: u32,
        /// The id its position calls for.
        expected: u32,
    },
    /// A running pod on a node or GPU that does not exist.
    #[error("pod {pod} runs on node {node} GPU set {gpus:#x}, which the snapshot does not have")]
    Placement {
        /// Pod name.
        pod: String,
        /// Node id.
        node: u32,
        /// GPU bit set.
        gpus: u32,
    },
}

impl Snapshot {
    /// Checks that the snapshot describes a cluster.
    pub fn validate(&self) -> Result<(), SnapshotError> {
        if self.nodes.is_empty() {
            return Err(SnapshotError::Empty);
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.id as usize != i {
                return Err(SnapshotError::Ids { name: n.name.clone(), id: n.id, expected: i as u32 });
            }
        }
        for r in &self.running {
            let ok = self
                .nodes
                .get(r.placement.node as usize)
                .is_some_and(|n| r.placement.gpus.indices().all(|g| g < n.gpus.len()));
            if !ok {
                return Err(SnapshotError::Placement {
                    pod: r.pod.name.clone(),
                    node: r.placement.node,
                    gpus: r.placement.gpus.0,
                });
            }
        }
        Ok(())
    }

    /// The nodes with nothing bound (capacity free, GPUs idle), keeping
    /// what describes them: zone, model, readiness, GPU health.
    pub fn empty_nodes(&self) -> Vec<Node> {
        self.nodes
            .iter()
            .map(|n| {
                let mut e = n.clone();
                e.free = e.capacity;
                e.workloads.clear();
                e.gpu_classes.clear();
                e.cpu_util_permille = 0;
                e.memory_util_permille = 0;
                for g in &mut e.gpus {
                    g.free_milli = GPU_MILLI;
                    g.util_permille = 0;
                    g.memory_used_mib = 0;
                }
                e
            })
            .collect()
    }

    /// The pods of the snapshot (running first, then waiting) as arrivals
    /// at `at` that do not leave: how long they still run is not known, so
    /// a twin keeps the live load for its whole run.
    pub fn arrivals(&self, at: u64) -> Vec<Arrival> {
        self.running
            .iter()
            .map(|r| &r.pod)
            .chain(&self.waiting)
            .map(|p| Arrival { pod: p.clone(), at, leaves_at: None })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Cluster, GpuSet};
    use crate::model::Resources;

    #[test]
    fn a_snapshot_round_trips_and_empties_its_nodes() {
        let mut c = Cluster::new(vec![Node::new(0, "a", Resources { cpu_milli: 8000, memory_mib: 8192 }, 2, "A100")]);
        let pod = Pod { name: "p".into(), gpu_count: 1, gpu_milli: 500, ..Pod::default() };
        let at = c.bind(0, &pod, GpuSet(1)).unwrap();
        let s = Snapshot {
            backend: "simulator".into(),
            nodes: c.nodes().to_vec(),
            running: vec![RunningPod { pod: pod.clone(), placement: at }],
            waiting: vec![Pod { name: "w".into(), ..Pod::default() }],
            ..Snapshot::default()
        };
        s.validate().unwrap();
        let back: Snapshot = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        let empty = s.empty_nodes();
        assert_eq!(empty[0].gpus[0].free_milli, GPU_MILLI);
        assert_eq!(empty[0].free, empty[0].capacity);
        assert_ne!(s.nodes[0].gpus[0].free_milli, GPU_MILLI, "the snapshot itself keeps its allocations");
        let names: Vec<String> = s.arrivals(5).into_iter().map(|a| a.pod.name).collect();
        assert_eq!(names, ["p", "w"]);
        let mut bad = s.clone();
        bad.running[0].placement.gpus = GpuSet(0b100);
        assert!(bad.validate().unwrap_err().to_string().contains("pod p"));
        bad.nodes[0].id = 3;
        assert!(matches!(bad.validate(), Err(SnapshotError::Ids { .. })));
    }
}
