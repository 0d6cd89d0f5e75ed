//! `binpack`: pack pods onto the most-allocated nodes (kube-scheduler's
//! `MostAllocated`, extended with GPU share), so that whole nodes and whole
//! GPUs stay free for large pods.
//!
//! Score = weighted mean over CPU, memory and GPU of the node's utilisation
//! *after* placing the pod, in thousandths. Resources the node lacks are
//! left out of the mean. It has no opinion on which GPU of the node a
//! sharing pod should use: the host's bind picks the best fit.

use serde::Deserialize;
use tessera_sdk::{Node, Pod, Score, Scorer};

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
    /// CPU, memory and GPU weights, and 0 for the fourth (padding) lane.
    weights: [f32; 4],
    /// `1 / Σ weights` of the resources present, by presence bit mask
    /// (bit 0 CPU, 1 memory, 2 GPU); 0 when that sum is 0.
    inv_weight_sum: [f32; 8],
    /// Σ weights.
    weight_sum: f32,
    /// The current pod's requests times the weights (and a 0 lane).
    weighted_request: [f32; 4],
}

impl Scorer for BinPack {
    type Config = Config;
    const NAME: &'static str = "binpack";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "prefer the most allocated nodes (CPU, memory, GPU share)";
    const REUSE: tessera_sdk::Reuse = tessera_sdk::Reuse::NodeShape;

    fn new(cfg: Config) -> Result<Self, String> {
        if cfg.cpu_weight + cfg.memory_weight + cfg.gpu_weight == 0 {
            return Err("binpack: at least one weight must be positive".into());
        }
        let weights = [cfg.cpu_weight as f32, cfg.memory_weight as f32, cfg.gpu_weight as f32, 0.0];
        let mut inv_weight_sum = [0.0; 8];
        for (mask, slot) in inv_weight_sum.iter_mut().enumerate() {
            let sum: f32 = (0..3).filter(|r| mask & (1 << r) != 0).map(|r| weights[r]).sum();
            *slot = if sum > 0.0 { 1.0 / sum } else { 0.0 };
        }
        Ok(Self { weights, inv_weight_sum, weight_sum: weights.iter().sum(), weighted_request: [0.0; 4] })
    }

    fn prepare(&mut self, pod: &Pod, _nodes: &tessera_sdk::NodeTable) {
        let request = [pod.requests.cpu_milli as f32, pod.requests.memory_mib as f32, pod.gpu_demand_milli() as f32];
        for ((wr, w), req) in self.weighted_request.iter_mut().zip(self.weights).zip(request) {
            *wr = w * req;
        }
    }

    #[inline]
    fn score(&self, _pod: &Pod, node: &Node<'_>) -> Score {
        // Σ w·(used after placement)/capacity
        //   = Σ w·(1 − free/capacity + request/capacity)
        //   = Σw − Σ w·free_share + Σ (w·request)·inv_capacity,
        // from fractions the node carries and products computed once per
        // pod: a handful of multiply-adds, no division, no branch. A
        // resource the node lacks has free share 1 and reciprocal 0, so it
        // adds 0; 1/Σweights is looked up by which resources the node has.
        // This runs for every candidate of every pod, in Wasm as natively.
        let (inv, free) = (node.inv_capacity(), node.free_share());
        let (w, wr) = (&self.weights, &self.weighted_request);
        // Three lanes, not four: fewer live values in the loop keep
        // Cranelift from spilling them to the stack on every iteration.
        let num = self.weight_sum
            + (wr[0] * inv[0] - w[0] * free[0])
            + (wr[1] * inv[1] - w[1] * free[1])
            + (wr[2] * inv[2] - w[2] * free[2]);
        let x = 1000.0 * num * self.inv_weight_sum[usize::from(node.resource_mask() & 7)];
        Score::new(round_small(x))
    }
}

/// Rounds `x` (finite, expected in 0..=1000) to the nearest integer, ties
/// to even, clamped to 0..=1000, with no float compare or conversion: adding
/// 2^23 puts the integer in the low mantissa bits of a float whose exponent
/// is known. (A saturating float-to-int cast and float selects compile to
/// branches in Wasm, which split the scoring loop and make Cranelift spill.)
#[inline(always)]
fn round_small(x: f32) -> i64 {
    debug_assert!(x.is_finite());
    const TWO_POW_23_BITS: i32 = 0x4B00_0000;
    let bits = (x + 8_388_608.0).to_bits() as i32;
    i64::from((bits - TWO_POW_23_BITS).clamp(0, 1000))
}

#[cfg(test)]
mod round_tests {
    #[test]
    fn rounds_and_clamps() {
        assert_eq!(super::round_small(187.5), 188);
        assert_eq!(super::round_small(186.5), 186, "ties to even");
        assert_eq!(super::round_small(599.99997), 600);
        assert_eq!(super::round_small(-0.001), 0);
        assert_eq!(super::round_small(1000.4), 1000);
        assert_eq!(super::round_small(5000.0), 1000);
        assert_eq!(super::round_small(-3000.0), 0);
    }
}

tessera_sdk::export_scorer!(BinPack);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::{GpuRecord, NodeDelta, NodeRecord, Resources, ScorerHarness};

    fn node(id: u32, free_cpu: u32, gpu_free: &[u32]) -> NodeRecord {
        NodeRecord {
            id,
            capacity: Resources { cpu_milli: 32_000, memory_mib: 0 },
            free: Resources { cpu_milli: free_cpu, memory_mib: 0 },
            gpus: gpu_free.iter().map(|&f| GpuRecord { free_milli: f, ..GpuRecord::default() }).collect(),
            ready: true,
            ..NodeRecord::default()
        }
    }

    #[test]
    fn fuller_node_scores_higher() {
        let mut h = ScorerHarness::<BinPack>::new(r#"{"cpu_weight":1,"memory_weight":0,"gpu_weight":1}"#).unwrap();
        h.apply([
            NodeDelta::Upsert(node(0, 32_000, &[1000, 1000])),
            NodeDelta::Upsert(node(1, 16_000, &[1000, 600, 300])),
        ])
        .unwrap();
        let pod = Pod {
            requests: Resources { cpu_milli: 8_000, memory_mib: 0 },
            gpu_count: 1,
            gpu_milli: 250,
            ..Pod::default()
        };
        let (mut v, mut hints) = (Vec::new(), Vec::new());
        h.score(&pod, &[0, 1], &mut v, &mut hints).unwrap();
        // node 0: cpu 8/32 = 250, gpu 250/2000 = 125 -> 187.5, rounded
        // node 1: cpu 24/32 = 750, gpu (3000-1900+250)/3000 = 450 -> 600
        assert_eq!(v, [188, 600]);
        assert!(hints.is_empty(), "binpack leaves the GPU choice to the host");
    }

    #[test]
    fn failed_gpus_do_not_count_as_free() {
        let mut h = ScorerHarness::<BinPack>::new(r#"{"cpu_weight":0,"memory_weight":0,"gpu_weight":1}"#).unwrap();
        let mut n = node(0, 32_000, &[0, 1000]);
        n.gpus[1].health = tessera_sdk::GpuHealth::Failed;
        h.apply([NodeDelta::Upsert(n), NodeDelta::Upsert(node(1, 32_000, &[0, 1000]))]).unwrap();
        let pod = Pod { gpu_count: 1, gpu_milli: 0, ..Pod::default() };
        let (mut v, mut hints) = (Vec::new(), Vec::new());
        h.score(&pod, &[0, 1], &mut v, &mut hints).unwrap();
        assert_eq!(v, [1000, 500]);
    }

    #[test]
    fn rejects_all_zero_weights_and_unknown_fields() {
        assert!(ScorerHarness::<BinPack>::new(r#"{"cpu_weight":0,"memory_weight":0,"gpu_weight":0}"#).is_err());
        let err = ScorerHarness::<BinPack>::new(r#"{"cpu_wieght":1}"#).err().unwrap();
        assert!(err.contains("cpu_wieght"), "{err}");
    }
}
