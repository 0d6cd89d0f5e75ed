//! GPU allocation and fragmentation, as defined by the FGD paper (ATC'23)
//! and its published results (see `shared/traces/README.md`).
//!
//! - **Target workload M**: the trace's pods grouped by shape
//!   `(cpu, num_gpu, gpu_milli, gpu_spec)` (a CPU request of 0 counts as
//!   100 millicores, Kubernetes' non-zero default); the most frequent shapes
//!   (equal counts: larger shape first) until they cover 95% of pods, each
//!   weighted by its count over the count of the shapes kept, so weights
//!   sum to 1.
//! - **Fragment amount of node n for shape m**: if m needs GPUs and fits on
//!   n (CPU, GPU model and GPU share all satisfied), the free share on GPUs
//!   with less free than m's `gpu_milli`; otherwise, and for every CPU-only
//!   shape, all of n's free GPU share (a CPU-only pod can use no GPU).
//!   `F_n(M) = Σ p_m F_n(m)`.
//!
//! These follow the published simulator's code (`GetTypicalPods`,
//! `NodeGpuShareFragAmount`: every category but "Q3, fits" is fragment),
//! which the published series were computed with; the trace README's prose
//! differs on CPU-only shapes and on the weights.
//! - **Allocation** = allocated GPU milli ÷ (1000 × GPUs); **fragmentation
//!   amount** = Σ F_n(M) ÷ (1000 × GPUs); **fragmentation rate** = Σ F_n(M)
//!   ÷ free GPU milli; all in percent.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::model::{GPU_MILLI, GpuHealth, Node, Pod};

/// A pod shape of the target workload.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Shape {
    /// CPU request, millicores.
    pub cpu_milli: u64,
    /// GPUs requested.
    pub gpu_count: u32,
    /// Share of each GPU.
    pub gpu_milli: u32,
    /// Allowed GPU models (sorted; empty = any).
    pub allowed_models: Vec<String>,
}

/// CPU a pod is counted with when it requests none (Kubernetes' default
/// non-zero request).
pub const NONZERO_CPU_MILLI: u64 = 100;

impl Shape {
    /// The shape of a pod.
    pub fn of(pod: &Pod) -> Self {
        let mut allowed_models = pod.allowed_models.clone();
        allowed_models.sort();
        let cpu_milli = if pod.requests.cpu_milli == 0 { NONZERO_CPU_MILLI } else { pod.requests.cpu_milli };
        Self { cpu_milli, gpu_count: pod.gpu_count, gpu_milli: pod.gpu_milli, allowed_models }
    }
}

/// The target workload M: shapes and their weights.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetWorkload {
    /// `(shape, p_m)`, most frequent first.
    pub shapes: Vec<(Shape, f64)>,
}

impl TargetWorkload {
    /// The most frequent shapes of `pods` until they cover `coverage` (0..=1)
    /// of them, weighted by count over the count kept. Equally frequent
    /// shapes are taken larger first (CPU, then GPU share, count, models),
    /// so the result does not depend on the order of `pods`.
    pub fn from_pods<'a>(pods: impl IntoIterator<Item = &'a Pod>, coverage: f64) -> Self {
        let mut counts: HashMap<Shape, u64> = HashMap::new();
        let mut total = 0u64;
        for p in pods {
            *counts.entry(Shape::of(p)).or_insert(0) += 1;
            total += 1;
        }
        let mut by_freq: Vec<(Shape, u64)> = counts.into_iter().collect();
        let key = |s: &Shape| (s.cpu_milli, s.gpu_milli, s.gpu_count, s.allowed_models.clone());
        by_freq.sort_by(|(sa, ca), (sb, cb)| cb.cmp(ca).then_with(|| key(sb).cmp(&key(sa))));
        let mut kept = Vec::new();
        let mut covered = 0u64;
        for (shape, count) in by_freq {
            if total == 0 || covered as f64 >= coverage * total as f64 {
                break;
            }
            covered += count;
            kept.push((shape, count));
        }
        Self { shapes: kept.into_iter().map(|(s, c)| (s, c as f64 / covered as f64)).collect() }
    }
}

fn usable_free(node: &Node) -> impl Iterator<Item = u32> + '_ {
    node.gpus.iter().filter(|g| g.health != GpuHealth::Failed).map(|g| g.free_milli)
}

/// The `p` quantile (0..=1) of `sorted` by nearest rank; the default
/// value for an empty slice.
pub fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    sorted[((p * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)]
}

/// Free GPU share of a node (usable GPUs), milli.
pub fn free_gpu_milli(node: &Node) -> u64 {
    usable_free(node).map(u64::from).sum()
}

/// Fragment amount of `node` for `shape`, milli.
pub fn node_fragment(node: &Node, shape: &Shape) -> u64 {
    let free = free_gpu_milli(node);
    let cpu_ok = shape.cpu_milli <= node.free.cpu_milli;
    if shape.gpu_count == 0 {
        return free;
    }
    let model_ok = shape.allowed_models.is_empty() || shape.allowed_models.contains(&node.gpu_model);
    let gpu_ok = if shape.gpu_milli < GPU_MILLI {
        usable_free(node).any(|f| f >= shape.gpu_milli)
    } else {
        usable_free(node).filter(|&f| f == GPU_MILLI).count() as u32 >= shape.gpu_count
    };
    if cpu_ok && model_ok && gpu_ok {
        usable_free(node).filter(|&f| f < shape.gpu_milli).map(u64::from).sum()
    } else {
        free
    }
}

/// `F_n(M)`: the weighted fragment amount of `node`, milli.
pub fn node_fragment_weighted(node: &Node, workload: &TargetWorkload) -> f64 {
    workload.shapes.iter().map(|(s, p)| p * node_fragment(node, s) as f64).sum()
}

/// Cluster-wide allocation and fragmentation, kept up to date node by node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FragmentationTracker {
    per_node: Vec<f64>,
    free_per_node: Vec<u64>,
    free: u64,
    capacity: u64,
}

/// One reading of the tracker, in percent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    /// GPU allocation ratio, %.
    pub allocation: f64,
    /// Fragmentation amount, % of all GPU capacity.
    pub fragmentation: f64,
    /// Fragmentation rate, % of free GPU share.
    pub fragmentation_rate: f64,
}

impl FragmentationTracker {
    /// Measures every node.
    pub fn new(nodes: &[Node], workload: &TargetWorkload) -> Self {
        let mut t = Self {
            per_node: vec![0.0; nodes.len()],
            free_per_node: vec![0; nodes.len()],
            capacity: nodes.iter().map(|n| n.gpus.len() as u64 * u64::from(GPU_MILLI)).sum(),
            ..Self::default()
        };
        for n in nodes {
            t.update(n, workload);
        }
        t
    }

    /// A node joined (its id is the next one): measured and counted.
    pub fn add_node(&mut self, node: &Node, workload: &TargetWorkload) {
        let i = node.id as usize;
        if self.per_node.len() <= i {
            self.per_node.resize(i + 1, 0.0);
            self.free_per_node.resize(i + 1, 0);
        }
        self.capacity += node.gpus.len() as u64 * u64::from(GPU_MILLI);
        self.update(node, workload);
    }

    /// Re-measures one node after it changed.
    pub fn update(&mut self, node: &Node, workload: &TargetWorkload) {
        let i = node.id as usize;
        self.per_node[i] = node_fragment_weighted(node, workload);
        let free = free_gpu_milli(node);
        self.free = self.free + free - self.free_per_node[i];
        self.free_per_node[i] = free;
    }

    /// Weighted fragment amount of one node, milli.
    pub fn node(&self, i: usize) -> f64 {
        self.per_node[i]
    }

    /// The current reading. Fragments are summed afresh from the per-node
    /// values (a running sum of floats would drift).
    pub fn reading(&self) -> Reading {
        let fragment: f64 = self.per_node.iter().sum();
        let cap = self.capacity as f64;
        Reading {
            allocation: if cap > 0.0 { 100.0 * (cap - self.free as f64) / cap } else { 0.0 },
            fragmentation: if cap > 0.0 { 100.0 * fragment / cap } else { 0.0 },
            fragmentation_rate: if self.free > 0 { 100.0 * fragment / self.free as f64 } else { 0.0 },
        }
    }
}

/// Hotspot threshold: a node whose GPU, CPU or memory is at least this
/// allocated.
pub const HOTSPOT_PERMILLE: u64 = 900;

/// Whether a node is a hotspot: GPU, CPU or memory at least
/// [`HOTSPOT_PERMILLE`] allocated.
pub fn is_hot(n: &Node) -> bool {
    let frac = |cap: u64, free: u64| cap > 0 && (cap - free.min(cap)) * 1000 >= HOTSPOT_PERMILLE * cap;
    let gpu_cap = n.gpus.len() as u64 * u64::from(GPU_MILLI);
    frac(gpu_cap, free_gpu_milli(n))
        || frac(n.capacity.cpu_milli, n.free.cpu_milli)
        || frac(n.capacity.memory_mib, n.free.memory_mib)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Resources;

    fn node(id: u32, cpu_free: u64, model: &str, gpu_free: &[u32]) -> Node {
        let mut n = Node::new(id, "n", Resources { cpu_milli: 64_000, memory_mib: 1 << 20 }, gpu_free.len(), model);
        n.free.cpu_milli = cpu_free;
        for (g, &f) in n.gpus.iter_mut().zip(gpu_free) {
            g.free_milli = f;
        }
        n
    }

    fn shape(cpu: u64, gpus: u32, milli: u32, models: &[&str]) -> Shape {
        Shape {
            cpu_milli: cpu,
            gpu_count: gpus,
            gpu_milli: milli,
            allowed_models: models.iter().map(|m| m.to_string()).collect(),
        }
    }

    #[test]
    fn fragment_of_one_node_by_hand() {
        // GPUs with 1000, 600, 300, 0 free: 1900 free in all.
        let n = node(0, 8000, "V100", &[1000, 600, 300, 0]);
        // A 500-milli shape fits; GPUs with < 500 free are fragments: 300 + 0.
        assert_eq!(node_fragment(&n, &shape(1000, 1, 500, &[])), 300);
        // A whole-GPU shape fits (one free GPU); partial GPUs are fragments.
        assert_eq!(node_fragment(&n, &shape(1000, 1, 1000, &[])), 900);
        // Two whole GPUs do not fit: everything free is a fragment.
        assert_eq!(node_fragment(&n, &shape(1000, 2, 1000, &[])), 1900);
        // Wrong model, or too little CPU: everything.
        assert_eq!(node_fragment(&n, &shape(1000, 1, 500, &["T4"])), 1900);
        assert_eq!(node_fragment(&n, &shape(9000, 1, 500, &[])), 1900);
        // CPU-only shapes: all free GPU share, fitting or not.
        assert_eq!(node_fragment(&n, &shape(8000, 0, 0, &[])), 1900);
        assert_eq!(node_fragment(&n, &shape(8001, 0, 0, &[])), 1900);
    }

    #[test]
    fn target_workload_keeps_the_most_frequent_shapes_to_95_percent() {
        let pod = |cpu, gpus, milli| Pod {
            requests: Resources { cpu_milli: cpu, memory_mib: 0 },
            gpu_count: gpus,
            gpu_milli: milli,
            ..Pod::default()
        };
        let mut pods = vec![pod(1000, 1, 500); 60];
        pods.extend(vec![pod(2000, 1, 1000); 30]);
        pods.extend(vec![pod(4000, 0, 0); 6]);
        pods.extend(vec![pod(8000, 8, 1000); 4]);
        pods.extend(vec![pod(0, 0, 0); 4]);
        pods.extend(vec![pod(3000, 0, 0); 4]);
        let w = TargetWorkload::from_pods(&pods, 0.95);
        let got: Vec<(u64, f64)> = w.shapes.iter().map(|(s, p)| (s.cpu_milli, *p)).collect();
        // Of 108 pods, 60 + 30 = 83% < 95%, + 6 = 89%, + 4 (of the three
        // shapes of 4, the largest first: 8 GPUs) = 93%, + 4 (3000 CPU before
        // 0 CPU, counted as 100) = 96.3%: five shapes, weights over 104.
        assert_eq!(
            got,
            [(1000, 60.0 / 104.0), (2000, 30.0 / 104.0), (4000, 6.0 / 104.0), (8000, 4.0 / 104.0), (3000, 4.0 / 104.0)]
        );
        let zero = TargetWorkload::from_pods(&[pod(0, 0, 0)], 1.0);
        assert_eq!(zero.shapes[0].0.cpu_milli, NONZERO_CPU_MILLI);
    }

    #[test]
    fn tracker_matches_a_full_recount() {
        let w = TargetWorkload { shapes: vec![(shape(0, 1, 500, &[]), 0.5), (shape(0, 1, 1000, &[]), 0.5)] };
        let mut nodes = vec![node(0, 8000, "V100", &[1000, 1000]), node(1, 8000, "V100", &[200, 1000])];
        let mut t = FragmentationTracker::new(&nodes, &w);
        // Node 0: no fragments; node 1: 0.5·200 + 0.5·200 = 200.
        assert_eq!(t.node(1), 200.0);
        let r = t.reading();
        assert_eq!(r.allocation, 100.0 * 800.0 / 4000.0);
        assert_eq!(r.fragmentation, 100.0 * 200.0 / 4000.0);
        assert_eq!(r.fragmentation_rate, 100.0 * 200.0 / 3200.0);
        nodes[0].gpus[0].free_milli = 300;
        t.update(&nodes[0], &w);
        // Node 0 now: 0.5·300 (300 < 500) + 0.5·300 (partial GPU) = 300.
        assert_eq!(t, FragmentationTracker::new(&nodes, &w));
        assert_eq!(t.reading().fragmentation, 100.0 * 500.0 / 4000.0);
    }
}
