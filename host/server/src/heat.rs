//! The decision-latency histogram over time: the buckets of
//! `tessera_decision_latency_seconds`, one histogram per minute of wall
//! time for the last hour, and failures by code per minute. What the
//! console's heatmap draws; each column's window is what it asks
//! `/v1/attribution` for the decisions behind a cell.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;
use utoipa::ToSchema;

/// Upper bounds of the latency buckets, seconds: those of the
/// `tessera_decision_latency_seconds` histogram (50 µs × 2ᵏ, k < 16); a
/// last bucket takes the rest.
pub fn bounds_s() -> Vec<f64> {
    (0..16).map(|k| 0.000_05 * f64::from(1u32 << k)).collect()
}

/// One column: a minute.
#[derive(Debug, Clone)]
struct Column {
    start_ms: u64,
    counts: Vec<u32>,
    failures: BTreeMap<String, u32>,
}

/// The histogram over time.
#[derive(Debug)]
pub struct LatencyHeat {
    column_ms: u64,
    keep: usize,
    bounds: Vec<f64>,
    columns: VecDeque<Column>,
}

impl Default for LatencyHeat {
    fn default() -> Self {
        Self::new(60_000, 60)
    }
}

/// The heat as the API gives it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HeatView {
    /// Column starts, Unix ms, oldest first; a column spans `column_ms`.
    pub starts_unix_ms: Vec<u64>,
    /// Column width, ms.
    pub column_ms: u64,
    /// Row upper bounds, µs (the last row: above the last bound).
    pub bounds_us: Vec<u64>,
    /// `counts[row][column]`.
    pub counts: Vec<Vec<u32>>,
    /// Decisions not bound in the window, by reason code.
    pub failures: BTreeMap<String, u32>,
    /// Decisions in the window.
    pub decisions: u64,
}

impl LatencyHeat {
    /// Columns of `column_ms`, the last `keep` of them kept.
    pub fn new(column_ms: u64, keep: usize) -> Self {
        Self { column_ms: column_ms.max(1), keep: keep.max(1), bounds: bounds_s(), columns: VecDeque::new() }
    }

    /// A decision at `at_ms` (wall clock) that took `latency_s`, and its
    /// failure code if it did not bind.
    pub fn observe(&mut self, at_ms: u64, latency_s: f64, failure: Option<&str>) {
        let start = at_ms - at_ms % self.column_ms;
        if self.columns.back().is_none_or(|c| c.start_ms < start) {
            self.columns.push_back(Column {
                start_ms: start,
                counts: vec![0; self.bounds.len() + 1],
                failures: BTreeMap::new(),
            });
            while self.columns.len() > self.keep {
                self.columns.pop_front();
            }
        }
        // A decision stamped before the newest column (clocks are not
        // monotonic) goes to its own column if still held, else the oldest.
        let col: usize = self.columns.iter().rposition(|c| c.start_ms <= start).unwrap_or_default();
        let row = self.bounds.iter().position(|&b| latency_s <= b).unwrap_or(self.bounds.len());
        let c = &mut self.columns[col];
        c.counts[row] += 1;
        if let Some(code) = failure {
            *c.failures.entry(code.to_string()).or_insert(0) += 1;
        }
    }

    /// The columns held, with empty minutes between them filled in.
    pub fn view(&self) -> HeatView {
        let rows = self.bounds.len() + 1;
        let (mut starts, mut counts, mut failures, mut decisions) =
            (Vec::new(), vec![Vec::new(); rows], BTreeMap::new(), 0u64);
        if let (Some(first), Some(last)) = (self.columns.front(), self.columns.back()) {
            let mut it = self.columns.iter().peekable();
            let mut t = first.start_ms;
            while t <= last.start_ms {
                starts.push(t);
                let here = it.next_if(|c| c.start_ms == t);
                for (r, row) in counts.iter_mut().enumerate() {
                    row.push(here.map_or(0, |c| c.counts[r]));
                }
                if let Some(c) = here {
                    decisions += c.counts.iter().map(|&n| u64::from(n)).sum::<u64>();
                    for (k, n) in &c.failures {
                        *failures.entry(k.clone()).or_insert(0) += n;
                    }
                }
                t += self.column_ms;
            }
        }
        HeatView {
            starts_unix_ms: starts,
            column_ms: self.column_ms,
            bounds_us: self.bounds.iter().map(|b| (b * 1e6).round() as u64).collect(),
            counts,
            failures,
            decisions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_fall_in_their_minute_and_bucket_and_the_hour_rolls() {
        let mut h = LatencyHeat::new(60_000, 3);
        h.observe(60_000, 0.000_04, None); // ≤ 50 µs
        h.observe(60_500, 0.003, Some("SCHED-GPU-INSUFFICIENT")); // ≤ 3.2 ms
        h.observe(180_000, 5.0, Some("SCHED-GPU-INSUFFICIENT")); // above every bound
        let v = h.view();
        assert_eq!(v.starts_unix_ms, [60_000, 120_000, 180_000], "the empty minute is shown");
        assert_eq!(v.counts[0], [1, 0, 0]);
        assert_eq!(v.counts[bounds_s().iter().position(|&b| 0.003 <= b).unwrap()], [1, 0, 0]);
        assert_eq!(v.counts[16], [0, 0, 1]);
        assert_eq!((v.decisions, v.failures["SCHED-GPU-INSUFFICIENT"]), (3, 2));
        assert_eq!(v.bounds_us[..3], [50, 100, 200]);
        // Two minutes later the first has rolled out.
        h.observe(300_000, 0.001, None);
        h.observe(360_000, 0.001, None);
        let v = h.view();
        assert_eq!(v.starts_unix_ms.first(), Some(&180_000));
        assert_eq!(v.decisions, 3);
        // A late stamp lands in its own minute while it is held.
        h.observe(300_001, 0.001, None);
        assert_eq!(h.view().decisions, 4);
    }
}
