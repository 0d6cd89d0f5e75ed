//! The six GPU placement policies of the FGD paper's published results
//! ("Beware of Fragmentation", ATC'23), written against the Tessera SDK.
//! Each is exported as its own component by `plugins/<name>`; the logic
//! lives here so it is tested natively and shared.
//!
//! Scores are higher-is-better; the host normalises each plugin's scores to
//! 0..100 over the candidates and picks the best (see `tessera-core`'s
//! `score`). All six suggest the GPU a sharing pod should use.

use tessera_sdk::{Gpu, Node, NodeTable, Pod, Score, Scorer, Sym};

mod fgd;

pub use fgd::{Fgd, FgdConfig, ShapeConfig};

/// Scale of fractional scores (they are integers on the wire).
const SCALE: f64 = 1e9;

#[inline]
fn fits(g: &Gpu, need: u32) -> bool {
    g.usable() && u32::from(g.free_milli) >= need
}

/// The fitting GPU with the least free share (lowest index on ties).
pub fn best_fit_gpu(node: &Node<'_>, need: u32) -> Option<u8> {
    node.gpus().iter().filter(|g| fits(g, need)).min_by_key(|g| (g.free_milli, g.index)).map(|g| g.index)
}

fn best_fit_hint(value: i64, pod: &Pod, node: &Node<'_>) -> Score {
    match pod.is_gpu_sharing().then(|| best_fit_gpu(node, pod.gpu_milli)).flatten() {
        Some(g) => Score::with_gpu(value, g),
        None => Score::new(value),
    }
}

/// GPU demand of a pod, milli.
fn gpu_request(pod: &Pod) -> u32 {
    pod.gpu_demand_milli()
}

/// **Random**: a random feasible node, a random fitting GPU on it.
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
            let fitting: Vec<u8> = node.gpus().iter().filter(|g| fits(g, pod.gpu_milli)).map(|g| g.index).collect();
            if !fitting.is_empty() {
                let pick = (tessera_sdk::random_u64() % fitting.len() as u64) as usize;
                return Score::with_gpu(value, fitting[pick]);
            }
        }
        Score::new(value)
    }
}

/// **DotProd**: the node's free (CPU, GPU) vector dotted with the pod's
/// request vector, each normalised by a maximum node of 128 cores and 8
/// GPUs; the smaller product wins. Best-fit GPU on the node.
#[derive(Debug, Default)]
pub struct DotProd;

impl Scorer for DotProd {
    type Config = ();
    const NAME: &'static str = "dotprod";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "smallest dot product of free and requested (CPU, GPU), normalised by 128 cores and 8 GPUs";
    const SUGGESTS_GPU: bool = true;

    fn new(_: ()) -> Result<Self, String> {
        Ok(Self)
    }

    fn score(&self, pod: &Pod, node: &Node<'_>) -> Score {
        const MAX_CPU: f64 = 128_000.0;
        const MAX_GPU: f64 = 8_000.0;
        let cpu = (f64::from(node.free.cpu_milli) / MAX_CPU) * (f64::from(pod.requests.cpu_milli) / MAX_CPU);
        let gpu = (f64::from(node.free_gpu_milli()) / MAX_GPU) * (f64::from(gpu_request(pod)) / MAX_GPU);
        best_fit_hint(-((cpu + gpu) * SCALE) as i64, pod, node)
    }
}

/// **BestFit**: the least leftover of CPU and GPU after placement, each
/// normalised by the largest node's capacity.
#[derive(Debug, Default)]
pub struct BestFit {
    max_cpu: u32,
    max_gpu: u32,
}

impl Scorer for BestFit {
    type Config = ();
    const NAME: &'static str = "bestfit";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "least CPU + GPU left over, each normalised by the largest node";
    const SUGGESTS_GPU: bool = true;

    fn new(_: ()) -> Result<Self, String> {
        Ok(Self::default())
    }

    fn on_node(&mut self, node: &Node<'_>) {
        self.max_cpu = self.max_cpu.max(node.capacity.cpu_milli);
        self.max_gpu = self.max_gpu.max(node.gpu_capacity_milli());
    }

    fn score(&self, pod: &Pod, node: &Node<'_>) -> Score {
        let left = |free: u32, req: u32, max: u32| {
            if max == 0 { 0.0 } else { f64::from(free.saturating_sub(req)) / f64::from(max) }
        };
        let leftover = left(node.free.cpu_milli, pod.requests.cpu_milli, self.max_cpu)
            + left(node.free_gpu_milli(), gpu_request(pod), self.max_gpu);
        best_fit_hint(-(leftover * SCALE) as i64, pod, node)
    }
}

/// **GpuPacking**: prefer nodes where a sharing pod fits on a partly used
/// GPU, then nodes with some GPUs in use (whole free GPUs on busy nodes),
/// then idle nodes; within a tier, the node with less free GPU share.
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
        let gpus = node.gpus();
        let partly_used_fit = pod.is_gpu_sharing()
            && gpus.iter().any(|g| fits(g, pod.gpu_milli) && g.free_milli < 1000 && g.free_milli > 0);
        let busy = gpus.iter().any(|g| g.usable() && g.free_milli < 1000);
        let tier: i64 = if partly_used_fit {
            2
        } else if busy {
            1
        } else {
            0
        };
        let value = tier * 1_000_000 - i64::from(node.free_gpu_milli());
        best_fit_hint(value, pod, node)
    }
}

/// **GpuClustering**: keep GPU-sharing pods of one size together. A node's
/// GPUs in use are classed by their allocated share; the node scores by
/// tier: only this pod's class > this class among others > an empty node >
/// only other classes; within a tier, the node with less free GPU share.
#[derive(Debug, Default)]
pub struct GpuClustering;

impl Scorer for GpuClustering {
    type Config = ();
    const NAME: &'static str = "gpu-clustering";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "pack GPU-sharing pods of the same size together";
    const SUGGESTS_GPU: bool = true;

    fn new(_: ()) -> Result<Self, String> {
        Ok(Self)
    }

    fn score(&self, pod: &Pod, node: &Node<'_>) -> Score {
        // The class of a used GPU is its allocated share (1000 - free); the
        // pod's class is its own share per GPU.
        let class = pod.gpu_milli.min(1000);
        let used: Vec<u32> =
            node.gpus().iter().filter(|g| g.usable() && g.free_milli < 1000).map(|g| 1000 - u32::from(g.free_milli)).collect();
        let same = used.iter().filter(|&&c| c == class).count();
        let tier: i64 = if used.is_empty() {
            1
        } else if same == used.len() {
            3
        } else if same > 0 {
            2
        } else {
            0
        };
        best_fit_hint(tier * 1_000_000 - i64::from(node.free_gpu_milli()), pod, node)
    }
}

/// Resolves model names to the mirror's symbols (`None` = any model; a
/// model no node has maps to a symbol that matches nothing).
pub(crate) fn model_syms(models: &[String], nodes: &NodeTable) -> Option<Vec<Sym>> {
    (!models.is_empty()).then(|| models.iter().map(|m| nodes.lookup(m).unwrap_or(Sym::MAX)).collect())
}

#[cfg(test)]
mod tests;
