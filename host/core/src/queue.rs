//! The pending-pod queue: a multi-level feedback queue.
//!
//! - A new pod enters level 0. A pod that fails to place, or is preempted,
//!   drops one level ([`Mlfq::demote`]).
//! - Dispatch runs in rounds: level `i` may hand out up to
//!   `max(1, base_quantum >> i)` pods per round before the next level gets
//!   its turn, so lower levels are served less often but always served.
//! - Aging: a pod that has waited `aging_after` clock units at a level
//!   rises one level (and its wait restarts), so nothing starves however
//!   many new pods arrive above it.
//! - Within a level, higher priority first, then first come first served;
//!   with `smallest_first`, among equal priorities the smallest job (the
//!   GPUs its gang asks for, as the caller sizes it) first, then arrival:
//!   a duration-blind shortest-job-first that shortens the median wait
//!   (a wide job is still served by aging, quanta and reservations).
//!
//! Time is the caller's clock (no `Instant` in the core): any monotonic
//! unit works (the simulator and the service use seconds).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Settings of the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MlfqConfig {
    /// Number of levels (at least 1).
    pub levels: usize,
    /// Pods level 0 may hand out per round; level `i` gets this `>> i`.
    pub base_quantum: u32,
    /// Wait, in clock units, after which a pod rises one level.
    pub aging_after: u64,
    /// Within a level and priority, smaller jobs first (see the module).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub smallest_first: bool,
}

impl Default for MlfqConfig {
    fn default() -> Self {
        Self { levels: 4, base_quantum: 8, aging_after: 300, smallest_first: false }
    }
}

/// Ordering key within a level: higher priority first, then (with
/// `smallest_first`) smaller size, then arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    neg_priority: i64,
    size: u64,
    seq: u64,
}

#[derive(Debug, Clone)]
struct Entry<T> {
    item: T,
    priority: i32,
    size: u64,
    since: u64,
}

/// A pod handed out by [`Mlfq::pop`], with what the queue knows of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Popped<T> {
    /// The item.
    pub item: T,
    /// Its priority.
    pub priority: i32,
    /// Its size, as given.
    pub size: u64,
    /// The level it was taken from.
    pub level: usize,
    /// Since when it waited at that level.
    pub since: u64,
}

/// The queue.
#[derive(Debug, Clone)]
pub struct Mlfq<T> {
    config: MlfqConfig,
    levels: Vec<BTreeMap<Key, Entry<T>>>,
    /// Per level, `(since, key)` of each entry: aging looks at the oldest
    /// only, so a pop costs O(log n) however long the queue.
    waits: Vec<BTreeSet<(u64, Key)>>,
    /// Pods handed out from each level in the current round.
    served: Vec<u32>,
    seq: u64,
}

impl<T> Mlfq<T> {
    /// An empty queue; `levels` is raised to 1 and `base_quantum` to 1.
    pub fn new(mut config: MlfqConfig) -> Self {
        config.levels = config.levels.max(1);
        config.base_quantum = config.base_quantum.max(1);
        Self {
            levels: (0..config.levels).map(|_| BTreeMap::new()).collect(),
            waits: (0..config.levels).map(|_| BTreeSet::new()).collect(),
            served: vec![0; config.levels],
            config,
            seq: 0,
        }
    }

    /// Pods waiting.
    pub fn len(&self) -> usize {
        self.levels.iter().map(BTreeMap::len).sum()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pods waiting at each level.
    pub fn depths(&self) -> Vec<usize> {
        self.levels.iter().map(BTreeMap::len).collect()
    }

    fn quantum(&self, level: usize) -> u32 {
        (self.config.base_quantum >> level.min(31)).max(1)
    }

    fn insert(&mut self, level: usize, item: T, priority: i32, size: u64, now: u64) {
        self.seq += 1;
        let order = if self.config.smallest_first { size } else { 0 };
        let key = Key { neg_priority: -i64::from(priority), size: order, seq: self.seq };
        self.levels[level].insert(key, Entry { item, priority, size, since: now });
        self.waits[level].insert((now, key));
    }

    /// Puts a pod back at `level` (clamped to the last), waiting since
    /// `since`: for pods set aside while nothing could fit them and
    /// returned when capacity frees, without losing the wait they aged by.
    pub fn requeue(&mut self, item: T, priority: i32, size: u64, level: usize, since: u64) {
        self.insert(level.min(self.config.levels - 1), item, priority, size, since);
    }

    /// A new pod: level 0. `size` orders it with `smallest_first`.
    pub fn push(&mut self, item: T, priority: i32, size: u64, now: u64) {
        self.insert(0, item, priority, size, now);
    }

    /// A pod that failed to place or was preempted: one level down from
    /// `level` (the lowest level keeps it).
    pub fn demote(&mut self, item: T, priority: i32, size: u64, level: usize, now: u64) {
        let to = (level + 1).min(self.config.levels - 1);
        self.insert(to, item, priority, size, now);
    }

    /// Takes every pod out, level by level in dispatch order within a
    /// level, without aging: for moving them to another queue as they are.
    pub fn drain(&mut self) -> Vec<Popped<T>> {
        let mut out = Vec::with_capacity(self.len());
        for (level, entries) in self.levels.iter_mut().enumerate() {
            out.extend(std::mem::take(entries).into_values().map(|e| Popped {
                item: e.item,
                priority: e.priority,
                size: e.size,
                level,
                since: e.since,
            }));
        }
        self.waits.iter_mut().for_each(BTreeSet::clear);
        self.served.iter_mut().for_each(|s| *s = 0);
        out
    }

    /// Raises pods that have waited `aging_after` one level.
    fn age(&mut self, now: u64) {
        for level in 1..self.levels.len() {
            while let Some(&(since, k)) = self.waits[level].first() {
                if now.saturating_sub(since) < self.config.aging_after {
                    break;
                }
                self.waits[level].pop_first();
                let e = self.levels[level].remove(&k).expect("every wait has its entry");
                self.insert(level - 1, e.item, e.priority, e.size, now);
            }
        }
    }

    /// The next pod to try, by level quanta, priority and arrival.
    pub fn pop(&mut self, now: u64) -> Option<Popped<T>> {
        self.age(now);
        if self.is_empty() {
            return None;
        }
        loop {
            let turn = (0..self.levels.len()).find(|&l| !self.levels[l].is_empty() && self.served[l] < self.quantum(l));
            match turn {
                Some(level) => {
                    self.served[level] += 1;
                    let (k, e) = self.levels[level].pop_first().expect("level is not empty");
                    self.waits[level].remove(&(e.since, k));
                    return Some(Popped { item: e.item, priority: e.priority, size: e.size, level, since: e.since });
                }
                // Every non-empty level used its quantum: a new round.
                None => self.served.iter_mut().for_each(|s| *s = 0),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(levels: usize, base: u32, aging: u64) -> Mlfq<&'static str> {
        Mlfq::new(MlfqConfig { levels, base_quantum: base, aging_after: aging, smallest_first: false })
    }

    #[test]
    fn priority_then_arrival_within_a_level() {
        let mut m = q(3, 8, 1_000);
        m.push("low-1", 0, 0, 0);
        m.push("high", 10, 0, 1);
        m.push("low-2", 0, 0, 2);
        let order: Vec<_> = std::iter::from_fn(|| m.pop(3).map(|p| p.item)).collect();
        assert_eq!(order, ["high", "low-1", "low-2"]);
    }

    #[test]
    fn smallest_first_orders_equal_priorities_by_size_and_keeps_it_across_levels() {
        let sized = |smallest_first| {
            let mut m = Mlfq::new(MlfqConfig { levels: 2, base_quantum: 8, aging_after: 100, smallest_first });
            m.push("wide-early", 0, 64, 0);
            m.push("narrow", 0, 1, 1);
            m.push("mid", 0, 8, 2);
            m.push("wide-late", 0, 64, 3);
            m.push("urgent-wide", 5, 64, 4);
            m
        };
        let mut m = sized(true);
        let order: Vec<_> = std::iter::from_fn(|| m.pop(5).map(|p| p.item)).collect();
        // Priority still first; then size; arrival among equal sizes.
        assert_eq!(order, ["urgent-wide", "narrow", "mid", "wide-early", "wide-late"]);
        let mut m = sized(false);
        let order: Vec<_> = std::iter::from_fn(|| m.pop(5).map(|p| p.item)).collect();
        assert_eq!(order, ["urgent-wide", "wide-early", "narrow", "mid", "wide-late"], "off: arrival");

        // A demoted job keeps its size; aging lifts it with its size.
        let mut m = sized(true);
        let p = m.pop(5).unwrap();
        m.demote(p.item, p.priority, p.size, p.level, 5);
        let p = m.pop(5).unwrap();
        assert_eq!((p.item, p.size), ("narrow", 1));
        m.demote(p.item, p.priority, p.size, p.level, 5);
        // Both aged back to level 0 at 105: after the higher priority,
        // narrow before every wider job there.
        let order: Vec<_> = std::iter::from_fn(|| m.pop(105).map(|p| (p.item, p.level))).collect();
        assert_eq!(order[..2], [("urgent-wide", 0), ("narrow", 0)], "{order:?}");
        let drained = sized(true).drain();
        assert_eq!(drained.iter().map(|p| p.size).collect::<Vec<_>>(), [64, 1, 8, 64, 64]);
    }

    #[test]
    fn failures_demote_and_the_last_level_keeps_them() {
        let mut m = q(2, 8, 1_000);
        m.push("p", 0, 0, 0);
        let p = m.pop(0).unwrap();
        assert_eq!(p.level, 0);
        m.demote(p.item, p.priority, 0, p.level, 1);
        assert_eq!(m.depths(), [0, 1]);
        let p = m.pop(1).unwrap();
        assert_eq!(p.level, 1);
        m.demote(p.item, p.priority, 0, p.level, 2);
        assert_eq!(m.depths(), [0, 1], "no level below the last");
    }

    #[test]
    fn quanta_serve_lower_levels_every_round() {
        let mut m = q(3, 4, u64::MAX);
        for _ in 0..20 {
            m.push("top", 0, 0, 0);
        }
        m.demote("mid", 0, 0, 0, 0);
        m.demote("bottom", 0, 0, 1, 0);
        let first: Vec<_> = (0..8).map(|_| m.pop(0).unwrap().item).collect();
        // Round: 4 from level 0, 2 from level 1 (only one there), 1 from level 2.
        assert_eq!(first, ["top", "top", "top", "top", "mid", "bottom", "top", "top"]);
    }

    #[test]
    fn aging_lifts_a_waiting_pod() {
        let mut m = q(3, 1, 100);
        m.demote("old", 0, 0, 1, 0);
        assert_eq!(m.depths(), [0, 0, 1]);
        m.push("new", 0, 0, 150);
        // At 99 nothing is ripe yet.
        m.age(99);
        assert_eq!(m.depths(), [1, 0, 1]);
        // Waited 150 >= 100 at level 2: it rises to level 1 (and its wait
        // restarts) before "new" is handed out.
        assert_eq!(m.pop(150).unwrap().item, "new");
        assert_eq!(m.depths(), [0, 1, 0]);
        let old = m.pop(150).unwrap();
        assert_eq!((old.item, old.level), ("old", 1));
    }

    #[test]
    fn no_starvation_under_a_flood_of_high_priority_pods() {
        let mut m: Mlfq<u32> =
            Mlfq::new(MlfqConfig { levels: 4, base_quantum: 8, aging_after: 50, smallest_first: false });
        m.demote(0, -100, 0, 2, 0);
        m.demote(1, -100, 0, 3, 0);
        let mut served_low = Vec::new();
        for t in 0..2_000u64 {
            // Two new high-priority pods per tick, one dispatched per tick:
            // the queue only grows, yet the low pods are reached.
            m.push(1_000 + t as u32 * 2, 1_000, 0, t);
            m.push(1_001 + t as u32 * 2, 1_000, 0, t);
            let p = m.pop(t).unwrap();
            if p.item < 2 {
                served_low.push((p.item, t));
            }
        }
        assert_eq!(served_low.len(), 2, "both low-priority pods were dispatched: {served_low:?}");
        assert!(served_low.iter().all(|&(_, t)| t < 100), "and soon: {served_low:?}");
    }
}
