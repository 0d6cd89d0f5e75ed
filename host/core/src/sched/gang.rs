//! Gangs: all or nothing. A member of a gang that still needs members
//! placed brings the whole gang to its decision: room is held for members
//! one by one (preempting for them where the host's filter is what stops
//! them), and only once `min_member` fit (running members counted) is
//! anything bound; otherwise everything held is released, every victim
//! put back where it ran, and the members park with the gang's reason.
//! Nothing is held across passes, so a partial gang never holds GPUs and
//! two gangs cannot deadlock.

use std::collections::BTreeSet;

use super::evict::Evicted;
use super::{Event, Scheduler, State};
use crate::cluster::{FilterReason, Placement};
use crate::framework::{GangWait, Placer, Why};
use crate::model::{Gang, NodeId, PodId};

/// What the loop keeps of a gang.
#[derive(Debug, Clone)]
pub(super) struct GangState {
    /// As its latest member gave it.
    pub(super) spec: Gang,
    /// Members known (waiting or running), by id.
    pub(super) members: BTreeSet<PodId>,
    /// Since when it has waited (its first member's submission, or the
    /// last time it went short of members).
    pub(super) since: u64,
    /// When it was last decided again to be elected for a reservation
    /// ([`Scheduler::wake_electable`]).
    pub(super) woken_at: Option<u64>,
}

/// A gang as the loop sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangStatus {
    /// Its name.
    pub name: String,
    /// Members it needs running together.
    pub min_member: u32,
    /// Members running.
    pub running: u32,
    /// Members waiting (queued or parked).
    pub waiting: u32,
    /// Since when it has waited for members to be placed, if it does.
    pub waiting_since: Option<u64>,
}

/// A member held room for in a gang's attempt.
struct Held {
    id: PodId,
    placement: Placement,
    candidates: usize,
    rejected: [u32; FilterReason::COUNT],
    level: usize,
    victims: Vec<Evicted>,
}

impl Scheduler {
    /// Records pod `id`'s membership of its gang, if it has one; a gang
    /// that now has enough members wakes those that waited for them.
    pub(super) fn join_gang(&mut self, id: PodId, now: u64) {
        let Some(spec) = self.pods.get(&id).and_then(|e| e.pod.gang.clone()) else { return };
        let st = self.gangs.entry(spec.name.clone()).or_insert_with(|| GangState {
            spec: spec.clone(),
            members: BTreeSet::new(),
            since: now,
            woken_at: None,
        });
        st.spec = spec;
        st.members.insert(id);
        if st.members.len() < st.spec.min_member as usize {
            return;
        }
        let waiting: Vec<PodId> = st
            .members
            .iter()
            .copied()
            .filter(|m| {
                self.parked.contains(m) && matches!(&self.pods[m].last_reason, Some(Why::Gang(w)) if w.needs_members())
            })
            .collect();
        self.wake(waiting);
    }

    /// Pod `id` left: its gang forgets it (and is forgotten with its last
    /// member).
    pub(super) fn leave_gang(&mut self, id: PodId, pod: &crate::model::Pod) {
        let Some(g) = &pod.gang else { return };
        if let Some(st) = self.gangs.get_mut(&g.name) {
            st.members.remove(&id);
            if st.members.is_empty() {
                self.gangs.remove(&g.name);
            }
        }
    }

    fn running_members(&self, st: &GangState) -> u32 {
        st.members.iter().filter(|m| matches!(self.pods[m].state, State::Running { .. })).count() as u32
    }

    /// Members gang `name` still needs placed together (0: it runs, and
    /// further members are placed one at a time).
    pub(super) fn gang_needs(&self, name: &str) -> u32 {
        self.gangs.get(name).map_or(0, |st| st.spec.min_member.saturating_sub(self.running_members(st)))
    }

    /// Thousandths of a GPU held by running members of gangs that run
    /// short of `min_member` (a member lost to a node failure or a move,
    /// not yet replaced): room that does no work. All or nothing keeps it
    /// at 0 at every bind; this is what measures the rest.
    pub fn partial_gang_gpu_milli(&self) -> u64 {
        self.gangs
            .values()
            .filter(|st| self.running_members(st) < st.spec.min_member)
            .flat_map(|st| st.members.iter())
            .filter_map(|m| {
                let e = &self.pods[m];
                matches!(e.state, State::Running { .. })
                    .then(|| u64::from(e.pod.gpu_count) * u64::from(e.pod.gpu_milli.min(crate::model::GPU_MILLI)))
            })
            .sum()
    }

    /// The gangs known, by name.
    pub fn gangs(&self) -> impl Iterator<Item = GangStatus> + '_ {
        self.gangs.iter().map(|(name, st)| {
            let running = self.running_members(st);
            GangStatus {
                name: name.clone(),
                min_member: st.spec.min_member,
                running,
                waiting: st.members.len() as u32 - running,
                waiting_since: (running < st.spec.min_member).then_some(st.since),
            }
        })
    }

    /// Decides gang `name` as a unit (see the module's doc), its events
    /// appended to `events`. `level` is the queue level its popped member
    /// came from (members queued with it are taken to be at it too).
    pub(super) fn schedule_gang<P: Placer + ?Sized>(
        &mut self,
        name: &str,
        placer: &mut P,
        now: u64,
        level: usize,
        events: &mut Vec<Event>,
    ) {
        let st = &self.gangs[name];
        let (spec, since) = (st.spec.clone(), st.since);
        let running = self.running_members(st);
        let waiting: Vec<(PodId, usize)> = st
            .members
            .iter()
            .filter_map(|&m| match self.pods[&m].state {
                State::Queued => Some((m, level)),
                State::Parked { level, .. } => Some((m, level)),
                State::Running { .. } => None,
            })
            .collect();
        let needed = spec.min_member.saturating_sub(running) as usize;
        let present = running + waiting.len() as u32;
        let wait = |w: GangWait| match spec.timeout_s {
            Some(t) if now.saturating_sub(since) >= t => {
                Why::Gang(GangWait::TimedOut { waited_s: now - since, wait: Box::new(w) })
            }
            _ => Why::Gang(w),
        };
        if (present as usize) < spec.min_member as usize {
            let why = wait(GangWait::Incomplete { gang: name.to_string(), present, min_member: spec.min_member });
            self.unreserve(name);
            self.park_untried(waiting, &why, now, events);
            return;
        }

        // The fair-share gate takes a gang as one, before anything is held
        // (its own held members would close it half-way).
        if let Some(w) = self.fair_share_wait(waiting.iter().map(|(m, _)| &self.pods[m].pod)) {
            self.unreserve(name);
            self.park_untried(waiting, &Why::Queue(w), now, events);
            return;
        }
        self.queues.gate_off = true;

        // Hold room member by member.
        let mut held: Vec<Held> = Vec::new();
        let mut failed: Vec<(PodId, usize, Why, [u32; FilterReason::COUNT], usize)> = Vec::new();
        for (i, &(m, lvl)) in waiting.iter().enumerate() {
            if held.len() + (waiting.len() - i) < needed {
                // The rest cannot make up the gang: stop holding.
                let blocker = failed.first().map(|f| f.2.clone());
                failed.extend(waiting[i..].iter().map(|&(m, lvl)| {
                    let why = blocker.clone().unwrap_or(Why::Filter(FilterReason::GpuInsufficient));
                    (m, lvl, why, [0; FilterReason::COUNT], 0)
                }));
                break;
            }
            let pod = self.pods[&m].pod.clone();
            self.stats.attempts += 1;
            match self.try_place(&pod, placer) {
                Ok((placement, candidates)) => {
                    // Held room counts against the queue's limits.
                    self.charge(m, placement.node);
                    held.push(Held {
                        id: m,
                        placement,
                        candidates,
                        rejected: self.last_rejected,
                        level: lvl,
                        victims: Vec::new(),
                    })
                }
                Err(why) => {
                    let (rejected, candidates) = (self.last_rejected, self.candidates.len());
                    let victims = match why {
                        Why::Filter(_) if held.len() < needed => self.choose_victims(&pod, now, Some(name)),
                        _ => None,
                    };
                    match victims {
                        Some((node, victims)) => {
                            let evicted = self.evict(&victims);
                            let placement = self.bind_preemptor(node, &pod);
                            self.charge(m, placement.node);
                            self.tell(placer, evicted.iter().map(|v| v.placement.node).chain([node]));
                            held.push(Held { id: m, placement, candidates, rejected, level: lvl, victims: evicted });
                        }
                        None => failed.push((m, lvl, why, rejected, candidates)),
                    }
                }
            }
        }

        self.queues.gate_off = false;
        if held.len() >= needed {
            self.unreserve(name);
            self.stats.gangs_admitted += u64::from(needed > 0);
            if let Some(st) = self.gangs.get_mut(name) {
                st.since = now;
            }
            for h in held {
                self.parked.remove(&h.id);
                let event = if h.victims.is_empty() {
                    let waited = self.bound(h.id, h.placement, now, h.level);
                    Event::Bound { pod: h.id, placement: h.placement, waited, candidates: h.candidates }
                } else {
                    self.requeue_victims(&h.victims, now);
                    for n in h.victims.iter().map(|v| v.placement.node).collect::<BTreeSet<_>>() {
                        self.unpark(n);
                    }
                    let waited = self.bound(h.id, h.placement, now, h.level);
                    let victims = h.victims.iter().map(|v| v.id).collect();
                    Event::Preempted { pod: h.id, placement: h.placement, victims, waited }
                };
                self.record(h.id, h.rejected, h.candidates, &event);
                events.push(event);
            }
            // Members past `min_member` that did not fit wait on their own.
            for (m, lvl, why, rejected, candidates) in failed {
                let event = self.park(m, why, now, lvl);
                self.record(m, rejected, candidates, &event);
                events.push(event);
            }
            return;
        }

        // Release everything held, last first, and put every victim back.
        self.stats.gang_rollbacks += 1;
        let mut touched: Vec<NodeId> = Vec::new();
        let mut tried: Vec<(PodId, usize, [u32; FilterReason::COUNT], usize)> = Vec::new();
        for h in held.iter().rev() {
            let pod = self.pods[&h.id].pod.clone();
            self.cluster.unbind(&h.placement, &pod);
            self.uncharge(h.id, false);
            touched.push(h.placement.node);
            for v in h.victims.iter().rev() {
                self.restore(v);
                touched.push(v.placement.node);
            }
            tried.push((h.id, h.level, h.rejected, h.candidates));
        }
        self.tell(placer, touched);
        let fit = held.len() as u32;
        let blocker = failed.first().map_or(Why::Filter(FilterReason::GpuInsufficient), |f| f.2.clone());
        // Short of room: it may have nodes kept for it; short of anything
        // else, nodes kept for it would only sit idle.
        match blocker {
            Why::Filter(_) => {
                let members: Vec<PodId> = waiting.iter().map(|&(m, _)| m).collect();
                self.maybe_reserve(name, &members, since, now);
            }
            _ => self.unreserve(name),
        }
        let why = wait(GangWait::Unschedulable {
            gang: name.to_string(),
            fit,
            needed: needed as u32,
            blocker: Box::new(blocker),
        });
        tried.extend(failed.into_iter().map(|(m, lvl, _, rejected, candidates)| (m, lvl, rejected, candidates)));
        tried.sort_unstable_by_key(|t| t.0);
        for (m, lvl, rejected, candidates) in tried {
            let event = self.park(m, why.clone(), now, lvl);
            self.record(m, rejected, candidates, &event);
            events.push(event);
        }
    }

    /// Parks `members`, none of them tried, with `why`.
    fn park_untried(&mut self, members: Vec<(PodId, usize)>, why: &Why, now: u64, events: &mut Vec<Event>) {
        for (m, lvl) in members {
            let event = self.park(m, why.clone(), now, lvl);
            self.record(m, [0; FilterReason::COUNT], 0, &event);
            events.push(event);
        }
    }

    /// Tells the placer of `nodes` (each once).
    fn tell<P: Placer + ?Sized>(&self, placer: &mut P, nodes: impl IntoIterator<Item = NodeId>) {
        let nodes: BTreeSet<NodeId> = nodes.into_iter().collect();
        let nodes: Vec<_> = nodes.iter().filter_map(|&n| self.cluster.node(n)).collect();
        placer.nodes_changed(&nodes);
    }
}

#[cfg(test)]
pub(super) mod tests;
