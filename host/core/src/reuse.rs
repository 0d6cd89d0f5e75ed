//! Reusing a plugin's answers across pods of one class.
//!
//! A scorer that promises the `node` scope (`tessera:policy/reuse`, since
//! contract 0.2.1) answers for a pod on a node from that pod's class (every
//! field a plugin sees but the name and namespace; with `node-shape`, the
//! workload too) and that node's record alone. Its answer for a node that has not changed since it was last
//! asked about a pod of the same class is the answer it gave then, so the
//! host asks only about the candidates that changed and takes the rest
//! from an [`AnswerCache`]. [`Changes`] says which nodes changed when; the
//! whole cache is dropped when nodes join or leave or a zone signal moves
//! (the promise allows answers to depend on those).
//!
//! A scorer of the `zone` scope (since 0.2.2) promises less across calls
//! and more within one: a call's answer for a node depends on the node
//! only through its zone. Nothing is kept between calls; [`answer`] asks
//! about one candidate per zone ([`Changes::zone_of`]) and gives its
//! answer to the zone's other candidates.
//!
//! Reuse is exact only if the promise holds, so the cache also says when
//! to check it ([`AnswerCache::audit_due`]): on those calls the caller asks
//! about every candidate and compares ([`first_mismatch`]).
//! Everything here counts calls, never time: a replay reuses and audits at
//! the same calls on any machine.

use crate::model::{NodeId, Pod, Resources, Tier};

mod changes;

pub use changes::Changes;
use changes::NO_ZONE;

/// Every field of a pod a plugin sees, but its name and namespace (and,
/// for a plugin of the `node-shape` scope, its workload): pods of one
/// class get the same answers from a plugin of that scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodClass {
    workload: String,
    requests: Resources,
    gpu_count: u32,
    gpu_milli: u32,
    allowed_models: Vec<String>,
    priority: i32,
    tier: Tier,
}

/// What a plugin promises its answers depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The pod's fields but name and namespace, and the node's record.
    Node,
    /// The same, without the pod's workload.
    NodeShape,
    /// Within one call, a node's answer depends on the node only through
    /// its zone (anything else may change between calls).
    Zone,
}

impl PodClass {
    /// The class of `pod` under `scope`.
    pub fn of(pod: &Pod, scope: Scope) -> Self {
        Self {
            workload: if scope == Scope::Node { pod.workload.clone() } else { String::new() },
            requests: pod.requests,
            gpu_count: pod.gpu_count,
            gpu_milli: pod.gpu_milli,
            allowed_models: pod.allowed_models.clone(),
            priority: pod.priority,
            tier: pod.tier,
        }
    }

    /// Whether `pod` is of this class under `scope` (no allocation).
    pub fn holds(&self, pod: &Pod, scope: Scope) -> bool {
        (scope == Scope::NodeShape || self.workload == pod.workload)
            && self.requests == pod.requests
            && self.gpu_count == pod.gpu_count
            && self.gpu_milli == pod.gpu_milli
            && self.allowed_models == pod.allowed_models
            && self.priority == pod.priority
            && self.tier == pod.tier
    }
}

/// No GPU hint list in the answer (the hint of a plugin that gave none).
const NO_LIST: u16 = 256;

/// Answers of one kind (filter verdicts or scores) for one class, by node.
#[derive(Debug, Default)]
struct Answers {
    /// The generation `valid` is current at.
    as_of: u64,
    /// One bit per node: its answer in `values` holds as of `as_of`.
    valid: Vec<u64>,
    values: Vec<i64>,
    /// GPU hints by node ([`NO_LIST`] where none), once one was given.
    hints: Option<Vec<u16>>,
}

impl Answers {
    /// None kept, current at `generation` (nothing to catch up on).
    fn at(generation: u64) -> Self {
        Self { as_of: generation, ..Self::default() }
    }

    #[inline]
    fn holds(&self, id: NodeId) -> bool {
        let i = id as usize;
        self.valid.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Forgets the answers of nodes that changed since `as_of` (all of
    /// them if the log does not reach back).
    fn catch_up(&mut self, changes: &Changes) {
        if self.as_of == changes.generation() {
            return;
        }
        match changes.since(self.as_of) {
            Some(ids) => {
                for id in ids {
                    let i = id as usize;
                    if let Some(w) = self.valid.get_mut(i / 64) {
                        *w &= !(1 << (i % 64));
                    }
                }
            }
            None => self.valid.iter_mut().for_each(|w| *w = 0),
        }
        self.as_of = changes.generation();
    }

    fn keep(&mut self, id: NodeId, value: i64, hint: u16) {
        let i = id as usize;
        if i >= self.values.len() {
            self.values.resize(i + 1, 0);
            self.valid.resize(i / 64 + 1, 0);
        }
        self.values[i] = value;
        self.valid[i / 64] |= 1 << (i % 64);
        if hint != NO_LIST || self.hints.is_some() {
            let hints = self.hints.get_or_insert_with(Vec::new);
            if i >= hints.len() {
                hints.resize(i + 1, NO_LIST);
            }
            hints[i] = hint;
        }
    }
}

#[derive(Debug)]
struct Entry {
    class: PodClass,
    epoch: u64,
    last_used: u64,
    verdicts: Answers,
    scores: Answers,
}

/// One plugin's answers for the last pod classes it was asked about.
///
/// A class's answers are kept from its second call on (a class seen once
/// costs nothing but its key), with a bit per node saying which still
/// hold (cleared, on the class's next call, for the nodes the change log
/// says changed meanwhile), for as many classes as
/// [`AnswerCache::BUDGET`] holds at the cluster's size (at least 4, at
/// most [`AnswerCache::MAX_CLASSES`]); past that, the least recently used
/// class goes.
#[derive(Debug)]
pub struct AnswerCache {
    scope: Scope,
    entries: Vec<Entry>,
    /// Classes called once lately, answers not kept (oldest first).
    seen: std::collections::VecDeque<PodClass>,
    /// Calls served (the clock of least-recent use and of audits).
    calls: u64,
    audit_every: u64,
    /// The plugin version the answers came from: another one starts over.
    owner: u64,
    /// Most classes kept, whatever the budget allows.
    max_classes: usize,
}

/// What a lookup found: the answers reused, in candidate order, and the
/// candidates (by position) still to ask about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reused {
    /// One per candidate; those to ask about hold 0 until filled.
    pub values: Vec<i64>,
    /// One per candidate ([`NO_LIST`] where none was given), once any
    /// answer had a hint.
    hints: Option<Vec<u16>>,
    /// Positions of the candidates to ask about, ascending.
    pub ask: Vec<usize>,
}

impl Reused {
    fn hint(&self, k: usize) -> u16 {
        self.hints.as_ref().map_or(NO_LIST, |h| h[k])
    }

    /// Puts the answers asked for (`values[k]` for `ask[k]`, hints empty or
    /// one per asked) in their places.
    pub fn fill(&mut self, values: &[i64], hints: &[u8]) {
        for (k, &at) in self.ask.iter().enumerate() {
            self.values[at] = values[k];
        }
        if !hints.is_empty() {
            let n = self.values.len();
            let all = self.hints.get_or_insert_with(|| vec![NO_LIST; n]);
            for (&at, &h) in self.ask.iter().zip(hints) {
                all[at] = u16::from(h);
            }
        } else if let Some(all) = &mut self.hints {
            for &at in &self.ask {
                all[at] = NO_LIST;
            }
        }
    }

    /// The GPU hints as a plugin asked afresh would give them: none if no
    /// answer had a list, else one per candidate (255 where none).
    pub fn hints(&self) -> Vec<u8> {
        match &self.hints {
            Some(h) if h.iter().any(|&h| h != NO_LIST) => {
                h.iter().map(|&h| if h == NO_LIST { u8::MAX } else { h as u8 }).collect()
            }
            _ => Vec::new(),
        }
    }
}

/// Which answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Filter verdicts.
    Verdict,
    /// Scores (and GPU hints).
    Score,
}

impl AnswerCache {
    /// Bytes of answers kept per plugin, about: 8 per node, class and kind
    /// of answer, and a bit (32 MiB: about 200 classes of both kinds at
    /// 10,000 nodes).
    pub const BUDGET: usize = 32 << 20;
    /// Most classes kept, however small the cluster.
    pub const MAX_CLASSES: usize = 256;
    /// How often a call checks the promise by default: every this many
    /// calls that reuse something.
    pub const AUDIT_EVERY: u64 = 64;

    /// An empty cache, checking every `audit_every`-th reusing call (0:
    /// never); [`AnswerCache::owned_by`] says whose answers it keeps.
    pub fn new(audit_every: u64) -> Self {
        Self {
            scope: Scope::Node,
            entries: Vec::new(),
            seen: Default::default(),
            calls: 0,
            audit_every,
            owner: 0,
            max_classes: Self::MAX_CLASSES,
        }
    }

    /// Keeps at most `n` classes (at least 1).
    pub fn with_classes(mut self, n: usize) -> Self {
        self.max_classes = n.max(1);
        self
    }

    /// Classes kept for a cluster whose node ids reach `nodes`.
    fn capacity(&self, nodes: usize) -> usize {
        (Self::BUDGET / (17 * nodes.max(1))).clamp(4, Self::MAX_CLASSES).min(self.max_classes)
    }

    /// Drops everything if the answers would come from another plugin
    /// version than those kept (`owner`: a unique id of the version, not
    /// 0), which promises `scope`.
    pub fn owned_by(&mut self, owner: u64, scope: Scope) {
        if self.owner != owner || self.scope != scope {
            self.entries.clear();
            self.seen.clear();
            self.owner = owner;
            self.scope = scope;
        }
    }

    /// The kept answers of `pod`'s class, if they are kept (from the
    /// class's second call on).
    fn entry(&mut self, pod: &Pod, changes: &Changes) -> Option<&mut Entry> {
        self.calls += 1;
        let scope = self.scope;
        let at = match self.entries.iter().position(|e| e.class.holds(pod, scope)) {
            Some(at) => at,
            None => {
                let capacity = self.capacity(changes.nodes());
                match self.seen.iter().position(|c| c.holds(pod, scope)) {
                    Some(at) => {
                        self.seen.remove(at);
                    }
                    None => {
                        if self.seen.len() >= capacity {
                            self.seen.pop_front();
                        }
                        self.seen.push_back(PodClass::of(pod, scope));
                        return None;
                    }
                }
                while self.entries.len() >= capacity {
                    let oldest = (0..self.entries.len()).min_by_key(|&i| self.entries[i].last_used).unwrap_or(0);
                    self.entries.swap_remove(oldest);
                }
                self.entries.push(Entry {
                    class: PodClass::of(pod, scope),
                    epoch: changes.epoch(),
                    last_used: 0,
                    verdicts: Answers::at(changes.generation()),
                    scores: Answers::at(changes.generation()),
                });
                self.entries.len() - 1
            }
        };
        let e = &mut self.entries[at];
        if e.epoch != changes.epoch() {
            e.epoch = changes.epoch();
            e.verdicts = Answers::at(changes.generation());
            e.scores = Answers::at(changes.generation());
        }
        e.last_used = self.calls;
        Some(e)
    }

    /// The `kind` answers for `pod` on `candidates` that can be reused,
    /// and the candidates to ask about.
    pub fn lookup(&mut self, kind: Kind, pod: &Pod, changes: &Changes, candidates: &[NodeId]) -> Reused {
        let n = candidates.len();
        let Some(e) = self.entry(pod, changes) else {
            return Reused { values: vec![0; n], hints: None, ask: (0..n).collect() };
        };
        let answers = match kind {
            Kind::Verdict => &mut e.verdicts,
            Kind::Score => &mut e.scores,
        };
        answers.catch_up(changes);
        let mut r = Reused { values: Vec::with_capacity(n), hints: None, ask: Vec::new() };
        for (k, &id) in candidates.iter().enumerate() {
            if answers.holds(id) {
                r.values.push(answers.values[id as usize]);
            } else {
                r.values.push(0);
                r.ask.push(k);
            }
        }
        if let Some(hints) = &answers.hints {
            r.hints = Some(candidates.iter().map(|&id| hints.get(id as usize).copied().unwrap_or(NO_LIST)).collect());
        }
        r
    }

    /// Whether this call should ask about every candidate and compare
    /// with what would have been reused (call it once per lookup that
    /// reused something).
    pub fn audit_due(&mut self) -> bool {
        self.audit_every > 0 && self.calls.is_multiple_of(self.audit_every)
    }

    /// Keeps the answers in `reused` (complete: every asked one filled)
    /// for `pod` on `candidates`, given at the current generation.
    pub fn keep(&mut self, kind: Kind, pod: &Pod, changes: &Changes, candidates: &[NodeId], reused: &Reused) {
        let scope = self.scope;
        let Some(e) = self.entries.iter_mut().find(|e| e.class.holds(pod, scope) && e.epoch == changes.epoch()) else {
            return;
        };
        let answers = match kind {
            Kind::Verdict => &mut e.verdicts,
            Kind::Score => &mut e.scores,
        };
        for &k in &reused.ask {
            answers.keep(candidates[k], reused.values[k], reused.hint(k));
        }
    }
}

/// A plugin's answers for every candidate of a call, some reused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// One per candidate.
    pub values: Vec<i64>,
    /// GPU hints: empty or one per candidate.
    pub hints: Vec<u8>,
    /// How many were reused rather than asked.
    pub reused: usize,
    /// On an audit that found the promise broken: the first candidate
    /// (position) that differed, what was kept and what came fresh. The
    /// answers are then the fresh ones and nothing was kept.
    pub broken: Option<(usize, i64, i64)>,
}

/// The one way a caller asks a plugin of the `node` scope: `ask` is asked
/// about the candidates `cache` cannot answer for (all of them on an
/// audit), and the answers are kept for the next pod of the class.
///
/// # Errors
/// What `ask` returns; nothing is kept then.
pub fn answer<E>(
    cache: &mut AnswerCache,
    changes: &Changes,
    kind: Kind,
    pod: &Pod,
    ids: &[NodeId],
    mut ask: impl FnMut(&[NodeId]) -> Result<(Vec<i64>, Vec<u8>), E>,
) -> Result<Answered, E> {
    if cache.scope == Scope::Zone {
        return by_zone(cache, changes, ids, ask);
    }
    let mut r = cache.lookup(kind, pod, changes, ids);
    let reused = ids.len() - r.ask.len();
    if reused > 0 && cache.audit_due() {
        let (values, hints) = ask(ids)?;
        let broken = first_mismatch(&r, &values, &hints).map(|k| (k, r.values[k], values[k]));
        if broken.is_none() {
            // Every answer is fresh now: keep them all.
            r.ask = (0..ids.len()).collect();
            r.fill(&values, &hints);
            cache.keep(kind, pod, changes, ids, &r);
        }
        return Ok(Answered { values, hints, reused: 0, broken });
    }
    if !r.ask.is_empty() {
        let asked: Vec<NodeId> = r.ask.iter().map(|&k| ids[k]).collect();
        let (values, hints) = ask(&asked)?;
        r.fill(&values, &hints);
        cache.keep(kind, pod, changes, ids, &r);
    }
    Ok(Answered { hints: r.hints(), values: r.values, reused, broken: None })
}

/// [`answer`] for a plugin of the `zone` scope: asks about the first
/// candidate of each zone and gives its answer to the zone's others;
/// every [`AnswerCache::audit_due`]-th call that would copy an answer asks
/// about every candidate instead and compares. If any candidate's zone was
/// never told (a node the feed does not know), everything is asked afresh,
/// as a plugin of no scope would be.
fn by_zone<E>(
    cache: &mut AnswerCache,
    changes: &Changes,
    ids: &[NodeId],
    mut ask: impl FnMut(&[NodeId]) -> Result<(Vec<i64>, Vec<u8>), E>,
) -> Result<Answered, E> {
    let of = changes.zones();
    // For each zone, the position in `asked` of its first candidate.
    let mut rep = vec![NO_ZONE; changes.zone_count()];
    let mut asked: Vec<NodeId> = Vec::with_capacity(rep.len());
    let mut known = true;
    for &id in ids {
        match of.get(id as usize).and_then(|&z| rep.get_mut(z as usize)) {
            Some(r) => {
                if *r == NO_ZONE {
                    *r = asked.len() as u32;
                    asked.push(id);
                }
            }
            None => {
                known = false;
                break;
            }
        }
    }
    if !known || asked.len() == ids.len() {
        let (values, hints) = ask(ids)?;
        return Ok(Answered { values, hints, reused: 0, broken: None });
    }
    cache.calls += 1;
    let (some, some_hints) = ask(&asked)?;
    // Every candidate's zone has a representative (the pass above).
    let spread = |answers: &[i64]| -> Vec<i64> {
        if answers.iter().all(|&v| v == answers[0]) {
            // Every zone alike (a filter that passes them all): no lookups.
            return vec![answers[0]; ids.len()];
        }
        let by_zone: Vec<i64> = rep.iter().map(|&k| answers.get(k as usize).copied().unwrap_or(0)).collect();
        ids.iter().map(|&id| by_zone[of[id as usize] as usize]).collect()
    };
    let values = spread(&some);
    let hints: Vec<u8> = if some_hints.is_empty() {
        Vec::new()
    } else {
        let wide: Vec<i64> = some_hints.iter().map(|&h| i64::from(h)).collect();
        spread(&wide).into_iter().map(|h| h as u8).collect()
    };
    if cache.audit_due() {
        let (fresh, fresh_hints) = ask(ids)?;
        let broken = (0..ids.len())
            .find(|&k| fresh[k] != values[k] || fresh_hints.get(k) != hints.get(k))
            .map(|k| (k, values[k], fresh[k]));
        return Ok(Answered { values: fresh, hints: fresh_hints, reused: 0, broken });
    }
    Ok(Answered { reused: ids.len() - asked.len(), values, hints, broken: None })
}

/// The first candidate (position) where answers asked afresh differ from
/// those `reused` would have given (only positions not asked about are
/// compared): a plugin breaking its promise.
pub fn first_mismatch(reused: &Reused, fresh_values: &[i64], fresh_hints: &[u8]) -> Option<usize> {
    (0..reused.values.len()).filter(|k| reused.ask.binary_search(k).is_err()).find(|&k| {
        let hint = fresh_hints.get(k).map_or(NO_LIST, |&h| u16::from(h));
        fresh_values.get(k) != Some(&reused.values[k]) || hint != reused.hint(k)
    })
}

#[cfg(test)]
mod tests;
