//! The simulator's telemetry model: what a node agent would measure, and
//! the carbon intensity of each zone's electricity, as seeded functions of
//! time, so load-, GPU- and carbon-aware plugins have real inputs.
//!
//! - Each running pod has a utilisation profile fixed by the seed and its
//!   name: online (soft-tier) pods follow a daily curve with their own
//!   phase, batch (opportunistic) pods run hot and flat, hard-tier pods
//!   steady; every interval adds a little noise.
//! - A node's CPU use is the sum of its pods' requests times their
//!   utilisation over its capacity; memory use follows requests; each GPU's
//!   utilisation sums the share each pod holds times its utilisation.
//! - Carbon intensity per zone: a base level with a daily swing (a coal
//!   zone flat and high, a solar zone low at noon, a wind/hydro zone low).
//!
//! Pure functions of (seed, pod, time): no clock, no IO.

use serde::{Deserialize, Serialize};

use crate::cluster::Placement;
use crate::model::{GPU_MILLI, Node, Pod, Tier};

/// Settings of the model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// Seconds between samples.
    pub interval_s: u64,
    /// Length of the daily cycle, seconds.
    pub day_s: u64,
    /// A soft-tier pod whose node runs at or above this (‰, the hottest of
    /// CPU, memory and its GPUs) counts one SLA violation per interval.
    pub sla_hot_permille: u16,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self { interval_s: 60, day_s: 86_400, sla_hot_permille: 900 }
    }
}

fn mix(mut x: u64) -> u64 {
    // splitmix64's finaliser: a well-spread hash of one word.
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn hash_str(seed: u64, s: &str) -> u64 {
    s.bytes().fold(mix(seed), |h, b| mix(h ^ u64::from(b)))
}

/// One detection interval of telemetry for the policy's detectors, as
/// columns (one entry per node in `nodes`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DetectionFrame {
    /// Interval sequence number.
    pub seq: u64,
    /// The nodes.
    pub nodes: Vec<crate::model::NodeId>,
    /// Mean GPU utilisation, ‰.
    pub gpu_util_permille: Vec<u16>,
    /// Free memory, ‰.
    pub memory_free_permille: Vec<u16>,
    /// CPU utilisation, ‰.
    pub cpu_util_permille: Vec<u16>,
    /// GPU share no pod of the target workload could use, milli-GPU.
    pub stranded_gpu_milli: Vec<u32>,
}

impl DetectionFrame {
    /// The frame of one interval's node samples; `stranded` gives each
    /// node's stranded GPU share (milli-GPU).
    pub fn from_samples(
        seq: u64,
        samples: &[(crate::model::NodeId, NodeSample)],
        stranded: impl Fn(crate::model::NodeId) -> u32,
    ) -> Self {
        Self {
            seq,
            nodes: samples.iter().map(|(id, _)| *id).collect(),
            gpu_util_permille: samples
                .iter()
                .map(|(_, s)| {
                    let g = &s.gpu_util_permille;
                    if g.is_empty() {
                        0
                    } else {
                        (g.iter().map(|&u| u32::from(u)).sum::<u32>() / g.len() as u32) as u16
                    }
                })
                .collect(),
            memory_free_permille: samples.iter().map(|(_, s)| 1000 - s.memory_util_permille.min(1000)).collect(),
            cpu_util_permille: samples.iter().map(|(_, s)| s.cpu_util_permille).collect(),
            stranded_gpu_milli: samples.iter().map(|(id, _)| stranded(*id)).collect(),
        }
    }
}

/// An anomaly a detector reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detection {
    /// The detector.
    pub detector: String,
    /// The node.
    pub node: crate::model::NodeId,
    /// What it found.
    pub kind: FindingKind,
    /// 0..=1000.
    pub severity: u16,
    /// What it saw.
    pub message: String,
}

/// What a detector found (the WIT's `finding-kind`); written as its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum FindingKind {
    /// A node runs hot.
    Overload,
    /// A node is short of memory.
    MemoryPressure,
    /// GPU share stranded on a node.
    Fragmentation,
    /// A node runs nearly idle.
    LowLoad,
    /// The detector's own kind.
    Other(String),
}

impl FindingKind {
    /// Its name in reports, metric labels and traces (`overload`,
    /// `memory-pressure`, `fragmentation`, `low-load`, or the detector's).
    pub fn as_str(&self) -> &str {
        match self {
            FindingKind::Overload => "overload",
            FindingKind::MemoryPressure => "memory-pressure",
            FindingKind::Fragmentation => "fragmentation",
            FindingKind::LowLoad => "low-load",
            FindingKind::Other(k) => k,
        }
    }
}

impl From<&str> for FindingKind {
    fn from(name: &str) -> Self {
        match name {
            "overload" => FindingKind::Overload,
            "memory-pressure" => FindingKind::MemoryPressure,
            "fragmentation" => FindingKind::Fragmentation,
            "low-load" => FindingKind::LowLoad,
            other => FindingKind::Other(other.to_string()),
        }
    }
}

/// Most kinds of its own one detector may name; the rest are `other`.
pub const MAX_OWN_KINDS: usize = 8;
/// Longest name of a detector's own kind.
pub const MAX_KIND_LEN: usize = 32;

/// The kinds of their own the detectors have named, so that what they
/// hand back cannot mint unbounded metric series or report rows: each
/// detector keeps its first [`MAX_OWN_KINDS`] well-formed names (1 to
/// [`MAX_KIND_LEN`] of `a-z`, `0-9`, `-`), in the order it first used
/// them (the same on every replay); anything else is counted as `other`.
#[derive(Debug, Clone, Default)]
pub struct OwnKinds(std::collections::BTreeMap<String, std::collections::BTreeSet<String>>);

impl OwnKinds {
    /// The kind `detector` reported as `name`, bounded.
    pub fn admit(&mut self, detector: &str, name: String) -> FindingKind {
        let well_formed = !name.is_empty()
            && name.len() <= MAX_KIND_LEN
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !well_formed {
            return FindingKind::Other("other".into());
        }
        let kind = FindingKind::from(name.as_str());
        if !matches!(kind, FindingKind::Other(_)) {
            return kind;
        }
        let seen = self.0.entry(detector.to_string()).or_default();
        if seen.contains(&name) || seen.len() < MAX_OWN_KINDS {
            seen.insert(name.clone());
            FindingKind::Other(name)
        } else {
            FindingKind::Other("other".into())
        }
    }
}

impl From<String> for FindingKind {
    fn from(name: String) -> Self {
        FindingKind::from(name.as_str())
    }
}

impl From<FindingKind> for String {
    fn from(k: FindingKind) -> Self {
        k.as_str().to_string()
    }
}

/// How often the detectors look, and from which severity a finding counts
/// as an anomaly (the policy's `detection:` section).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DetectionConfig {
    /// Telemetry intervals between detection rounds (at least 1).
    pub detection_interval: u64,
    /// Findings below this severity (0..=1000) are not anomalies.
    pub anomaly_threshold: u16,
}

impl Default for DetectionConfig {
    fn default() -> Self {
        Self { detection_interval: 1, anomaly_threshold: 500 }
    }
}

/// One node's measured state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSample {
    /// CPU utilisation, ‰.
    pub cpu_util_permille: u16,
    /// Memory utilisation, ‰.
    pub memory_util_permille: u16,
    /// Per GPU utilisation, ‰.
    pub gpu_util_permille: Vec<u16>,
    /// Per GPU device memory in use, MiB.
    pub gpu_memory_used_mib: Vec<u32>,
}

impl NodeSample {
    /// The hottest of CPU, memory and the given GPUs.
    pub fn hottest(&self, gpus: impl Iterator<Item = usize>) -> u16 {
        let g = gpus.filter_map(|i| self.gpu_util_permille.get(i).copied()).max().unwrap_or(0);
        self.cpu_util_permille.max(self.memory_util_permille).max(g)
    }

    /// Writes the sample into the node.
    pub fn apply(&self, n: &mut Node) {
        n.cpu_util_permille = self.cpu_util_permille;
        n.memory_util_permille = self.memory_util_permille;
        for ((g, &u), &m) in n.gpus.iter_mut().zip(&self.gpu_util_permille).zip(&self.gpu_memory_used_mib) {
            g.util_permille = u;
            g.memory_used_mib = m;
        }
    }
}

/// The model.
#[derive(Debug, Clone)]
pub struct TelemetryModel {
    seed: u64,
    config: TelemetryConfig,
}

impl TelemetryModel {
    /// A model from a seed.
    pub fn new(config: TelemetryConfig, seed: u64) -> Self {
        Self { seed, config }
    }

    /// Its settings.
    pub fn config(&self) -> &TelemetryConfig {
        &self.config
    }

    /// Utilisation of one running pod at time `t` (seconds), ‰.
    pub fn pod_util(&self, pod: &Pod, t: u64) -> u16 {
        let h = hash_str(self.seed, &pod.name);
        let day = self.config.day_s.max(1) as f64;
        let base = 300.0 + (h % 600) as f64;
        let level = match pod.tier {
            Tier::Soft => {
                let phase = (h >> 20) as f64 / (1u64 << 44) as f64 * std::f64::consts::TAU;
                base * (0.6 + 0.4 * ((t as f64 / day) * std::f64::consts::TAU + phase).sin())
            }
            Tier::Opportunistic => 850.0 + ((h >> 12) % 150) as f64,
            Tier::Hard => base,
        };
        let tick = t / self.config.interval_s.max(1);
        let noise = (mix(h ^ tick) % 101) as f64 - 50.0;
        (level + noise).clamp(0.0, 1000.0) as u16
    }

    /// What a node agent would report of `node` running `pods` at `t`.
    pub fn sample<'a>(&self, node: &Node, pods: impl Iterator<Item = (&'a Pod, Placement)>, t: u64) -> NodeSample {
        let (mut cpu, mut mem) = (0.0, 0.0);
        let mut gpu = vec![0.0f64; node.gpus.len()];
        // A pod holds device memory in proportion to its share, more of it
        // the busier it runs (activations, caches).
        let mut gpu_mem = vec![0.0f64; node.gpus.len()];
        for (pod, placement) in pods {
            let u = f64::from(self.pod_util(pod, t)) / 1000.0;
            cpu += pod.requests.cpu_milli as f64 * u;
            mem += pod.requests.memory_mib as f64 * (0.7 + 0.3 * u);
            let share = f64::from(pod.gpu_milli.min(GPU_MILLI)) / f64::from(GPU_MILLI);
            for i in placement.gpus.indices() {
                if let (Some(g), Some(m), Some(dev)) = (gpu.get_mut(i), gpu_mem.get_mut(i), node.gpus.get(i)) {
                    *g += share * u;
                    *m += share * f64::from(dev.memory_mib) * (0.6 + 0.4 * u);
                }
            }
        }
        let permille = |used: f64, cap: u64| if cap == 0 { 0 } else { (1000.0 * used / cap as f64).min(1000.0) as u16 };
        NodeSample {
            cpu_util_permille: permille(cpu, node.capacity.cpu_milli),
            memory_util_permille: permille(mem, node.capacity.memory_mib),
            gpu_util_permille: gpu.iter().map(|&g| (1000.0 * g).min(1000.0) as u16).collect(),
            gpu_memory_used_mib: gpu_mem.iter().zip(&node.gpus).map(|(&m, g)| (m as u32).min(g.memory_mib)).collect(),
        }
    }

    /// Carbon intensity of `zone` at `t`, gCO₂/kWh. Zones are told apart
    /// by name: the `k`-th of the built-in profiles for a zone ending in
    /// `-k` (`zone-0` coal-heavy, `zone-1` solar, `zone-2` hydro/wind),
    /// else a profile picked by the name's hash.
    pub fn carbon(&self, zone: &str, t: u64) -> u32 {
        // (base, daily swing as a share of base, hour of the minimum)
        const PROFILES: [(f64, f64, f64); 3] = [(620.0, 0.08, 4.0), (380.0, 0.55, 13.0), (90.0, 0.35, 2.0)];
        let k = zone
            .rsplit('-')
            .next()
            .and_then(|d| d.parse::<usize>().ok())
            .unwrap_or_else(|| hash_str(self.seed, zone) as usize);
        let (base, swing, low_hour) = PROFILES[k % PROFILES.len()];
        let day = self.config.day_s.max(1) as f64;
        let hours = (t as f64 % day) / day * 24.0;
        let v = base * (1.0 - swing * ((hours - low_hour) / 24.0 * std::f64::consts::TAU).cos());
        v.max(0.0).round() as u32
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    #[test]
    fn a_detector_cannot_mint_unbounded_kinds() {
        let mut k = OwnKinds::default();
        let names: Vec<String> = (0..1000).map(|i| k.admit("d", format!("kind-{i}")).as_str().to_string()).collect();
        let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), MAX_OWN_KINDS + 1, "eight of its own and `other`");
        assert_eq!(names[3], "kind-3");
        assert_eq!(names[500], "other");
        assert_eq!(k.admit("d", "kind-3".into()).as_str(), "kind-3", "a known one stays");
        assert_eq!(k.admit("e", "kind-999".into()).as_str(), "kind-999", "per detector");
        assert_eq!(k.admit("d", "overload".into()), FindingKind::Overload);
        for bad in ["", "Upper", "x".repeat(33).as_str(), "a b", "é"] {
            assert_eq!(k.admit("f", bad.to_string()).as_str(), "other", "{bad:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::GpuSet;
    use crate::model::Resources;

    fn pod(name: &str, tier: Tier, milli: u32) -> Pod {
        Pod {
            name: name.into(),
            requests: Resources { cpu_milli: 8_000, memory_mib: 16_384 },
            gpu_count: 1,
            gpu_milli: milli,
            tier,
            ..Pod::default()
        }
    }

    #[test]
    fn profiles_by_tier_and_determinism() {
        let m = TelemetryModel::new(TelemetryConfig::default(), 7);
        let batch = pod("train-1", Tier::Opportunistic, 1000);
        let web = pod("web-1", Tier::Soft, 1000);
        for t in (0..86_400).step_by(3_600) {
            let u = m.pod_util(&batch, t);
            assert!((800..=1000).contains(&u), "batch runs hot: {u}");
            assert_eq!(u, TelemetryModel::new(TelemetryConfig::default(), 7).pod_util(&batch, t));
        }
        let web_day: Vec<u16> = (0..24).map(|h| m.pod_util(&web, h * 3_600)).collect();
        let (lo, hi) = (web_day.iter().min().unwrap(), web_day.iter().max().unwrap());
        assert!(hi - lo > 150, "online load follows the day: {web_day:?}");
    }

    #[test]
    fn node_sample_sums_pods_by_gpu_and_resource() {
        let m = TelemetryModel::new(TelemetryConfig::default(), 1);
        let node = Node::new(0, "n", Resources { cpu_milli: 32_000, memory_mib: 65_536 }, 2, "A100");
        let a = pod("a", Tier::Hard, 1000);
        let b = pod("b", Tier::Hard, 1000);
        let pa = Placement { node: 0, gpus: GpuSet(0b01) };
        let s = m.sample(&node, [(&a, pa)].into_iter(), 0);
        assert_eq!(s.gpu_util_permille[1], 0, "GPU 1 idle");
        assert_eq!(s.gpu_util_permille[0], m.pod_util(&a, 0));
        let both = m.sample(&node, [(&a, pa), (&b, Placement { node: 0, gpus: GpuSet(0b10) })].into_iter(), 0);
        assert_eq!(both.gpu_util_permille[1], m.pod_util(&b, 0));
        assert!(both.cpu_util_permille > s.cpu_util_permille);
        // Device memory follows the share held and how busy the pod runs.
        let mut big = Node::new(0, "n", Resources { cpu_milli: 32_000, memory_mib: 65_536 }, 2, "A100");
        big.gpus.iter_mut().for_each(|g| g.memory_mib = 40_000);
        let half = Pod { gpu_milli: 500, ..a.clone() };
        let m = m.sample(&big, [(&half, pa)].into_iter(), 0).gpu_memory_used_mib;
        assert!((12_000..=20_000).contains(&m[0]) && m[1] == 0, "{m:?}");
        assert_eq!(
            both.hottest([1].into_iter()),
            both.cpu_util_permille.max(both.memory_util_permille).max(both.gpu_util_permille[1])
        );
    }

    #[test]
    fn carbon_profiles_differ_by_zone_and_hour() {
        let m = TelemetryModel::new(TelemetryConfig::default(), 1);
        let solar_noon = m.carbon("zone-1", 13 * 3_600);
        let solar_night = m.carbon("zone-1", 3_600);
        assert!(solar_noon * 2 < solar_night, "{solar_noon} vs {solar_night}");
        assert!(m.carbon("zone-0", 0) > m.carbon("zone-2", 0));
        assert_eq!(m.carbon("zone-0", 100), m.carbon("zone-0", 86_500), "daily period");
    }
}
