//! **FGD** (fragmentation gradient descent): place the pod where it
//! increases the node's expected fragmentation `F_n(M)` the least, and on a
//! sharing pod's node, on the GPU that does.
//!
//! `F_n(M) = Σ_m p_m F_n(m)` over the target workload M (shapes with
//! weights), where `F_n(m)` is, if shape m needs GPUs and fits on n (CPU,
//! GPU model and GPU share all satisfied), the free share on GPUs with less
//! free than m's `gpu_milli`, and otherwise (and for CPU-only shapes) all
//! of n's free GPU share. The workload comes from the host in the plugin's
//! configuration; without one, the plugin learns it from the pods it is
//! asked to place (the most frequent shapes covering 95% of them, refreshed
//! as their number doubles and every 1,024 pods).
//!
//! As in the published simulator, a node scores
//! `⌊100·sigmoid((F_before − F_after)/1000)⌋` (50 when nothing changes), for
//! a sharing pod the best over its fitting GPUs (lowest index on ties); the
//! coarse integer scores tie often, and ties are the host's to break —
//! unless `spare_gpu_nodes` (and `balance_cpu`) break them here: CPU-only
//! pods to the nodes with the least GPU share free (with `balance_cpu`:
//! the most CPU to spare beyond what the free GPUs will need), whole-GPU
//! pods to the nodes whose CPU left per GPU left stays closest to the
//! workload's, and (with `fill_residue`) sharing pods to the GPU whose gap
//! is left most fillable by the workload's common sizes — or, with
//! `residue_first` too, sharing pods go by that residue first and FGD only
//! decides among GPUs that leave it alike. On the openb traces this beats
//! the published FGD on every workload (by 11–14% with `residue_first`).

use serde::Deserialize;
use tessera_sdk::{Node, NodeTable, Pod, Score, Scorer, Sym, residue};

use crate::model_syms;

/// One shape of the target workload.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ShapeConfig {
    /// CPU request, millicores.
    pub cpu_milli: u32,
    /// GPUs requested.
    pub gpu_count: u32,
    /// Share of each GPU, milli.
    pub gpu_milli: u32,
    /// Allowed models (empty = any).
    #[serde(default)]
    pub models: Vec<String>,
    /// Weight `p_m` (its frequency).
    pub weight: f64,
}

/// FGD settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FgdConfig {
    /// The target workload; empty: learned from the pods placed.
    #[serde(default)]
    pub workload: Vec<ShapeConfig>,
    /// Among nodes FGD scores alike, send a CPU-only pod where the least
    /// GPU share is free, so CPU stays where GPUs will need it (the score
    /// becomes `1000 × FGD + tie-break`; off: the published scores).
    #[serde(default)]
    pub spare_gpu_nodes: bool,
    /// With `spare_gpu_nodes`, among nodes FGD scores alike a whole-GPU pod
    /// goes where the CPU left per GPU share left is closest to the target
    /// workload's (so no node runs out of CPU with GPUs free, or the other
    /// way round), and a CPU-only pod where the CPU left most exceeds what
    /// the free GPU share will need.
    #[serde(default)]
    pub balance_cpu: bool,
    /// With `spare_gpu_nodes`, among nodes (and GPUs) FGD scores alike a
    /// sharing pod goes where the *residue* falls most: the share of a GPU
    /// gap that no sum of the workload's common sharing sizes (≥ 1.5% of
    /// its GPU pods, and at least a quarter as frequent as the most
    /// frequent one that fits the gap) can fill.
    #[serde(default)]
    pub fill_residue: bool,
    /// With `fill_residue`, the residue comes first: a sharing pod goes
    /// where its GPU gap's residue falls most (rises least), and FGD only
    /// decides among those. A pod that completes a packing the common sizes
    /// can finish is then never sent where it strands a share they cannot
    /// fill (0.32 beside a lone 0.47 leaves 0.21), however FGD ranks it.
    #[serde(default)]
    pub residue_first: bool,
}

/// Shape key of a pod for the learned workload.
type ShapeKey = (u32, u32, u32, Vec<String>);

/// Pods whose shapes the learned workload keeps: those covering this
/// share of the pods seen.
const LEARNED_COVERAGE: f64 = 0.95;

#[derive(Debug, Clone)]
struct Shape {
    cpu_milli: u32,
    gpu_count: u32,
    /// Index of the shape's `gpu_milli` in `Fgd::levels` (GPU shapes only).
    level: usize,
    models: Option<Vec<Sym>>,
    weight: f64,
}

/// The plugin.
#[derive(Debug, Default)]
pub struct Fgd {
    config: Vec<ShapeConfig>,
    shapes: Vec<Shape>,
    /// Distinct `gpu_milli` of the GPU shapes.
    levels: Vec<u32>,
    symbols: usize,
    /// Bumped whenever `shapes` are rebuilt; cache entries of another
    /// generation are stale.
    generation: u32,
    scratch: std::cell::RefCell<Agg>,
    /// Per node id: `(generation, F before placement, shapes whose model
    /// the node has)`; a node's entry is dropped when the node changes.
    cache: std::cell::RefCell<Vec<(u32, f64, u64)>>,
    /// Distinct pod kinds `(scored CPU, GPU count, GPU share)` of the
    /// workload: a node's score depends on nothing else of the pod.
    kinds: Vec<(u32, u32, u32)>,
    /// The current pod's kind, if it is one of `kinds`.
    kind: Option<usize>,
    /// Per node id: bumped whenever the node changes.
    epochs: Vec<u32>,
    /// Per node id × kind: `(generation, epoch, score, GPU)` of the last
    /// score of that kind on that node. Between two changes of a node,
    /// thousands of pods are scored on it, mostly of a few dozen kinds, so
    /// most scores are looked up, not recomputed (same values either way).
    memo: std::cell::RefCell<Vec<(u32, u32, i64, u8)>>,
    /// `ln(k / (100 − k))` for k = 1..=99: see [`sigmoid_score`].
    thresholds: Vec<f64>,
    /// Learning the workload: pods seen per shape (`None`: configured).
    learned: Option<std::collections::HashMap<ShapeKey, u64>>,
    /// Pods seen while learning.
    seen: u64,
    /// See [`FgdConfig::spare_gpu_nodes`].
    spare_gpu_nodes: bool,
    /// See [`FgdConfig::balance_cpu`].
    balance_cpu: bool,
    /// See [`FgdConfig::fill_residue`].
    fill_residue: bool,
    /// See [`FgdConfig::residue_first`].
    residue_first: bool,
    /// `residue[x]`: the part of a free share `x` no sum of common sharing
    /// sizes fills (0 for a whole free GPU); see [`residues`].
    residue: Vec<u16>,
}

/// `residue[x]` for x in 0..=1000 under the workload `shapes` (see
/// [`tessera_sdk::residue`]).
pub(crate) fn residues(shapes: &[ShapeConfig]) -> Vec<u16> {
    let gpu_weight: f64 = shapes.iter().filter(|s| s.gpu_count > 0).map(|s| s.weight).sum();
    let sharing = shapes.iter().filter(|s| s.gpu_count == 1).map(|s| (s.gpu_milli, s.weight));
    residue::gap_residues(&residue::common_sizes(sharing, gpu_weight))
}

/// `⌊100·sigmoid(x)⌋` without `exp` per call: it is the number of k in
/// 1..=99 with `sigmoid(x) ≥ k/100`, i.e. `x ≥ ln(k/(100−k))`.
pub(crate) fn sigmoid_score(thresholds: &[f64], x: f64) -> i64 {
    thresholds.partition_point(|&t| t <= x) as i64
}

/// Shapes beyond this many share the last bit of the model mask (which
/// then checks their models the slow way).
const MASK_BITS: usize = 63;

/// A node's free GPU shares summarised for every level `g` at once:
/// `F(m)` needs only "how many GPUs have at least g free" and "how much is
/// free on GPUs with less than g". Changing one GPU updates it in O(levels),
/// so trying each GPU for a sharing pod costs O(levels + shapes), not
/// O(GPUs × shapes).
#[derive(Debug, Default, Clone)]
struct Agg {
    total: u32,
    count_ge: Vec<u32>,
    sum_lt: Vec<u32>,
}

impl Agg {
    /// `levels` ascending; O(GPUs·log + levels) by walking the sorted shares.
    fn fill(&mut self, free: &[u32], levels: &[u32]) {
        let mut sorted = [0u32; tessera_sdk::MAX_GPUS];
        let sorted = &mut sorted[..free.len()];
        sorted.copy_from_slice(free);
        sorted.sort_unstable();
        self.total = free.iter().sum();
        self.count_ge.clear();
        self.sum_lt.clear();
        let (mut k, mut below) = (0, 0);
        for &g in levels {
            while k < sorted.len() && sorted[k] < g {
                below += sorted[k];
                k += 1;
            }
            self.count_ge.push((sorted.len() - k) as u32);
            self.sum_lt.push(below);
        }
    }

    /// One GPU's free share goes from `a` to `b`.
    fn change(&mut self, a: u32, b: u32, levels: &[u32]) {
        self.total = self.total - a + b;
        for (i, &g) in levels.iter().enumerate() {
            self.count_ge[i] = self.count_ge[i] - u32::from(a >= g) + u32::from(b >= g);
            self.sum_lt[i] = self.sum_lt[i] - if a < g { a } else { 0 } + if b < g { b } else { 0 };
        }
    }
}

impl Fgd {
    /// Bit `i` set when shape `i` allows `model` (shapes past
    /// [`MASK_BITS`] always set: they are checked in `weighted`).
    fn model_mask(&self, model: Sym) -> u64 {
        self.shapes.iter().enumerate().fold(0, |mask, (i, s)| {
            let ok = i >= MASK_BITS || s.models.as_ref().is_none_or(|m| m.contains(&model));
            mask | (u64::from(ok) << i.min(MASK_BITS))
        })
    }

    /// `F_n(M)` for a node summarised by `agg`, with `cpu_free`, `model`
    /// and its [`Fgd::model_mask`].
    fn weighted(&self, agg: &Agg, cpu_free: u32, model: Sym, mask: u64) -> f64 {
        self.shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let frag = if s.gpu_count == 0 {
                    agg.total
                } else {
                    let model_ok = if i < MASK_BITS {
                        mask & (1 << i) != 0
                    } else {
                        s.models.as_ref().is_none_or(|m| m.contains(&model))
                    };
                    let fits = s.cpu_milli <= cpu_free && model_ok && agg.count_ge[s.level] >= s.gpu_count;
                    if fits { agg.sum_lt[s.level] } else { agg.total }
                };
                s.weight * f64::from(frag)
            })
            .sum()
    }
}

impl Scorer for Fgd {
    type Config = FgdConfig;
    const NAME: &'static str = "fgd";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "least increase of expected GPU fragmentation (FGD, ATC'23)";
    const SUGGESTS_GPU: bool = true;

    fn new(config: FgdConfig) -> Result<Self, String> {
        if let Some(s) =
            config.workload.iter().find(|s| !(s.weight.is_finite() && s.weight >= 0.0) || s.gpu_milli > 1000)
        {
            return Err(format!("fgd: invalid shape {s:?}: weight must be finite and >= 0, gpu_milli <= 1000"));
        }
        let thresholds = (1..100).map(|k| (f64::from(k) / f64::from(100 - k)).ln()).collect();
        let learned = config.workload.is_empty().then(std::collections::HashMap::new);
        Ok(Self {
            config: config.workload,
            symbols: usize::MAX,
            thresholds,
            learned,
            spare_gpu_nodes: config.spare_gpu_nodes,
            balance_cpu: config.balance_cpu,
            fill_residue: config.fill_residue,
            residue_first: config.residue_first,
            ..Self::default()
        })
    }

    fn on_node(&mut self, node: &Node<'_>) {
        self.forget(node.id());
    }

    fn on_remove(&mut self, id: tessera_sdk::NodeId) {
        self.forget(id);
    }

    fn prepare(&mut self, pod: &Pod, nodes: &NodeTable) {
        self.learn(pod);
        // Model names resolve against the mirror's symbols, which only grow.
        if self.symbols != nodes.symbol_count() {
            self.symbols = nodes.symbol_count();
            let mut levels: Vec<u32> = self.config.iter().filter(|c| c.gpu_count > 0).map(|c| c.gpu_milli).collect();
            levels.sort_unstable();
            levels.dedup();
            self.shapes = self
                .config
                .iter()
                .map(|c| Shape {
                    cpu_milli: c.cpu_milli,
                    gpu_count: c.gpu_count,
                    level: levels.binary_search(&c.gpu_milli).unwrap_or(0),
                    models: model_syms(&c.models, nodes),
                    weight: c.weight,
                })
                .collect();
            self.levels = levels;
            self.residue = residues(&self.config);
            self.generation += 1;
            self.kinds = self
                .config
                .iter()
                .map(|c| (c.cpu_milli.max(crate::NONZERO_CPU_MILLI), c.gpu_count, c.gpu_milli))
                .collect();
            self.kinds.sort_unstable();
            self.kinds.dedup();
            self.memo.get_mut().clear();
        }
        let key = (crate::scored_cpu(pod), pod.gpu_count, pod.gpu_milli);
        self.kind = self.kinds.binary_search(&key).ok();
    }

    fn score(&self, pod: &Pod, node: &Node<'_>) -> Score {
        let i = node.id() as usize;
        let epoch = self.epochs.get(i).copied().unwrap_or(0);
        let slot = self.kind.map(|k| i * self.kinds.len() + k);
        if let Some(slot) = slot
            && let Some(&(generation, e, score, gpu)) = self.memo.borrow().get(slot)
            && generation == self.generation
            && e == epoch
        {
            return if gpu == u8::MAX { Score::new(score) } else { Score::with_gpu(score, gpu) };
        }
        let fresh = self.compute(pod, node);
        if let Some(slot) = slot {
            let mut memo = self.memo.borrow_mut();
            if slot >= memo.len() {
                memo.resize(slot + 1, (0, 0, 0, u8::MAX));
            }
            memo[slot] = (self.generation, epoch, fresh.value, fresh.gpu.unwrap_or(u8::MAX));
        }
        fresh
    }
}

impl Fgd {
    /// Bumped whenever the target workload's shapes are rebuilt (a
    /// learned workload refreshed, new model names): terms computed under
    /// another generation are stale.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// After [`Scorer::prepare`]: the index of the pod's kind (scored CPU,
    /// GPU count, GPU share) among the workload's, if it is one; a node's
    /// [`Fgd::parts`] depend on nothing else of the pod.
    pub fn kind(&self) -> Option<usize> {
        self.kind
    }

    /// How many kinds the workload has.
    pub fn kind_count(&self) -> usize {
        self.kinds.len()
    }

    /// CPU (millicores) per thousandth of GPU the target workload's GPU
    /// shapes ask for, weighted.
    fn cpu_per_gpu_milli(&self) -> f64 {
        let (mut cpu, mut gpu) = (0.0, 0.0);
        for c in self.config.iter().filter(|c| c.gpu_count > 0) {
            cpu += c.weight * f64::from(c.cpu_milli);
            gpu += c.weight * f64::from(c.gpu_count * c.gpu_milli.min(1000));
        }
        if gpu > 0.0 { cpu / gpu } else { 0.0 }
    }

    /// Counts the pod's shape while learning; rebuilds the workload as the
    /// pods seen double and every 1,024 pods.
    fn learn(&mut self, pod: &Pod) {
        let Some(counts) = self.learned.as_mut() else { return };
        let mut models = pod.allowed_models.clone();
        models.sort();
        *counts.entry((pod.requests.cpu_milli, pod.gpu_count, pod.gpu_milli, models)).or_insert(0) += 1;
        self.seen += 1;
        if !(self.seen.is_power_of_two() || self.seen.is_multiple_of(1024)) {
            return;
        }
        // Most frequent first, larger first on ties (independent of order).
        let mut by: Vec<(&ShapeKey, &u64)> = counts.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1).then_with(|| b.0.cmp(a.0)));
        let mut kept = Vec::new();
        let mut covered = 0u64;
        for (k, &c) in by {
            if covered as f64 >= LEARNED_COVERAGE * self.seen as f64 {
                break;
            }
            covered += c;
            kept.push((k.clone(), c));
        }
        self.config = kept
            .into_iter()
            .map(|((cpu_milli, gpu_count, gpu_milli, models), c)| ShapeConfig {
                cpu_milli,
                gpu_count,
                gpu_milli: gpu_milli.min(1000),
                models,
                weight: c as f64 / covered as f64,
            })
            .collect();
        // Rebuild shapes, levels and kinds on this call.
        self.symbols = usize::MAX;
    }

    fn forget(&mut self, id: tessera_sdk::NodeId) {
        let i = id as usize;
        if let Some(entry) = self.cache.get_mut().get_mut(i) {
            entry.0 = 0;
        }
        if i >= self.epochs.len() {
            self.epochs.resize(i + 1, 0);
        }
        self.epochs[i] = self.epochs[i].wrapping_add(1);
    }

    fn compute(&self, pod: &Pod, node: &Node<'_>) -> Score {
        self.parts(pod, node).score()
    }

    /// What FGD found for `pod` on `node`, term by term: the score it
    /// gives ([`Parts::score`]) and what a learned policy reads as
    /// features (`tessera-learned-policy`).
    pub fn parts(&self, pod: &Pod, node: &Node<'_>) -> Parts {
        let mut agg = self.scratch.borrow_mut();
        let gpus = node.gpus();
        let free = |g: &tessera_sdk::Gpu| if g.usable() { u32::from(g.free_milli) } else { 0 };
        let mut frees = [0u32; tessera_sdk::MAX_GPUS];
        let mut n = 0;
        for g in gpus.iter().filter(|g| g.usable()) {
            frees[n] = u32::from(g.free_milli);
            n += 1;
        }
        let frees = &frees[..n];
        agg.fill(frees, &self.levels);
        let cpu_after = node.free.cpu_milli.saturating_sub(crate::scored_cpu(pod));
        let (before, mask) = {
            let mut cache = self.cache.borrow_mut();
            let i = node.id() as usize;
            if i >= cache.len() {
                cache.resize(i + 1, (0, 0.0, 0));
            }
            if cache[i].0 != self.generation {
                let mask = self.model_mask(node.gpu_model);
                cache[i] = (self.generation, self.weighted(&agg, node.free.cpu_milli, node.gpu_model, mask), mask);
            }
            (cache[i].1, cache[i].2)
        };
        let score = |after: f64| sigmoid_score(&self.thresholds, (before - after) / 1000.0);
        let wholes = frees.iter().filter(|&&f| f == 1000).count() as u32;
        let by_residue = self.spare_gpu_nodes && self.fill_residue;
        let mut parts = Parts {
            kind: PartsKind::Plain,
            fgd: 0,
            delta: 0.0,
            residue_drop: 0,
            tie: 0,
            gpu: None,
            gpu_free_after: 0,
            whole_gpus_after: 0,
            cpu_after,
        };
        if pod.is_gpu_sharing() {
            // Each fitting GPU in index order; the best integer score wins,
            // the lowest index on ties. GPUs with equal free share give equal
            // results, so each free value is tried once.
            // With `fill_residue`: ties go to the GPU whose residue falls most
            // (with `residue_first`, FGD breaks the residue's ties instead).
            let residue_drop = |a: u32, b: u32| {
                let r = |x: u32| i64::from(self.residue.get(x as usize).copied().unwrap_or(0));
                r(a) - r(b)
            };
            let first = by_residue && self.residue_first;
            let rank = |s: i64, drop: i64| if first { (drop, s) } else { (s, drop) };
            let mut best: Option<(i64, i64, u8, f64, u32)> = None;
            let mut tried = [u32::MAX; tessera_sdk::MAX_GPUS];
            for (k, g) in gpus.iter().filter(|g| g.usable()).enumerate() {
                let a = free(g);
                if a < pod.gpu_milli || tried[..k].contains(&a) {
                    continue;
                }
                tried[k] = a;
                let b = a - pod.gpu_milli;
                agg.change(a, b, &self.levels);
                let after = self.weighted(&agg, cpu_after, node.gpu_model, mask);
                agg.change(b, a, &self.levels);
                let s = score(after);
                let drop = if by_residue { residue_drop(a, b) } else { 0 };
                if best.is_none_or(|(bs, bd, ..)| rank(s, drop) > rank(bs, bd)) {
                    best = Some((s, drop, g.index, before - after, wholes - u32::from(a == 1000)));
                }
            }
            parts.kind = match (by_residue, first) {
                (true, true) => PartsKind::ResidueFirst,
                (true, false) => PartsKind::ResidueTie,
                _ => PartsKind::Plain,
            };
            match best {
                Some((s, drop, gpu, delta, wholes)) => {
                    parts.fgd = s;
                    parts.residue_drop = drop;
                    parts.gpu = Some(gpu);
                    parts.delta = delta;
                    parts.gpu_free_after = agg.total - pod.gpu_milli;
                    parts.whole_gpus_after = wholes;
                }
                None => parts.kind = PartsKind::Unfit,
            }
            return parts;
        }
        // CPU-only or whole GPUs: the first entirely free GPUs (which ones
        // does not change the free shares).
        for _ in 0..pod.gpu_count.min(wholes) {
            agg.change(1000, 0, &self.levels);
        }
        let after = self.weighted(&agg, cpu_after, node.gpu_model, mask);
        parts.fgd = score(after);
        parts.delta = before - after;
        parts.gpu_free_after = agg.total;
        parts.whole_gpus_after = wholes - pod.gpu_count.min(wholes);
        if self.spare_gpu_nodes {
            parts.kind = PartsKind::TieBroken;
            // 999 on a node with no GPU share free, 0 with all of it free.
            parts.tie = if pod.gpu_count == 0 && !frees.is_empty() && self.balance_cpu {
                // Where the CPU left most exceeds what the free GPUs need.
                let surplus = f64::from(cpu_after) - self.cpu_per_gpu_milli() * f64::from(agg.total);
                let cap = f64::from(node.capacity.cpu_milli.max(1));
                (500.0 + 499.0 * surplus / cap).clamp(0.0, 999.0) as i64
            } else if pod.gpu_count == 0 && !frees.is_empty() {
                let total = 1000 * frees.len() as i64;
                999 * (total - i64::from(agg.total)) / total
            } else if pod.gpu_count > 0 && pod.gpu_milli >= 1000 && self.balance_cpu && agg.total > 0 {
                // CPU left per GPU left close to the workload's.
                let ratio = f64::from(cpu_after) / f64::from(agg.total);
                let want = self.cpu_per_gpu_milli();
                (999.0 - (ratio - want).abs() / want.max(1e-9) * 2000.0).clamp(0.0, 999.0) as i64
            } else {
                0
            };
        }
        parts
    }
}

/// How [`Parts`] make a score.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartsKind {
    /// The published score alone.
    Plain,
    /// A sharing pod that fits no GPU of the node: 0.
    Unfit,
    /// `1000 × FGD + tie` (`spare_gpu_nodes`, not a sharing pod).
    TieBroken,
    /// A sharing pod, `1000 × FGD + residue term` (`fill_residue`).
    ResidueTie,
    /// A sharing pod, the residue's drop first (`residue_first`).
    ResidueFirst,
}

/// FGD's terms for one pod on one node ([`Fgd::parts`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Parts {
    /// How they make the score.
    pub kind: PartsKind,
    /// The published integer score, `⌊100·sigmoid(delta/1000)⌋`.
    pub fgd: i64,
    /// `F_n(M)` before minus after placement (milli-GPUs; positive: the
    /// node fragments less).
    pub delta: f64,
    /// The residue's drop on the chosen GPU (sharing pods with
    /// `fill_residue`), −1000..=1000.
    pub residue_drop: i64,
    /// The tie-break term, 0..=999 (`spare_gpu_nodes`, pods that do not
    /// share a GPU).
    pub tie: i64,
    /// The GPU suggested for a sharing pod.
    pub gpu: Option<u8>,
    /// The node's usable free GPU share after placement, milli.
    pub gpu_free_after: u32,
    /// Its entirely free usable GPUs after placement.
    pub whole_gpus_after: u32,
    /// Its free CPU after placement (the scored request), millicores.
    pub cpu_after: u32,
}

impl Parts {
    /// The score FGD gives.
    pub fn score(&self) -> Score {
        let with_gpu = |v: i64| match self.gpu {
            Some(g) => Score::with_gpu(v, g),
            None => Score::new(v),
        };
        match self.kind {
            PartsKind::Unfit => Score::new(0),
            PartsKind::Plain => with_gpu(self.fgd),
            PartsKind::TieBroken => Score::new(self.fgd * 1000 + self.tie),
            // 500 when the residue stays, 999 when it falls by 998+.
            PartsKind::ResidueTie => with_gpu(self.fgd * 1000 + (500 + self.residue_drop / 2).clamp(0, 999)),
            // The drop (−1000..=1000) in hundreds, FGD's 0..=99 below.
            PartsKind::ResidueFirst => with_gpu((self.residue_drop + 1000) * 100 + self.fgd),
        }
    }
}
