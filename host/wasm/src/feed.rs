//! The host side of the node mirror: the current node records in WIT form,
//! and a log of which nodes changed at which generation, so each plugin
//! instance receives only the deltas it has not seen (or a full snapshot
//! when it is new or too far behind).

use tessera_core::{GpuHealth, Node, NodeId, Pod, Tier};

use crate::bindings::types as wit;

/// Signals the host keeps per topology zone, offered to plugins through
/// `tessera:policy/host` (not through the node mirror: they change for
/// every node of a zone at once).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZoneSignals {
    /// Bumps on every change.
    pub version: u64,
    /// Carbon intensity by zone, gCO₂/kWh.
    pub carbon: std::collections::BTreeMap<String, u32>,
}

/// Current node state plus a change log ([`tessera_core::reuse::Changes`],
/// the one log both the mirrors' deltas and reused answers are read
/// from), shared by a policy's plugins.
#[derive(Debug)]
pub struct NodeFeed {
    id: u64,
    /// Each present node's record, kept as the delta that sends it (so a
    /// sync of one node lends it rather than copying it: [`Deltas::One`]).
    nodes: Vec<Option<wit::NodeDelta>>,
    present: usize,
    zones: std::sync::Arc<ZoneSignals>,
    /// Device memory in use per GPU, by node id (telemetry beside the
    /// record; offered through `host.gpu-memory-used`), shared with the
    /// instances that sync from the feed (no copy per sync).
    gpu_memory_used: Vec<std::sync::Arc<[u32]>>,
    /// Which nodes changed when: what instances are synced from and reused
    /// answers are checked against; shared with a decision while it runs,
    /// so never copied in practice (a change comes between decisions, when
    /// no one else holds it).
    changes: std::sync::Arc<tessera_core::reuse::Changes>,
}

impl Default for NodeFeed {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeFeed {
    /// An empty feed with a process-unique id.
    pub fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Self {
            id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            nodes: Vec::new(),
            present: 0,
            zones: std::sync::Arc::default(),
            gpu_memory_used: Vec::new(),
            changes: Default::default(),
        }
    }

    /// The feed's process-unique id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Current generation; bumps on every change.
    pub fn generation(&self) -> u64 {
        self.changes.generation()
    }

    /// Number of nodes present.
    pub fn len(&self) -> usize {
        self.present
    }

    /// Whether no node is present.
    pub fn is_empty(&self) -> bool {
        self.present == 0
    }

    /// Sets the carbon intensity of `zone` (gCO₂/kWh); plugins see it from
    /// their next call on.
    pub fn set_zone_carbon(&mut self, zone: &str, g_per_kwh: u32) {
        if self.zones.carbon.get(zone) == Some(&g_per_kwh) {
            return;
        }
        let z = std::sync::Arc::make_mut(&mut self.zones);
        z.version += 1;
        z.carbon.insert(zone.to_string(), g_per_kwh);
        std::sync::Arc::make_mut(&mut self.changes).everything();
    }

    /// Which nodes changed when, for reusing plugins' answers.
    pub fn changes(&self) -> std::sync::Arc<tessera_core::reuse::Changes> {
        self.changes.clone()
    }

    /// Device memory in use per GPU of node `id`, MiB, shared (`None` if
    /// unknown).
    pub(crate) fn gpu_memory_shared(&self, id: NodeId) -> Option<&std::sync::Arc<[u32]>> {
        self.gpu_memory_used.get(id as usize).filter(|m| !m.is_empty())
    }

    /// The zone signals now.
    pub fn zones(&self) -> &std::sync::Arc<ZoneSignals> {
        &self.zones
    }

    /// Inserts or replaces a node.
    pub fn upsert(&mut self, node: &Node) {
        let i = node.id as usize;
        if i >= self.nodes.len() {
            self.nodes.resize_with(i + 1, || None);
        }
        let joined = self.nodes[i].is_none();
        if joined {
            self.present += 1;
        }
        let changes = std::sync::Arc::make_mut(&mut self.changes);
        changes.changed(node.id, joined);
        changes.set_zone(node.id, &node.zone);
        self.nodes[i] = Some(wit::NodeDelta::Upsert(to_wit_node(node)));
        if self.gpu_memory_used.len() <= i {
            self.gpu_memory_used.resize_with(i + 1, || std::sync::Arc::new([]));
        }
        // Most changes (a bind) leave the device memory as it was: keep
        // the shared copy then.
        if !self.gpu_memory_used[i].iter().copied().eq(node.gpus.iter().map(|g| g.memory_used_mib)) {
            self.gpu_memory_used[i] = node.gpus.iter().map(|g| g.memory_used_mib).collect();
        }
    }

    /// Inserts or replaces many nodes.
    pub fn upsert_all<'a>(&mut self, nodes: impl IntoIterator<Item = &'a Node>) {
        for n in nodes {
            self.upsert(n);
        }
    }

    /// Removes a node (no-op if absent).
    pub fn remove(&mut self, id: NodeId) {
        if let Some(slot) = self.nodes.get_mut(id as usize)
            && slot.take().is_some()
        {
            self.present -= 1;
            std::sync::Arc::make_mut(&mut self.changes).left(id);
        }
    }

    /// Deltas that bring an instance synced at `since` up to date.
    pub fn deltas_since(&self, since: u64) -> Deltas<'_> {
        if since == self.generation() && since != 0 {
            return Deltas::Many(Vec::new());
        }
        // The log keeps about twice the cluster's changes (see `Changes`):
        // an instance further behind gets a full snapshot instead.
        let Some(changed) = self.changes.since(since).filter(|_| since != 0) else {
            return Deltas::Many(self.nodes.iter().flatten().cloned().collect());
        };
        let mut ids: Vec<NodeId> = changed.collect();
        ids.sort_unstable();
        ids.dedup();
        let delta = |id: NodeId| self.nodes.get(id as usize).and_then(Option::as_ref);
        // One node changed (a bind, between two decisions): its record is
        // lent, not copied (a copy is a dozen allocations).
        if let [id] = ids[..]
            && let Some(d) = delta(id)
        {
            return Deltas::One(d);
        }
        Deltas::Many(ids.into_iter().map(|id| delta(id).cloned().unwrap_or(wit::NodeDelta::Remove(id))).collect())
    }
}

/// What [`NodeFeed::deltas_since`] found: one record borrowed from the
/// feed, or any number copied.
#[derive(Debug)]
pub enum Deltas<'a> {
    /// One node's current record.
    One(&'a wit::NodeDelta),
    /// Records and removals, in node order.
    Many(Vec<wit::NodeDelta>),
}

impl Deltas<'_> {
    /// The deltas, as the contract's `apply` takes them.
    pub fn as_slice(&self) -> &[wit::NodeDelta] {
        match self {
            Self::One(d) => std::slice::from_ref(*d),
            Self::Many(v) => v,
        }
    }
}

/// A core node in WIT form.
pub fn to_wit_node(n: &Node) -> wit::Node {
    wit::Node {
        id: n.id,
        name: n.name.clone(),
        zone: n.zone.clone(),
        gpu_model: n.gpu_model.clone(),
        capacity: wit::Resources { cpu_milli: n.capacity.cpu_milli, memory_mib: n.capacity.memory_mib },
        free: wit::Resources { cpu_milli: n.free.cpu_milli, memory_mib: n.free.memory_mib },
        gpus: n
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| wit::Gpu {
                index: i as u8,
                free_milli: g.free_milli,
                memory_mib: g.memory_mib,
                health: match g.health {
                    GpuHealth::Healthy => wit::GpuHealth::Healthy,
                    GpuHealth::Degraded => wit::GpuHealth::Degraded,
                    GpuHealth::Failed => wit::GpuHealth::Failed,
                },
                util_permille: g.util_permille,
                link: wit::GpuLink { island: g.link.island, pcie_switch: g.link.pcie, numa_node: g.link.numa },
            })
            .collect(),
        cpu_util_permille: n.cpu_util_permille,
        memory_util_permille: n.memory_util_permille,
        ready: n.ready,
        workloads: n.workloads.iter().map(|(w, &pods)| wit::WorkloadCount { workload: w.clone(), pods }).collect(),
        gpu_classes: n.gpu_classes.iter().map(|(c, &pods)| wit::ClassCount { class: c.clone(), pods }).collect(),
    }
}

/// A core pod in WIT form.
pub fn to_wit_pod(p: &Pod) -> wit::Pod {
    wit::Pod {
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        workload: p.workload.clone(),
        requests: wit::Resources { cpu_milli: p.requests.cpu_milli, memory_mib: p.requests.memory_mib },
        gpu_count: p.gpu_count,
        gpu_milli: p.gpu_milli,
        allowed_models: p.allowed_models.clone(),
        priority: p.priority,
        tier: match p.tier {
            Tier::Hard => wit::Tier::Hard,
            Tier::Soft => wit::Tier::Soft,
            Tier::Opportunistic => wit::Tier::Opportunistic,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::Resources;

    fn node(id: NodeId) -> Node {
        Node::new(id, format!("n{id}"), Resources { cpu_milli: 1000, memory_mib: 1024 }, 2, "T4")
    }

    fn ids(deltas: &Deltas<'_>) -> Vec<(bool, NodeId)> {
        deltas
            .as_slice()
            .iter()
            .map(|d| match d {
                wit::NodeDelta::Upsert(n) => (true, n.id),
                wit::NodeDelta::Remove(id) => (false, *id),
            })
            .collect()
    }

    #[test]
    fn new_instances_get_a_snapshot_and_old_ones_only_changes() {
        let mut f = NodeFeed::new();
        for id in 0..4 {
            f.upsert(&node(id));
        }
        let g = f.generation();
        assert_eq!(ids(&f.deltas_since(0)), [(true, 0), (true, 1), (true, 2), (true, 3)]);
        assert!(f.deltas_since(g).as_slice().is_empty());
        f.upsert(&node(2));
        f.remove(1);
        f.upsert(&node(2));
        assert_eq!(ids(&f.deltas_since(g)), [(false, 1), (true, 2)]);
        assert_eq!(f.len(), 3);
        assert_eq!(ids(&f.deltas_since(0)), [(true, 0), (true, 2), (true, 3)]);
    }

    #[test]
    fn far_behind_instances_get_a_snapshot() {
        let mut f = NodeFeed::new();
        f.upsert(&node(0));
        let g = f.generation();
        for _ in 0..3000 {
            f.upsert(&node(1));
        }
        let d = f.deltas_since(g);
        assert_eq!(ids(&d), [(true, 0), (true, 1)], "snapshot after the log was compacted");
    }

    #[test]
    fn compaction_spares_instances_that_keep_up() {
        let mut f = NodeFeed::new();
        f.upsert(&node(0));
        f.upsert(&node(1));
        for _ in 0..5000 {
            let g = f.generation();
            f.upsert(&node(1));
            assert_eq!(ids(&f.deltas_since(g)), [(true, 1)], "one change, one delta");
            assert!(matches!(f.deltas_since(g), Deltas::One(_)), "lent, not copied");
        }
    }
}
