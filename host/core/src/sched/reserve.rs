//! Room kept for a gang that does not fit (`scheduling.reserve_after_s`;
//! Volcano's `elect` and `reserve`, Slurm's backfill reservation).
//!
//! A wide gang — eight 8-GPU members — needs eight nodes free at once.
//! While smaller pods keep taking whatever frees, that moment may never
//! come: the gang waits for ever although it is first in line. Once a gang
//! has waited `reserve_after_s` for room (its members parked because the
//! host's filter found too little, not for a queue or a missing member),
//! it is elected — one gang at a time, the first to qualify in queue
//! order — and the nodes it needs that are least in use are reserved for
//! it: no other pod is placed on them or preempts onto them, so they
//! empty as what runs there ends, and the gang fits. The reservation ends
//! when the gang runs, leaves, waits for something other than room, or a
//! reserved node stops being ready.
//!
//! Deterministic: nodes are chosen by use, ties by id.

use std::collections::BTreeSet;

use super::Scheduler;
use crate::cluster::check;
use crate::model::{GPU_MILLI, GpuHealth, Node, NodeId, Pod, PodId};

/// Nodes kept for one gang.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Reservation {
    /// The gang's name.
    pub(super) gang: String,
    /// The nodes kept for it.
    pub(super) nodes: BTreeSet<NodeId>,
}

/// A gang's reservation as the loop reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationStatus {
    /// The gang it is kept for.
    pub gang: String,
    /// The nodes kept, by name.
    pub nodes: Vec<String>,
}

impl Scheduler {
    /// Whether node `n` is kept for a gang other than `pod`'s.
    pub(super) fn reserved_against(&self, pod: &Pod, n: NodeId) -> bool {
        self.reservation
            .as_ref()
            .is_some_and(|r| r.nodes.contains(&n) && pod.gang.as_ref().is_none_or(|g| g.name != r.gang))
    }

    /// Takes the nodes kept for another gang out of `pod`'s candidates;
    /// how many were taken.
    pub(super) fn drop_reserved(&mut self, pod: &Pod) -> usize {
        if self.reservation.is_none() {
            return 0;
        }
        let mut candidates = std::mem::take(&mut self.candidates);
        let before = candidates.len();
        candidates.retain(|&n| !self.reserved_against(pod, n));
        self.candidates = candidates;
        before - self.candidates.len()
    }

    /// Gang `name`, whose members `members` are waiting since `since`,
    /// could not be placed at `now` for want of room: it is elected if no
    /// gang is and it has waited long enough, and the nodes it needs least
    /// in use are kept for it (none if even an empty cluster could not
    /// hold it).
    pub(super) fn maybe_reserve(&mut self, name: &str, members: &[PodId], since: u64, now: u64) {
        let Some(after) = self.cfg.reserve_after_s else { return };
        if self.reservation.is_some() || now.saturating_sub(since) < after {
            return;
        }
        let mut pods: Vec<&Pod> = members.iter().filter_map(|m| self.pods.get(m).map(|e| &e.pod)).collect();
        // The widest first: they have the fewest nodes to choose from.
        pods.sort_by_key(|p| std::cmp::Reverse((p.gpu_count, p.requests.cpu_milli, p.requests.memory_mib)));
        // Each node as it would be with nothing running, for the host's
        // own filter ([`check`]) to judge.
        let empty: Vec<Node> = self.cluster.nodes().iter().map(emptied).collect();
        let mut nodes = BTreeSet::new();
        for pod in pods {
            let best = self
                .cluster
                .nodes()
                .iter()
                .zip(&empty)
                .filter(|(n, e)| !nodes.contains(&n.id) && check(e, pod).is_ok())
                .map(|(n, _)| n)
                .min_by_key(|n| (in_use(n), n.id));
            match best {
                Some(n) => nodes.insert(n.id),
                None => return,
            };
        }
        if !nodes.is_empty() {
            self.stats.reservations += 1;
            self.reservation = Some(Reservation { gang: name.to_string(), nodes });
        }
    }

    /// Ends the reservation of gang `name`, if it has one (it runs, or
    /// waits for something other than room).
    pub(super) fn unreserve(&mut self, name: &str) {
        if self.reservation.as_ref().is_some_and(|r| r.gang == name) {
            self.end_reservation();
        }
    }

    /// At a pass's start: a reservation whose gang left or runs, or one of
    /// whose nodes stopped being ready, ends.
    pub(super) fn check_reservation(&mut self) {
        let Some(r) = &self.reservation else { return };
        let gone = self.gang_needs(&r.gang) == 0;
        let lost = r.nodes.iter().any(|&n| self.cluster.node(n).is_none_or(|n| !n.ready));
        if gone || lost {
            self.end_reservation();
        }
    }

    fn end_reservation(&mut self) {
        if let Some(r) = self.reservation.take() {
            // Pods kept off these nodes get another chance at them.
            for n in r.nodes {
                self.unpark(n);
            }
        }
    }

    /// The reservation now, if any.
    pub fn reservation(&self) -> Option<ReservationStatus> {
        self.reservation.as_ref().map(|r| ReservationStatus {
            gang: r.gang.clone(),
            nodes: r.nodes.iter().filter_map(|&n| self.cluster.node(n)).map(|n| n.name.clone()).collect(),
        })
    }
}

/// `node` with nothing running on it: all it has is free.
fn emptied(node: &Node) -> Node {
    let mut n = node.clone();
    n.free = n.capacity;
    for g in &mut n.gpus {
        g.free_milli = GPU_MILLI;
    }
    n
}

/// What runs on `node`: GPU share in use, then CPU.
fn in_use(node: &Node) -> (u32, u64) {
    let gpu = node.gpus.iter().filter(|g| g.health != GpuHealth::Failed).map(|g| GPU_MILLI - g.free_milli).sum();
    (gpu, node.capacity.cpu_milli.saturating_sub(node.free.cpu_milli))
}
