//! Rescheduling in the submissions protocol: making room for a pod that
//! fits nowhere ([`crate::room::make_room`]) and, with a global planner,
//! periodic plans and a plan whenever a pod fails. The protocol has no
//! clock, so moves take effect at once; every one is counted against the
//! migration cap (a share of the pods placed so far).

use super::{MAX_MOVES_PER_POD, Simulator};
use crate::framework::{Placer, Rescheduler, apply_in_passes};
use crate::model::Pod;

/// Least submissions between a global plan and one for a failed pod.
pub const MIN_PLAN_GAP: u64 = 25;

impl<'p, P: Placer> Simulator<'p, P> {
    /// Reschedules when a pod fits nowhere (submissions protocol): moves at
    /// most [`MAX_MOVES_PER_POD`] running pods to other nodes to make room for it
    /// ([`crate::room::make_room`], moved pods placed where the placer
    /// ranks best), as long as migrations stay within `cap` × pods placed.
    pub fn with_rescheduling(mut self, cap: f64) -> Self {
        self.migration_cap = Some(cap);
        self
    }

    /// Tries to make room for `pod` by migration; true if it did.
    pub(super) fn reschedule_for(&mut self, pod: &Pod) -> bool {
        if self.migration_cap.is_none() {
            return false;
        }
        let left = self.moves_left();
        let shape = (
            pod.requests.cpu_milli,
            pod.requests.memory_mib,
            pod.gpu_count,
            pod.gpu_milli,
            pod.allowed_models.clone(),
            pod.tier,
        );
        if left == 0 || self.no_room.contains(&shape) {
            return false;
        }
        let running = crate::room::borrow_running(&self.running);
        let placer = &mut *self.placer;
        let room =
            crate::room::make_room(&mut self.cluster, &running, pod, left.min(MAX_MOVES_PER_POD), &mut |p, nodes| {
                let mut order = nodes.to_vec();
                if let Some(best) = placer.place(p, nodes).node
                    && let Some(at) = order.iter().position(|&n| n == best)
                {
                    let b = order.remove(at);
                    order.insert(0, b);
                }
                order
            });
        drop(running);
        let Some(room) = room else {
            self.no_room.insert(shape);
            // No one node can be cleared for it: a global plan may help.
            return self.planner.is_some()
                && (self.report.reschedule_plans == 0 || self.report.submitted >= self.last_plan + MIN_PLAN_GAP)
                && self.replan();
        };
        for m in room.moves {
            let (p, from) = self.running[m.running].clone();
            self.cluster.unbind(&from, &p);
            let to = self.cluster.bind(m.to.node, &p, m.to.gpus).expect("make_room checked the move");
            self.running[m.running].1 = to;
            self.node_changed(from.node);
            self.node_changed(to.node);
            self.report.migrations += 1;
        }
        true
    }

    /// Adds a global planner to rescheduling (needs
    /// [`Simulator::with_rescheduling`] for the cap): it runs every
    /// `period` submissions (0: never on a period) and whenever a pod fits
    /// nowhere and no room could be made for it on one node.
    pub fn with_planner(mut self, planner: &'p mut dyn Rescheduler, period: u64) -> Self {
        self.planner = Some((planner, period));
        self
    }

    /// Migrations left under the cap.
    fn moves_left(&self) -> usize {
        let Some(cap) = self.migration_cap else { return 0 };
        let budget = (cap * (self.report.placed + 1) as f64).floor() as u64;
        budget.saturating_sub(self.report.migrations) as usize
    }

    /// Runs the planner if its period came round.
    pub(super) fn replan_if_due(&mut self) {
        let Some((_, period)) = self.planner else { return };
        if period > 0 && self.report.submitted >= self.last_plan + period {
            self.replan();
        }
    }

    /// Runs the planner and applies its moves; true if any was made. A
    /// plan for a failed pod waits [`MIN_PLAN_GAP`] submissions after the
    /// last plan (a real rescheduler is rate-limited too).
    fn replan(&mut self) -> bool {
        let left = self.moves_left();
        if left == 0 || self.planner_idle {
            return false;
        }
        self.last_plan = self.report.submitted;
        let Some((planner, _)) = self.planner.as_mut() else { return false };
        let mut moves = planner.plan(&self.cluster, &self.running, left);
        moves.truncate(left);
        self.report.reschedule_plans += 1;
        let mut made = false;
        apply_in_passes(moves, |i, to| {
            let Some((p, from)) = self.running.get(i).cloned() else { return true };
            if from == to {
                return true;
            }
            self.cluster.unbind(&from, &p);
            match self.cluster.bind(to.node, &p, to.gpus) {
                Ok(at) => {
                    self.running[i].1 = at;
                    self.node_changed(from.node);
                    self.node_changed(at.node);
                    self.report.migrations += 1;
                    self.report.planned_migrations += 1;
                    made = true;
                    true
                }
                Err(_) => {
                    self.cluster.bind(from.node, &p, from.gpus).expect("the pod was just there");
                    false
                }
            }
        });
        self.planner_idle = !made;
        made
    }
}
