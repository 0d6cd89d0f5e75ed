//! {{name}}: a Tessera placement policy (filter and score), in Rust.
//!
//! `filter` keeps the pod off nodes whose CPU is busier than the configured
//! limit; `score` prefers the node with the most free GPU share, then the
//! most free CPU. Units are the contract's: CPU in millicores, GPU share in
//! thousandths of a GPU, utilisation in tenths of a percent.

use serde::Deserialize;
use tessera_sdk::{Node, Pod, Score, Scorer};

/// Every field the policy document may set; anything else is refused at
/// load, naming the field.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Nodes busier than this (tenths of a percent of CPU) are filtered out.
    pub max_cpu_util_permille: u16,
}

impl Default for Config {
    fn default() -> Self {
        Self { max_cpu_util_permille: 900 }
    }
}

/// The plugin.
pub struct Policy {
    cfg: Config,
}

impl Scorer for Policy {
    type Config = Config;
    const NAME: &'static str = "{{name}}";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "most free GPU share, then most free CPU; skips busy nodes";
    const FILTER_REASONS: &'static [&'static str] = &["CPU-BUSY"];

    fn new(cfg: Config) -> Result<Self, String> {
        if cfg.max_cpu_util_permille > 1000 {
            return Err("max_cpu_util_permille: tenths of a percent, 0..=1000".into());
        }
        Ok(Self { cfg })
    }

    fn filter(&self, _pod: &Pod, node: &Node<'_>) -> Result<(), u8> {
        if node.cpu_util_permille > self.cfg.max_cpu_util_permille { Err(0) } else { Ok(()) }
    }

    fn score(&self, _pod: &Pod, node: &Node<'_>) -> Score {
        // Higher is better; the host normalises scores across candidates.
        Score::new(i64::from(node.free_gpu_milli()) * 1_000_000 + i64::from(node.free.cpu_milli))
    }
}

tessera_sdk::export_scorer!(Policy);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::{GpuRecord, NodeDelta, NodeRecord, Resources, ScorerHarness};

    fn node(id: u32, free_cpu: u32, gpu_free: &[u32], cpu_util: u16) -> NodeDelta {
        NodeDelta::Upsert(NodeRecord {
            id,
            capacity: Resources { cpu_milli: 32_000, memory_mib: 131_072 },
            free: Resources { cpu_milli: free_cpu, memory_mib: 65_536 },
            gpus: gpu_free.iter().map(|&f| GpuRecord { free_milli: f, ..GpuRecord::default() }).collect(),
            cpu_util_permille: cpu_util,
            ready: true,
            ..NodeRecord::default()
        })
    }

    fn harness() -> ScorerHarness<Policy> {
        let mut h = ScorerHarness::<Policy>::new(r#"{"max_cpu_util_permille": 800}"#).unwrap();
        h.apply([node(0, 8_000, &[1000, 0], 0), node(1, 4_000, &[1000, 1000], 0), node(2, 30_000, &[1000; 2], 950)])
            .unwrap();
        h
    }

    fn pod() -> Pod {
        Pod { requests: Resources { cpu_milli: 1_000, memory_mib: 1_024 }, gpu_count: 1, gpu_milli: 1000, ..Pod::default() }
    }

    #[test]
    fn prefers_free_gpus() {
        let (mut values, mut hints) = (Vec::new(), Vec::new());
        harness().score(&pod(), &[0, 1], &mut values, &mut hints).unwrap();
        assert!(values[1] > values[0], "{values:?}");
    }

    #[test]
    fn filters_busy_nodes() {
        let mut out = Vec::new();
        harness().filter(&pod(), &[0, 2], &mut out).unwrap();
        assert_eq!(out, [0, 1], "1 = FILTER_REASONS[0]");
    }

    #[test]
    fn refuses_unknown_configuration() {
        let e = ScorerHarness::<Policy>::new(r#"{"max_cpu": 1}"#).err().unwrap();
        assert!(e.contains("max_cpu"), "{e}");
    }
}
