//! **FGD** (fragmentation gradient descent): place the pod where it
//! increases the node's expected fragmentation `F_n(M)` the least, and on a
//! sharing pod's node, on the GPU that does.
//!
//! `F_n(M) = Σ_m p_m F_n(m)` over the target workload M (shapes with
//! weights), where `F_n(m)` is, if shape m needs GPUs and fits on n (CPU,
//! GPU model and GPU share all satisfied), the free share on GPUs with less
//! free than m's `gpu_milli`, and otherwise (and for CPU-only shapes) all
//! of n's free GPU share. The workload comes from the host in the plugin's
//! configuration.
//!
//! As in the published simulator, a node scores
//! `⌊100·sigmoid((F_before − F_after)/1000)⌋` (50 when nothing changes), for
//! a sharing pod the best over its fitting GPUs (lowest index on ties); the
//! coarse integer scores tie often, and ties are the host's to break.

use serde::Deserialize;
use tessera_sdk::{Node, NodeTable, Pod, Score, Scorer, Sym};

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
    /// The target workload.
    pub workload: Vec<ShapeConfig>,
}

#[derive(Debug, Clone)]
struct Shape {
    cpu_milli: u32,
    gpu_count: u32,
    gpu_milli: u32,
    models: Option<Vec<Sym>>,
    weight: f64,
}

/// The plugin.
#[derive(Debug, Default)]
pub struct Fgd {
    config: Vec<ShapeConfig>,
    shapes: Vec<Shape>,
    symbols: usize,
}

/// Fragment amount of a node described by its usable GPUs' free shares, its
/// free CPU and its model, for one shape.
fn fragment(free: &[u32], total: u32, cpu_free: u32, model: Sym, s: &Shape) -> u32 {
    if s.gpu_count == 0 {
        return total;
    }
    let cpu_ok = s.cpu_milli <= cpu_free;
    let model_ok = s.models.as_ref().is_none_or(|m| m.contains(&model));
    let gpu_ok = if s.gpu_milli < 1000 {
        free.iter().any(|&f| f >= s.gpu_milli)
    } else {
        free.iter().filter(|&&f| f == 1000).count() as u32 >= s.gpu_count
    };
    if cpu_ok && model_ok && gpu_ok { free.iter().filter(|&&f| f < s.gpu_milli).sum() } else { total }
}

impl Fgd {
    fn weighted(&self, free: &[u32], cpu_free: u32, model: Sym) -> f64 {
        let total: u32 = free.iter().sum();
        self.shapes.iter().map(|s| s.weight * f64::from(fragment(free, total, cpu_free, model, s))).sum()
    }
}

impl Scorer for Fgd {
    type Config = FgdConfig;
    const NAME: &'static str = "fgd";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "least increase of expected GPU fragmentation (FGD, ATC'23)";
    const SUGGESTS_GPU: bool = true;

    fn new(config: FgdConfig) -> Result<Self, String> {
        if config.workload.is_empty() {
            return Err("fgd: `workload` (the target shapes and weights) is required".into());
        }
        if let Some(s) =
            config.workload.iter().find(|s| !(s.weight.is_finite() && s.weight >= 0.0) || s.gpu_milli > 1000)
        {
            return Err(format!("fgd: invalid shape {s:?}: weight must be finite and >= 0, gpu_milli <= 1000"));
        }
        Ok(Self { config: config.workload, shapes: Vec::new(), symbols: usize::MAX })
    }

    fn prepare(&mut self, _pod: &Pod, nodes: &NodeTable) {
        // Model names resolve against the mirror's symbols, which only grow.
        if self.symbols != nodes.symbol_count() {
            self.symbols = nodes.symbol_count();
            self.shapes = self
                .config
                .iter()
                .map(|c| Shape {
                    cpu_milli: c.cpu_milli,
                    gpu_count: c.gpu_count,
                    gpu_milli: c.gpu_milli,
                    models: model_syms(&c.models, nodes),
                    weight: c.weight,
                })
                .collect();
        }
    }

    fn score(&self, pod: &Pod, node: &Node<'_>) -> Score {
        let gpus = node.gpus();
        let mut free: Vec<u32> = gpus.iter().filter(|g| g.usable()).map(|g| u32::from(g.free_milli)).collect();
        let index: Vec<u8> = gpus.iter().filter(|g| g.usable()).map(|g| g.index).collect();
        let cpu_after = node.free.cpu_milli.saturating_sub(crate::scored_cpu(pod));
        let before = self.weighted(&free, node.free.cpu_milli, node.gpu_model);
        let score = |after: f64| (100.0 / (1.0 + (-(before - after) / 1000.0).exp())) as i64;
        if pod.is_gpu_sharing() {
            // Each fitting GPU in index order; the best integer score wins,
            // the lowest index on ties. GPUs with equal free share give equal
            // results, so each free value is tried once.
            let mut best: Option<(i64, u8)> = None;
            let mut tried: Vec<u32> = Vec::with_capacity(free.len());
            for i in 0..free.len() {
                if free[i] < pod.gpu_milli || tried.contains(&free[i]) {
                    continue;
                }
                tried.push(free[i]);
                free[i] -= pod.gpu_milli;
                let s = score(self.weighted(&free, cpu_after, node.gpu_model));
                free[i] += pod.gpu_milli;
                if best.is_none_or(|(b, _)| s > b) {
                    best = Some((s, index[i]));
                }
            }
            return match best {
                Some((s, gpu)) => Score::with_gpu(s, gpu),
                None => Score::new(0),
            };
        }
        // CPU-only or whole GPUs: the first entirely free GPUs (which ones
        // does not change the free shares).
        let mut taken = 0;
        for f in free.iter_mut() {
            if taken < pod.gpu_count && *f == 1000 {
                *f = 0;
                taken += 1;
            }
        }
        Score::new(score(self.weighted(&free, cpu_after, node.gpu_model)))
    }
}
