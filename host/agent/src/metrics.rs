//! The agent's Prometheus metrics (OpenMetrics text), prefixed
//! `tessera_agent_`, set from each [`AgentSample`].
//!
//! Per GPU, labelled `node`, `gpu` (index), `uuid`, `model`:
//! `gpu_utilization_ratio`, `gpu_memory_used_bytes`, `gpu_memory_total_bytes`,
//! `gpu_temperature_celsius`, `gpu_power_watts`, `gpu_ecc_errors_total`
//! (`type` uncorrected or corrected; NVML's volatile counters),
//! `gpu_xid_events_total` (`xid`; since the agent started), `gpu_health`
//! (`state` healthy, degraded or failed: 1 for the current one, 0 for the
//! others). Per node, labelled `node`: `node_cpu_utilization_ratio`,
//! `node_cpu_cores`, `node_memory_utilization_ratio`, `node_memory_used_bytes`,
//! `node_memory_total_bytes`, `nvml_available` (0 or 1).
//!
//! Only series that exist are written: a measurement a GPU does not support
//! has no series, and a GPU that is gone takes its series with it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::health::XidCounts;
use crate::sample::{AgentSample, GpuSample, Health};

/// The content type of `GET /metrics`.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabels {
    node: String,
    gpu: String,
    uuid: String,
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EccLabels {
    #[prometheus(flatten)]
    gpu: GpuLabels,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct XidLabels {
    #[prometheus(flatten)]
    gpu: GpuLabels,
    xid: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HealthLabels {
    #[prometheus(flatten)]
    gpu: GpuLabels,
    state: &'static str,
}

type Ratio = Gauge<f64, AtomicU64>;

/// The registry and its families.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    gpu_util: Family<GpuLabels, Ratio>,
    gpu_mem_used: Family<GpuLabels, Gauge>,
    gpu_mem_total: Family<GpuLabels, Gauge>,
    gpu_temp: Family<GpuLabels, Gauge>,
    gpu_power: Family<GpuLabels, Ratio>,
    gpu_ecc: Family<EccLabels, Counter>,
    gpu_xid: Family<XidLabels, Counter>,
    gpu_health: Family<HealthLabels, Gauge>,
    cpu_util: Family<NodeLabels, Ratio>,
    cpu_cores: Family<NodeLabels, Gauge>,
    mem_util: Family<NodeLabels, Ratio>,
    mem_used: Family<NodeLabels, Gauge>,
    mem_total: Family<NodeLabels, Gauge>,
    nvml_available: Family<NodeLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn mib_to_bytes(mib: u64) -> i64 {
    i64::try_from(mib << 20).unwrap_or(i64::MAX)
}

impl Metrics {
    /// Registers every family (empty until the first sample).
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tessera_agent");
        let mut m = Self {
            registry: Registry::default(),
            gpu_util: Family::default(),
            gpu_mem_used: Family::default(),
            gpu_mem_total: Family::default(),
            gpu_temp: Family::default(),
            gpu_power: Family::default(),
            gpu_ecc: Family::default(),
            gpu_xid: Family::default(),
            gpu_health: Family::default(),
            cpu_util: Family::default(),
            cpu_cores: Family::default(),
            mem_util: Family::default(),
            mem_used: Family::default(),
            mem_total: Family::default(),
            nvml_available: Family::default(),
        };
        let r = &mut registry;
        r.register("gpu_utilization_ratio", "Share of time a kernel ran on the GPU", m.gpu_util.clone());
        r.register("gpu_memory_used_bytes", "Device memory in use", m.gpu_mem_used.clone());
        r.register("gpu_memory_total_bytes", "Device memory", m.gpu_mem_total.clone());
        r.register("gpu_temperature_celsius", "GPU die temperature", m.gpu_temp.clone());
        r.register("gpu_power_watts", "GPU power draw", m.gpu_power.clone());
        r.register("gpu_ecc_errors", "ECC errors since the driver loaded (volatile)", m.gpu_ecc.clone());
        r.register("gpu_xid_events", "XID events since the agent started", m.gpu_xid.clone());
        r.register("gpu_health", "GPU health: 1 for the current state", m.gpu_health.clone());
        r.register("node_cpu_utilization_ratio", "Busy share of all CPUs", m.cpu_util.clone());
        r.register("node_cpu_cores", "Logical CPUs", m.cpu_cores.clone());
        r.register("node_memory_utilization_ratio", "Memory in use over total", m.mem_util.clone());
        r.register("node_memory_used_bytes", "Memory in use (total - available)", m.mem_used.clone());
        r.register("node_memory_total_bytes", "Memory", m.mem_total.clone());
        r.register("nvml_available", "1 when NVML answered on this node", m.nvml_available.clone());
        m.registry = registry;
        m
    }

    /// Sets every series from a sample and the XID counts so far; series of
    /// GPUs no longer in the sample are dropped.
    pub fn observe(&self, s: &AgentSample, xids: &XidCounts) {
        let node = NodeLabels { node: s.node.clone() };
        self.cpu_util.get_or_create(&node).set(f64::from(s.cpu.util_permille) / 1000.0);
        self.cpu_cores.get_or_create(&node).set(i64::from(s.cpu.cores));
        self.mem_util.get_or_create(&node).set(f64::from(s.memory.util_permille) / 1000.0);
        self.mem_used.get_or_create(&node).set(mib_to_bytes(s.memory.used_mib));
        self.mem_total.get_or_create(&node).set(mib_to_bytes(s.memory.total_mib));
        self.nvml_available.get_or_create(&node).set(i64::from(s.nvml.available));
        self.gpu_util.clear();
        self.gpu_mem_used.clear();
        self.gpu_mem_total.clear();
        self.gpu_temp.clear();
        self.gpu_power.clear();
        self.gpu_ecc.clear();
        self.gpu_xid.clear();
        self.gpu_health.clear();
        for g in &s.gpus {
            self.observe_gpu(&s.node, g, xids);
        }
    }

    fn observe_gpu(&self, node: &str, g: &GpuSample, xids: &XidCounts) {
        let l = GpuLabels { node: node.into(), gpu: g.index.to_string(), uuid: g.uuid.clone(), model: g.name.clone() };
        if !g.lost {
            self.gpu_util.get_or_create(&l).set(f64::from(g.util_permille) / 1000.0);
            self.gpu_mem_used.get_or_create(&l).set(mib_to_bytes(g.memory_used_mib.into()));
            self.gpu_mem_total.get_or_create(&l).set(mib_to_bytes(g.memory_total_mib.into()));
        }
        if let Some(t) = g.temperature_c {
            self.gpu_temp.get_or_create(&l).set(i64::from(t));
        }
        if let Some(p) = g.power_w {
            self.gpu_power.get_or_create(&l).set(p);
        }
        for (kind, v) in [("uncorrected", g.ecc_uncorrected), ("corrected", g.ecc_corrected)] {
            if let Some(v) = v {
                self.gpu_ecc.get_or_create(&EccLabels { gpu: l.clone(), r#type: kind }).inc_by(v);
            }
        }
        for (xid, &n) in xids.get(&g.uuid).into_iter().flatten() {
            self.gpu_xid.get_or_create(&XidLabels { gpu: l.clone(), xid: xid.to_string() }).inc_by(n);
        }
        for h in Health::ALL {
            self.gpu_health
                .get_or_create(&HealthLabels { gpu: l.clone(), state: h.as_str() })
                .set(i64::from(h == g.health));
        }
    }

    /// The OpenMetrics text of every series.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{CpuSample, MemorySample, NvmlStatus};
    use std::collections::BTreeMap;

    fn gpu(index: u32, health: Health) -> GpuSample {
        GpuSample {
            index,
            uuid: format!("GPU-{index}"),
            name: "NVIDIA H100 80GB HBM3".into(),
            util_permille: 875,
            memory_total_mib: 81_559,
            memory_used_mib: 1024,
            temperature_c: Some(71),
            power_w: Some(512.5),
            ecc_uncorrected: Some(2),
            ecc_corrected: None,
            xid_events: vec![],
            health,
            health_reason: None,
            lost: false,
        }
    }

    fn sample(gpus: Vec<GpuSample>) -> AgentSample {
        AgentSample {
            node: "n1".into(),
            taken_at_unix_ms: 1,
            cpu: CpuSample { cores: 4, util_permille: 250 },
            memory: MemorySample { total_mib: 2048, used_mib: 1024, util_permille: 500 },
            gpus,
            nvml: NvmlStatus { available: true, ..NvmlStatus::default() },
            gpu_topology: None,
        }
    }

    #[test]
    fn series_with_values() {
        let m = Metrics::new();
        let xids: XidCounts = BTreeMap::from([("GPU-1".to_string(), BTreeMap::from([(79, 1), (13, 2)]))]);
        m.observe(&sample(vec![gpu(0, Health::Healthy), gpu(1, Health::Failed)]), &xids);
        let t = m.encode();
        let l0 = r#"node="n1",gpu="0",uuid="GPU-0",model="NVIDIA H100 80GB HBM3""#;
        let l1 = r#"node="n1",gpu="1",uuid="GPU-1",model="NVIDIA H100 80GB HBM3""#;
        for line in [
            format!("tessera_agent_gpu_utilization_ratio{{{l0}}} 0.875"),
            format!("tessera_agent_gpu_memory_used_bytes{{{l0}}} 1073741824"),
            format!("tessera_agent_gpu_memory_total_bytes{{{l0}}} 85520809984"),
            format!("tessera_agent_gpu_temperature_celsius{{{l0}}} 71"),
            format!("tessera_agent_gpu_power_watts{{{l0}}} 512.5"),
            format!("tessera_agent_gpu_ecc_errors_total{{{l0},type=\"uncorrected\"}} 2"),
            format!("tessera_agent_gpu_xid_events_total{{{l1},xid=\"79\"}} 1"),
            format!("tessera_agent_gpu_xid_events_total{{{l1},xid=\"13\"}} 2"),
            format!("tessera_agent_gpu_health{{{l0},state=\"healthy\"}} 1"),
            format!("tessera_agent_gpu_health{{{l1},state=\"healthy\"}} 0"),
            format!("tessera_agent_gpu_health{{{l1},state=\"failed\"}} 1"),
            r#"tessera_agent_node_cpu_utilization_ratio{node="n1"} 0.25"#.into(),
            r#"tessera_agent_node_cpu_cores{node="n1"} 4"#.into(),
            r#"tessera_agent_node_memory_used_bytes{node="n1"} 1073741824"#.into(),
            r#"tessera_agent_nvml_available{node="n1"} 1"#.into(),
            "# TYPE tessera_agent_gpu_ecc_errors counter".into(),
        ] {
            assert!(t.lines().any(|x| x == line), "missing {line}\n{t}");
        }
        assert!(!t.contains("type=\"corrected\""), "unsupported: no series\n{t}");
        assert!(t.ends_with("# EOF\n"));
    }

    #[test]
    fn gone_and_lost_gpus_take_their_series() {
        let m = Metrics::new();
        m.observe(&sample(vec![gpu(0, Health::Healthy), gpu(1, Health::Healthy)]), &XidCounts::new());
        m.observe(&sample(vec![gpu(0, Health::Healthy)]), &XidCounts::new());
        let t = m.encode();
        assert!(t.contains(r#"gpu="0""#) && !t.contains(r#"gpu="1""#), "{t}");
        let mut lost = gpu(0, Health::Failed);
        (lost.lost, lost.temperature_c, lost.power_w, lost.ecc_uncorrected) = (true, None, None, None);
        m.observe(&sample(vec![lost]), &XidCounts::new());
        let t = m.encode();
        assert!(!t.contains("tessera_agent_gpu_utilization_ratio{"), "{t}");
        assert!(t.contains(r#"state="failed"} 1"#), "{t}");
    }
}
