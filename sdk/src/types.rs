//! Plain Rust mirrors of the WIT types of `tessera:policy@0.1.0`.
//!
//! These are what plugin code sees, both natively and inside the component.

use serde::{Deserialize, Serialize};

/// Dense node identifier assigned by the host.
pub type NodeId = u32;

/// CPU and memory quantities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// CPU in millicores.
    pub cpu_milli: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
}

/// Health of one GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum GpuHealth {
    /// Fully usable.
    #[default]
    Healthy,
    /// Usable but slower or hotter than its peers.
    Degraded,
    /// Unusable (XID/ECC failure).
    Failed,
}

/// One physical GPU of a node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// Index on the node.
    pub index: u8,
    /// Unallocated share, 0..=1000.
    pub free_milli: u32,
    /// Device memory in MiB.
    pub memory_mib: u32,
    /// Health from telemetry.
    pub health: GpuHealth,
    /// Recent utilisation in tenths of a percent.
    pub util_permille: u16,
}

/// Pods of one workload on a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadCount {
    /// Workload name.
    pub workload: String,
    /// Number of its pods on the node.
    pub pods: u32,
}

/// A node as mirrored inside a plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Host-assigned id.
    pub id: NodeId,
    /// Node name.
    pub name: String,
    /// Topology zone.
    pub zone: String,
    /// GPU model of the node ("" when CPU-only).
    pub gpu_model: String,
    /// Allocatable capacity.
    pub capacity: Resources,
    /// Capacity not yet requested by bound pods.
    pub free: Resources,
    /// The node's GPUs.
    pub gpus: Vec<Gpu>,
    /// CPU utilisation, tenths of a percent.
    pub cpu_util_permille: u16,
    /// Memory utilisation, tenths of a percent.
    pub memory_util_permille: u16,
    /// Whether the node accepts pods.
    pub ready: bool,
    /// Pods per workload on this node.
    pub workloads: Vec<WorkloadCount>,
}

impl Node {
    /// Total free GPU share over all healthy GPUs, in milli.
    pub fn free_gpu_milli(&self) -> u32 {
        self.gpus.iter().filter(|g| g.health != GpuHealth::Failed).map(|g| g.free_milli).sum()
    }

    /// GPU capacity in milli (1000 per GPU).
    pub fn gpu_capacity_milli(&self) -> u32 {
        self.gpus.len() as u32 * 1000
    }

    /// Number of healthy GPUs that are entirely free.
    pub fn whole_free_gpus(&self) -> u32 {
        self.gpus.iter().filter(|g| g.health != GpuHealth::Failed && g.free_milli == 1000).count() as u32
    }

    /// Pods of `workload` on this node.
    pub fn workload_pods(&self, workload: &str) -> u32 {
        self.workloads.iter().find(|w| w.workload == workload).map_or(0, |w| w.pods)
    }
}

/// A change to the node mirror.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeDelta {
    /// Insert or replace a node.
    Upsert(Node),
    /// Remove a node.
    Remove(NodeId),
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
    pub fn gpu_demand_milli(&self) -> u32 {
        self.gpu_count * self.gpu_milli
    }

    /// Whether this pod shares a single GPU with others.
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
