//! `overload`: a detector over a sliding window of node telemetry.
//!
//! - OVERLOAD: GPU utilisation above `gpu_util_permille` for
//!   `gpu_intervals` consecutive intervals (default: > 90% for 5).
//! - MEMORY_PRESSURE: free memory below `memory_free_permille` for
//!   `memory_intervals` consecutive intervals (default: < 10% for 3).
//!
//! Severity grows with how far the latest sample is past the threshold.

use serde::Deserialize;
use tessera_sdk::{Detector, Finding, FindingKind, Window};

/// Thresholds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// GPU utilisation threshold, tenths of a percent.
    pub gpu_util_permille: u16,
    /// Consecutive intervals above the GPU threshold.
    pub gpu_intervals: usize,
    /// Free-memory threshold, tenths of a percent.
    pub memory_free_permille: u16,
    /// Consecutive intervals below the memory threshold.
    pub memory_intervals: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self { gpu_util_permille: 900, gpu_intervals: 5, memory_free_permille: 100, memory_intervals: 3 }
    }
}

/// The plugin.
#[derive(Debug)]
pub struct Overload {
    cfg: Config,
}

impl Detector for Overload {
    type Config = Config;
    const NAME: &'static str = "overload";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "sustained GPU overload and memory pressure";

    fn new(cfg: Config) -> Result<Self, String> {
        if cfg.gpu_intervals == 0 || cfg.memory_intervals == 0 {
            return Err("overload: intervals must be at least 1".into());
        }
        if cfg.gpu_util_permille > 1000 || cfg.memory_free_permille > 1000 {
            return Err("overload: thresholds are tenths of a percent (0..=1000)".into());
        }
        Ok(Self { cfg })
    }

    fn window(&self) -> usize {
        self.cfg.gpu_intervals.max(self.cfg.memory_intervals)
    }

    fn detect(&self, window: &Window) -> Vec<Finding> {
        let c = &self.cfg;
        let Some(latest) = window.latest() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for &(node, s) in &latest.samples {
            if window.consecutive(node, |x| x.gpu_util_permille > c.gpu_util_permille) >= c.gpu_intervals {
                let over = (s.gpu_util_permille - c.gpu_util_permille) as u32;
                let room = (1000 - c.gpu_util_permille).max(1) as u32;
                out.push(Finding {
                    node,
                    kind: FindingKind::Overload,
                    severity: (500 + 500 * over / room).min(1000) as u16,
                    message: format!(
                        "GPU utilisation above {}‰ for {} consecutive intervals (now {}‰)",
                        c.gpu_util_permille, c.gpu_intervals, s.gpu_util_permille
                    ),
                });
            }
            if window.consecutive(node, |x| x.memory_free_permille < c.memory_free_permille) >= c.memory_intervals {
                let short = (c.memory_free_permille - s.memory_free_permille) as u32;
                out.push(Finding {
                    node,
                    kind: FindingKind::MemoryPressure,
                    severity: (500 + 500 * short / c.memory_free_permille.max(1) as u32).min(1000) as u16,
                    message: format!(
                        "free memory below {}‰ for {} consecutive intervals (now {}‰)",
                        c.memory_free_permille, c.memory_intervals, s.memory_free_permille
                    ),
                });
            }
        }
        out
    }
}

tessera_sdk::export_detector!(Overload);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::{DetectorHarness, Frame, Sample};

    fn frame(seq: u64, util: &[u16], mem_free: &[u16]) -> Frame {
        Frame {
            seq,
            samples: util
                .iter()
                .zip(mem_free)
                .enumerate()
                .map(|(i, (&u, &m))| {
                    (i as u32, Sample { gpu_util_permille: u, memory_free_permille: m, ..Sample::default() })
                })
                .collect(),
        }
    }

    #[test]
    fn overload_needs_five_consecutive_intervals() {
        let mut h = DetectorHarness::<Overload>::new("").unwrap();
        // node 0 hot for 5 intervals; node 1 hot but dips once.
        let util = [[950, 950], [950, 950], [950, 500], [950, 950], [950, 950]];
        for (seq, u) in util.iter().enumerate() {
            h.observe(frame(seq as u64, u, &[500, 500]));
            let f = h.detect();
            if seq < 4 {
                assert!(f.is_empty(), "interval {seq}: {f:?}");
            }
        }
        let f = h.detect();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].node, &f[0].kind), (0, &FindingKind::Overload));
    }

    #[test]
    fn memory_pressure_after_three() {
        let mut h = DetectorHarness::<Overload>::new(r#"{"memory_intervals": 3}"#).unwrap();
        for seq in 0..3 {
            h.observe(frame(seq, &[0], &[50]));
        }
        let f = h.detect();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, FindingKind::MemoryPressure);
        assert_eq!(f[0].severity, 750);
    }
}
