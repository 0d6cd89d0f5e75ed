//! The planner's working copy of the cluster: strategies try moves on it,
//! keep the ones that pay and undo the rest, so every strategy sees the
//! cluster as the moves before it left it and no two moves conflict.

use std::collections::BTreeSet;
use std::time::Instant;

use rustc_hash::FxHashMap;

use tessera_core::cluster::{Cluster, GpuSet, Placement, check};
use tessera_core::metrics::{TargetWorkload, node_fragment_weighted};
use tessera_core::model::{GPU_MILLI, GpuHealth, NodeId, Pod, Tier};

use crate::cost::CostWeights;
use crate::plan::{Move, Strategy};

#[derive(Clone)]
pub(crate) struct Scratch<'a> {
    pub cluster: Cluster,
    pub running: &'a [(Pod, Placement)],
    /// Where each running pod is now.
    pub at: Vec<Placement>,
    /// Pods moved by this plan (a pod moves at most once).
    pub moved: Vec<bool>,
    /// Pods per node, by index into `running`.
    pub on_node: Vec<Vec<usize>>,
    pub moves: Vec<Move>,
    pub workload: &'a TargetWorkload,
    pub weights: CostWeights,
    /// Running replicas per workload.
    replicas: FxHashMap<&'a str, u32>,
    /// Weighted fragmentation per node, as the node stands.
    pub frag: Vec<f64>,
    /// Partially used, usable GPUs of ready nodes: (free share, node, GPU).
    pub partial: BTreeSet<(u32, NodeId, u8)>,
    pub deadline: Option<Instant>,
    pub timed_out: bool,
    checks: u32,
    /// `γ·gain` of the groups of moves kept.
    pub gain: f64,
    /// Incremental planning: only these nodes are sources of moves (hot,
    /// low-load, donors); all nodes remain targets.
    pub focus: Option<Vec<bool>>,
}

/// Whether `g` can hold a share and counts as partially used.
fn partial_key(n: &tessera_core::Node, i: usize) -> Option<(u32, NodeId, u8)> {
    let g = &n.gpus[i];
    (n.ready && g.health != GpuHealth::Failed && g.free_milli > 0 && g.free_milli < GPU_MILLI).then_some((
        g.free_milli,
        n.id,
        i as u8,
    ))
}

impl<'a> Scratch<'a> {
    pub fn new(
        cluster: &Cluster,
        running: &'a [(Pod, Placement)],
        workload: &'a TargetWorkload,
        weights: CostWeights,
        deadline: Option<Instant>,
    ) -> Self {
        let cluster = cluster.clone();
        let mut on_node = vec![Vec::new(); cluster.nodes().len()];
        // Counted for 100,000 pods per plan and read for every move: a fast
        // hash rather than SipHash (the keys are the cluster's own names).
        let mut replicas: FxHashMap<&str, u32> = FxHashMap::default();
        for (i, (p, at)) in running.iter().enumerate() {
            if let Some(v) = on_node.get_mut(at.node as usize) {
                v.push(i);
            }
            if !p.workload.is_empty() {
                *replicas.entry(p.workload.as_str()).or_insert(0) += 1;
            }
        }
        let frag = cluster.nodes().iter().map(|n| node_fragment_weighted(n, workload)).collect();
        // `collect` sorts once and builds the set in bulk, rather than
        // inserting key by key.
        let partial: BTreeSet<(u32, NodeId, u8)> =
            cluster.nodes().iter().flat_map(|n| (0..n.gpus.len()).filter_map(|i| partial_key(n, i))).collect();
        Self {
            at: running.iter().map(|(_, p)| *p).collect(),
            moved: vec![false; running.len()],
            on_node,
            moves: Vec::new(),
            cluster,
            running,
            workload,
            weights,
            replicas,
            frag,
            partial,
            deadline,
            timed_out: false,
            checks: 0,
            gain: 0.0,
            focus: None,
        }
    }

    /// True once the deadline passed (checked every few calls).
    pub fn out_of_time(&mut self) -> bool {
        if self.timed_out {
            return true;
        }
        self.checks += 1;
        if self.checks.is_multiple_of(16)
            && let Some(d) = self.deadline
            && Instant::now() >= d
        {
            self.timed_out = true;
        }
        self.timed_out
    }

    /// May moves start from `node`?
    pub fn in_focus(&self, node: NodeId) -> bool {
        self.focus.as_ref().is_none_or(|f| f.get(node as usize).copied().unwrap_or(false))
    }

    pub fn pod(&self, i: usize) -> &'a Pod {
        &self.running[i].0
    }

    /// May this pod be moved by this plan?
    pub fn movable(&self, i: usize) -> bool {
        !self.moved[i] && self.running[i].0.tier != Tier::Hard
    }

    pub fn replicas(&self, p: &Pod) -> u32 {
        self.replicas.get(p.workload.as_str()).copied().unwrap_or(1)
    }

    /// Cost of moving pod `i` from where it is.
    pub fn move_cost(&self, i: usize) -> f64 {
        let p = self.pod(i);
        let model = &self.cluster.nodes()[self.at[i].node as usize].gpu_model;
        self.weights.move_cost(p, model, self.replicas(p))
    }

    /// Free share of `node`'s GPUs in `set` (index = GPU), before a change.
    fn frees(&self, node: NodeId, set: GpuSet) -> [u32; 32] {
        let mut out = [0; 32];
        let gpus = &self.cluster.nodes()[node as usize].gpus;
        for i in set.indices().filter(|&i| i < gpus.len()) {
            out[i] = gpus[i].free_milli;
        }
        out
    }

    /// Refreshes the index entries of `node`'s GPUs in `set`, whose free
    /// share was `before`.
    fn reindex(&mut self, node: NodeId, set: GpuSet, before: &[u32; 32]) {
        let len = self.cluster.nodes()[node as usize].gpus.len();
        for i in set.indices().filter(|&i| i < len) {
            self.partial.remove(&(before[i], node, i as u8));
            if let Some(k) = partial_key(&self.cluster.nodes()[node as usize], i) {
                self.partial.insert(k);
            }
        }
    }

    /// Moves pod `i` to `to`; false (and nothing changed) if it does not
    /// fit there.
    pub fn try_move(&mut self, i: usize, to: NodeId, gpus: GpuSet, strategy: Strategy) -> bool {
        let from = self.at[i];
        if from.node == to || !self.movable(i) {
            return false;
        }
        let pod = self.pod(i);
        let Some(target) = self.cluster.node(to) else { return false };
        if check(target, pod).is_err() {
            return false;
        }
        let cost = self.move_cost(i);
        let (src_before, dst_before) = (self.frees(from.node, from.gpus), self.frees(to, gpus));
        self.cluster.unbind(&from, pod);
        match self.cluster.bind(to, pod, gpus) {
            Ok(p) => {
                self.at[i] = p;
                self.moved[i] = true;
                self.on_node[from.node as usize].retain(|&j| j != i);
                self.on_node[to as usize].push(i);
                self.moves.push(Move { pod: i, from, to: p, strategy, cost });
                self.reindex(from.node, from.gpus, &src_before);
                self.reindex(to, p.gpus, &dst_before);
                true
            }
            Err(_) => {
                self.cluster.bind(from.node, pod, from.gpus).expect("the pod was just there");
                false
            }
        }
    }

    /// Undoes every move after the first `mark`.
    pub fn undo_to(&mut self, mark: usize) {
        while self.moves.len() > mark {
            let m = self.moves.pop().expect("len > mark");
            let pod = self.pod(m.pod);
            let (to_before, from_before) = (self.frees(m.to.node, m.to.gpus), self.frees(m.from.node, m.from.gpus));
            self.cluster.unbind(&m.to, pod);
            self.cluster.bind(m.from.node, pod, m.from.gpus).expect("undo restores a state that held");
            self.at[m.pod] = m.from;
            self.moved[m.pod] = false;
            self.on_node[m.to.node as usize].retain(|&j| j != m.pod);
            self.on_node[m.from.node as usize].push(m.pod);
            self.reindex(m.to.node, m.to.gpus, &to_before);
            self.reindex(m.from.node, m.from.gpus, &from_before);
        }
    }

    /// Fragmentation of `node` now minus what the cache holds (negative: it
    /// went down); refreshes the cache when `commit`.
    pub fn frag_delta(&mut self, nodes: &[NodeId], commit: bool) -> f64 {
        let mut d = 0.0;
        for &n in nodes {
            let now = node_fragment_weighted(&self.cluster.nodes()[n as usize], self.workload);
            d += now - self.frag[n as usize];
            if commit {
                self.frag[n as usize] = now;
            }
        }
        d
    }

    /// The best-fit partially used GPU for sharing pod `i` on another node
    /// than `not`, with room for its CPU and memory: the least free share
    /// that holds it. Looks at no more than `tries` GPUs.
    pub fn best_fit_share(&self, i: usize, not: &[NodeId], tries: usize) -> Option<(NodeId, u8)> {
        let pod = self.pod(i);
        let share = pod.gpu_milli;
        self.partial
            .range((share, 0, 0)..)
            .filter(|&&(_, n, _)| !not.contains(&n))
            .take(tries)
            .find(|&&(_, n, _)| check(&self.cluster.nodes()[n as usize], pod).is_ok())
            .map(|&(_, n, g)| (n, g))
    }

    /// Nodes touched by the moves after `mark`.
    pub fn touched_since(&self, mark: usize) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self.moves[mark..].iter().flat_map(|m| [m.from.node, m.to.node]).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Cost of the moves after `mark`.
    pub fn cost_since(&self, mark: usize) -> f64 {
        self.moves[mark..].iter().map(|m| m.cost).sum()
    }

    /// Keeps the moves after `mark` if `γ·(fragmentation removed + bonus)
    /// − cost` beats the minimum net gain; undoes them otherwise.
    pub fn keep_if_it_pays(&mut self, mark: usize, bonus_milli: f64) -> bool {
        let touched = self.touched_since(mark);
        let removed = -self.frag_delta(&touched, false);
        let gain = self.weights.gain(removed + bonus_milli);
        if gain - self.cost_since(mark) > self.weights.min_net_gain.max(0.0) {
            self.frag_delta(&touched, true);
            self.gain += gain;
            true
        } else {
            self.undo_to(mark);
            false
        }
    }
}
