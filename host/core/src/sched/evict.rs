//! Preemption's side of the loop: which running pods may be victims (a
//! gang goes whole or not at all), evicting them, and putting them back
//! when the gang they made room for could not be placed after all.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use super::{Scheduler, State};
use crate::cluster::{Placement, choose_gpus};
use crate::framework::Placer;
use crate::model::{NodeId, Pod, PodId, Tier};
use crate::preempt::{self, Running};
use crate::quota::Amounts;

/// A victim taken off its node, and what puts it back.
#[derive(Debug, Clone, Copy)]
pub(super) struct Evicted {
    pub(super) id: PodId,
    pub(super) placement: Placement,
    pub(super) started_at: u64,
    pub(super) level: usize,
}

impl Scheduler {
    /// The cheapest victims that let `pod` fit on one node, with every
    /// running member of a victim's gang; none of gang `own` (a gang does
    /// not preempt itself). A gang with a member `pod` may not preempt, or
    /// one a disruption budget protects, is no victim at all. With queues,
    /// a pod preempts by priority only in its own queue; across queues it
    /// reclaims: its queue below its guarantee takes back from queues over
    /// theirs, never taking them below it (`queues::may_take_from`, `may_give_up`).
    pub(super) fn choose_victims(&self, pod: &Pod, now: u64, own: Option<&str>) -> Option<(NodeId, Vec<PodId>)> {
        if !self.cfg.preemption {
            return None;
        }
        let tree = &self.queues.tree;
        let reclaim = self.may_reclaim(pod);
        if !reclaim {
            // The least important running pod: if it cannot be preempted, none can.
            let (&(rank, priority), _) = self.running_keys.first_key_value()?;
            let least = Pod { tier: Tier::BY_RANK[usize::from(rank)], priority, ..Pod::default() };
            if !preempt::may_preempt(pod, &least) {
                return None;
            }
        }
        // What each gang's running members use (a gang is reclaimed whole;
        // only a reclaim asks).
        let mut gang_use: BTreeMap<&str, Amounts> = BTreeMap::new();
        let mut members: BTreeMap<&str, u32> = BTreeMap::new();
        // Walked once here and twice a round below.
        let running_now: Vec<(PodId, &super::Entry)> = self.running_entries().collect();
        for &(id, e) in &running_now {
            if let Some(g) = &e.pod.gang {
                *members.entry(g.name.as_str()).or_insert(0) += 1;
                if reclaim && let Some((_, a)) = self.queues.charged.get(&id) {
                    gang_use.entry(g.name.as_str()).or_default().add(a);
                }
            }
        }
        let no_use = Amounts::default();
        // Leaf queues looked up once, not per victim.
        let own_leaf = tree.leaf_of(pod).ok();
        // The taker's half of a reclaim depends only on the victim's leaf
        // queue and the node's GPU model (what `pod` would use there): once
        // per pair, not per victim (a cluster has few models).
        let mut takes: BTreeMap<(usize, &str), bool> = BTreeMap::new();
        if let Some(qp) = own_leaf.filter(|_| reclaim) {
            let models: BTreeSet<&str> = self.cluster.nodes().iter().map(|n| n.gpu_model.as_str()).collect();
            for model in models {
                let pod_use = Amounts::of(pod, model);
                for qv in (0..tree.nodes().len()).filter(|&q| tree.nodes()[q].is_leaf()) {
                    takes.insert((qv, model), self.may_take_from(qp, &pod_use, qv));
                }
            }
        }
        let mut excluded: BTreeSet<usize> = BTreeSet::new();
        // Each round drops the queues a reclaim would take below their
        // guarantee; each drops one at least, so this ends.
        loop {
            // Per running pod: may it be a victim, and as a reclaim?
            let eligible = |id: PodId, e: &super::Entry, node: NodeId| -> Option<bool> {
                if self.protected.contains(&id) {
                    return None;
                }
                // Ordinary preemption stays in the preemptor's leaf queue.
                let leaf = tree.leaf_of(&e.pod).ok();
                if (tree.is_trivial() || leaf == own_leaf) && preempt::may_preempt(pod, &e.pod) {
                    return Some(false);
                }
                if !reclaim || leaf.is_some_and(|l| excluded.iter().any(|&b| tree.contains(b, l))) {
                    return None;
                }
                // A turn lasts at least `reclaim_min_runtime_s`.
                let State::Running { started_at, .. } = e.state else { return None };
                if now.saturating_sub(started_at) < tree.reclaim_min_runtime_s() {
                    return None;
                }
                let (qp, qv) = (own_leaf?, leaf?);
                let model = self.cluster.node(node).map_or("", |n| n.gpu_model.as_str());
                if !takes.get(&(qv, model)).copied().unwrap_or(false) {
                    return None;
                }
                let victim_use = match &e.pod.gang {
                    Some(g) => gang_use.get(g.name.as_str())?,
                    None => self.queues.charged.get(&id).map_or(&no_use, |(_, a)| a),
                };
                self.may_give_up(qv, &e.pod, victim_use, qp).then_some(true)
            };
            // Each running pod's eligibility, by id (the pass below walks
            // them again).
            let mut whole_or_none: BTreeSet<&str> = BTreeSet::new();
            let flags: Vec<Option<bool>> = running_now
                .iter()
                .map(|&(id, e)| {
                    let State::Running { placement, .. } = e.state else { return None };
                    let ok = eligible(id, e, placement.node);
                    if let Some(g) = &e.pod.gang
                        && (ok.is_none() || own == Some(g.name.as_str()))
                    {
                        whole_or_none.insert(g.name.as_str());
                    }
                    ok
                })
                .collect();
            let (ids, running): (Vec<PodId>, Vec<Running<'_>>) = running_now
                .iter()
                .zip(&flags)
                .filter_map(|(&(id, e), &flag)| match (e.state, flag) {
                    // Nodes kept for another gang take no preemptor.
                    (State::Running { placement, .. }, _) if self.reserved_against(pod, placement.node) => None,
                    (State::Running { placement, started_at, .. }, Some(reclaim)) => {
                        let evicts = match &e.pod.gang {
                            Some(g) if whole_or_none.contains(g.name.as_str()) => return None,
                            Some(g) => members[g.name.as_str()],
                            None => 1,
                        };
                        Some((id, Running { pod: Cow::Borrowed(&e.pod), placement, started_at, evicts, reclaim }))
                    }
                    _ => None,
                })
                .unzip();
            let plan = preempt::plan(self.cluster.nodes(), &running, pod, now)?;
            let mut victims: BTreeSet<PodId> = plan.victims.iter().map(|&v| ids[v]).collect();
            let gangs: BTreeSet<&str> =
                victims.iter().filter_map(|v| self.pods[v].pod.gang.as_ref().map(|g| g.name.as_str())).collect();
            for g in gangs {
                let running =
                    self.gangs[g].members.iter().filter(|m| matches!(self.pods[m].state, State::Running { .. }));
                victims.extend(running);
            }
            if reclaim {
                let taken: Vec<(PodId, &Amounts)> =
                    victims.iter().filter_map(|v| self.queues.charged.get(v).map(|(_, a)| (*v, a))).collect();
                let bad = self.over_reclaimed(pod, &taken);
                if !bad.is_empty() {
                    excluded.extend(bad);
                    continue;
                }
            }
            return Some((plan.node, victims.into_iter().collect()));
        }
    }

    /// Takes `victims` off their nodes. They wait outside the queue until
    /// [`Self::requeue_victims`] (the preemption stands) or
    /// [`Self::restore`] (it is undone).
    pub(super) fn evict(&mut self, victims: &[PodId]) -> Vec<Evicted> {
        let mut out = Vec::with_capacity(victims.len());
        for &id in victims {
            let e = self.pods.get_mut(&id).expect("a victim runs");
            let State::Running { placement, started_at, level } = e.state else { unreachable!("victims run") };
            self.cluster.unbind(&placement, &e.pod);
            e.state = State::Queued;
            let pod = e.pod.clone();
            self.forget_running(id, &pod);
            out.push(Evicted { id, placement, started_at, level });
        }
        out
    }

    /// Binds a preemptor where its victims made room.
    pub(super) fn bind_preemptor(&mut self, node: NodeId, pod: &Pod) -> Placement {
        let n = self.cluster.node(node).expect("planned node");
        let gpus = choose_gpus(n, pod, None).expect("the plan makes room");
        self.cluster.bind(node, pod, gpus).expect("the plan makes room")
    }

    /// The preemption stands: victims go back to the queue one level down.
    pub(super) fn requeue_victims(&mut self, evicted: &[Evicted], now: u64) {
        for v in evicted {
            let priority = self.pods[&v.id].pod.priority;
            self.enlist_demoted(v.id, priority, v.level, now);
        }
        self.stats.preemptions += 1;
        self.stats.evicted += evicted.len() as u64;
    }

    /// Undoes [`Self::evict`]: the victim runs where it ran.
    pub(super) fn restore(&mut self, v: &Evicted) {
        let e = self.pods.get_mut(&v.id).expect("an evicted pod");
        self.cluster.bind(v.placement.node, &e.pod, v.placement.gpus).expect("its room was kept for it");
        e.state = State::Running { placement: v.placement, started_at: v.started_at, level: v.level };
        *self.running_keys.entry((Tier::rank(e.pod.tier), e.pod.priority)).or_insert(0) += 1;
        self.running.insert(v.id);
        self.charge(v.id, v.placement.node);
    }

    /// Tells the placer of the preemptor's node and the victims' nodes; a
    /// victim's node other than `node` (a gang member elsewhere) has room
    /// now, which parked pods get a chance at.
    pub(super) fn tell_evicted<P: Placer + ?Sized>(&mut self, placer: &mut P, evicted: &[Evicted], node: NodeId) {
        let others: BTreeSet<NodeId> = evicted.iter().map(|v| v.placement.node).filter(|&n| n != node).collect();
        let nodes: Vec<_> =
            std::iter::once(node).chain(others.iter().copied()).filter_map(|n| self.cluster.node(n)).collect();
        placer.nodes_changed(&nodes);
        for n in others {
            self.unpark(n);
        }
    }
}
