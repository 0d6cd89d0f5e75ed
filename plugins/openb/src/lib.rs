//! The six GPU placement policies of the FGD paper's published results
//! ("Beware of Fragmentation", ATC'23), written against the Tessera SDK.
//! Each is exported as its own component by `plugins/<name>`; the logic
//! lives here so it is tested natively and shared.
//!
//! Scores follow the published simulator's integer formulas (read from its
//! source, `pkg/simulator/plugin/*_score.go`): they are coarse, so ties are
//! common, and the published runs broke them by a seeded ranking of nodes —
//! run these with `tie_break: seeded-rank` to compare. All six suggest the
//! GPU a sharing pod should use: best fit (least free share that fits,
//! lowest index on ties), or for Random a random fitting GPU, or for FGD
//! the one that fragments least.

use tessera_sdk::{Gpu, Node, NodeTable, Pod, Score, Scorer, Sym};

mod fgd;

pub use fgd::{Fgd, FgdConfig, Parts, PartsKind, ShapeConfig};

/// The published simulator's reference node: 128 cores and 8 GPUs.
const MAX_CPU: f64 = 128_000.0;
const MAX_GPU: f64 = 8_000.0;

/// Kubernetes counts a pod that requests no CPU as requesting 100 millicores
/// when scoring.
pub const NONZERO_CPU_MILLI: u32 = 100;

/// The CPU a pod is scored with.
pub fn scored_cpu(pod: &Pod) -> u32 {
    if pod.requests.cpu_milli == 0 { NONZERO_CPU_MILLI } else { pod.requests.cpu_milli }
}

/// The fitting GPU with the least free share (lowest index on ties).
pub fn best_fit_gpu(node: &Node<'_>, need: u32) -> Option<u8> {
    node.gpus().iter().filter(|g| g.fits(need)).min_by_key(|g| (g.free_milli, g.index)).map(|g| g.index)
}

fn best_fit_hint(value: i64, pod: &Pod, node: &Node<'_>) -> Score {
    match pod.is_gpu_sharing().then(|| best_fit_gpu(node, pod.gpu_milli)).flatten() {
        Some(g) => Score::with_gpu(value, g),
        None => Score::new(value),
    }
}

/// **Random**: a random feasible node, a random fitting GPU on it (both
/// from the host's seeded stream).
#[derive(Debug, Default)]
pub struct Random;

impl Scorer for Random {
    type Config = ();
    const NAME: &'static str = "random";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "a random feasible node and a random fitting GPU (seeded by the host)";
    const SUGGESTS_GPU: bool = true;

    fn new(_: ()) -> Result<Self, String> {
        Ok(Self)
    }

    fn score(&self, pod: &Pod, node: &Node<'_>) -> Score {
        let value = (tessera_sdk::random_u64() >> 2) as i64;
        if pod.is_gpu_sharing() {
            let fitting: Vec<u8> = node.gpus().iter().filter(|g| g.fits(pod.gpu_milli)).map(|g| g.index).collect();
            if !fitting.is_empty() {
                let pick = (tessera_sdk::random_u64() % fitting.len() as u64) as usize;
                return Score::with_gpu(value, fitting[pick]);
            }
        }
        Score::new(value)
    }
}

/// **DotProd**: `100·(1 − d/2)` truncated, where `d` is the dot product of
/// the node's free (CPU, GPU) and the pod's request, each normalised by a
/// reference node of 128 cores and 8 GPUs: the smaller product wins.
/// Best-fit GPU on the node.
#[derive(Debug, Default)]
pub struct DotProd;

impl Scorer for DotProd {
    type Config = ();
    const NAME: &'static str = "dotprod";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str =
        "smallest dot product of free and requested (CPU, GPU), normalised by 128 cores and 8 GPUs";
    const SUGGESTS_GPU: bool = true;

    fn new(_: ()) -> Result<Self, String> {
        Ok(Self)
    }

    fn score(&self, pod: &Pod, node: &Node<'_>) -> Score {
        if node.free.cpu_milli < pod.requests.cpu_milli {
            return Score::new(0);
        }
        let cpu = (f64::from(node.free.cpu_milli) / MAX_CPU) * (f64::from(scored_cpu(pod)) / MAX_CPU);
        let gpu = (f64::from(node.free_gpu_milli()) / MAX_GPU) * (f64::from(pod.gpu_demand_milli()) / MAX_GPU);
        best_fit_hint((100.0 * (1.0 - (cpu + gpu) / 2.0)) as i64, pod, node)
    }
}

/// **BestFit**: `100·(1 − leftover)` truncated, where leftover averages the
/// CPU and GPU left after placement, normalised by the reference node;
/// then normalised over the candidates to 0..=100 with integer division
/// (all equal: all 0), as kube-scheduler plugins do. Best-fit GPU.
#[derive(Debug, Default)]
pub struct BestFit;

impl Scorer for BestFit {
    type Config = ();
    const NAME: &'static str = "bestfit";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "least CPU + GPU left over, normalised by a 128-core, 8-GPU node";
    const SUGGESTS_GPU: bool = true;

    fn new(_: ()) -> Result<Self, String> {
        Ok(Self)
    }

    fn score(&self, pod: &Pod, node: &Node<'_>) -> Score {
        let cpu_left = f64::from(node.free.cpu_milli) - f64::from(scored_cpu(pod));
        let gpu_left = f64::from(node.free_gpu_milli()) - f64::from(pod.gpu_demand_milli());
        let leftover = 0.5 * cpu_left / MAX_CPU + 0.5 * gpu_left / MAX_GPU;
        best_fit_hint(((1.0 - leftover) * 100.0) as i64, pod, node)
    }

    fn finish(&self, _pod: &Pod, values: &mut [i64]) {
        normalize_0_100(values);
    }
}

/// kube-scheduler's `(s − min)·100 / (max − min)` in integers; all equal
/// scores become 0.
pub fn normalize_0_100(values: &mut [i64]) {
    let (Some(&min), Some(&max)) = (values.iter().min(), values.iter().max()) else { return };
    for v in values.iter_mut() {
        *v = if max == min { 0 } else { (*v - min) * 100 / (max - min) };
    }
}

/// **GpuPacking**: on an idle node (all n GPUs free) `max(33 − n, n)`;
/// otherwise take the fitting GPUs in order of least free share: if any of
/// them is entirely free (k of them), `max(50 − k, 33)`; if the pod fits on
/// partly used GPUs only, `max(100 − Σ(free·100/1000)/10, 50)`. CPU-only
/// pods score 0. Best-fit GPU.
#[derive(Debug, Default)]
pub struct GpuPacking;

impl Scorer for GpuPacking {
    type Config = ();
    const NAME: &'static str = "gpu-packing";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "partly used GPUs first, then busy nodes, then idle nodes";
    const SUGGESTS_GPU: bool = true;

    fn new(_: ()) -> Result<Self, String> {
        Ok(Self)
    }

    fn score(&self, pod: &Pod, node: &Node<'_>) -> Score {
        if pod.gpu_count == 0 {
            return Score::new(0);
        }
        let gpus = node.gpus();
        let n = gpus.len() as i64;
        if gpus.iter().all(|g| g.free_milli == 1000) {
            return best_fit_hint((33 - n).max(n), pod, node);
        }
        let mut order: Vec<&Gpu> = gpus.iter().filter(|g| g.fits(pod.gpu_milli.min(1000))).collect();
        order.sort_by_key(|g| g.free_milli);
        let used = &order[..(pod.gpu_count as usize).min(order.len())];
        let whole = used.iter().filter(|g| g.free_milli == 1000).count() as i64;
        let value = if whole > 0 {
            (50 - whole).max(33)
        } else {
            let sum: i64 = used.iter().map(|g| i64::from(g.free_milli) * 100 / 1000).sum();
            (100 - sum / 10).max(50)
        };
        best_fit_hint(value, pod, node)
    }
}

/// **GpuClustering**: keep pods of one GPU request class together
/// (`share-gpu`, `N-gpu`). Score `25·(8000 − free GPU share)/8000`
/// (integers) plus 75 if the node runs only the pod's class, 50 if its
/// class among others, 25 if no GPU pod, 0 if only other classes. CPU-only
/// pods score 0. Best-fit GPU.
#[derive(Debug, Default)]
pub struct GpuClustering {
    class: String,
}

impl Scorer for GpuClustering {
    type Config = ();
    const NAME: &'static str = "gpu-clustering";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "pack pods of the same GPU request class together";
    const SUGGESTS_GPU: bool = true;

    fn new(_: ()) -> Result<Self, String> {
        Ok(Self::default())
    }

    fn prepare(&mut self, pod: &Pod, _nodes: &NodeTable) {
        self.class = match (pod.gpu_count, pod.gpu_milli) {
            (0, _) => String::new(),
            (1, m) if m < 1000 => "share-gpu".into(),
            (n, _) => format!("{n}-gpu"),
        };
    }

    fn score(&self, pod: &Pod, node: &Node<'_>) -> Score {
        if self.class.is_empty() {
            return Score::new(0);
        }
        let base = 25 * (8000 - i64::from(node.free_gpu_milli())) / 8000;
        let classes = node.meta().map_or(&[][..], |m| &m.gpu_classes[..]);
        let mine = classes.iter().any(|c| c.workload == self.class && c.pods > 0);
        let others = classes.iter().any(|c| c.workload != self.class && c.pods > 0);
        let bonus = match (mine, others) {
            (true, false) => 75,
            (true, true) => 50,
            (false, false) => 25,
            (false, true) => 0,
        };
        best_fit_hint(base + bonus, pod, node)
    }
}

/// Resolves model names to the mirror's symbols (`None` = any model; a
/// model no node has maps to a symbol that matches nothing).
pub(crate) fn model_syms(models: &[String], nodes: &NodeTable) -> Option<Vec<Sym>> {
    (!models.is_empty()).then(|| models.iter().map(|m| nodes.lookup(m).unwrap_or(Sym::MAX)).collect())
}

#[cfg(test)]
mod tests;
