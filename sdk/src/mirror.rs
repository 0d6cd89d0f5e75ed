//! The node mirror a plugin keeps, fed by deltas from the host.

use std::collections::HashMap;

use crate::types::{EMPTY_SYM, GpuLink, GpuList, Node, NodeDelta, NodeId, NodeRecord, NodeState, Sym, WorkloadCount};

/// What a node carries besides its compact [`Node`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeMeta {
    /// Node name.
    pub name: String,
    /// Device memory of each GPU, MiB.
    pub gpu_memory_mib: u32,
    /// Pods per workload on the node.
    pub workloads: Vec<WorkloadCount>,
    /// Bound GPU pods per request class (`share-gpu`, `N-gpu`).
    pub gpu_classes: Vec<WorkloadCount>,
    /// Device memory in use per GPU, MiB (empty if unknown).
    pub gpu_memory_used_mib: Vec<u32>,
    /// Where each GPU sits in the node's interconnect, by index (all zero
    /// when the node reports no topology, or the plugin was built against
    /// contract 0.1.0). See [`crate::topology`].
    pub gpu_links: Vec<GpuLink>,
}

impl NodeMeta {
    /// Pods of `workload` on this node.
    pub fn workload_pods(&self, workload: &str) -> u32 {
        self.workloads.iter().find(|w| w.workload == workload).map_or(0, |w| w.pods)
    }
}

/// Node table indexed by [`NodeId`] (ids are dense), with interned zone and
/// model names.
#[derive(Debug, Clone)]
pub struct NodeTable {
    /// `Option<NodeState>` is no larger than `NodeState` (a `bool` niche),
    /// and one bounds check finds both presence and data.
    nodes: Vec<Option<NodeState>>,
    gpus: Vec<GpuList>,
    meta: Vec<NodeMeta>,
    len: usize,
    symbols: Vec<String>,
    by_name: HashMap<String, Sym>,
    /// Symbols that name a zone of some node, in order of first sight.
    zones: Vec<Sym>,
    /// Carbon intensity by symbol (zones only), gCO₂/kWh, as the host
    /// gave it before this call.
    carbon: Vec<Option<u32>>,
}

impl Default for NodeTable {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeTable {
    /// An empty table.
    pub fn new() -> Self {
        let mut by_name = HashMap::new();
        by_name.insert(String::new(), EMPTY_SYM);
        Self {
            nodes: Vec::new(),
            gpus: Vec::new(),
            meta: Vec::new(),
            len: 0,
            symbols: vec![String::new()],
            by_name,
            zones: Vec::new(),
            carbon: Vec::new(),
        }
    }

    /// The symbol of `name`, interning it if new.
    pub fn intern(&mut self, name: &str) -> Result<Sym, String> {
        if let Some(&s) = self.by_name.get(name) {
            return Ok(s);
        }
        let s =
            Sym::try_from(self.symbols.len()).map_err(|_| "more than 65535 distinct zone/model names".to_string())?;
        self.symbols.push(name.to_string());
        self.by_name.insert(name.to_string(), s);
        Ok(s)
    }

    /// The symbol of `name`, if the table has seen it.
    pub fn lookup(&self, name: &str) -> Option<Sym> {
        self.by_name.get(name).copied()
    }

    /// The name of a symbol.
    pub fn symbol(&self, sym: Sym) -> &str {
        self.symbols.get(sym as usize).map_or("", String::as_str)
    }

    /// The symbols that name a zone of some node.
    pub fn zones(&self) -> &[Sym] {
        &self.zones
    }

    /// Carbon intensity of a zone (by symbol) now, gCO₂/kWh, if the host
    /// knows it (`tessera:policy/host.zone-carbon-intensity`; inside a
    /// component, asked before each call only for a plugin that declares
    /// [`crate::Scorer::ZONE_CARBON`]).
    #[inline]
    pub fn zone_carbon(&self, zone: Sym) -> Option<u32> {
        self.carbon.get(zone as usize).copied().flatten()
    }

    /// Sets a zone's carbon intensity (the harness does this from the host
    /// before each call of a plugin that reads it; native tests and twins
    /// call it directly).
    pub fn set_zone_carbon(&mut self, zone: &str, g_per_kwh: Option<u32>) -> Result<(), String> {
        let s = self.intern(zone)?;
        if self.carbon.len() <= s as usize {
            self.carbon.resize(s as usize + 1, None);
        }
        self.carbon[s as usize] = g_per_kwh;
        Ok(())
    }

    /// Asks `lookup` for the carbon intensity of every zone.
    pub fn refresh_zone_carbon(&mut self, lookup: impl Fn(&str) -> Option<u32>) {
        for i in 0..self.zones.len() {
            let s = self.zones[i];
            let v = lookup(self.symbol(s));
            if self.carbon.len() <= s as usize {
                self.carbon.resize(s as usize + 1, None);
            }
            self.carbon[s as usize] = v;
        }
    }

    /// Number of symbols (valid symbols are `0..symbol_count()`).
    pub fn symbol_count(&self) -> usize {
        self.symbols.len()
    }

    /// Applies one delta; `Err` (and no change) if the record is invalid.
    pub fn apply(&mut self, delta: NodeDelta) -> Result<(), String> {
        match delta {
            NodeDelta::Upsert(rec) => self.upsert(rec),
            NodeDelta::Remove(id) => {
                if let Some(slot) = self.nodes.get_mut(id as usize)
                    && slot.take().is_some()
                {
                    self.meta[id as usize] = NodeMeta::default();
                    self.len -= 1;
                }
                Ok(())
            }
        }
    }

    fn upsert(&mut self, rec: NodeRecord) -> Result<(), String> {
        let mut gpus = GpuList::new();
        for g in &rec.gpus {
            gpus.push(crate::Gpu {
                free_milli: g.free_milli.min(1000) as u16,
                util_permille: g.util_permille,
                index: 0,
                health: g.health,
            })
            .map_err(|e| format!("node {} ({}): {e}", rec.id, rec.name))?;
        }
        // A node keeps its zone and model from one record to the next:
        // compare with the names it had before hashing them again.
        let before = self.nodes.get(rec.id as usize).and_then(Option::as_ref).map(|n| (n.zone, n.gpu_model));
        let (zone, gpu_model) = match before {
            Some((z, m)) if self.symbol(z) == rec.zone && self.symbol(m) == rec.gpu_model => (z, m),
            _ => (self.intern(&rec.zone)?, self.intern(&rec.gpu_model)?),
        };
        if !self.zones.contains(&zone) {
            self.zones.push(zone);
        }
        let mut node = NodeState {
            capacity: rec.capacity,
            free: rec.free,
            zone,
            gpu_model,
            cpu_util_permille: rec.cpu_util_permille,
            memory_util_permille: rec.memory_util_permille,
            ready: rec.ready,
            ..NodeState::default()
        };
        node.derive(&gpus);
        let i = rec.id as usize;
        if i >= self.nodes.len() {
            self.nodes.resize(i + 1, None);
            self.gpus.resize(i + 1, GpuList::new());
            self.meta.resize_with(i + 1, NodeMeta::default);
        }
        if self.nodes[i].is_none() {
            self.len += 1;
        }
        self.nodes[i] = Some(node);
        self.gpus[i] = gpus;
        let gpu_memory_mib = rec.gpus.first().map_or(0, |g| g.memory_mib);
        let gpu_links = rec.gpus.iter().map(|g| g.link).collect();
        self.meta[i] = NodeMeta {
            gpu_links,
            name: rec.name,
            gpu_memory_mib,
            workloads: rec.workloads,
            gpu_classes: rec.gpu_classes,
            gpu_memory_used_mib: rec.gpu_memory_used_mib,
        };
        Ok(())
    }

    /// The node with this id, if present.
    #[inline]
    pub fn get(&self, id: NodeId) -> Option<Node<'_>> {
        static NO_GPUS: GpuList = GpuList::new();
        let state = self.nodes.get(id as usize)?.as_ref()?;
        // `get` rather than indexing: no panic path in scoring loops (the
        // two vectors always have the same length).
        Some(Node::new(id, state, self.gpus.get(id as usize).unwrap_or(&NO_GPUS), self.meta.get(id as usize)))
    }

    /// Whether the node with this id is present.
    #[inline]
    pub fn contains(&self, id: NodeId) -> bool {
        self.nodes.get(id as usize).is_some_and(Option::is_some)
    }

    /// Name and workloads of a node, if present.
    pub fn meta(&self, id: NodeId) -> Option<&NodeMeta> {
        self.get(id).map(|_| &self.meta[id as usize])
    }

    /// Number of nodes present.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// All nodes present, in id order.
    pub fn iter(&self) -> impl Iterator<Item = Node<'_>> {
        self.nodes
            .iter()
            .zip(&self.gpus)
            .zip(&self.meta)
            .enumerate()
            .filter_map(|(i, ((n, g), m))| n.as_ref().map(|n| Node::new(i as NodeId, n, g, Some(m))))
    }

    /// All nodes present with their metadata, in id order.
    pub fn iter_meta(&self) -> impl Iterator<Item = (Node<'_>, &NodeMeta)> {
        self.nodes
            .iter()
            .zip(&self.gpus)
            .zip(&self.meta)
            .enumerate()
            .filter_map(|(i, ((n, g), m))| n.as_ref().map(|n| (Node::new(i as NodeId, n, g, Some(m)), m)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GpuRecord;

    fn rec(id: NodeId, zone: &str) -> NodeRecord {
        NodeRecord { id, name: format!("n{id}"), zone: zone.into(), ..NodeRecord::default() }
    }

    #[test]
    fn upsert_replace_remove_and_interning() {
        let mut t = NodeTable::new();
        t.apply(NodeDelta::Upsert(rec(3, "a"))).unwrap();
        t.apply(NodeDelta::Upsert(rec(0, "b"))).unwrap();
        assert_eq!(t.len(), 2);
        t.apply(NodeDelta::Upsert(rec(3, "b"))).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.symbol(t.get(3).unwrap().zone), "b");
        assert_eq!(t.get(3).unwrap().zone, t.get(0).unwrap().zone);
        assert_eq!(t.meta(3).unwrap().name, "n3");
        t.apply(NodeDelta::Remove(3)).unwrap();
        t.apply(NodeDelta::Remove(3)).unwrap();
        t.apply(NodeDelta::Remove(99)).unwrap();
        assert_eq!(t.len(), 1);
        assert!(t.get(3).is_none() && t.meta(3).is_none());
        assert_eq!(t.iter().map(|n| n.id()).collect::<Vec<_>>(), vec![0]);
        assert_eq!(t.lookup("a"), Some(1));
        assert_eq!(t.lookup("zzz"), None);
    }

    #[test]
    fn gpu_totals_are_derived_on_arrival() {
        let mut t = NodeTable::new();
        let mut r = rec(0, "a");
        r.gpus = [1000, 300, 1000, 0].iter().map(|&f| GpuRecord { free_milli: f, ..GpuRecord::default() }).collect();
        r.gpus[2].health = crate::GpuHealth::Failed;
        t.apply(NodeDelta::Upsert(r)).unwrap();
        let n = t.get(0).unwrap();
        assert_eq!((n.free_gpu_milli(), n.whole_free_gpus(), n.max_free_gpu_milli()), (1300, 1, 1000));
        assert_eq!(n.gpu_capacity_milli(), 4000);
        assert_eq!(n.gpus()[3].index, 3);
        assert_eq!(n.gpu_count(), 4);
    }

    #[test]
    fn too_many_gpus_is_an_error_that_changes_nothing() {
        let mut t = NodeTable::new();
        let mut r = rec(0, "a");
        r.gpus = vec![GpuRecord::default(); 17];
        let e = t.apply(NodeDelta::Upsert(r)).unwrap_err();
        assert!(e.contains("at most 16 GPUs"), "{e}");
        assert!(t.is_empty());
    }
}
