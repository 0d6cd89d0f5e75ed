//! `binpack`: pack pods onto the most-allocated nodes (kube-scheduler's
//! `MostAllocated`, extended with GPU share), so that whole nodes and whole
//! GPUs stay free for large pods.
//!
//! Score = weighted mean over CPU, memory and GPU of the node's utilisation
//! *after* placing the pod, in thousandths. Resources the node lacks are
//! left out of the mean. For GPU-sharing pods the best-fit GPU (least free
//! share that still fits) is suggested to the host.

use serde::Deserialize;
use tessera_sdk::{GpuHealth, Node, Pod, Score, Scorer};

/// Weights of each resource in the mean.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Weight of CPU utilisation.
    pub cpu_weight: u32,
    /// Weight of memory utilisation.
    pub memory_weight: u32,
    /// Weight of GPU utilisation.
    pub gpu_weight: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self { cpu_weight: 1, memory_weight: 1, gpu_weight: 3 }
    }
}

/// The plugin.
#[derive(Debug, Clone)]
pub struct BinPack {
    cfg: Config,
}

#[inline]
fn utilisation_after(capacity: u64, free: u64, request: u64) -> u64 {
    let used = capacity.saturating_sub(free) + request;
    used.min(capacity) * 1000 / capacity
}

impl Scorer for BinPack {
    type Config = Config;
    const NAME: &'static str = "binpack";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "prefer the most allocated nodes (CPU, memory, GPU share)";

    fn new(cfg: Config) -> Result<Self, String> {
        if cfg.cpu_weight + cfg.memory_weight + cfg.gpu_weight == 0 {
            return Err("binpack: at least one weight must be positive".into());
        }
        Ok(Self { cfg })
    }

    #[inline]
    fn score(&self, pod: &Pod, node: &Node) -> Score {
        let c = &self.cfg;
        let mut sum = 0u64;
        let mut weights = 0u64;
        if node.capacity.cpu_milli > 0 {
            sum += c.cpu_weight as u64
                * utilisation_after(node.capacity.cpu_milli, node.free.cpu_milli, pod.requests.cpu_milli);
            weights += c.cpu_weight as u64;
        }
        if node.capacity.memory_mib > 0 {
            sum += c.memory_weight as u64
                * utilisation_after(node.capacity.memory_mib, node.free.memory_mib, pod.requests.memory_mib);
            weights += c.memory_weight as u64;
        }
        if !node.gpus.is_empty() {
            let cap = node.gpu_capacity_milli() as u64;
            sum += c.gpu_weight as u64
                * utilisation_after(cap, node.free_gpu_milli() as u64, pod.gpu_demand_milli() as u64);
            weights += c.gpu_weight as u64;
        }
        let value = if weights == 0 { 0 } else { (sum / weights) as i64 };
        if pod.is_gpu_sharing() {
            let best = node
                .gpus
                .iter()
                .filter(|g| g.health != GpuHealth::Failed && g.free_milli >= pod.gpu_milli)
                .min_by_key(|g| (g.free_milli, g.index));
            if let Some(g) = best {
                return Score::with_gpu(value, g.index);
            }
        }
        Score::new(value)
    }
}

tessera_sdk::export_scorer!(BinPack);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::{Gpu, NodeDelta, Resources, ScorerHarness};

    fn node(id: u32, free_cpu: u64, gpu_free: &[u32]) -> Node {
        Node {
            id,
            capacity: Resources { cpu_milli: 32_000, memory_mib: 0 },
            free: Resources { cpu_milli: free_cpu, memory_mib: 0 },
            gpus: gpu_free
                .iter()
                .enumerate()
                .map(|(i, &f)| Gpu { index: i as u8, free_milli: f, ..Gpu::default() })
                .collect(),
            ready: true,
            ..Node::default()
        }
    }

    #[test]
    fn fuller_node_scores_higher_and_best_fit_gpu_is_hinted() {
        let mut h = ScorerHarness::<BinPack>::new(r#"{"cpu_weight":1,"memory_weight":0,"gpu_weight":1}"#).unwrap();
        h.apply([
            NodeDelta::Upsert(node(0, 32_000, &[1000, 1000])),
            NodeDelta::Upsert(node(1, 16_000, &[1000, 600, 300])),
        ]);
        let pod = Pod {
            requests: Resources { cpu_milli: 8_000, memory_mib: 0 },
            gpu_count: 1,
            gpu_milli: 250,
            ..Pod::default()
        };
        let (mut v, mut hints) = (Vec::new(), Vec::new());
        h.score(&pod, &[0, 1], &mut v, &mut hints).unwrap();
        // node 0: cpu 8/32 = 250, gpu 250/2000 = 125 -> 187
        // node 1: cpu 24/32 = 750, gpu (3000-1900+250)/3000 = 450 -> 600
        assert_eq!(v, [187, 600]);
        assert_eq!(hints, [0, 2], "best fit: the GPU with least free share that fits");
    }

    #[test]
    fn rejects_all_zero_weights_and_unknown_fields() {
        assert!(ScorerHarness::<BinPack>::new(r#"{"cpu_weight":0,"memory_weight":0,"gpu_weight":0}"#).is_err());
        let err = ScorerHarness::<BinPack>::new(r#"{"cpu_wieght":1}"#).err().unwrap();
        assert!(err.contains("cpu_wieght"), "{err}");
    }
}
