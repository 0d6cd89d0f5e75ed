//! Telemetry-aware placement scorers. Each is exported as its own
//! component by `plugins/<name>`; the logic lives here, tested natively.
//!
//! - [`GpuAware`]: place on healthy, cool GPUs with device memory to
//!   spare; degraded GPUs are avoided (soft: a penalty; hard: a filter) and
//!   failed ones never fit.
//! - [`LoadAware`]: place by measured utilisation (CPU, memory, GPU), not
//!   by requests, so hot nodes cool down.
//! - [`HybridScore`]: resource efficiency, SLA-violation risk and zone
//!   carbon intensity, weighted by the policy.

use serde::Deserialize;
use tessera_sdk::{Gpu, GpuHealth, MAX_GPUS, Node, Pod, Score, Scorer};

mod hybrid;

pub use hybrid::{HybridConfig, HybridScore, HybridWeights};

/// How degraded GPUs are treated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Avoid {
    /// Score them down.
    #[default]
    Soft,
    /// Reject nodes where the pod would have to use one.
    Hard,
}

/// `gpu-aware` settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GpuAwareConfig {
    /// How degraded GPUs are treated.
    pub degraded: Avoid,
    /// Score lost for using a degraded GPU (soft mode), out of 1000.
    pub degraded_penalty: i64,
    /// A GPU whose device memory is at least this full (‰) is preferred
    /// after every other healthy GPU that fits.
    pub memory_high_permille: u16,
    /// Score lost at full device memory, out of 1000 (in proportion to the
    /// chosen GPUs' mean memory use).
    pub memory_penalty: i64,
}

impl Default for GpuAwareConfig {
    fn default() -> Self {
        Self { degraded: Avoid::Soft, degraded_penalty: 500, memory_high_permille: 900, memory_penalty: 300 }
    }
}

/// **gpu-aware**: for a GPU pod, the GPUs it would use are the fitting ones
/// that are healthy first, then not short of device memory, then coolest
/// (lowest utilisation), then least free (best fit); the node scores
/// `1000 − their mean utilisation (‰)`, minus the penalty if one of them is
/// degraded, minus `memory_penalty × their mean device memory use`. The GPU suggested for a
/// sharing pod is the first of them. CPU-only pods score 0 everywhere.
#[derive(Debug, Clone)]
pub struct GpuAware {
    cfg: GpuAwareConfig,
    /// Per node id: device memory in use per GPU, ‰ of its memory.
    memory: Vec<[u16; MAX_GPUS]>,
    /// Per node id: its GPUs in preference order, kept as nodes change,
    /// so picking is a short scan for the first GPUs that fit.
    prefs: Vec<Prefs>,
}

/// A node's GPUs in preference order as scoring reads them, in arrays of
/// fixed length: which GPUs fit a pod is one branch-free pass of fixed
/// trip count, and the pod's GPUs are the lowest bits of that mask. The
/// scan it replaces branched per GPU through the live node's records; in
/// Wasm each of its iterations also paid an epoch check, around which
/// Cranelift spilled the scan's state (docs/BENCHMARKS.md §4).
#[derive(Debug, Clone, Copy, Default)]
struct Prefs {
    /// Position of each in the node's GPUs.
    order: [u8; MAX_GPUS],
    /// Free milli-GPUs of each; −1 for a failed GPU and past the last, so
    /// that no request fits them ([`Gpu::fits`]).
    free: [i16; MAX_GPUS],
    /// Utilisation, ‰, at most 1000.
    util: [u16; MAX_GPUS],
    /// Device memory in use, ‰.
    memory: [u16; MAX_GPUS],
    /// GPU index.
    index: [u8; MAX_GPUS],
    /// Bit `j`: the `j`-th is degraded.
    degraded: u16,
    /// GPUs the node has.
    len: u8,
}

impl Prefs {
    /// Bit `j`: the `j`-th GPU can hold `need` milli more.
    #[inline(always)]
    fn fitting(&self, need: u32) -> u32 {
        // `need` is at most 1000 here; anything larger fits nothing.
        let need = i16::try_from(need).unwrap_or(i16::MAX);
        let mut mask = 0u32;
        for j in 0..MAX_GPUS {
            mask |= u32::from(self.free[j] >= need) << j;
        }
        mask
    }
}

impl GpuAware {
    /// Preference key of a GPU: healthy first, then not short of device
    /// memory, then coolest, then least free (best fit), then lowest index.
    fn key(&self, g: &Gpu, memory_permille: u16) -> (bool, bool, u16, u16, u8) {
        (
            g.health != GpuHealth::Healthy,
            memory_permille >= self.cfg.memory_high_permille,
            g.util_permille,
            g.free_milli,
            g.index,
        )
    }

    /// The GPUs the pod would use on `node`, in preference order, in a
    /// fixed array (no allocation per node: this runs for every candidate).
    fn pick<'a>(&self, pod: &Pod, node: &'a Node<'_>) -> ([Option<&'a Gpu>; MAX_GPUS], usize) {
        let need = pod.gpu_milli.min(1000);
        let gpus = node.gpus();
        let mut chosen: [Option<&Gpu>; MAX_GPUS] = [None; MAX_GPUS];
        let mut n = 0;
        let order = match self.prefs.get(node.id() as usize) {
            Some(p) if usize::from(p.len) == gpus.len() => &p.order[..gpus.len()],
            // Not seen through on_node (cannot happen in the harness): sort now.
            _ => return self.pick_sorted(pod, node),
        };
        for &i in order {
            let g = &gpus[usize::from(i)];
            if n == pod.gpu_count as usize {
                break;
            }
            if g.fits(need) {
                chosen[n] = Some(g);
                n += 1;
            }
        }
        (chosen, n)
    }

    fn pick_sorted<'a>(&self, pod: &Pod, node: &'a Node<'_>) -> ([Option<&'a Gpu>; MAX_GPUS], usize) {
        let need = pod.gpu_milli.min(1000);
        let mut chosen: [Option<&Gpu>; MAX_GPUS] = [None; MAX_GPUS];
        let mut n = 0;
        for g in node.gpus().iter().filter(|g| g.fits(need)) {
            chosen[n] = Some(g);
            n += 1;
        }
        let memory = self.memory.get(node.id() as usize).copied().unwrap_or([0; MAX_GPUS]);
        chosen[..n].sort_unstable_by_key(|g| g.map(|g| self.key(g, memory[usize::from(g.index)])));
        (chosen, n.min(pod.gpu_count as usize))
    }
}

impl Scorer for GpuAware {
    type Config = GpuAwareConfig;
    const NAME: &'static str = "gpu-aware";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "healthy, cool GPUs first; degraded GPUs avoided";
    const FILTER_REASONS: &'static [&'static str] = &["SCHED-GPU-DEGRADED"];
    const SUGGESTS_GPU: bool = true;
    const GPU_MEMORY: bool = true;
    const REUSE: tessera_sdk::Reuse = tessera_sdk::Reuse::NodeShape;

    fn new(cfg: GpuAwareConfig) -> Result<Self, String> {
        if !(0..=1000).contains(&cfg.degraded_penalty) || !(0..=1000).contains(&cfg.memory_penalty) {
            return Err("gpu-aware: degraded_penalty and memory_penalty must be within 0..=1000".into());
        }
        if cfg.memory_high_permille > 1000 {
            return Err("gpu-aware: memory_high_permille must be within 0..=1000".into());
        }
        Ok(Self { cfg, memory: Vec::new(), prefs: Vec::new() })
    }

    fn on_node(&mut self, node: &Node<'_>) {
        // Preference among all GPUs by (health, utilisation, free share,
        // index); which fit is decided per pod, in `pick`. Free share only
        // breaks ties, so this order stays right for every request size:
        // among the GPUs that fit, the first in this order is the best.
        let gpus = node.gpus();
        let mut memory = [0u16; MAX_GPUS];
        if let Some(meta) = node.meta()
            && meta.gpu_memory_mib > 0
        {
            for (m, &used) in memory.iter_mut().zip(&meta.gpu_memory_used_mib) {
                *m = (u64::from(used) * 1000 / u64::from(meta.gpu_memory_mib)).min(1000) as u16;
            }
        }
        let mut idx: Vec<u8> = (0..gpus.len() as u8).collect();
        idx.sort_unstable_by_key(|&i| self.key(&gpus[usize::from(i)], memory[usize::from(i)]));
        let i = node.id() as usize;
        if i >= self.prefs.len() {
            self.memory.resize(i + 1, [0; MAX_GPUS]);
            self.prefs.resize(i + 1, Prefs::default());
        }
        let mut prefs = Prefs { free: [-1; MAX_GPUS], len: idx.len() as u8, ..Prefs::default() };
        prefs.order[..idx.len()].copy_from_slice(&idx);
        for (j, &g) in idx.iter().enumerate() {
            let gpu = &gpus[usize::from(g)];
            // Free is at most 1000 milli: it fits in an i16.
            prefs.free[j] = if gpu.usable() { gpu.free_milli.min(1000) as i16 } else { -1 };
            prefs.util[j] = gpu.util_permille.min(1000);
            prefs.memory[j] = memory[usize::from(g)];
            prefs.index[j] = gpu.index;
            prefs.degraded |= u16::from(gpu.health == GpuHealth::Degraded) << j;
        }
        self.memory[i] = memory;
        self.prefs[i] = prefs;
    }

    /// Only `degraded: hard` rejects anything: otherwise the host need not
    /// ask it to filter.
    fn filter_reasons(&self) -> &'static [&'static str] {
        if self.cfg.degraded == Avoid::Hard { Self::FILTER_REASONS } else { &[] }
    }

    fn filter(&self, pod: &Pod, node: &Node<'_>) -> Result<(), u8> {
        if pod.gpu_count == 0 || self.cfg.degraded != Avoid::Hard {
            return Ok(());
        }
        let (picked, n) = self.pick(pod, node);
        let chosen = picked[..n].iter().flatten();
        if n < pod.gpu_count as usize || chosen.clone().any(|g| g.health == GpuHealth::Degraded) {
            Err(0)
        } else {
            Ok(())
        }
    }

    fn score(&self, pod: &Pod, node: &Node<'_>) -> Score {
        if pod.gpu_count == 0 {
            return Score::new(0);
        }
        let gpus = node.gpus();
        if let Some(p) = self.prefs.get(node.id() as usize)
            && usize::from(p.len) == gpus.len()
        {
            // The same GPUs as `pick`: the first `gpu_count` that fit, in
            // preference order. Sums and divisions in 32 bits (at most 16
            // GPUs of at most 1000 each).
            let fit = p.fitting(pod.gpu_milli.min(1000));
            if fit == 0 {
                return Score::new(0);
            }
            let j = fit.trailing_zeros() as usize;
            let first = p.index[j];
            let (mut n, mut util, mut mem, mut degraded) =
                (1u32, u32::from(p.util[j]), u32::from(p.memory[j]), p.degraded & (1 << j));
            let mut rest = fit & (fit - 1);
            while rest != 0 && n < pod.gpu_count {
                let j = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                n += 1;
                util += u32::from(p.util[j]);
                mem += u32::from(p.memory[j]);
                degraded |= p.degraded & (1 << j);
            }
            let value = 1000
                - i64::from(util / n)
                - if degraded != 0 { self.cfg.degraded_penalty } else { 0 }
                - self.cfg.memory_penalty * i64::from(mem / n) / 1000;
            return if pod.is_gpu_sharing() { Score::with_gpu(value, first) } else { Score::new(value) };
        }
        self.score_picked(pod, node)
    }
}

impl GpuAware {
    /// The score by way of [`Self::pick`] (a node not seen through
    /// `on_node`; what the one-pass score must agree with).
    fn score_picked(&self, pod: &Pod, node: &Node<'_>) -> Score {
        let (picked, n) = self.pick(pod, node);
        if n == 0 {
            return Score::new(0);
        }
        let chosen = picked[..n].iter().flatten();
        let util: i64 = chosen.clone().map(|g| i64::from(g.util_permille.min(1000))).sum::<i64>() / n as i64;
        let degraded = chosen.clone().any(|g| g.health == GpuHealth::Degraded);
        let memory = self
            .memory
            .get(node.id() as usize)
            .map_or(0, |m| chosen.clone().map(|g| i64::from(m[usize::from(g.index)])).sum::<i64>() / n as i64);
        let value = 1000
            - util
            - if degraded { self.cfg.degraded_penalty } else { 0 }
            - self.cfg.memory_penalty * memory / 1000;
        match picked[0] {
            Some(first) if pod.is_gpu_sharing() => Score::with_gpu(value, first.index),
            _ => Score::new(value),
        }
    }
}

/// `load-aware` settings: how much each measured utilisation weighs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoadAwareConfig {
    /// Weight of CPU utilisation.
    pub cpu_weight: u32,
    /// Weight of memory utilisation.
    pub memory_weight: u32,
    /// Weight of the mean GPU utilisation.
    pub gpu_weight: u32,
}

impl Default for LoadAwareConfig {
    fn default() -> Self {
        Self { cpu_weight: 1, memory_weight: 1, gpu_weight: 2 }
    }
}

/// **load-aware**: `1000 − weighted mean measured utilisation (‰)`, so the
/// least loaded node wins regardless of what has been requested on it.
#[derive(Debug, Clone)]
pub struct LoadAware {
    cfg: LoadAwareConfig,
}

impl Scorer for LoadAware {
    type Config = LoadAwareConfig;
    const NAME: &'static str = "load-aware";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "least measured CPU, memory and GPU utilisation";
    const REUSE: tessera_sdk::Reuse = tessera_sdk::Reuse::NodeShape;

    fn new(cfg: LoadAwareConfig) -> Result<Self, String> {
        if cfg.cpu_weight + cfg.memory_weight + cfg.gpu_weight == 0 {
            return Err("load-aware: at least one weight must be positive".into());
        }
        Ok(Self { cfg })
    }

    fn score(&self, _pod: &Pod, node: &Node<'_>) -> Score {
        let c = &self.cfg;
        let gpu_util = u64::from(node.mean_gpu_util_permille());
        let gpu_weight = if node.gpus().is_empty() { 0 } else { u64::from(c.gpu_weight) };
        let weights = u64::from(c.cpu_weight) + u64::from(c.memory_weight) + gpu_weight;
        let load = u64::from(c.cpu_weight) * u64::from(node.cpu_util_permille.min(1000))
            + u64::from(c.memory_weight) * u64::from(node.memory_util_permille.min(1000))
            + gpu_weight * gpu_util;
        Score::new(1000 - load.checked_div(weights).unwrap_or(0) as i64)
    }
}

#[cfg(test)]
mod tests {
    use tessera_sdk::{GpuRecord, NodeDelta, NodeRecord, Resources, ScorerHarness};

    use super::*;

    fn node(id: u32, cpu_util: u16, gpus: &[(u32, u16, GpuHealth)]) -> NodeDelta {
        NodeDelta::Upsert(NodeRecord {
            id,
            capacity: Resources { cpu_milli: 64_000, memory_mib: 262_144 },
            free: Resources { cpu_milli: 64_000, memory_mib: 262_144 },
            gpus: gpus
                .iter()
                .map(|&(free_milli, util_permille, health)| GpuRecord {
                    free_milli,
                    util_permille,
                    health,
                    ..GpuRecord::default()
                })
                .collect(),
            cpu_util_permille: cpu_util,
            ready: true,
            ..NodeRecord::default()
        })
    }

    fn pod(gpus: u32, milli: u32) -> Pod {
        Pod { gpu_count: gpus, gpu_milli: milli, ..Pod::default() }
    }

    use GpuHealth::{Degraded, Healthy};

    #[test]
    fn gpu_aware_prefers_cool_healthy_gpus() {
        let mut h = ScorerHarness::<GpuAware>::new("").unwrap();
        h.apply([
            node(0, 0, &[(1000, 900, Healthy), (1000, 100, Healthy)]),
            node(1, 0, &[(1000, 50, Degraded), (1000, 300, Healthy)]),
            node(2, 0, &[(1000, 20, Degraded)]),
        ])
        .unwrap();
        let (mut v, mut hints) = (Vec::new(), Vec::new());
        h.score(&pod(1, 500), &[0, 1, 2], &mut v, &mut hints).unwrap();
        // Node 0 uses its cool GPU 1 (100‰); node 1 its healthy GPU 1 (300‰);
        // node 2 only has a degraded GPU: 1000 - 20 - 500.
        assert_eq!(v, [900, 700, 480]);
        assert_eq!(hints, [1, 1, 0]);
        h.score(&pod(2, 1000), &[0, 1], &mut v, &mut hints).unwrap();
        assert_eq!(v, [500, 1000 - 175 - 500], "two GPUs: mean utilisation, degraded penalty");
    }

    #[test]
    fn gpu_aware_avoids_gpus_short_of_device_memory() {
        let mut h = ScorerHarness::<GpuAware>::new("").unwrap();
        let with_memory = |id, used: &[u32]| {
            let NodeDelta::Upsert(mut rec) = node(id, 0, &[(1000, 100, Healthy), (1000, 200, Healthy)]) else {
                unreachable!()
            };
            rec.gpus.iter_mut().for_each(|g| g.memory_mib = 16_000);
            rec.gpu_memory_used_mib = used.to_vec();
            NodeDelta::Upsert(rec)
        };
        // Node 0: GPU 0 is cooler but its memory is 95% used: GPU 1 is chosen.
        // Node 1: no memory reported: GPU 0, as before.
        h.apply([with_memory(0, &[15_200, 4_000]), with_memory(1, &[])]).unwrap();
        let (mut v, mut hints) = (Vec::new(), Vec::new());
        h.score(&pod(1, 300), &[0, 1], &mut v, &mut hints).unwrap();
        assert_eq!(hints, [1, 0]);
        // Node 0: 1000 - 200 - 300 × 250‰; node 1: 1000 - 100.
        assert_eq!(v, [1000 - 200 - 75, 900]);
        assert!(ScorerHarness::<GpuAware>::new(r#"{"memory_penalty": 1001}"#).is_err());
    }

    /// The one-pass score is the score of the GPUs `pick` chooses, on
    /// every shape of node and pod.
    #[test]
    fn gpu_aware_one_pass_score_is_the_picked_score() {
        let mut h = ScorerHarness::<GpuAware>::new(r#"{"memory_penalty": 400}"#).unwrap();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let nodes: Vec<NodeDelta> = (0..400)
            .map(|id| {
                // Up to 16 GPUs (the most a node has), some degraded, some
                // failed, free shares on and around the requests' edges.
                let gpus: Vec<(u32, u16, GpuHealth)> = (0..1 + next(16))
                    .map(|_| {
                        let health = [Degraded, GpuHealth::Failed, Healthy, Healthy, Healthy][next(5) as usize];
                        ([0, 1, 249, 250, 500, 999, 1000][next(7) as usize], next(1001) as u16, health)
                    })
                    .collect();
                let NodeDelta::Upsert(mut rec) = node(id, 0, &gpus) else { unreachable!() };
                rec.gpus.iter_mut().for_each(|g| g.memory_mib = 16_000);
                rec.gpu_memory_used_mib = rec.gpus.iter().map(|_| next(16_001) as u32).collect();
                NodeDelta::Upsert(rec)
            })
            .collect();
        h.apply(nodes).unwrap();
        for gpus in 1..=16 {
            for milli in [0, 1, 250, 500, 999, 1000] {
                let p = pod(gpus, milli);
                for id in 0..400 {
                    let n = h.nodes().get(id).unwrap();
                    let (fast, picked) = (h.plugin().score(&p, &n), h.plugin().score_picked(&p, &n));
                    assert_eq!((fast.value, fast.gpu), (picked.value, picked.gpu), "node {id}, {gpus} × {milli}");
                }
            }
        }
    }

    #[test]
    fn gpu_aware_declares_a_filter_reason_only_in_hard_mode() {
        let soft = ScorerHarness::<GpuAware>::new("null").unwrap();
        assert!(soft.plugin().filter_reasons().is_empty(), "soft mode rejects nothing: the host need not ask");
        let hard = ScorerHarness::<GpuAware>::new(r#"{"degraded": "hard"}"#).unwrap();
        assert_eq!(hard.plugin().filter_reasons(), ["SCHED-GPU-DEGRADED"]);
    }

    #[test]
    fn gpu_aware_hard_mode_filters_degraded() {
        let mut h = ScorerHarness::<GpuAware>::new(r#"{"degraded": "hard"}"#).unwrap();
        h.apply([node(0, 0, &[(1000, 50, Degraded), (1000, 300, Healthy)]), node(1, 0, &[(1000, 20, Degraded)])])
            .unwrap();
        let mut out = Vec::new();
        h.filter(&pod(1, 1000), &[0, 1], &mut out).unwrap();
        assert_eq!(out, [0, 1], "node 0 has a healthy GPU; node 1 only a degraded one");
        h.filter(&pod(2, 1000), &[0], &mut out).unwrap();
        assert_eq!(out, [1], "two GPUs would include the degraded one");
        assert!(ScorerHarness::<GpuAware>::new(r#"{"degraded_penalty": 2000}"#).is_err());
        assert!(ScorerHarness::<GpuAware>::new(r#"{"degraded": "maybe"}"#).is_err());
    }

    #[test]
    fn load_aware_follows_measured_load() {
        let mut h = ScorerHarness::<LoadAware>::new("").unwrap();
        h.apply([node(0, 800, &[(1000, 900, Healthy)]), node(1, 100, &[(0, 100, Healthy)]), node(2, 500, &[])])
            .unwrap();
        let (mut v, mut hints) = (Vec::new(), Vec::new());
        h.score(&pod(0, 0), &[0, 1, 2], &mut v, &mut hints).unwrap();
        // (cpu + mem + 2 gpu) / 4: node 0 (800 + 0 + 1800)/4 = 650; node 1
        // (100 + 0 + 200)/4 = 75 (fully requested GPU, but idle); node 2 has
        // no GPU: (500 + 0)/2 = 250.
        assert_eq!(v, [350, 925, 750]);
        assert!(ScorerHarness::<LoadAware>::new(r#"{"cpu_weight":0,"memory_weight":0,"gpu_weight":0}"#).is_err());
    }
}
