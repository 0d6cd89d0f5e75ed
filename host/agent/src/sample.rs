//! What the agent publishes: one [`AgentSample`] per interval, as JSON on
//! `GET /v1/sample`. Utilisation is in tenths of a percent (‰) like the rest
//! of Tessera ([`tessera_core::telemetry::NodeSample`]).

use serde::{Deserialize, Serialize};
use tessera_core::model::GpuHealth;
use tessera_core::telemetry::NodeSample;

/// One sample of a node: CPU, memory, its GPUs and whether NVML answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSample {
    /// The node's name (the DaemonSet's `NODE_NAME`, else the hostname).
    pub node: String,
    /// When the sample was taken, ms since the Unix epoch.
    pub taken_at_unix_ms: u64,
    /// CPU.
    pub cpu: CpuSample,
    /// Memory.
    pub memory: MemorySample,
    /// GPUs by index; empty without NVML.
    pub gpus: Vec<GpuSample>,
    /// Whether NVML is there, and why not.
    pub nvml: NvmlStatus,
    /// How the GPUs are connected, one `island/pcie/numa` per GPU
    /// (`tessera_core::topology::format`), when NVML could tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_topology: Option<String>,
}

/// CPU of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuSample {
    /// Logical CPUs (`cpuN` lines of /proc/stat).
    pub cores: u32,
    /// Busy time over the last interval, ‰ of all cores.
    pub util_permille: u16,
}

/// Memory of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySample {
    /// `MemTotal`, MiB.
    pub total_mib: u64,
    /// `MemTotal − MemAvailable`, MiB.
    pub used_mib: u64,
    /// `used ÷ total`, ‰.
    pub util_permille: u16,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// NVML index.
    pub index: u32,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Kernel time over NVML's last sample period, ‰ (0 when unsupported).
    pub util_permille: u16,
    /// Device memory, MiB.
    pub memory_total_mib: u32,
    /// Device memory in use, MiB.
    pub memory_used_mib: u32,
    /// Die temperature, °C (`None`: unsupported).
    pub temperature_c: Option<u32>,
    /// Power draw, W (`None`: unsupported).
    pub power_w: Option<f64>,
    /// Uncorrected ECC errors since the driver loaded (volatile counter).
    pub ecc_uncorrected: Option<u64>,
    /// Corrected ECC errors since the driver loaded (volatile counter).
    pub ecc_corrected: Option<u64>,
    /// The latest XID events the agent saw on this GPU (at most
    /// [`crate::health::XID_KEPT`], oldest first).
    pub xid_events: Vec<XidEvent>,
    /// Health by the rule of [`crate::health`].
    pub health: Health,
    /// Why the GPU is not healthy (`None` when it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_reason: Option<String>,
    /// NVML lost the GPU (fallen off the bus): the measurements are zero or
    /// absent and the GPU is failed.
    #[serde(default, skip_serializing_if = "is_false")]
    pub lost: bool,
}

/// An XID error NVML reported for a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidEvent {
    /// The XID code (e.g. 79: the GPU has fallen off the bus).
    pub xid: u64,
    /// When the agent saw it, ms since the Unix epoch.
    pub at_unix_ms: u64,
}

/// Health of a GPU, worst last.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// Nothing wrong.
    #[default]
    Healthy,
    /// Usable but hot, throttled, or collecting corrected ECC errors.
    Degraded,
    /// Unusable: uncorrected ECC errors, a critical XID, or lost.
    Failed,
}

impl Health {
    /// `healthy`, `degraded` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Degraded => "degraded",
            Self::Failed => "failed",
        }
    }

    /// Every state, healthy first.
    pub const ALL: [Health; 3] = [Self::Healthy, Self::Degraded, Self::Failed];
}

impl From<Health> for GpuHealth {
    fn from(h: Health) -> Self {
        match h {
            Health::Healthy => GpuHealth::Healthy,
            Health::Degraded => GpuHealth::Degraded,
            Health::Failed => GpuHealth::Failed,
        }
    }
}

/// Whether NVML answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmlStatus {
    /// NVML loaded and initialised.
    pub available: bool,
    /// The driver's version, when NVML told it.
    pub driver_version: Option<String>,
    /// Why NVML is unavailable, or why the last GPU sample failed.
    pub message: Option<String>,
}

impl AgentSample {
    /// The node's measured state as the scheduler's model takes it
    /// ([`NodeSample::apply`]): GPUs in index order.
    pub fn to_node_sample(&self) -> NodeSample {
        let mut gpus: Vec<&GpuSample> = self.gpus.iter().collect();
        gpus.sort_by_key(|g| g.index);
        NodeSample {
            cpu_util_permille: self.cpu.util_permille,
            memory_util_permille: self.memory.util_permille,
            gpu_util_permille: gpus.iter().map(|g| g.util_permille).collect(),
            gpu_memory_used_mib: gpus.iter().map(|g| g.memory_used_mib).collect(),
        }
    }

    /// Each GPU's health in the scheduler's terms, in index order (a failed
    /// GPU takes no new pods).
    pub fn gpu_health(&self) -> Vec<GpuHealth> {
        let mut gpus: Vec<(u32, Health)> = self.gpus.iter().map(|g| (g.index, g.health)).collect();
        gpus.sort_by_key(|&(i, _)| i);
        gpus.into_iter().map(|(_, h)| h.into()).collect()
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Tenths of a percent of `part ÷ whole`, clamped to 0..=1000 (0 when
/// `whole` is 0).
pub(crate) fn permille(part: u64, whole: u64) -> u16 {
    if whole == 0 {
        return 0;
    }
    let p = (u128::from(part) * 1000 + u128::from(whole) / 2) / u128::from(whole);
    u16::try_from(p.min(1000)).unwrap_or(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, util: u16, used: u32, health: Health) -> GpuSample {
        GpuSample {
            index,
            uuid: format!("GPU-{index}"),
            name: "NVIDIA H100 80GB HBM3".into(),
            util_permille: util,
            memory_total_mib: 81_559,
            memory_used_mib: used,
            temperature_c: Some(40),
            power_w: Some(100.0),
            ecc_uncorrected: Some(0),
            ecc_corrected: Some(0),
            xid_events: vec![],
            health,
            health_reason: None,
            lost: false,
        }
    }

    fn sample() -> AgentSample {
        AgentSample {
            node: "n1".into(),
            taken_at_unix_ms: 1,
            cpu: CpuSample { cores: 8, util_permille: 250 },
            memory: MemorySample { total_mib: 1000, used_mib: 500, util_permille: 500 },
            gpus: vec![gpu(1, 900, 2000, Health::Failed), gpu(0, 100, 1000, Health::Healthy)],
            nvml: NvmlStatus { available: true, driver_version: Some("550.90.07".into()), message: None },
            gpu_topology: None,
        }
    }

    #[test]
    fn node_sample_is_in_index_order() {
        let n = sample().to_node_sample();
        assert_eq!(n.cpu_util_permille, 250);
        assert_eq!(n.memory_util_permille, 500);
        assert_eq!(n.gpu_util_permille, vec![100, 900]);
        assert_eq!(n.gpu_memory_used_mib, vec![1000, 2000]);
        assert_eq!(sample().gpu_health(), vec![GpuHealth::Healthy, GpuHealth::Failed]);
    }

    #[test]
    fn json_shape() {
        let v = serde_json::to_value(sample()).unwrap();
        assert_eq!(v["gpus"][0]["health"], "failed");
        assert_eq!(v["nvml"]["driver_version"], "550.90.07");
        assert!(v["gpus"][0].get("health_reason").is_none());
        let back: AgentSample = serde_json::from_value(v).unwrap();
        assert_eq!(back, sample());
    }

    #[test]
    fn permille_rounds_and_clamps() {
        assert_eq!(permille(1, 3), 333);
        assert_eq!(permille(2, 3), 667);
        assert_eq!(permille(5, 0), 0);
        assert_eq!(permille(7, 5), 1000);
    }
}
