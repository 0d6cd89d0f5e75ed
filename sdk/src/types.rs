//! The types plugin code sees, natively and inside the component.
//!
//! Two forms of a node: [`NodeRecord`] is what the host sends (names as
//! strings, workloads), and [`Node`] is what scoring functions receive: a
//! view of a one-cache-line [`NodeState`] (strings interned to [`Sym`]s,
//! GPU totals and capacity reciprocals precomputed) and of its GPUs, kept
//! apart. Scoring runs over thousands of candidates per pod, and at that
//! scale cache traffic, not arithmetic, sets its cost: a node that fits in
//! 64 bytes keeps the Wasm path within a few nanoseconds per node.

use serde::{Deserialize, Serialize};

pub use tessera_topology::GpuLink;

/// Dense node identifier assigned by the host.
pub type NodeId = u32;

/// An interned string (zone, GPU model) of a [`crate::NodeTable`].
pub type Sym = u16;

/// The symbol of the empty string in every table.
pub const EMPTY_SYM: Sym = 0;

/// CPU and memory quantities. Host values above `u32::MAX` saturate
/// (4.2 million millicores, 4 PiB).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resources {
    /// CPU in millicores.
    pub cpu_milli: u32,
    /// Memory in MiB.
    pub memory_mib: u32,
}

/// Health of one GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum GpuHealth {
    /// Fully usable.
    #[default]
    Healthy,
    /// Usable but slower or hotter than its peers.
    Degraded,
    /// Unusable (XID/ECC failure).
    Failed,
}

/// One physical GPU of a node (6 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Gpu {
    /// Unallocated share, 0..=1000.
    pub free_milli: u16,
    /// Recent utilisation in tenths of a percent.
    pub util_permille: u16,
    /// Index on the node.
    pub index: u8,
    /// Health from telemetry.
    pub health: GpuHealth,
}

impl Default for Gpu {
    fn default() -> Self {
        Self { free_milli: 1000, util_permille: 0, index: 0, health: GpuHealth::Healthy }
    }
}

impl Gpu {
    /// Whether the GPU may take pods.
    #[inline]
    pub fn usable(&self) -> bool {
        self.health != GpuHealth::Failed
    }

    /// Whether it can hold `need` milli more (usable and enough free).
    #[inline]
    pub fn fits(&self, need: u32) -> bool {
        self.usable() && u32::from(self.free_milli) >= need
    }
}

/// Most GPUs a node may have.
pub const MAX_GPUS: usize = 16;

/// The GPUs of a node, stored inline. Dereferences to `[Gpu]`.
#[derive(Clone, Copy)]
pub struct GpuList {
    len: u8,
    items: [Gpu; MAX_GPUS],
}

impl GpuList {
    /// An empty list.
    pub const fn new() -> Self {
        const EMPTY: Gpu = Gpu { free_milli: 0, util_permille: 0, index: 0, health: GpuHealth::Healthy };
        Self { len: 0, items: [EMPTY; MAX_GPUS] }
    }

    /// Appends a GPU, numbering it by position; `Err` past [`MAX_GPUS`].
    pub fn push(&mut self, mut gpu: Gpu) -> Result<(), String> {
        if self.len as usize == MAX_GPUS {
            return Err(format!("a node may have at most {MAX_GPUS} GPUs"));
        }
        gpu.index = self.len;
        self.items[self.len as usize] = gpu;
        self.len += 1;
        Ok(())
    }
}

impl Default for GpuList {
    fn default() -> Self {
        Self::new()
    }
}

impl std::ops::Deref for GpuList {
    type Target = [Gpu];
    #[inline]
    fn deref(&self) -> &[Gpu] {
        &self.items[..self.len as usize]
    }
}

impl std::ops::DerefMut for GpuList {
    #[inline]
    fn deref_mut(&mut self) -> &mut [Gpu] {
        &mut self.items[..self.len as usize]
    }
}

impl PartialEq for GpuList {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for GpuList {}

impl std::fmt::Debug for GpuList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl TryFrom<Vec<Gpu>> for GpuList {
    type Error = String;
    fn try_from(v: Vec<Gpu>) -> Result<Self, String> {
        let mut list = Self::new();
        for g in v {
            list.push(g)?;
        }
        Ok(list)
    }
}

/// The hot, fixed-size part of a node (one cache line): what most scoring
/// functions read. GPUs are kept beside it ([`Node::gpus`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NodeState {
    /// Allocatable capacity.
    pub capacity: Resources,
    /// Capacity not yet requested by bound pods.
    pub free: Resources,
    /// Topology zone ([`crate::NodeTable::symbol`] gives the name).
    pub zone: Sym,
    /// GPU model ([`EMPTY_SYM`] for CPU-only nodes).
    pub gpu_model: Sym,
    /// CPU utilisation, tenths of a percent.
    pub cpu_util_permille: u16,
    /// Memory utilisation, tenths of a percent.
    pub memory_util_permille: u16,
    /// Whether the node accepts pods.
    pub ready: bool,
    // Derived from the GPUs and capacities by the mirror when the node
    // arrives, so scoring functions get them in O(1) without division.
    pub(crate) gpu_count: u8,
    pub(crate) free_gpu: u16,
    pub(crate) whole_free: u8,
    pub(crate) max_free: u16,
    pub(crate) resource_mask: u8,
    pub(crate) inv_capacity: [f32; 4],
    pub(crate) free_share: [f32; 4],
}

impl NodeState {
    /// Recomputes the derived values (the mirror calls this).
    pub(crate) fn derive(&mut self, gpus: &[Gpu]) {
        let usable = || gpus.iter().filter(|g| g.usable());
        self.gpu_count = gpus.len() as u8;
        self.free_gpu = usable().map(|g| g.free_milli).sum();
        self.whole_free = usable().filter(|g| g.free_milli == 1000).count() as u8;
        self.max_free = usable().map(|g| g.free_milli).max().unwrap_or(0);
        let cap = [self.capacity.cpu_milli, self.capacity.memory_mib, self.gpu_capacity_milli()];
        let free = [self.free.cpu_milli, self.free.memory_mib, self.free_gpu_milli()];
        self.resource_mask = 0;
        self.inv_capacity[3] = 0.0;
        self.free_share[3] = 1.0;
        for r in 0..3 {
            if cap[r] == 0 {
                self.inv_capacity[r] = 0.0;
                self.free_share[r] = 1.0;
            } else {
                self.inv_capacity[r] = 1.0 / cap[r] as f32;
                self.free_share[r] = free[r].min(cap[r]) as f32 / cap[r] as f32;
                self.resource_mask |= 1 << r;
            }
        }
    }

    /// Number of GPUs.
    #[inline]
    pub fn gpu_count(&self) -> u32 {
        u32::from(self.gpu_count)
    }

    /// Free share over usable GPUs, in milli.
    #[inline]
    pub fn free_gpu_milli(&self) -> u32 {
        u32::from(self.free_gpu)
    }

    /// GPU capacity in milli (1000 per GPU).
    #[inline]
    pub fn gpu_capacity_milli(&self) -> u32 {
        u32::from(self.gpu_count) * 1000
    }

    /// Number of usable GPUs that are entirely free.
    #[inline]
    pub fn whole_free_gpus(&self) -> u32 {
        u32::from(self.whole_free)
    }

    /// Largest free share on one usable GPU, in milli.
    #[inline]
    pub fn max_free_gpu_milli(&self) -> u32 {
        u32::from(self.max_free)
    }

    /// `1 / capacity` of CPU, memory and GPU share, and a fourth lane of 0
    /// (0 also where the node has none), so per-node arithmetic needs no
    /// division and fits one SIMD register.
    #[inline]
    pub fn inv_capacity(&self) -> &[f32; 4] {
        &self.inv_capacity
    }

    /// Free fraction (`free / capacity`) of CPU, memory and GPU share, and a
    /// fourth lane of 1.0 (1.0 also where the node has none).
    #[inline]
    pub fn free_share(&self) -> &[f32; 4] {
        &self.free_share
    }

    /// Which resources the node has: bit 0 CPU, bit 1 memory, bit 2 GPU.
    #[inline]
    pub fn resource_mask(&self) -> u8 {
        self.resource_mask
    }
}

/// A node as scoring functions see it: its [`NodeState`] (fields reachable
/// directly, through `Deref`) and its GPUs.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    id: NodeId,
    state: &'a NodeState,
    // References, not slices: building the view must not read the GPU
    // array or the metadata (cache lines most scorers never touch).
    gpus: &'a GpuList,
    meta: Option<&'a crate::NodeMeta>,
}

impl<'a> Node<'a> {
    pub(crate) fn new(id: NodeId, state: &'a NodeState, gpus: &'a GpuList, meta: Option<&'a crate::NodeMeta>) -> Self {
        Self { id, state, gpus, meta }
    }

    /// Name, workloads and GPU classes of the node.
    #[inline]
    pub fn meta(&self) -> Option<&'a crate::NodeMeta> {
        self.meta
    }

    /// The host-assigned id.
    #[inline]
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Mean utilisation of the node's GPUs, ‰ (each capped at 1000; 0 for
    /// a node without GPUs).
    pub fn mean_gpu_util_permille(&self) -> u16 {
        let gpus = self.gpus;
        if gpus.is_empty() {
            return 0;
        }
        (gpus.iter().map(|g| u32::from(g.util_permille.min(1000))).sum::<u32>() / gpus.len() as u32) as u16
    }

    /// The node's GPUs, by index.
    #[inline]
    pub fn gpus(&self) -> &'a [Gpu] {
        self.gpus
    }
}

impl std::ops::Deref for Node<'_> {
    type Target = NodeState;
    #[inline]
    fn deref(&self) -> &NodeState {
        self.state
    }
}

/// Pods of one workload on a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadCount {
    /// Workload name.
    pub workload: String,
    /// Number of its pods on the node.
    pub pods: u32,
}

/// A GPU as the host describes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRecord {
    /// Unallocated share, 0..=1000.
    pub free_milli: u32,
    /// Device memory in MiB.
    pub memory_mib: u32,
    /// Health.
    pub health: GpuHealth,
    /// Utilisation, tenths of a percent.
    pub util_permille: u16,
    /// Where it sits in the node's interconnect (since contract 0.2.0).
    #[serde(default)]
    pub link: GpuLink,
}

/// A node as the host describes it (the WIT `node` record).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Host-assigned id.
    pub id: NodeId,
    /// Node name.
    pub name: String,
    /// Topology zone.
    pub zone: String,
    /// GPU model ("" when CPU-only).
    pub gpu_model: String,
    /// Allocatable capacity.
    pub capacity: Resources,
    /// Free capacity.
    pub free: Resources,
    /// GPUs by index.
    pub gpus: Vec<GpuRecord>,
    /// CPU utilisation, tenths of a percent.
    pub cpu_util_permille: u16,
    /// Memory utilisation, tenths of a percent.
    pub memory_util_permille: u16,
    /// Whether the node accepts pods.
    pub ready: bool,
    /// Pods per workload on this node.
    pub workloads: Vec<WorkloadCount>,
    /// Bound GPU pods per request class (`share-gpu`, `N-gpu`), with the
    /// class in the `workload` field.
    pub gpu_classes: Vec<WorkloadCount>,
    /// Device memory in use per GPU, MiB (empty if unknown). Not in the
    /// WIT record: inside a component the SDK fills it from
    /// `host.gpu-memory-used` for plugins that set [`crate::Scorer::GPU_MEMORY`].
    #[serde(default)]
    pub gpu_memory_used_mib: Vec<u32>,
}

/// A change to the node mirror.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeDelta {
    /// Insert or replace a node.
    Upsert(NodeRecord),
    /// Remove a node.
    Remove(NodeId),
}

/// How far the host may reuse a scorer's answers ([`crate::Scorer::REUSE`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reuse {
    /// Ask about every candidate on every call.
    #[default]
    Fresh,
    /// Answers for a node depend on the pod (but its name and namespace)
    /// and that node alone: reuse them while the node does not change.
    Node,
    /// As [`Reuse::Node`], and not on the pod's workload either.
    NodeShape,
    /// Within one call, answers depend on a node only through its zone
    /// (anything else may change between calls): the host asks about one
    /// candidate per zone and copies its answer to the zone's others
    /// (since contract 0.2.2).
    Zone,
}

/// Placement tier of a pod.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Tier {
    /// Constraints must hold exactly.
    Hard,
    /// Online service.
    #[default]
    Soft,
    /// Batch, preemptible.
    Opportunistic,
}

/// A pod to place.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    /// Pod name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Owning workload ("" if none).
    pub workload: String,
    /// CPU and memory requests.
    pub requests: Resources,
    /// GPUs requested.
    pub gpu_count: u32,
    /// Share of each requested GPU (1000 = whole GPUs).
    pub gpu_milli: u32,
    /// Allowed GPU models; empty means any.
    pub allowed_models: Vec<String>,
    /// Priority (higher is more important).
    pub priority: i32,
    /// Placement tier.
    pub tier: Tier,
}

impl Pod {
    /// Total GPU demand in milli (`gpu_count × gpu_milli`).
    #[inline]
    pub fn gpu_demand_milli(&self) -> u32 {
        self.gpu_count * self.gpu_milli
    }

    /// Whether this pod shares a single GPU with others.
    #[inline]
    pub fn is_gpu_sharing(&self) -> bool {
        self.gpu_count > 0 && self.gpu_milli < 1000
    }
}

/// Score of one candidate node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Score {
    /// Higher is better.
    pub value: i64,
    /// Preferred GPU index on the node for a GPU-sharing pod.
    pub gpu: Option<u8>,
}

impl Score {
    /// A score with no GPU preference.
    pub const fn new(value: i64) -> Self {
        Self { value, gpu: None }
    }

    /// A score that also names the GPU the pod should use.
    pub const fn with_gpu(value: i64, gpu: u8) -> Self {
        Self { value, gpu: Some(gpu) }
    }
}

impl From<i64> for Score {
    fn from(value: i64) -> Self {
        Self::new(value)
    }
}

/// Telemetry of one node for one interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Mean GPU utilisation, tenths of a percent.
    pub gpu_util_permille: u16,
    /// Free memory, tenths of a percent.
    pub memory_free_permille: u16,
    /// CPU utilisation, tenths of a percent.
    pub cpu_util_permille: u16,
    /// Stranded (unusable) GPU share, milli.
    pub stranded_gpu_milli: u32,
}

/// One interval of telemetry for many nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// Interval sequence number.
    pub seq: u64,
    /// `(node, sample)` pairs sorted by node id.
    pub samples: Vec<(NodeId, Sample)>,
}

impl Frame {
    /// The sample of `node` in this frame, if present.
    pub fn get(&self, node: NodeId) -> Option<&Sample> {
        self.samples.binary_search_by_key(&node, |(n, _)| *n).ok().map(|i| &self.samples[i].1)
    }
}

/// Kind of anomaly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FindingKind {
    /// Sustained high utilisation.
    Overload,
    /// Little free memory.
    MemoryPressure,
    /// Stranded GPU share.
    Fragmentation,
    /// Candidate for consolidation.
    LowLoad,
    /// Anything else, with a stable code.
    Other(String),
}

/// An anomaly on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Node at fault.
    pub node: NodeId,
    /// What is wrong.
    pub kind: FindingKind,
    /// Severity, 0..=1000.
    pub severity: u16,
    /// Human-readable detail.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_state_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Gpu>(), 6);
        assert!(std::mem::size_of::<NodeState>() <= 64, "{}", std::mem::size_of::<NodeState>());
        assert_eq!(std::mem::size_of::<Option<NodeState>>(), std::mem::size_of::<NodeState>());
    }
}
