//! `rebalance`: a detector for the rescheduler's defragmentation and
//! consolidation strategies, over a sliding window of node telemetry.
//!
//! - FRAGMENTATION: at least `stranded_gpu_milli` of a node's GPU share is
//!   stranded (free, but no share of the target workload fits) for
//!   `fragmentation_intervals` consecutive intervals (default: 0.5 GPU for 3).
//! - LOW_LOAD: GPU utilisation below `low_gpu_util_permille` and CPU
//!   utilisation below `low_cpu_util_permille` for `low_load_intervals`
//!   consecutive intervals (default: < 10% and < 20% for 6): a candidate to
//!   empty by consolidation.
//!
//! Severity grows with how stranded, or how idle, the latest sample is.

use serde::Deserialize;
use tessera_sdk::{Detector, Finding, FindingKind, Window};

/// Thresholds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Stranded GPU share that makes a hot spot, thousandths of a GPU.
    pub stranded_gpu_milli: u32,
    /// Consecutive intervals at or above it.
    pub fragmentation_intervals: usize,
    /// GPU utilisation under which a node is idle, tenths of a percent.
    pub low_gpu_util_permille: u16,
    /// CPU utilisation under which a node is idle, tenths of a percent.
    pub low_cpu_util_permille: u16,
    /// Consecutive idle intervals.
    pub low_load_intervals: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            stranded_gpu_milli: 500,
            fragmentation_intervals: 3,
            low_gpu_util_permille: 100,
            low_cpu_util_permille: 200,
            low_load_intervals: 6,
        }
    }
}

/// The plugin.
#[derive(Debug)]
pub struct Rebalance {
    cfg: Config,
}

impl Detector for Rebalance {
    type Config = Config;
    const NAME: &'static str = "rebalance";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "fragmentation hot spots and low-load nodes";

    fn new(cfg: Config) -> Result<Self, String> {
        if cfg.fragmentation_intervals == 0 || cfg.low_load_intervals == 0 {
            return Err("rebalance: intervals must be at least 1".into());
        }
        if cfg.low_gpu_util_permille > 1000 || cfg.low_cpu_util_permille > 1000 || cfg.stranded_gpu_milli == 0 {
            return Err("rebalance: utilisation thresholds are 0..=1000 ‰ and stranded_gpu_milli at least 1".into());
        }
        Ok(Self { cfg })
    }

    fn window(&self) -> usize {
        self.cfg.fragmentation_intervals.max(self.cfg.low_load_intervals)
    }

    fn detect(&self, window: &Window) -> Vec<Finding> {
        let c = &self.cfg;
        let Some(latest) = window.latest() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for &(node, s) in &latest.samples {
            if window.consecutive(node, |x| x.stranded_gpu_milli >= c.stranded_gpu_milli) >= c.fragmentation_intervals {
                out.push(Finding {
                    node,
                    kind: FindingKind::Fragmentation,
                    // One stranded GPU's worth is as bad as it gets.
                    severity: (s.stranded_gpu_milli.min(1000) as u16).max(1),
                    message: format!(
                        "{} milli-GPU stranded for {} consecutive intervals",
                        s.stranded_gpu_milli, c.fragmentation_intervals
                    ),
                });
            }
            let idle = |x: &tessera_sdk::Sample| {
                x.gpu_util_permille < c.low_gpu_util_permille && x.cpu_util_permille < c.low_cpu_util_permille
            };
            if window.consecutive(node, idle) >= c.low_load_intervals {
                let gpu_room = u32::from(c.low_gpu_util_permille - s.gpu_util_permille.min(c.low_gpu_util_permille));
                out.push(Finding {
                    node,
                    kind: FindingKind::LowLoad,
                    severity: (1000 * gpu_room / u32::from(c.low_gpu_util_permille.max(1))).max(1) as u16,
                    message: format!(
                        "GPU below {}‰ and CPU below {}‰ for {} consecutive intervals (now {}‰, {}‰)",
                        c.low_gpu_util_permille,
                        c.low_cpu_util_permille,
                        c.low_load_intervals,
                        s.gpu_util_permille,
                        s.cpu_util_permille
                    ),
                });
            }
        }
        out
    }
}

tessera_sdk::export_detector!(Rebalance);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::{DetectorHarness, Frame, Sample};

    fn frame(seq: u64, samples: &[Sample]) -> Frame {
        Frame { seq, samples: samples.iter().enumerate().map(|(i, s)| (i as u32, *s)).collect() }
    }

    #[test]
    fn fragmentation_after_three_intervals_stranded() {
        let mut h = DetectorHarness::<Rebalance>::new("").unwrap();
        let stranded =
            |m| Sample { stranded_gpu_milli: m, gpu_util_permille: 500, cpu_util_permille: 500, ..Sample::default() };
        // node 0 strands 0.6 GPU throughout; node 1 once drops below 0.5.
        let rows = [[600, 700], [600, 300], [600, 700]];
        for (seq, r) in rows.iter().enumerate() {
            assert!(h.detect().is_empty(), "not before three intervals");
            h.observe(frame(seq as u64, &[stranded(r[0]), stranded(r[1])]));
        }
        let f = h.detect();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].node, &f[0].kind, f[0].severity), (0, &FindingKind::Fragmentation, 600));
    }

    #[test]
    fn low_load_needs_both_gpu_and_cpu_idle_for_six() {
        let cfg = r#"{"low_load_intervals": 6}"#;
        let mut h = DetectorHarness::<Rebalance>::new(cfg).unwrap();
        let s = |gpu, cpu| Sample { gpu_util_permille: gpu, cpu_util_permille: cpu, ..Sample::default() };
        for seq in 0..6 {
            // node 0 idle; node 1 idle GPU but busy CPU.
            h.observe(frame(seq, &[s(20, 50), s(20, 600)]));
        }
        let f = h.detect();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].node, &f[0].kind, f[0].severity), (0, &FindingKind::LowLoad, 800));
        assert!(DetectorHarness::<Rebalance>::new(r#"{"low_load_intervals": 0}"#).is_err());
        assert!(DetectorHarness::<Rebalance>::new(r#"{"colour": 1}"#).is_err());
    }
}
