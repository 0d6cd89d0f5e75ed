//! A live cluster: nodes join, and pods already running (bound before
//! this loop started, or by another scheduler) join the model where they
//! run.

use super::{Entry, Scheduler, State};
use crate::cluster::{FilterReason, GpuSet, Placement};
use crate::model::{Node, NodeId, Pod, PodId, Tier};

/// A running pod could not join the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdoptError {
    /// The id is already in use.
    #[error("pod id {0} is already known")]
    Duplicate(PodId),
    /// It does not fit where it runs, as the model sees the node.
    #[error(transparent)]
    Unfit(#[from] crate::cluster::BindError),
}

/// A waiting pod could not be placed where it was told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    /// No such pod waits (unknown, or already running).
    #[error("pod id {0} is not waiting")]
    NotWaiting(PodId),
    /// It does not fit there, as the model sees the node.
    #[error(transparent)]
    Unfit(#[from] crate::cluster::BindError),
}

impl Scheduler {
    /// Whether running pod `id` may be chosen as a preemption victim: a
    /// disruption budget that allows no disruption now protects it. When
    /// the protection lifts (the budget was relaxed or deleted), parked
    /// pods that may preempt it get another chance: nothing else about the
    /// cluster changed, so nothing else would wake them.
    pub fn protect(&mut self, id: PodId, protected: bool) {
        if protected {
            self.protected.insert(id);
            return;
        }
        if !self.protected.remove(&id) {
            return;
        }
        let Some(victim) = self.pods.get(&id).filter(|e| matches!(e.state, State::Running { .. })).map(|e| &e.pod)
        else {
            return;
        };
        let ready: Vec<PodId> = self
            .parked
            .iter()
            .copied()
            .filter(|p| self.pods.get(p).is_some_and(|e| crate::preempt::may_preempt(&e.pod, victim)))
            .collect();
        self.wake(ready);
    }

    /// A node joins: the placer is told, parked pods that fit on it get
    /// another chance. Its id.
    pub fn add_node(&mut self, node: Node) -> NodeId {
        let id = self.cluster.add_node(node);
        self.queues.capacity = None;
        self.dirty.insert(id);
        self.unpark(id);
        id
    }

    /// A pod already running on `node` (bound before this loop started, or
    /// by another scheduler) joins the model there, on `gpus` when known,
    /// else on the GPUs the host would choose. Unknown pods only; on error
    /// (it does not fit the model) nothing changes.
    pub fn adopt(
        &mut self,
        id: PodId,
        mut pod: Pod,
        node: NodeId,
        gpus: Option<GpuSet>,
        now: u64,
    ) -> Result<Placement, AdoptError> {
        if self.pods.contains_key(&id) {
            return Err(AdoptError::Duplicate(id));
        }
        // A pod keeps running on a node that stopped being ready, or was
        // tainted or relabelled since it was bound: its room is taken all
        // the same.
        let was_ready = self.cluster.node(node).ok_or(crate::cluster::BindError::NoSuchNode(node))?.ready;
        let taints = self.cluster.update_node(node, |n| {
            n.ready = true;
            std::mem::take(&mut n.taints)
        });
        let selector = std::mem::take(&mut pod.node_selector);
        let r = self.adopt_on_ready(id, pod, node, gpus, now);
        if let Some(e) = self.pods.get_mut(&id)
            && r.is_ok()
        {
            e.pod.node_selector = selector;
        }
        self.cluster.update_node(node, |n| {
            n.ready = was_ready;
            n.taints = taints.unwrap_or_default();
        });
        r
    }

    /// Binds queued (or parked) pod `id` at `to`, a place decided outside
    /// the placer: a rescheduling move steering the replacement of a moved
    /// pod onto the room reserved for it. On error nothing changes.
    pub fn place_at(&mut self, id: PodId, to: Placement, now: u64) -> Result<Placement, PlaceError> {
        let e = self.pods.get(&id).ok_or(PlaceError::NotWaiting(id))?;
        if matches!(e.state, State::Running { .. }) {
            return Err(PlaceError::NotWaiting(id));
        }
        let at = self.cluster.bind(to.node, &e.pod, to.gpus)?;
        self.parked.remove(&id);
        let level = match e.state {
            State::Parked { level, .. } => level,
            _ => 0,
        };
        self.bound(id, at, now, level);
        self.dirty.insert(at.node);
        Ok(at)
    }

    fn adopt_on_ready(
        &mut self,
        id: PodId,
        pod: Pod,
        node: NodeId,
        gpus: Option<GpuSet>,
        now: u64,
    ) -> Result<Placement, AdoptError> {
        let n = self.cluster.node(node).ok_or(crate::cluster::BindError::NoSuchNode(node))?;
        let gpus = match gpus {
            Some(g) => g,
            None => crate::cluster::choose_gpus(n, &pod, None).ok_or_else(|| crate::cluster::BindError::Rejected {
                node,
                pod: pod.name.clone(),
                reason: crate::cluster::check(n, &pod).err().unwrap_or(FilterReason::GpuInsufficient),
            })?,
        };
        let placement = self.cluster.bind(node, &pod, gpus)?;
        *self.running_keys.entry((Tier::rank(pod.tier), pod.priority)).or_insert(0) += 1;
        self.running.insert(id);
        self.pods.insert(
            id,
            Entry {
                pod,
                state: State::Running { placement, started_at: now, level: 0 },
                submitted_at: now,
                last_reason: None,
            },
        );
        self.join_gang(id, now);
        self.charge(id, node);
        self.dirty.insert(node);
        Ok(placement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{Choice, Placer};
    use crate::model::Resources;

    struct First;

    impl Placer for First {
        fn nodes_changed(&mut self, _nodes: &[&Node]) {}
        fn place(&mut self, _pod: &Pod, candidates: &[NodeId]) -> Choice {
            Choice { node: candidates.first().copied(), ..Choice::default() }
        }
    }

    fn node(name: &str, gpus: usize) -> Node {
        Node::new(0, name, Resources { cpu_milli: 16_000, memory_mib: 65_536 }, gpus, "A100")
    }

    fn pod(name: &str, gpus: u32) -> Pod {
        Pod {
            name: name.into(),
            requests: Resources { cpu_milli: 1_000, memory_mib: 1_024 },
            gpu_count: gpus,
            gpu_milli: 1000,
            ..Pod::default()
        }
    }

    #[test]
    fn a_joining_node_takes_the_pods_that_fit_nowhere_else() {
        let mut s = Scheduler::new(vec![node("a", 2)], super::super::SchedConfig::default());
        s.submit(1, pod("big", 4), 0).unwrap();
        let ev = s.schedule(&mut First, 0);
        assert!(matches!(ev[..], [crate::sched::Event::Unschedulable { .. }]), "{ev:?}");
        let id = s.add_node(node("b", 8));
        assert_eq!((id, s.cluster().nodes()[1].name.as_str()), (1, "b"));
        let ev = s.schedule(&mut First, 1);
        assert!(
            matches!(ev[..], [crate::sched::Event::Bound { pod: 1, .. }]),
            "the parked pod got another chance: {ev:?}"
        );
        assert_eq!(s.placement(1).unwrap().node, 1);
    }

    #[test]
    fn a_protected_pod_is_never_a_preemption_victim() {
        use crate::model::Tier;
        let mut s = Scheduler::new(vec![node("a", 2)], super::super::SchedConfig::default());
        let low = |name: &str| Pod { tier: Tier::Opportunistic, ..pod(name, 1) };
        s.adopt(1, low("batch-1"), 0, None, 0).unwrap();
        s.adopt(2, low("batch-2"), 0, None, 0).unwrap();
        s.protect(1, true);
        s.submit(3, Pod { priority: 100, ..pod("urgent", 1) }, 1).unwrap();
        let ev = s.schedule(&mut First, 1);
        assert!(
            matches!(ev.first(), Some(crate::sched::Event::Preempted { pod: 3, victims, .. }) if victims == &[2]),
            "only the unprotected pod is preempted: {ev:?}"
        );
        // Both protected: nothing to preempt.
        s.protect(3, true);
        s.protect(1, true);
        s.submit(4, Pod { priority: 100, ..pod("urgent-2", 1) }, 2).unwrap();
        let ev = s.schedule(&mut First, 2);
        assert!(ev.iter().all(|e| !matches!(e, crate::sched::Event::Preempted { pod: 4, .. })), "{ev:?}");
        assert_eq!(s.parked(), 2, "urgent-2 waits, as batch-2 (the first preemption's victim) does");
        // The budget is relaxed: the parked pod that may preempt batch-1
        // tries again at once and preempts (nothing else changed that
        // would wake it); batch-2 may not, and stays parked.
        s.protect(1, false);
        assert_eq!(s.parked(), 1);
        let ev = s.schedule(&mut First, 3);
        assert!(
            matches!(ev.first(), Some(crate::sched::Event::Preempted { pod: 4, victims, .. }) if victims == &[1]),
            "{ev:?}"
        );
        // Lifting a protection no pod had wakes nothing.
        s.protect(99, false);
    }

    #[test]
    fn a_queued_or_parked_pod_is_placed_where_it_is_told_and_nowhere_else() {
        let mut s = Scheduler::new(vec![node("a", 2), node("b", 4)], super::super::SchedConfig::default());
        s.submit(1, pod("moved", 2), 0).unwrap();
        let at = s.place_at(1, Placement { node: 1, gpus: GpuSet(0b1100) }, 3).unwrap();
        assert_eq!(at, Placement { node: 1, gpus: GpuSet(0b1100) });
        assert_eq!(s.placement(1), Some(at));
        assert!(s.schedule(&mut First, 4).is_empty(), "its stale queue entry is skipped");
        assert!(s.place_at(1, at, 5).is_err(), "a running pod is not placed again");
        // A parked pod too; a place it does not fit changes nothing.
        s.submit(2, pod("big", 8), 5).unwrap();
        assert!(matches!(s.schedule(&mut First, 5)[..], [crate::sched::Event::Unschedulable { pod: 2, .. }]));
        assert!(s.place_at(2, Placement { node: 0, gpus: GpuSet(0b11) }, 6).is_err());
        assert_eq!(s.placement(2), None);
        assert_eq!(s.parked(), 1);
        s.submit(3, pod("small", 2), 6).unwrap();
        s.place_at(3, Placement { node: 0, gpus: GpuSet(0b11) }, 6).unwrap();
        assert_eq!(s.cluster().nodes()[0].free_gpu_milli(), 0);
        assert_eq!(s.stats().bound, 2);
    }

    #[test]
    fn running_pods_are_adopted_on_nodes_tainted_or_relabelled_since() {
        let mut s = Scheduler::new(vec![node("a", 2)], super::super::SchedConfig::default());
        s.update_node(0, |n| {
            n.taints.push(crate::model::Taint { key: "k".into(), value: String::new(), effect: "NoSchedule".into() })
        });
        let picky = Pod { node_selector: [("pool".into(), "x".into())].into(), ..pod("web", 1) };
        s.adopt(1, picky.clone(), 0, None, 0).unwrap();
        assert_eq!(s.cluster().nodes()[0].free_gpu_milli(), 1000, "its room is taken");
        assert_eq!(s.cluster().nodes()[0].taints.len(), 1, "the taint stays");
        assert_eq!(s.running().next().unwrap().1.node_selector, picky.node_selector, "so does its selector");
        // New pods still keep off.
        s.submit(2, pod("new", 1), 1).unwrap();
        assert!(matches!(s.schedule(&mut First, 1)[..], [crate::sched::Event::Unschedulable { pod: 2, .. }]));
    }

    #[test]
    fn running_pods_are_adopted_where_they_run_even_on_a_node_no_longer_ready() {
        let mut s = Scheduler::new(vec![node("a", 4)], super::super::SchedConfig::default());
        let at = s.adopt(7, pod("web", 2), 0, Some(GpuSet(0b1100)), 5).unwrap();
        assert_eq!(at, Placement { node: 0, gpus: GpuSet(0b1100) });
        assert_eq!(s.cluster().nodes()[0].free_gpu_milli(), 2000);
        s.update_node(0, |n| n.ready = false);
        let at = s.adopt(8, pod("db", 1), 0, None, 5).unwrap();
        assert_eq!(at.gpus.len(), 1, "the host chose a free GPU");
        assert!(!s.cluster().nodes()[0].ready, "readiness is left as it was");
        assert_eq!(s.adopt(8, pod("db", 1), 0, None, 5), Err(AdoptError::Duplicate(8)));
        let e = s.adopt(9, pod("huge", 4), 0, None, 5).unwrap_err();
        assert!(e.to_string().contains("huge"), "{e}");
        assert_eq!(s.running().count(), 2, "a pod that does not fit changes nothing");
        // Leaving frees the room as for any pod.
        s.remove(7);
        assert_eq!(s.cluster().nodes()[0].free_gpu_milli(), 3000);
    }
}
