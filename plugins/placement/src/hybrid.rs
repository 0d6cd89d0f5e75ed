//! **hybrid-score**: one score from three concerns, weighted by the policy.
//!
//! - *Resource efficiency*: how full the node would be after placement (mean
//!   of CPU, memory and GPU share allocated, as `binpack` sees it).
//! - *SLA-violation risk*: how hot the node runs now (the highest of its
//!   measured CPU, memory and mean GPU utilisation); a soft-tier pod (an
//!   online service) weighs this double, an opportunistic one half.
//! - *Carbon intensity*: of the node's zone (gCO₂/kWh) as the host reports
//!   it now (`zone-carbon-intensity`: the simulator's time series, or a
//!   live feed), else as configured, relative to the dirtiest zone.
//!
//! Score (‰) = `w_e·efficiency − w_s·risk − w_c·carbon` over `w_e + w_s +
//! w_c`, each term in 0..=1000.

use std::collections::HashMap;

use serde::Deserialize;
use tessera_sdk::{Node, NodeTable, Pod, Score, Scorer, Sym, Tier};

/// Weights of the three terms.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HybridWeights {
    /// Resource efficiency.
    pub efficiency: f64,
    /// SLA-violation risk.
    pub sla: f64,
    /// Carbon intensity.
    pub carbon: f64,
}

impl Default for HybridWeights {
    fn default() -> Self {
        Self { efficiency: 1.0, sla: 1.0, carbon: 0.5 }
    }
}

/// `hybrid-score` settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HybridConfig {
    /// Term weights.
    pub weights: HybridWeights,
    /// Carbon intensity per zone, gCO₂/kWh, for zones the host reports
    /// nothing of; zones neither reports count as the mean of those listed.
    pub carbon: HashMap<String, f64>,
}

/// The plugin.
#[derive(Debug, Clone)]
pub struct HybridScore {
    cfg: HybridConfig,
    /// Carbon term (0..=1000) per zone symbol, for the current mirror.
    carbon_by_zone: Vec<f64>,
    /// Per node id: how hot it runs (‰, the highest of CPU, memory and mean
    /// GPU utilisation), kept when the node changes, not per pod.
    hot: Vec<u16>,
    sla_factor: f64,
    request: [f64; 3],
}

impl Scorer for HybridScore {
    type Config = HybridConfig;
    const NAME: &'static str = "hybrid-score";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "resource efficiency, SLA-violation risk and zone carbon intensity, weighted";
    const REUSE: tessera_sdk::Reuse = tessera_sdk::Reuse::NodeShape;
    const ZONE_CARBON: bool = true;

    fn new(cfg: HybridConfig) -> Result<Self, String> {
        let w = &cfg.weights;
        if [w.efficiency, w.sla, w.carbon].iter().any(|x| !x.is_finite() || *x < 0.0)
            || w.efficiency + w.sla + w.carbon == 0.0
        {
            return Err("hybrid-score: weights must be finite, >= 0, and not all 0".into());
        }
        if let Some((zone, v)) = cfg.carbon.iter().find(|(_, v)| !v.is_finite() || **v < 0.0) {
            return Err(format!("hybrid-score: carbon intensity of zone `{zone}` must be finite and >= 0, not {v}"));
        }
        Ok(Self { cfg, carbon_by_zone: Vec::new(), hot: Vec::new(), sla_factor: 1.0, request: [0.0; 3] })
    }

    fn on_node(&mut self, node: &Node<'_>) {
        let i = node.id() as usize;
        if i >= self.hot.len() {
            self.hot.resize(i + 1, 0);
        }
        self.hot[i] = hotness(node);
    }

    fn prepare(&mut self, pod: &Pod, nodes: &NodeTable) {
        // Per zone: the host's live intensity if it has one, else the
        // configured one, else the mean of those configured; relative to
        // the dirtiest zone. Recomputed per pod: the host's values move.
        let configured_mean = if self.cfg.carbon.is_empty() {
            0.0
        } else {
            self.cfg.carbon.values().sum::<f64>() / self.cfg.carbon.len() as f64
        };
        let intensity = |s: Sym| -> f64 {
            nodes
                .zone_carbon(s)
                .map(f64::from)
                .or_else(|| self.cfg.carbon.get(nodes.symbol(s)).copied())
                .unwrap_or(configured_mean)
        };
        if self.carbon_by_zone.len() != nodes.symbol_count() {
            self.carbon_by_zone = vec![0.0; nodes.symbol_count()];
        }
        let max = nodes.zones().iter().map(|&s| intensity(s)).fold(0.0, f64::max);
        for &s in nodes.zones() {
            self.carbon_by_zone[s as usize] = if max > 0.0 { 1000.0 * intensity(s) / max } else { 0.0 };
        }
        self.sla_factor = match pod.tier {
            Tier::Soft => 2.0,
            Tier::Hard => 1.0,
            Tier::Opportunistic => 0.5,
        };
        self.request =
            [f64::from(pod.requests.cpu_milli), f64::from(pod.requests.memory_mib), f64::from(pod.gpu_demand_milli())];
    }

    fn score(&self, _pod: &Pod, node: &Node<'_>) -> Score {
        let inv = node.inv_capacity();
        let free = node.free_share();
        let (mut used, mut present) = (0.0, 0.0);
        for r in 0..3 {
            if inv[r] > 0.0 {
                used += at_most(1.0 - f64::from(free[r]) + self.request[r] * f64::from(inv[r]), 1.0);
                present += 1.0;
            }
        }
        let efficiency = if present > 0.0 { 1000.0 * used / present } else { 0.0 };
        let hot = self.hot.get(node.id() as usize).copied().unwrap_or_else(|| hotness(node));
        let risk = at_most(f64::from(hot) * self.sla_factor, 1000.0);
        let carbon = self.carbon_by_zone.get(node.zone as usize).copied().unwrap_or(0.0);
        let w = &self.cfg.weights;
        let value = (w.efficiency * efficiency - w.sla * risk - w.carbon * carbon) / (w.efficiency + w.sla + w.carbon);
        // Ties to even: one `f64.nearest` instruction in Wasm, where
        // `round` (ties away from zero) is a call into libm.
        Score::new(value.round_ties_even() as i64)
    }
}

/// The highest of a node's CPU, memory and mean GPU utilisation, ‰.
fn hotness(node: &Node<'_>) -> u16 {
    node.cpu_util_permille.max(node.memory_util_permille).min(1000).max(node.mean_gpu_util_permille())
}

/// `x.min(cap)` for values that are never NaN: a compare in Wasm, where
/// `f64::min` is a call to `fmin` (NaN handling differs from `f64.min`).
fn at_most(x: f64, cap: f64) -> f64 {
    if x < cap { x } else { cap }
}

#[cfg(test)]
mod tests {
    use tessera_sdk::{GpuRecord, NodeDelta, NodeRecord, Resources, ScorerHarness};

    use super::*;

    fn node(id: u32, zone: &str, free_cpu: u32, cpu_util: u16) -> NodeDelta {
        NodeDelta::Upsert(NodeRecord {
            id,
            zone: zone.into(),
            capacity: Resources { cpu_milli: 10_000, memory_mib: 0 },
            free: Resources { cpu_milli: free_cpu, memory_mib: 0 },
            gpus: vec![GpuRecord { free_milli: 1000, ..GpuRecord::default() }],
            cpu_util_permille: cpu_util,
            ready: true,
            ..NodeRecord::default()
        })
    }

    fn scores(cfg: &str, pod: &Pod) -> Vec<i64> {
        let mut h = ScorerHarness::<HybridScore>::new(cfg).unwrap();
        h.apply([node(0, "coal", 2_000, 100), node(1, "wind", 2_000, 100), node(2, "wind", 8_000, 900)]).unwrap();
        let (mut v, mut hints) = (Vec::new(), Vec::new());
        h.score(pod, &[0, 1, 2], &mut v, &mut hints).unwrap();
        v
    }

    #[test]
    fn each_term_moves_the_score() {
        let pod = Pod { requests: Resources { cpu_milli: 1_000, memory_mib: 0 }, tier: Tier::Soft, ..Pod::default() };
        // Efficiency only: node 0/1 would be (0.9 CPU + 0 GPU)/2 = 450‰, node 2 (0.3)/2 = 150‰.
        let v = scores(r#"{"weights": {"efficiency": 1, "sla": 0, "carbon": 0}}"#, &pod);
        assert_eq!(v, [450, 450, 150]);
        // Carbon only: coal 1000‰ of the dirtiest, wind 100‰.
        let v = scores(
            r#"{"weights": {"efficiency": 0, "sla": 0, "carbon": 1}, "carbon": {"coal": 800, "wind": 80}}"#,
            &pod,
        );
        assert_eq!(v, [-1000, -100, -100]);
        // SLA only: a soft pod doubles the risk of the hot node (900 -> 1000 cap).
        let v = scores(r#"{"weights": {"efficiency": 0, "sla": 1, "carbon": 0}}"#, &pod);
        assert_eq!(v, [-200, -200, -1000]);
        let batch = Pod { tier: Tier::Opportunistic, ..pod.clone() };
        assert_eq!(scores(r#"{"weights": {"efficiency": 0, "sla": 1, "carbon": 0}}"#, &batch), [-50, -50, -450]);
        // All three: the clean, cool, full-enough node 1 wins.
        let v = scores(r#"{"carbon": {"coal": 800, "wind": 80}}"#, &pod);
        assert!(v[1] > v[0] && v[1] > v[2], "{v:?}");
    }

    #[test]
    fn live_intensity_from_the_host_beats_the_configured_one() {
        let pod = Pod { requests: Resources { cpu_milli: 1_000, memory_mib: 0 }, ..Pod::default() };
        let cfg = r#"{"weights": {"efficiency": 0, "sla": 0, "carbon": 1}, "carbon": {"coal": 800, "wind": 80}}"#;
        let mut h = ScorerHarness::<HybridScore>::new(cfg).unwrap();
        h.apply([node(0, "coal", 2_000, 100), node(1, "wind", 2_000, 100), node(2, "hydro", 2_000, 100)]).unwrap();
        let run = |h: &mut ScorerHarness<HybridScore>| {
            let (mut v, mut hints) = (Vec::new(), Vec::new());
            h.score(&pod, &[0, 1, 2], &mut v, &mut hints).unwrap();
            v
        };
        // hydro is neither configured nor reported: the configured mean, 440.
        assert_eq!(run(&mut h), [-1000, -100, -550]);
        // The wind dropped and coal's plant is on: the host's values win.
        h.nodes_mut().set_zone_carbon("wind", Some(400)).unwrap();
        h.nodes_mut().set_zone_carbon("hydro", Some(20)).unwrap();
        assert_eq!(run(&mut h), [-1000, -500, -25]);
    }

    #[test]
    fn rejects_bad_weights_and_intensities() {
        assert!(ScorerHarness::<HybridScore>::new(r#"{"weights": {"efficiency": 0, "sla": 0, "carbon": 0}}"#).is_err());
        assert!(ScorerHarness::<HybridScore>::new(r#"{"weights": {"efficiency": -1}}"#).is_err());
        assert!(ScorerHarness::<HybridScore>::new(r#"{"carbon": {"x": -5}}"#).is_err());
        assert!(ScorerHarness::<HybridScore>::new(r#"{"colour": 1}"#).is_err());
    }
}
