//! Queues in the loop (`crate::quota`): each leaf queue has its own
//! multi-level feedback queue; the next pod comes from the leaf reached by
//! serving, at each level of the tree, the sibling furthest below its
//! guarantee, then the one with the smallest weighted dominant share. A
//! pod that would take a queue past a limit waits with
//! `SCHED-QUEUE-LIMIT` until its queue's use falls; a pod naming no leaf
//! queue waits with `SCHED-QUEUE-UNKNOWN` until the queues change. What
//! each queue uses is charged per running pod (and per member a gang holds
//! room for), so held room counts against limits too.

use std::collections::{BTreeMap, BTreeSet};

use super::{Scheduler, State};
use crate::framework::{QueueWait, Why};
use crate::model::{Node, NodeId, Pod, PodId};
use crate::queue::{Mlfq, Popped};
use crate::quota::{Amounts, Dim, QueueTree, fair_shares};
use gate::GateShares;
use usage::Usage;

/// What the loop keeps of its queues.
#[derive(Debug)]
pub(super) struct Queues {
    pub(super) tree: QueueTree,
    /// Per queue of the tree (leaves only hold pods).
    pub(super) waiting: Vec<Mlfq<PodId>>,
    /// Per queue, what its running (and held) pods use, its subtree's
    /// summed in.
    pub(super) used: Vec<Amounts>,
    /// Per pod charged: its leaf and what it was charged.
    pub(super) charged: BTreeMap<PodId, (usize, Amounts)>,
    /// Parked pods a limit holds, by the queue whose limit it is.
    pub(super) limited: BTreeMap<usize, BTreeSet<PodId>>,
    /// With `fair_share_gate`: each queue's share of GPUs this pass.
    pub(super) share: Option<GateShares>,
    /// Parked pods the gate holds, by the queue at its share.
    pub(super) gated: BTreeMap<usize, BTreeSet<PodId>>,
    /// Set while a gang holds room: the gang passed the gate as one.
    pub(super) gate_off: bool,
    /// Per queue, pods placed from it.
    pub(super) admitted: Vec<u64>,
    /// What the cluster has (ready nodes), while no node changed.
    pub(super) capacity: Option<Amounts>,
    /// With `usage_half_life_s`: use remembered over time.
    pub(super) usage: Option<Usage>,
    /// With `reclaim_to_fair_share`: per queue, its share of GPUs when its
    /// parked pods were last woken to try reclaim, and when.
    pub(super) reclaim_woken: Vec<(u64, u64)>,
}

impl Queues {
    pub(super) fn new(tree: QueueTree, cfg: crate::queue::MlfqConfig) -> Self {
        let n = tree.nodes().len();
        Self {
            usage: tree.usage_half_life_s().map(|h| Usage::new(n, h)),
            tree,
            waiting: (0..n).map(|_| Mlfq::new(cfg)).collect(),
            used: vec![Amounts::default(); n],
            charged: BTreeMap::new(),
            limited: BTreeMap::new(),
            share: None,
            gated: BTreeMap::new(),
            gate_off: false,
            admitted: vec![0; n],
            capacity: None,
            reclaim_woken: vec![(0, 0); n],
        }
    }

    /// The leaf `pod` waits in; a pod naming no leaf waits in the default
    /// queue's list until it is decided (and parked).
    fn list_of(&self, pod: &Pod) -> usize {
        self.tree.leaf_of(pod).unwrap_or(self.tree.default_leaf())
    }

    /// Whether any leaf under `q` has pods listed.
    fn has_waiting(&self, q: usize) -> bool {
        let n = &self.tree.nodes()[q];
        if n.is_leaf() { !self.waiting[q].is_empty() } else { n.children.iter().any(|&c| self.has_waiting(c)) }
    }
}

/// Per queue, its subtree summed in ([`Scheduler::tally`]).
struct Tally {
    pending: Vec<u64>,
    running: Vec<u64>,
    demand: Vec<Amounts>,
    fair: Vec<Amounts>,
}

/// A queue as the loop sees it now.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueStatus {
    /// Name.
    pub name: String,
    /// Parent, if any.
    pub parent: Option<String>,
    /// Whether pods wait in it.
    pub leaf: bool,
    /// Weight.
    pub weight: f64,
    /// Pods waiting (queued or parked) in it or under it.
    pub pending: u64,
    /// Pods running from it or under it.
    pub running: u64,
    /// Pods placed from it so far.
    pub admitted: u64,
    /// What it uses.
    pub used: Amounts,
    /// What it uses past its guarantee (borrowed).
    pub borrowed: Amounts,
    /// Its guarantee.
    pub guarantee: Amounts,
    /// Its limit.
    pub limit: Amounts,
    /// Its fair share now ([`fair_shares`] over use and waiting demand).
    pub fair_share: Amounts,
    /// Its dominant share of the cluster.
    pub dominant_share: f64,
}

impl Scheduler {
    /// Replaces the queues (a new policy): pods keep their place in their
    /// queue's order where their queue still is, what runs is charged to
    /// the new tree, and pods a queue held get another chance.
    pub fn set_queues(&mut self, tree: QueueTree) {
        let mut q = Queues::new(tree, self.cfg.queue);
        let mut listed: Vec<Popped<PodId>> = self.queues.waiting.iter_mut().flat_map(Mlfq::drain).collect();
        // One order whatever queue they were in: by wait, then id.
        listed.sort_by_key(|p| (p.since, p.item));
        for p in listed {
            let Some(e) = self.pods.get(&p.item) else { continue };
            if e.state == State::Queued {
                let list = q.list_of(&e.pod);
                q.waiting[list].requeue(p.item, p.priority, p.size, p.level, p.since);
            }
        }
        let running: Vec<(PodId, NodeId)> = self.running().map(|(id, _, at)| (id, at.node)).collect();
        self.queues = q;
        for (id, node) in running {
            self.charge(id, node);
        }
        let held: Vec<PodId> = self
            .parked
            .iter()
            .copied()
            .filter(|id| self.pods[id].last_reason.as_ref().is_some_and(|w| w.queue_wait().is_some()))
            .collect();
        self.wake(held);
    }

    /// Per queue (its subtree summed in): pods pending, pods running, its
    /// demand (use plus what waits) and its fair share of each resource of
    /// the cluster now.
    fn tally(&self, capacity: &Amounts) -> Tally {
        let tree = &self.queues.tree;
        let n = tree.nodes().len();
        // Summed per leaf first, then up each leaf's path once: a backlog
        // is thousands of pods in a few queues.
        let (mut own_pending, mut own_running) = (vec![0u64; n], vec![0u64; n]);
        let mut waiting = vec![[0u64; 3]; n];
        for e in self.pods.values() {
            let Ok(leaf) = tree.leaf_of(&e.pod) else { continue };
            if matches!(e.state, State::Running { .. }) {
                own_running[leaf] += 1;
            } else {
                own_pending[leaf] += 1;
                for (sum, v) in waiting[leaf].iter_mut().zip(Amounts::anywhere_parts(&e.pod)) {
                    *sum += v;
                }
            }
        }
        let (mut pending, mut running) = (vec![0u64; n], vec![0u64; n]);
        let mut demand = self.queues.used.clone();
        for q in (0..n).filter(|&q| own_pending[q] + own_running[q] > 0) {
            let need = Amounts::from_parts(waiting[q]);
            for a in tree.path(q) {
                pending[a] += own_pending[q];
                running[a] += own_running[q];
                demand[a].add(&need);
            }
        }
        let fair = fair_shares(tree, capacity, &demand);
        Tally { pending, running, demand, fair }
    }

    /// The queues: use, guarantee, limit, what is borrowed, fair share.
    pub fn queues(&self) -> Vec<QueueStatus> {
        let tree = &self.queues.tree;
        let capacity = self.capacity();
        let Tally { pending, running, fair, .. } = self.tally(&capacity);
        tree.nodes()
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let used = self.queues.used[i].clone();
                let guarantee = Amounts(q.guarantee.clone());
                let mut borrowed = used.clone();
                borrowed.sub(&guarantee);
                borrowed.0.retain(|d, _| q.guarantee.contains_key(d) || !matches!(d, Dim::Model(_)));
                QueueStatus {
                    name: q.name.clone(),
                    parent: q.parent.map(|p| tree.nodes()[p].name.clone()),
                    leaf: q.is_leaf(),
                    weight: q.weight,
                    pending: pending[i],
                    running: running[i],
                    admitted: self.queues.admitted[i],
                    dominant_share: crate::quota::dominant_share(&used, &capacity),
                    used,
                    borrowed,
                    guarantee,
                    limit: Amounts(q.limit.clone()),
                    fair_share: fair[i].clone(),
                }
            })
            .collect()
    }

    /// The queue `pod` waits in, by name (the name it gave, if that is
    /// no leaf queue).
    pub fn queue_of<'a>(&'a self, pod: &'a Pod) -> &'a str {
        match self.queues.tree.leaf_of(pod) {
            Ok(q) => &self.queues.tree.nodes()[q].name,
            Err(name) => name,
        }
    }

    /// Whether the policy set queues (more than the one default queue).
    pub fn has_queues(&self) -> bool {
        !self.queues.tree.is_trivial()
    }

    /// What the cluster has, per resource (ready nodes).
    pub(super) fn capacity(&self) -> Amounts {
        if let Some(c) = &self.queues.capacity {
            return c.clone();
        }
        let mut c = Amounts::default();
        for n in self.cluster.nodes().iter().filter(|n| n.ready) {
            c.add(&node_amounts(n));
        }
        c
    }

    /// [`Self::capacity`], kept until a node changes.
    fn capacity_cached(&mut self) -> Amounts {
        let c = self.capacity();
        self.queues.capacity = Some(c.clone());
        c
    }

    /// Pod `id`'s queue list and its job's size for the queue's order
    /// (`scheduling.queue.smallest_first`): the GPU share its whole gang
    /// asks for (every member alike, so a gang's members stay together).
    fn list_and_size(&self, id: PodId) -> (usize, u64) {
        let pod = &self.pods[&id].pod;
        let members = pod.gang.as_ref().map_or(1, |g| u64::from(g.min_member.max(1)));
        (self.queues.list_of(pod), u64::from(pod.gpu_count) * u64::from(pod.gpu_milli) * members)
    }

    /// Lists pod `id` (queued) in its queue.
    pub(super) fn enlist(&mut self, id: PodId, priority: i32, level: usize, since: u64) {
        let (list, size) = self.list_and_size(id);
        self.queues.waiting[list].requeue(id, priority, size, level, since);
    }

    /// Lists a new pod `id` at level 0.
    pub(super) fn enlist_new(&mut self, id: PodId, priority: i32, now: u64) {
        let (list, size) = self.list_and_size(id);
        self.queues.waiting[list].push(id, priority, size, now);
    }

    /// Lists pod `id` one level below `level` (a preemption's victim).
    pub(super) fn enlist_demoted(&mut self, id: PodId, priority: i32, level: usize, now: u64) {
        let (list, size) = self.list_and_size(id);
        self.queues.waiting[list].demote(id, priority, size, level, now);
    }

    /// Pods listed at each level, over all queues.
    pub(super) fn listed_depths(&self) -> Vec<usize> {
        let mut depths = vec![0; self.cfg.queue.levels.max(1)];
        for q in &self.queues.waiting {
            for (d, n) in depths.iter_mut().zip(q.depths()) {
                *d += n;
            }
        }
        depths
    }

    /// The next pod to decide: from the one queue if there is one, else
    /// down the tree by guarantee and weighted dominant share.
    pub(super) fn next_listed(&mut self, now: u64) -> Option<Popped<PodId>> {
        if self.queues.tree.is_trivial() {
            return self.queues.waiting[0].pop(now);
        }
        let capacity = self.capacity_cached();
        let tree = &self.queues.tree;
        let mut siblings: &[usize] = tree.roots();
        loop {
            let best = siblings
                .iter()
                .copied()
                .filter(|&q| self.queues.has_waiting(q))
                .map(|q| (tree.rank(q, &self.queues.used[q], &capacity), q))
                .min_by(|(a, qa), (b, qb)| {
                    a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(tree.nodes()[*qa].name.cmp(&tree.nodes()[*qb].name))
                })?
                .1;
            let n = &tree.nodes()[best];
            if n.is_leaf() {
                return self.queues.waiting[best].pop(now);
            }
            siblings = &n.children;
        }
    }

    /// Charges running (or held) pod `id` on `node` to its queue, once.
    pub(super) fn charge(&mut self, id: PodId, node: NodeId) {
        if self.queues.charged.contains_key(&id) {
            return;
        }
        let Some(e) = self.pods.get(&id) else { return };
        let Ok(leaf) = self.queues.tree.leaf_of(&e.pod) else { return };
        let model = self.cluster.node(node).map_or("", |n| n.gpu_model.as_str());
        let a = Amounts::of(&e.pod, model);
        for q in self.queues.tree.path(leaf).collect::<Vec<_>>() {
            self.queues.used[q].add(&a);
        }
        self.queues.charged.insert(id, (leaf, a));
    }

    /// Takes back what pod `id` was charged; with `wake`, pods a limit
    /// held on its queue's path get another chance (not when room held for
    /// a gang is merely given back).
    pub(super) fn uncharge(&mut self, id: PodId, wake: bool) {
        let Some((leaf, a)) = self.queues.charged.remove(&id) else { return };
        let path: Vec<usize> = self.queues.tree.path(leaf).collect();
        let mut ready = Vec::new();
        for q in path {
            self.queues.used[q].sub(&a);
            if wake && let Some(held) = self.queues.limited.remove(&q) {
                ready.extend(held.into_iter().filter(|p| self.parked.contains(p)));
            }
        }
        self.wake(ready);
    }

    /// Notes a pod placed from its queue.
    pub(super) fn note_admitted(&mut self, id: PodId) {
        if let Some((leaf, _)) = self.queues.charged.get(&id) {
            for q in self.queues.tree.path(*leaf).collect::<Vec<_>>() {
                self.queues.admitted[q] += 1;
            }
        }
    }

    /// Notes that parked pod `id` waits on `why`: a limit's queue wakes it
    /// when its use falls.
    pub(super) fn note_parked(&mut self, id: PodId, why: &Why) {
        match why.queue_wait() {
            Some(QueueWait::Limit { queue, .. }) => {
                if let Some(q) = self.queues.tree.index(queue) {
                    self.queues.limited.entry(q).or_default().insert(id);
                }
            }
            Some(QueueWait::FairShare { queue, .. }) => {
                if let Some(q) = self.queues.tree.index(queue) {
                    self.queues.gated.entry(q).or_default().insert(id);
                }
            }
            _ => {}
        }
    }

    /// Why `pod` may not be placed by its queue now, if it may not:
    /// unknown queue, or a limit of CPU, memory or GPUs of any model on its
    /// path. GPU models whose limit it would pass are in `blocked`.
    pub(super) fn queue_check(&self, pod: &Pod, blocked: &mut Vec<(String, QueueWait)>) -> Result<(), QueueWait> {
        blocked.clear();
        let tree = &self.queues.tree;
        if tree.is_trivial() && pod.queue.is_none() {
            return Ok(());
        }
        let leaf = tree.leaf_of(pod).map_err(|q| QueueWait::Unknown { queue: q.to_string() })?;
        if let Some(w) = self.fair_share_wait([pod]) {
            return Err(w);
        }
        let need = Amounts::anywhere(pod);
        if let Some((q, d)) = tree.over_limit(leaf, &self.queues.used, &need) {
            return Err(self.limit_wait(q, &d));
        }
        if pod.gpu_count == 0 {
            return Ok(());
        }
        let models: BTreeSet<&String> = tree
            .path(leaf)
            .flat_map(|q| tree.nodes()[q].limit.keys())
            .filter_map(|d| match d {
                Dim::Model(m) => Some(m),
                _ => None,
            })
            .collect();
        for m in models {
            let need = Amounts::of(pod, m);
            if let Some((q, d)) = tree.over_limit(leaf, &self.queues.used, &need) {
                blocked.push((m.clone(), self.limit_wait(q, &d)));
            }
        }
        Ok(())
    }

    fn limit_wait(&self, q: usize, d: &Dim) -> QueueWait {
        let node = &self.queues.tree.nodes()[q];
        QueueWait::Limit {
            queue: node.name.clone(),
            resource: d.name(),
            limit: d.show(node.limit.get(d).copied().unwrap_or(0)),
            used: d.show(self.queues.used[q].get(d)),
        }
    }

    /// What reclaim protects of queue `q` and lets it take back, per
    /// resource: its guarantee, and with `reclaim_to_fair_share` (while
    /// the gate holds queues) for GPUs the share the gate holds it to this
    /// pass instead — with remembered use a guarantee over time: a queue
    /// that held more than its share is owed less now, down to nothing.
    fn entitled(&self, q: usize) -> impl Iterator<Item = (&Dim, u64)> + '_ {
        static GPU: Dim = Dim::Gpu;
        let node = &self.queues.tree.nodes()[q];
        let share = self.reclaim_share(q);
        let gpu = share.map(|s| (&GPU, s));
        node.guarantee.iter().filter(move |(d, _)| share.is_none() || **d != Dim::Gpu).map(|(d, &g)| (d, g)).chain(gpu)
    }

    /// Whether a pod of leaf queue `qp`, using `pod_use` on a victim's
    /// node, may reclaim from leaf queue `qv` — the taker's half of a
    /// reclaim: up to where their paths meet, its queues stay within their
    /// guarantees with it, and one of them is entitled to something it
    /// uses. The same for every victim of `qv` on nodes of one GPU model.
    pub(super) fn may_take_from(&self, qp: usize, pod_use: &Amounts, qv: usize) -> bool {
        let tree = &self.queues.tree;
        if !tree.reclaim() || qp == qv {
            return false;
        }
        let mut entitled = false;
        for a in tree.path(qp).take_while(|&a| !tree.contains(a, qv)) {
            for (d, g) in self.entitled(a) {
                let add = pod_use.get(d);
                if add == 0 {
                    continue;
                }
                if self.queues.used[a].get(d) + add > g {
                    return false;
                }
                entitled = true;
            }
        }
        entitled
    }

    /// The victim's half of a reclaim: whether pod `victim` of leaf queue
    /// `qv`, using `victim_use` (its gang's if it has one), may be taken
    /// for a pod of leaf queue `qp` ([`Self::may_take_from`]): not of the
    /// hard tier, and up to where their paths meet, its queues stay at or
    /// above their guarantees without it.
    pub(super) fn may_give_up(&self, qv: usize, victim: &Pod, victim_use: &Amounts, qp: usize) -> bool {
        let tree = &self.queues.tree;
        victim.tier != crate::model::Tier::Hard
            && tree.path(qv).take_while(|&b| !tree.contains(b, qp)).all(|b| self.keeps_entitlement(b, victim_use))
    }

    /// Whether queue `b` stays at or above what it is entitled to
    /// ([`Self::entitled`]) without `taken`, in each resource taken.
    fn keeps_entitlement(&self, b: usize, taken: &Amounts) -> bool {
        self.entitled(b).all(|(d, g)| {
            let take = taken.get(d);
            take == 0 || self.queues.used[b].get(d).saturating_sub(take) >= g
        })
    }

    /// Whether `pod` may reclaim at all: its own leaf sets a guarantee it
    /// would use and stays within it with the pod (CPU, memory, GPUs of
    /// any model; a model's guarantee is checked per node later). A
    /// necessary condition of [`Self::may_take_from`], cheap enough to ask
    /// before looking at any victim.
    pub(super) fn may_reclaim(&self, pod: &Pod) -> bool {
        let tree = &self.queues.tree;
        if !tree.reclaim() || tree.is_trivial() {
            return false;
        }
        let Ok(leaf) = tree.leaf_of(pod) else { return false };
        let need = Amounts::anywhere(pod);
        let mut uses_one = false;
        for (d, g) in self.entitled(leaf) {
            let add = match d {
                Dim::Model(_) => {
                    uses_one |= pod.gpu_count > 0 && g > 0;
                    continue;
                }
                d => need.get(d),
            };
            if add == 0 {
                continue;
            }
            if self.queues.used[leaf].get(d) + add > g {
                return false;
            }
            uses_one = true;
        }
        uses_one
    }

    /// The queues that the victims chosen, taken together, would take
    /// below their guarantee (none: the reclaim stands).
    pub(super) fn over_reclaimed(&self, pod: &Pod, victims: &[(PodId, &Amounts)]) -> BTreeSet<usize> {
        let tree = &self.queues.tree;
        let Ok(qp) = tree.leaf_of(pod) else { return BTreeSet::new() };
        let mut taken: BTreeMap<usize, Amounts> = BTreeMap::new();
        for (id, a) in victims {
            let Ok(qv) = tree.leaf_of(&self.pods[id].pod) else { continue };
            if qv == qp {
                continue;
            }
            for b in tree.path(qv).take_while(|&b| !tree.contains(b, qp)) {
                taken.entry(b).or_default().add(a);
            }
        }
        taken.into_iter().filter(|(b, t)| !self.keeps_entitlement(*b, t)).map(|(b, _)| b).collect()
    }
}

/// What a node has, per resource.
fn node_amounts(n: &Node) -> Amounts {
    let mut a = BTreeMap::new();
    a.insert(Dim::Cpu, n.capacity.cpu_milli);
    a.insert(Dim::Memory, n.capacity.memory_mib);
    let gpus = n.gpus.len() as u64 * u64::from(crate::model::GPU_MILLI);
    if gpus > 0 {
        a.insert(Dim::Gpu, gpus);
        a.insert(Dim::Model(n.gpu_model.clone()), gpus);
    }
    a.retain(|_, v| *v > 0);
    Amounts(a)
}

mod gate;
#[cfg(test)]
mod tests;
mod usage;
