//! Cluster state: the host's hard filter, GPU assignment and binding.
//!
//! The hard filter is what no policy may override: resources, GPU share
//! fit, GPU model and health. Binding assigns concrete GPUs: a sharing pod
//! (`gpu_milli < 1000`) takes part of one GPU, a whole-GPU pod takes
//! `gpu_count` entirely free GPUs.

use serde::{Deserialize, Serialize};

use crate::model::{GPU_MILLI, GpuHealth, Node, NodeId, Pod};

/// Why a node cannot take a pod. Codes follow `SCENARIO-RESOURCE-ACTION`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FilterReason {
    /// Cordoned, not ready or unreachable.
    NodeNotReady,
    /// Not enough free CPU.
    CpuInsufficient,
    /// Not enough free memory.
    MemoryInsufficient,
    /// The node's GPU model is not among the pod's allowed models.
    ModelMismatch,
    /// Not enough GPUs, or no GPU with enough free share.
    GpuInsufficient,
    /// A taint the pod does not tolerate, or a label its node selector
    /// asks for that the node lacks.
    NodeConstraint,
    /// Kept for a gang that waited too long for room
    /// (`scheduling.reserve_after_s`); never returned by [`check`].
    Reserved,
}

impl FilterReason {
    /// All reasons, in a stable order.
    pub const ALL: [FilterReason; FilterReason::COUNT] = [
        FilterReason::NodeNotReady,
        FilterReason::CpuInsufficient,
        FilterReason::MemoryInsufficient,
        FilterReason::ModelMismatch,
        FilterReason::GpuInsufficient,
        FilterReason::NodeConstraint,
        FilterReason::Reserved,
    ];

    /// How many reasons there are.
    pub const COUNT: usize = 7;

    /// The most common of the rejections counted by [`Cluster::feasible`]
    /// (ties: the earlier reason).
    pub fn main(rejected: &[u32; FilterReason::COUNT]) -> FilterReason {
        let (i, _) = rejected.iter().enumerate().max_by_key(|&(i, c)| (*c, std::cmp::Reverse(i))).unwrap_or((0, &0));
        FilterReason::ALL[i]
    }

    /// Stable code.
    pub fn code(self) -> &'static str {
        match self {
            FilterReason::NodeNotReady => "SCHED-NODE-NOT-READY",
            FilterReason::CpuInsufficient => "SCHED-CPU-INSUFFICIENT",
            FilterReason::MemoryInsufficient => "SCHED-MEMORY-INSUFFICIENT",
            FilterReason::ModelMismatch => "SCHED-MODEL-MISMATCH",
            FilterReason::GpuInsufficient => "SCHED-GPU-INSUFFICIENT",
            FilterReason::NodeConstraint => "SCHED-NODE-CONSTRAINT",
            FilterReason::Reserved => "SCHED-NODE-RESERVED",
        }
    }
}

/// A set of GPU indices on one node (bit `i` = GPU `i`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuSet(pub u32);

impl GpuSet {
    /// The GPU indices, ascending.
    pub fn indices(self) -> impl Iterator<Item = usize> {
        (0..32).filter(move |i| self.0 & (1 << i) != 0)
    }

    /// Number of GPUs.
    pub fn len(self) -> u32 {
        self.0.count_ones()
    }

    /// Whether empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// Where a bound pod runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Node.
    pub node: NodeId,
    /// GPUs it uses.
    pub gpus: GpuSet,
}

/// A bind that cannot happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// The node does not exist.
    #[error("node {0} does not exist")]
    NoSuchNode(NodeId),
    /// The hard filter rejects the node.
    #[error("node {node} cannot take pod {pod}: {}", .reason.code())]
    Rejected {
        /// Node.
        node: NodeId,
        /// Pod name.
        pod: String,
        /// Why.
        reason: FilterReason,
    },
    /// The GPUs given do not suit the pod.
    #[error("node {node}: GPUs {gpus:?} cannot hold pod {pod}")]
    BadGpus {
        /// Node.
        node: NodeId,
        /// Pod name.
        pod: String,
        /// The GPUs given.
        gpus: GpuSet,
    },
}

fn usable(g: &crate::model::Gpu) -> bool {
    g.health != GpuHealth::Failed
}

/// The hard filter: can `node` take `pod` now?
pub fn check(node: &Node, pod: &Pod) -> Result<(), FilterReason> {
    if !node.ready {
        return Err(FilterReason::NodeNotReady);
    }
    if (!node.taints.is_empty() || pod.selects()) && !node.admits(pod) {
        return Err(FilterReason::NodeConstraint);
    }
    if pod.requests.cpu_milli > node.free.cpu_milli {
        return Err(FilterReason::CpuInsufficient);
    }
    if pod.requests.memory_mib > node.free.memory_mib {
        return Err(FilterReason::MemoryInsufficient);
    }
    if pod.gpu_count == 0 {
        return Ok(());
    }
    if !pod.allowed_models.is_empty() && !pod.allowed_models.contains(&node.gpu_model) {
        return Err(FilterReason::ModelMismatch);
    }
    let ok = if pod.gpu_milli < GPU_MILLI {
        node.gpus.iter().any(|g| usable(g) && g.free_milli >= pod.gpu_milli)
    } else {
        node.whole_free_gpus() >= pod.gpu_count
    };
    if ok { Ok(()) } else { Err(FilterReason::GpuInsufficient) }
}

/// The GPUs a pod would use on `node`: for a sharing pod the `hint` if it
/// fits, else the best fit (least free share that fits, lowest index on
/// ties); for whole-GPU pods the lowest-index entirely free GPUs. `None` if
/// the pod does not fit.
pub fn choose_gpus(node: &Node, pod: &Pod, hint: Option<u8>) -> Option<GpuSet> {
    if pod.gpu_count == 0 {
        return Some(GpuSet::default());
    }
    if pod.gpu_milli < GPU_MILLI {
        let fits = |i: usize| node.gpus.get(i).is_some_and(|g| usable(g) && g.free_milli >= pod.gpu_milli);
        if let Some(h) = hint.map(usize::from).filter(|&h| fits(h)) {
            return Some(GpuSet(1 << h));
        }
        return (0..node.gpus.len())
            .filter(|&i| fits(i))
            .min_by_key(|&i| (node.gpus[i].free_milli, i))
            .map(|i| GpuSet(1 << i));
    }
    let free: Vec<usize> =
        (0..node.gpus.len()).filter(|&i| usable(&node.gpus[i]) && node.gpus[i].free_milli == GPU_MILLI).collect();
    // The best-connected set (`topology`): within an NVLink island when
    // one has room, from an island already broken into before a whole
    // one; on a node that says nothing, the lowest indices.
    let set = crate::topology::best_set(&crate::topology::links(&node.gpus), &free, pod.gpu_count as usize)?;
    Some(GpuSet(set.iter().fold(0, |acc, &i| acc | (1 << i))))
}

/// Gives back to `node` the CPU, memory and GPU share `pod` held on `gpus`
/// (bookkeeping of workloads and classes is the caller's).
pub(crate) fn release(node: &mut Node, gpus: GpuSet, pod: &Pod) {
    for i in gpus.indices() {
        if let Some(g) = node.gpus.get_mut(i) {
            g.free_milli = (g.free_milli + pod.gpu_milli.min(GPU_MILLI)).min(GPU_MILLI);
        }
    }
    node.free.cpu_milli = (node.free.cpu_milli + pod.requests.cpu_milli).min(node.capacity.cpu_milli);
    node.free.memory_mib = (node.free.memory_mib + pod.requests.memory_mib).min(node.capacity.memory_mib);
}

/// What the hard filter needs of one node, kept beside it so that a pass
/// over every node reads a few bytes per node instead of the node itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Fit {
    ready: bool,
    /// The node has taints (a pod must tolerate them).
    tainted: bool,
    /// Index of the node's GPU model in [`Cluster::models`].
    model: u16,
    /// Usable GPUs that are entirely free.
    whole_free: u8,
    /// Largest free share of a usable GPU.
    best_share: u32,
    cpu: u64,
    memory: u64,
}

/// The hard filter prepared for one pod, for scans over many nodes.
struct Scan<'a> {
    pod: &'a Pod,
    allowed: Vec<bool>,
    selects: bool,
    cpu: u64,
    memory: u64,
    gpu: GpuNeed,
}

/// What a pod needs of a node's GPUs.
#[derive(Clone, Copy)]
enum GpuNeed {
    None,
    /// One GPU with this much free share.
    Share(u32),
    /// This many entirely free GPUs.
    Whole(u32),
}

impl<'a> Scan<'a> {
    /// The reason of each failure bit, in [`check`]'s order.
    const REASONS: [FilterReason; 6] = [
        FilterReason::NodeNotReady,
        FilterReason::NodeConstraint,
        FilterReason::CpuInsufficient,
        FilterReason::MemoryInsufficient,
        FilterReason::ModelMismatch,
        FilterReason::GpuInsufficient,
    ];
    /// What [`Scan::first_failure`] returns for a node that fits.
    const FITS: usize = Self::REASONS.len();

    fn new(cluster: &Cluster, pod: &'a Pod) -> Self {
        let gpu = match (pod.gpu_count, pod.gpu_milli) {
            (0, _) => GpuNeed::None,
            (_, m) if m < GPU_MILLI => GpuNeed::Share(m),
            (c, _) => GpuNeed::Whole(c),
        };
        Self {
            pod,
            allowed: cluster.allowed(pod),
            selects: pod.selects(),
            cpu: pod.requests.cpu_milli,
            memory: pod.requests.memory_mib,
            gpu,
        }
    }

    /// The index in [`Scan::REASONS`] of the first check `node` (summary
    /// `f`) fails, or [`Scan::FITS`].
    #[inline]
    fn first_failure(&self, f: &Fit, node: &Node) -> usize {
        let mut failed = u32::from(!f.ready);
        // Taints and selectors are rare: only then is the node itself read.
        if (f.tainted || self.selects) && !node.admits(self.pod) {
            failed |= 1 << 1;
        }
        failed |= u32::from(self.cpu > f.cpu) << 2;
        failed |= u32::from(self.memory > f.memory) << 3;
        match self.gpu {
            GpuNeed::None => {}
            GpuNeed::Share(m) => {
                failed |= u32::from(!self.allowed[f.model as usize]) << 4;
                failed |= u32::from(f.best_share < m) << 5;
            }
            GpuNeed::Whole(c) => {
                failed |= u32::from(!self.allowed[f.model as usize]) << 4;
                failed |= u32::from(u32::from(f.whole_free) < c) << 5;
            }
        }
        (failed | 1 << Self::FITS).trailing_zeros() as usize
    }
}

/// Nodes and the pods bound to them.
///
/// Beside the nodes the cluster keeps a compact summary of each (free CPU,
/// memory, whole free GPUs, best free share, model, readiness) that every
/// change refreshes, so the hard filter over 10,000 nodes stays a short
/// linear scan. [`Cluster::feasible`] and [`check`] always agree.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(from = "ClusterRepr", into = "ClusterRepr")]
pub struct Cluster {
    nodes: Vec<Node>,
    fits: Vec<Fit>,
    models: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct ClusterRepr {
    nodes: Vec<Node>,
}

impl From<ClusterRepr> for Cluster {
    fn from(r: ClusterRepr) -> Self {
        Cluster::new(r.nodes)
    }
}

impl From<Cluster> for ClusterRepr {
    fn from(c: Cluster) -> Self {
        ClusterRepr { nodes: c.nodes }
    }
}

/// Two clusters are equal when their nodes are (the summaries follow).
impl PartialEq for Cluster {
    fn eq(&self, other: &Self) -> bool {
        self.nodes == other.nodes
    }
}

impl Eq for Cluster {}

impl Cluster {
    /// A cluster of `nodes`; their ids are set to their positions.
    pub fn new(mut nodes: Vec<Node>) -> Self {
        for (i, n) in nodes.iter_mut().enumerate() {
            n.id = i as NodeId;
        }
        let mut c = Self { fits: Vec::with_capacity(nodes.len()), nodes, models: Vec::new() };
        for i in 0..c.nodes.len() {
            let f = c.summarise(i);
            c.fits.push(f);
        }
        c
    }

    fn summarise(&mut self, i: usize) -> Fit {
        let n = &self.nodes[i];
        let model = match self.models.iter().position(|m| *m == n.gpu_model) {
            Some(m) => m,
            None => {
                self.models.push(n.gpu_model.clone());
                self.models.len() - 1
            }
        };
        Fit {
            ready: n.ready,
            tainted: !n.taints.is_empty(),
            model: model as u16,
            whole_free: n.whole_free_gpus().min(255) as u8,
            best_share: n.gpus.iter().filter(|g| usable(g)).map(|g| g.free_milli).max().unwrap_or(0),
            cpu: n.free.cpu_milli,
            memory: n.free.memory_mib,
        }
    }

    fn refresh(&mut self, id: NodeId) {
        let i = id as usize;
        self.fits[i] = self.summarise(i);
    }

    /// The nodes, by id.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// One node.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id as usize)
    }

    /// Changes one node (telemetry, health, readiness) and refreshes what
    /// the hard filter knows of it. `None` if there is no such node.
    pub fn update_node<R>(&mut self, id: NodeId, f: impl FnOnce(&mut Node) -> R) -> Option<R> {
        let n = self.nodes.get_mut(id as usize)?;
        let r = f(n);
        n.id = id;
        self.refresh(id);
        Some(r)
    }

    /// A node joins (a real cluster grows): it gets the next id, which is
    /// returned. Ids are never reused; a node that leaves is marked not
    /// ready.
    pub fn add_node(&mut self, mut node: Node) -> NodeId {
        let id = self.nodes.len() as NodeId;
        node.id = id;
        self.nodes.push(node);
        let f = self.summarise(id as usize);
        self.fits.push(f);
        id
    }

    /// Total number of GPUs.
    pub fn total_gpus(&self) -> u64 {
        self.nodes.iter().map(|n| n.gpus.len() as u64).sum()
    }

    /// Which of the cluster's GPU models `pod` accepts (all when it names
    /// none), by model index.
    fn allowed(&self, pod: &Pod) -> Vec<bool> {
        self.models.iter().map(|m| pod.allowed_models.is_empty() || pod.allowed_models.contains(m)).collect()
    }

    /// Nodes that pass the hard filter, in id order; `rejected` counts the
    /// others by reason (indexed like [`FilterReason::ALL`]).
    ///
    /// The same answers as [`check`] node by node (from the summary), without a
    /// branch on what a node's summary says (a scan over 10,000 nodes
    /// whose outcome is a coin toss per node would mispredict half its
    /// branches): each check sets a bit, the first bit set is the reason,
    /// and a node is written out and kept or overwritten by the next.
    pub fn feasible(&self, pod: &Pod, out: &mut Vec<NodeId>, rejected: &mut [u32; FilterReason::COUNT]) {
        let scan = Scan::new(self, pod);
        let n = self.fits.len();
        out.clear();
        out.resize(n, 0);
        let mut kept = 0;
        // Slot `Scan::FITS` counts the nodes that fit.
        let mut counts = [0u32; Scan::FITS + 1];
        for (i, f) in self.fits.iter().enumerate() {
            let bit = scan.first_failure(f, &self.nodes[i]);
            out[kept] = i as NodeId;
            kept += usize::from(bit == Scan::FITS);
            counts[bit] += 1;
        }
        out.truncate(kept);
        for (bit, reason) in Scan::REASONS.iter().enumerate() {
            rejected[*reason as usize] += counts[bit];
        }
    }

    /// Like [`Self::feasible`], but scanning from node `start` (wrapping
    /// around) and stopping once `want` feasible nodes are found, as
    /// kube-scheduler samples large clusters. `out` is sorted by id;
    /// `rejected` counts the nodes looked at. Returns where the next scan
    /// should start.
    pub fn feasible_from(
        &self,
        pod: &Pod,
        start: usize,
        want: usize,
        out: &mut Vec<NodeId>,
        rejected: &mut [u32; FilterReason::COUNT],
    ) -> usize {
        let n = self.fits.len();
        if want >= n || n == 0 {
            self.feasible(pod, out, rejected);
            return 0;
        }
        out.clear();
        let scan = Scan::new(self, pod);
        let start = start % n;
        let mut next = start;
        for k in 0..n {
            let i = (start + k) % n;
            next = (i + 1) % n;
            match scan.first_failure(&self.fits[i], &self.nodes[i]) {
                Scan::FITS => {
                    out.push(i as NodeId);
                    if out.len() == want {
                        break;
                    }
                }
                bit => rejected[Scan::REASONS[bit] as usize] += 1,
            }
        }
        out.sort_unstable();
        next
    }

    /// Binds `pod` to `node` on `gpus` (from [`choose_gpus`]).
    pub fn bind(&mut self, node: NodeId, pod: &Pod, gpus: GpuSet) -> Result<Placement, BindError> {
        let n = self.nodes.get_mut(node as usize).ok_or(BindError::NoSuchNode(node))?;
        check(n, pod).map_err(|reason| BindError::Rejected { node, pod: pod.name.clone(), reason })?;
        let bad = || BindError::BadGpus { node, pod: pod.name.clone(), gpus };
        let need = if pod.gpu_count == 0 {
            0
        } else if pod.gpu_milli < GPU_MILLI {
            1
        } else {
            pod.gpu_count
        };
        if gpus.len() != need || gpus.indices().any(|i| i >= n.gpus.len()) {
            return Err(bad());
        }
        for i in gpus.indices() {
            let g = &n.gpus[i];
            let ok = usable(g)
                && if pod.gpu_milli < GPU_MILLI { g.free_milli >= pod.gpu_milli } else { g.free_milli == GPU_MILLI };
            if !ok {
                return Err(bad());
            }
        }
        for i in gpus.indices() {
            n.gpus[i].free_milli -= pod.gpu_milli.min(GPU_MILLI);
        }
        n.free.cpu_milli -= pod.requests.cpu_milli;
        n.free.memory_mib -= pod.requests.memory_mib;
        // Keys are cloned only when new to the node.
        if !pod.workload.is_empty() {
            match n.workloads.get_mut(&pod.workload) {
                Some(c) => *c += 1,
                None => {
                    n.workloads.insert(pod.workload.clone(), 1);
                }
            }
        }
        if let Some(class) = pod.gpu_class() {
            match n.gpu_classes.get_mut(class.as_ref()) {
                Some(c) => *c += 1,
                None => {
                    n.gpu_classes.insert(class.into_owned(), 1);
                }
            }
        }
        self.refresh(node);
        Ok(Placement { node, gpus })
    }

    /// Releases what `pod` held at `placement`.
    ///
    /// # Panics
    /// If the placement does not belong to this cluster (a caller bug).
    pub fn unbind(&mut self, placement: &Placement, pod: &Pod) {
        let n = &mut self.nodes[placement.node as usize];
        release(n, placement.gpus, pod);
        if let Some(c) = n.workloads.get_mut(&pod.workload) {
            *c -= 1;
            if *c == 0 {
                n.workloads.remove(&pod.workload);
            }
        }
        if let Some(class) = pod.gpu_class()
            && let Some(c) = n.gpu_classes.get_mut(class.as_ref())
        {
            *c -= 1;
            if *c == 0 {
                n.gpu_classes.remove(class.as_ref());
            }
        }
        self.refresh(placement.node);
    }
}

#[cfg(test)]
mod tests;
