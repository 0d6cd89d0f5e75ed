//! {{name}}: a Tessera detection policy, in Rust.
//!
//! Reports a node whose GPUs have sat idle (utilisation at or below
//! `idle_permille`) for `intervals` consecutive telemetry intervals: a
//! candidate for consolidation.

use serde::Deserialize;
use tessera_sdk::{Detector, Finding, FindingKind, Window};

/// Every field the policy document may set.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// GPU utilisation at or below this is idle, tenths of a percent.
    pub idle_permille: u16,
    /// Consecutive idle intervals before a finding.
    pub intervals: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self { idle_permille: 50, intervals: 3 }
    }
}

/// The plugin.
pub struct Policy {
    cfg: Config,
}

impl Detector for Policy {
    type Config = Config;
    const NAME: &'static str = "{{name}}";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "GPUs idle for several intervals";

    fn new(cfg: Config) -> Result<Self, String> {
        if cfg.intervals == 0 {
            return Err("intervals: at least 1".into());
        }
        Ok(Self { cfg })
    }

    fn window(&self) -> usize {
        self.cfg.intervals
    }

    fn detect(&self, window: &Window) -> Vec<Finding> {
        let (idle, n) = (self.cfg.idle_permille, self.cfg.intervals);
        let Some(latest) = window.latest() else { return Vec::new() };
        latest
            .samples
            .iter()
            .filter(|&&(node, _)| window.consecutive(node, |x| x.gpu_util_permille <= idle) >= n)
            .map(|&(node, s)| Finding {
                node,
                kind: FindingKind::LowLoad,
                severity: 500,
                message: format!("GPU utilisation at or below {idle}‰ for {n} intervals (now {}‰)", s.gpu_util_permille),
            })
            .collect()
    }
}

tessera_sdk::export_detector!(Policy);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::{DetectorHarness, Frame, Sample};

    fn frame(seq: u64, utils: &[u16]) -> Frame {
        Frame {
            seq,
            samples: utils
                .iter()
                .enumerate()
                .map(|(i, &u)| (i as u32, Sample { gpu_util_permille: u, memory_free_permille: 500, ..Sample::default() }))
                .collect(),
        }
    }

    #[test]
    fn idle_for_three_intervals() {
        let mut h = DetectorHarness::<Policy>::new("").unwrap();
        for (seq, u) in [[0, 900], [10, 0], [20, 0]].iter().enumerate() {
            h.observe(frame(seq as u64, u));
        }
        let found: Vec<_> = h.detect().into_iter().map(|f| (f.node, f.kind)).collect();
        assert_eq!(found, [(0, FindingKind::LowLoad)]);
    }

    #[test]
    fn refuses_unknown_configuration() {
        assert!(DetectorHarness::<Policy>::new(r#"{"idle": 1}"#).err().unwrap().contains("idle"));
    }
}
