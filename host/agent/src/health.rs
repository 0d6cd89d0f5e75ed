//! The health rule: how the agent judges a GPU from its readings.
//!
//! A GPU is
//!
//! - **failed** when NVML has lost it (`GpuLost`: fallen off the bus), when
//!   its volatile *uncorrected* ECC count rose above the first value this
//!   agent read for it (the baseline; a count below it means the driver was
//!   reloaded and becomes the new baseline), or when a *critical* XID was seen
//!   on it since the agent started ([`CRITICAL_XIDS`]: 48 double-bit ECC, 63/64
//!   page retirement or row-remapping failure, 74 NVLink, 79 fallen off the
//!   bus, 94/95 contained/uncontained ECC, 119/120 GSP). Failure is sticky: the
//!   count stays above the baseline and a critical XID is remembered until the
//!   agent restarts, which a GPU reset or a driver reload brings anyway;
//! - **degraded** when its temperature is at or above the hot threshold
//!   ([`DEFAULT_HOT_CELSIUS`], configurable), when its clocks are held down by
//!   hardware (hardware slowdown, thermal slowdown, power brake), or when its
//!   *corrected* ECC count grew since the previous sample;
//! - **healthy** otherwise. Other XIDs (13 graphics exception, 31 MMU fault,
//!   43 stopped application, …) are application errors: counted and published,
//!   not held against the GPU.
//!
//! [`judge`] is the rule as a pure function of [`Signals`]; [`Tracker`] keeps
//! the per-GPU state (baselines, previous counts, XIDs seen) and turns raw
//! [`GpuReading`]s into published [`GpuSample`]s.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::gpu::GpuReading;
use crate::sample::{GpuSample, Health, XidEvent, permille};

/// Default temperature, °C, from which a GPU is degraded.
pub const DEFAULT_HOT_CELSIUS: u32 = 85;

/// XID events kept per GPU in [`GpuSample::xid_events`].
pub const XID_KEPT: usize = 16;

/// XIDs that fail a GPU, with what they mean.
pub const CRITICAL_XIDS: [(u64, &str); 9] = [
    (48, "double-bit ECC error"),
    (63, "ECC page retirement or row remapping"),
    (64, "ECC page retirement or row-remapping failure"),
    (74, "NVLink error"),
    (79, "fallen off the bus"),
    (94, "contained ECC error"),
    (95, "uncontained ECC error"),
    (119, "GSP RPC timeout"),
    (120, "GSP error"),
];

/// What a critical XID means, `None` for the others.
pub fn critical_xid(xid: u64) -> Option<&'static str> {
    CRITICAL_XIDS.iter().find(|&&(x, _)| x == xid).map(|&(_, m)| m)
}

/// What the rule looks at for one GPU at one sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Signals {
    /// NVML lost the GPU.
    pub lost: bool,
    /// Uncorrected ECC errors above the baseline.
    pub uncorrected_above_baseline: u64,
    /// The first critical XID seen on the GPU, if any.
    pub critical_xid: Option<u64>,
    /// Temperature, °C.
    pub temperature_c: Option<u32>,
    /// Degraded from this temperature, °C.
    pub hot_celsius: u32,
    /// Clocks held down by hardware.
    pub throttled: bool,
    /// Corrected ECC errors since the previous sample.
    pub corrected_growth: u64,
}

/// The rule (see the module documentation): the health and, unless healthy,
/// why.
pub fn judge(s: &Signals) -> (Health, Option<String>) {
    let mut failed = Vec::new();
    if s.lost {
        failed.push("lost by NVML (GPU fell off the bus or is inaccessible)".to_string());
    }
    if s.uncorrected_above_baseline > 0 {
        failed.push(format!("{} uncorrected ECC errors", s.uncorrected_above_baseline));
    }
    if let Some(x) = s.critical_xid {
        failed.push(format!("XID {x} ({})", critical_xid(x).unwrap_or("critical")));
    }
    if !failed.is_empty() {
        return (Health::Failed, Some(failed.join("; ")));
    }
    let mut degraded = Vec::new();
    if let Some(t) = s.temperature_c.filter(|&t| t >= s.hot_celsius) {
        degraded.push(format!("{t} °C ≥ {} °C", s.hot_celsius));
    }
    if s.throttled {
        degraded.push("clocks held down by hardware".to_string());
    }
    if s.corrected_growth > 0 {
        degraded.push(format!("{} corrected ECC errors since the last sample", s.corrected_growth));
    }
    if degraded.is_empty() { (Health::Healthy, None) } else { (Health::Degraded, Some(degraded.join("; "))) }
}

/// XID events seen per GPU UUID and code, since the agent started.
pub type XidCounts = BTreeMap<String, BTreeMap<u64, u64>>;

/// What the agent remembers about one GPU.
#[derive(Debug, Clone, Default)]
struct GpuState {
    uncorrected_baseline: Option<u64>,
    corrected_prev: Option<u64>,
    critical_xid: Option<u64>,
    recent: VecDeque<XidEvent>,
}

/// Per-GPU state across samples, keyed by UUID.
#[derive(Debug, Clone)]
pub struct Tracker {
    hot_celsius: u32,
    gpus: HashMap<String, GpuState>,
    xids: XidCounts,
}

impl Default for Tracker {
    fn default() -> Self {
        Self::new(DEFAULT_HOT_CELSIUS)
    }
}

impl Tracker {
    /// A tracker that degrades GPUs from `hot_celsius`.
    pub fn new(hot_celsius: u32) -> Self {
        Self { hot_celsius, gpus: HashMap::new(), xids: BTreeMap::new() }
    }

    /// The hot threshold, °C.
    pub fn hot_celsius(&self) -> u32 {
        self.hot_celsius
    }

    /// XID events seen so far, per GPU and code.
    pub fn xid_counts(&self) -> &XidCounts {
        &self.xids
    }

    /// Takes one reading taken at `now_ms`: updates the GPU's state and
    /// returns what is published for it.
    pub fn assess(&mut self, r: &GpuReading, now_ms: u64) -> GpuSample {
        let st = self.gpus.entry(r.uuid.clone()).or_default();
        let mut signals = Signals {
            lost: r.lost,
            temperature_c: r.temperature_c,
            hot_celsius: self.hot_celsius,
            throttled: r.throttled,
            ..Signals::default()
        };
        if let Some(u) = r.ecc_uncorrected {
            let base = match st.uncorrected_baseline {
                Some(b) if b <= u => b,
                _ => u, // first reading, or the driver reloaded and reset the counter
            };
            st.uncorrected_baseline = Some(base);
            signals.uncorrected_above_baseline = u - base;
        }
        if let Some(c) = r.ecc_corrected {
            signals.corrected_growth = st.corrected_prev.map_or(0, |p| c.saturating_sub(p));
            st.corrected_prev = Some(c);
        }
        let counts = self.xids.entry(r.uuid.clone()).or_default();
        for &xid in &r.xids {
            *counts.entry(xid).or_default() += 1;
            if st.critical_xid.is_none() && critical_xid(xid).is_some() {
                st.critical_xid = Some(xid);
            }
            st.recent.push_back(XidEvent { xid, at_unix_ms: now_ms });
            if st.recent.len() > XID_KEPT {
                st.recent.pop_front();
            }
        }
        signals.critical_xid = st.critical_xid;
        let (health, health_reason) = judge(&signals);
        let mib = |b: Option<u64>| u32::try_from(b.unwrap_or(0) >> 20).unwrap_or(u32::MAX);
        GpuSample {
            index: r.index,
            uuid: r.uuid.clone(),
            name: r.name.clone(),
            util_permille: r.util_percent.map_or(0, |p| permille(u64::from(p), 100)),
            memory_total_mib: mib(r.memory_total_bytes),
            memory_used_mib: mib(r.memory_used_bytes),
            temperature_c: r.temperature_c,
            power_w: r.power_mw.map(|mw| f64::from(mw) / 1000.0),
            ecc_uncorrected: r.ecc_uncorrected,
            ecc_corrected: r.ecc_corrected,
            xid_events: st.recent.iter().copied().collect(),
            health,
            health_reason,
            lost: r.lost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hot() -> Signals {
        Signals { hot_celsius: DEFAULT_HOT_CELSIUS, ..Signals::default() }
    }

    #[test]
    fn the_rule() {
        assert_eq!(judge(&hot()), (Health::Healthy, None));
        assert_eq!(judge(&Signals { temperature_c: Some(84), ..hot() }).0, Health::Healthy);
        let (h, why) = judge(&Signals { temperature_c: Some(85), ..hot() });
        assert_eq!(h, Health::Degraded);
        assert_eq!(why.as_deref(), Some("85 °C ≥ 85 °C"));
        assert_eq!(judge(&Signals { throttled: true, ..hot() }).0, Health::Degraded);
        assert_eq!(judge(&Signals { corrected_growth: 3, ..hot() }).0, Health::Degraded);
        let (h, why) = judge(&Signals { uncorrected_above_baseline: 2, temperature_c: Some(90), ..hot() });
        assert_eq!(h, Health::Failed, "failure outranks heat");
        assert_eq!(why.as_deref(), Some("2 uncorrected ECC errors"));
        let (h, why) = judge(&Signals { critical_xid: Some(79), ..hot() });
        assert_eq!(h, Health::Failed);
        assert_eq!(why.as_deref(), Some("XID 79 (fallen off the bus)"));
        assert_eq!(judge(&Signals { lost: true, ..hot() }).0, Health::Failed);
    }

    #[test]
    fn critical_xids() {
        for x in [48, 63, 64, 74, 79, 94, 95, 119, 120] {
            assert!(critical_xid(x).is_some(), "{x}");
        }
        for x in [13, 31, 43, 45, 92] {
            assert!(critical_xid(x).is_none(), "{x}");
        }
    }

    fn reading(uncorrected: u64, corrected: u64, xids: &[u64]) -> GpuReading {
        GpuReading {
            index: 0,
            uuid: "GPU-a".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            util_percent: Some(57),
            memory_total_bytes: Some(85_520_809_984),
            memory_used_bytes: Some(10 << 30),
            temperature_c: Some(60),
            power_mw: Some(412_345),
            ecc_uncorrected: Some(uncorrected),
            ecc_corrected: Some(corrected),
            xids: xids.to_vec(),
            ..GpuReading::default()
        }
    }

    #[test]
    fn tracker_baselines_and_remembers() {
        let mut t = Tracker::default();
        // Pre-existing counts are published but are the baseline.
        let s = t.assess(&reading(3, 10, &[]), 1);
        assert_eq!(
            (s.health, s.util_permille, s.memory_total_mib, s.memory_used_mib),
            (Health::Healthy, 570, 81_559, 10_240)
        );
        assert_eq!(s.power_w, Some(412.345));
        assert_eq!(t.assess(&reading(3, 12, &[]), 2).health, Health::Degraded, "corrected grew");
        assert_eq!(t.assess(&reading(3, 12, &[13]), 3).health, Health::Healthy, "XID 13 is the application's");
        let s = t.assess(&reading(4, 12, &[]), 4);
        assert_eq!((s.health, s.health_reason.as_deref()), (Health::Failed, Some("1 uncorrected ECC errors")));
        assert_eq!(t.assess(&reading(4, 12, &[]), 5).health, Health::Failed, "sticky");
        // The driver reloaded: counters restart, a new baseline.
        assert_eq!(t.assess(&reading(0, 0, &[]), 6).health, Health::Healthy);
        let s = t.assess(&reading(0, 0, &[79]), 7);
        assert_eq!(s.health, Health::Failed);
        assert_eq!(s.xid_events, vec![XidEvent { xid: 13, at_unix_ms: 3 }, XidEvent { xid: 79, at_unix_ms: 7 }]);
        assert_eq!(t.assess(&reading(0, 0, &[]), 8).health, Health::Failed, "a critical XID is remembered");
        assert_eq!(t.xid_counts()["GPU-a"], BTreeMap::from([(13, 1), (79, 1)]));
    }

    #[test]
    fn xid_window_is_bounded() {
        let mut t = Tracker::default();
        let xids: Vec<u64> = (0..40).map(|_| 13).collect();
        let s = t.assess(&reading(0, 0, &xids), 1);
        assert_eq!(s.xid_events.len(), XID_KEPT);
        assert_eq!(t.xid_counts()["GPU-a"][&13], 40);
    }
}
