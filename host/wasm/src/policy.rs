//! A policy at run time: its plugins (each in a hot-swappable slot), their
//! weights, and the node feed they mirror. `decide` runs one placement
//! decision: every scorer filters and scores the candidates once; a plugin
//! that faults or is quarantined abstains and the rest still decide.

use std::sync::{Arc, Mutex, RwLock};

use tessera_core::reuse::{AnswerCache, Kind};
use tessera_core::{Node, NodeId, Pod, score};

use crate::error::{CallError, WorldKind};
use crate::feed::{NodeFeed, to_wit_pod};
use crate::plugin::PluginVersion;
use crate::slot::PluginSlot;

/// One plugin of a running policy.
#[derive(Debug, Clone)]
pub struct Member {
    /// Name in the policy.
    pub name: String,
    /// Weight of its normalised scores.
    pub weight: f64,
    /// The slot holding its current version.
    pub slot: Arc<PluginSlot>,
}

/// What one plugin contributed to a decision.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginOutcome {
    /// Plugin name.
    pub plugin: String,
    /// Version that answered.
    pub version: String,
    /// Weight.
    pub weight: f64,
    /// Raw scores over the feasible candidates (empty if it abstained).
    pub scores: Vec<i64>,
    /// Why it abstained, if it did.
    pub error: Option<CallError>,
    /// When its scoring call started, from the start of the decision.
    pub started: std::time::Duration,
    /// How long its scoring call took.
    pub elapsed: std::time::Duration,
}

/// A filter rejection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Node.
    pub node: NodeId,
    /// Plugin.
    pub plugin: String,
    /// Reason code.
    pub reason: String,
}

/// The outcome of one placement decision.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    /// Candidates that passed every plugin filter, in node-id order.
    pub feasible: Vec<NodeId>,
    /// Candidates rejected by a plugin filter.
    pub rejections: Vec<Rejection>,
    /// Each scorer's contribution.
    pub outcomes: Vec<PluginOutcome>,
    /// Weighted, normalised totals over `feasible`.
    pub totals: Vec<f64>,
    /// The chosen node.
    pub chosen: Option<NodeId>,
    /// GPU index suggested for a sharing pod by the heaviest plugin that
    /// gave one.
    pub gpu_hint: Option<u8>,
    /// Every call error, faults and guest errors alike.
    pub errors: Vec<CallError>,
    /// The decision deadline passed before every scorer had answered: the
    /// choice was made on the scores gathered so far.
    pub deadline_hit: bool,
    /// How long the filter phase took (every filtering plugin).
    pub filter_elapsed: std::time::Duration,
    /// How long the whole decision took.
    pub elapsed: std::time::Duration,
    /// Plugin calls of this decision the host starved (past their deadline
    /// on the wall clock with less than it of CPU): host overload, not
    /// the plugins' fault; the decision's span says so.
    pub host_starved: u64,
    /// Answers (verdicts and scores, over every plugin) taken from what a
    /// plugin of the `node` scope answered before rather than asked.
    pub reused: u64,
}

impl Decision {
    /// What the loop binds: the chosen node and GPU hint, the faults seen,
    /// and, when a plugin filter rejected every candidate, its most common
    /// reason code (the pod is then not placed).
    pub fn choice(&self) -> tessera_core::framework::Choice {
        tessera_core::framework::Choice {
            node: self.chosen,
            gpu_hint: self.gpu_hint,
            plugin_errors: self.errors.len() as u32,
            deadline_hit: self.deadline_hit,
            filtered: if self.feasible.is_empty() {
                score::most_common(self.rejections.iter().map(|r| r.reason.as_str()))
            } else {
                None
            },
        }
    }
}

/// A running policy.
#[derive(Debug)]
pub struct Policy {
    name: String,
    tie_break: score::TieBreak,
    timeout: Option<std::time::Duration>,
    scorers: Vec<Member>,
    detectors: Vec<Member>,
    feed: Arc<RwLock<NodeFeed>>,
    workers: Option<Arc<rayon::ThreadPool>>,
    /// The detectors' own finding kinds, bounded.
    own_kinds: tessera_core::telemetry::OwnKinds,
    /// Per scorer: its answers kept for reuse (none: every call asks
    /// about every candidate).
    answers: Option<Vec<Mutex<AnswerCache>>>,
}

impl Policy {
    /// A policy over loaded plugin slots.
    pub fn new(name: impl Into<String>, members: Vec<Member>) -> Self {
        let (scorers, detectors): (Vec<Member>, Vec<Member>) =
            members.into_iter().partition(|m| m.slot.current().kind() == WorldKind::Scorer);
        let answers = Some(Self::caches(scorers.len(), AnswerCache::AUDIT_EVERY));
        Self {
            name: name.into(),
            tie_break: score::TieBreak::NodeId,
            timeout: None,
            scorers,
            detectors,
            feed: Arc::new(RwLock::new(NodeFeed::new())),
            workers: None,
            own_kinds: Default::default(),
            answers,
        }
    }

    fn caches(n: usize, audit_every: u64) -> Vec<Mutex<AnswerCache>> {
        (0..n).map(|_| Mutex::new(AnswerCache::new(audit_every))).collect()
    }

    /// Whether to reuse the answers of plugins that promise the `node`
    /// scope (on by default), checking the promise every `audit_every`-th
    /// reusing call (0: never). Off, every plugin is asked about every
    /// candidate on every call, as a plugin of the `fresh` scope is.
    pub fn with_reuse(mut self, on: bool, audit_every: u64) -> Self {
        self.answers = on.then(|| Self::caches(self.scorers.len(), audit_every));
        self
    }

    /// Calls the host starved so far, over the scorers' current versions.
    fn starved_calls(&self) -> u64 {
        self.scorers.iter().map(|m| m.slot.current().starved_calls()).sum()
    }

    /// Calls the plugins of one decision on `n` worker threads, each plugin
    /// on its own instance (the instance pool gives every worker one), so a
    /// decision takes about as long as its slowest plugins rather than
    /// their sum. Results are combined in policy order, so the choice is
    /// the same as with one worker. `n <= 1` calls them in turn.
    ///
    /// # Errors
    /// If the operating system refuses the threads.
    pub fn with_workers(mut self, n: usize) -> Result<Self, std::io::Error> {
        self.workers = if n > 1 {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .thread_name(|i| format!("tessera-score-{i}"))
                .build()
                .map_err(std::io::Error::other)?;
            Some(Arc::new(pool))
        } else {
            None
        };
        Ok(self)
    }

    /// Runs `f` over `members`, on the workers if there are any; results
    /// in member order.
    fn each<T: Sync, R: Send>(&self, members: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
        match &self.workers {
            Some(pool) if members.len() > 1 => {
                // Member i always runs on worker i mod n: its instance's
                // memory stays in that core's cache from one call to the
                // next.
                let n = pool.current_num_threads();
                let mut parts = pool.broadcast(|ctx| {
                    (ctx.index()..members.len()).step_by(n).map(|i| f(&members[i])).collect::<Vec<R>>().into_iter()
                });
                (0..members.len()).map(|i| parts[i % n].next().expect("one result per member")).collect()
            }
            _ => members.iter().map(f).collect(),
        }
    }

    /// Bounds each decision: once `timeout` has passed, no further scorer
    /// is called and the best candidate by the scores gathered so far wins
    /// (`Decision::deadline_hit`). A call already running ends by its own
    /// plugin deadline.
    pub fn with_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Removes the decision budget (the simulator replays exactly, so it
    /// must not depend on how fast this machine is).
    pub fn without_timeout(mut self) -> Self {
        self.timeout = None;
        self
    }

    /// Decides equal totals by `tie` instead of the lowest node id.
    pub fn with_tie_break(mut self, tie: score::TieBreak) -> Self {
        self.tie_break = tie;
        self
    }

    /// Policy name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Scoring plugins.
    pub fn scorers(&self) -> &[Member] {
        &self.scorers
    }

    /// Detection plugins.
    pub fn detectors(&self) -> &[Member] {
        &self.detectors
    }

    /// The member with this name.
    pub fn member(&self, name: &str) -> Option<&Member> {
        self.scorers.iter().chain(&self.detectors).find(|m| m.name == name)
    }

    /// Tells the plugins about new or changed nodes.
    pub fn upsert_nodes<'a>(&self, nodes: impl IntoIterator<Item = &'a Node>) {
        let mut feed = self.feed.write().unwrap_or_else(|p| p.into_inner());
        for n in nodes {
            feed.upsert(n);
        }
    }

    /// Tells the plugins a zone's carbon intensity (gCO₂/kWh), offered
    /// through `tessera:policy/host.zone-carbon-intensity` from their next
    /// call on.
    pub fn set_zone_carbon(&self, zone: &str, g_per_kwh: u32) {
        self.feed.write().unwrap_or_else(|p| p.into_inner()).set_zone_carbon(zone, g_per_kwh);
    }

    /// Tells the plugins that nodes left.
    pub fn remove_nodes(&self, ids: impl IntoIterator<Item = NodeId>) {
        let mut feed = self.feed.write().unwrap_or_else(|p| p.into_inner());
        for id in ids {
            feed.remove(id);
        }
    }

    /// Mirrors the current nodes into one instance of every scorer now
    /// (see [`tessera_core::framework::Placer::prime`]). A plugin that fails is
    /// counted as faulting, as on any call, and the error returned.
    pub fn prime(&self) -> Vec<CallError> {
        let members: Vec<&Member> = self.scorers.iter().collect();
        self.each(&members, |m| m.slot.call(|v| v.prime(&self.feed))).into_iter().filter_map(Result::err).collect()
    }

    /// Hot-swaps the named plugin to a checked new version.
    pub fn swap(&self, name: &str, version: Arc<PluginVersion>) -> Option<Arc<PluginVersion>> {
        self.member(name).map(|m| m.slot.swap(version))
    }

    /// Scorer `at`'s `kind` answers on `ids`, reused where it promised.
    fn ask(
        &self,
        at: usize,
        v: &Arc<PluginVersion>,
        kind: Kind,
        pod: &Pod,
        wit_pod: &crate::bindings::types::Pod,
        ids: &[NodeId],
    ) -> Result<crate::reuse::Answer, CallError> {
        let cache = self.answers.as_ref().and_then(|c| c.get(at));
        crate::reuse::ask(v, cache, &self.feed, kind, pod, wit_pod, ids)
    }

    /// One decision for `pod` over `candidates` (sorted by node id, already
    /// through the host's hard filter).
    pub fn decide(&self, pod: &Pod, candidates: &[NodeId]) -> Decision {
        let started = std::time::Instant::now();
        let late = || self.timeout.is_some_and(|t| started.elapsed() >= t);
        let wit_pod = to_wit_pod(pod);
        let mut d = Decision::default();
        let starved_before = self.starved_calls();

        // Filter: a candidate must pass every plugin that answers. A plugin
        // that declares no filter reasons cannot reject (any other verdict
        // than 0 would be a fault): it is not called.
        let filtering: Vec<usize> = (0..self.scorers.len())
            .filter(|&i| !self.scorers[i].slot.current().info().filter_reasons.is_empty())
            .collect();
        let answers = self.each(&filtering, |&i| {
            self.scorers[i]
                .slot
                .call(|v| self.ask(i, v, Kind::Verdict, pod, &wit_pod, candidates).map(|x| (x, v.clone())))
        });
        let mut ok = vec![true; candidates.len()];
        for (&at, answered) in filtering.iter().zip(answers) {
            let m = &self.scorers[at];
            match answered {
                Ok((verdicts, version)) => {
                    d.reused += verdicts.reused as u64;
                    d.errors.extend(verdicts.broken);
                    let reasons = &version.info().filter_reasons;
                    for (i, &k) in verdicts.values.iter().enumerate() {
                        if k != 0 && ok[i] {
                            ok[i] = false;
                            d.rejections.push(Rejection {
                                node: candidates[i],
                                plugin: m.name.clone(),
                                reason: reasons.get(k as usize - 1).cloned().unwrap_or_default(),
                            });
                        }
                    }
                }
                Err(e) => d.errors.push(e),
            }
        }
        d.feasible = candidates.iter().zip(&ok).filter(|(_, ok)| **ok).map(|(id, _)| *id).collect();
        d.totals = vec![0.0; d.feasible.len()];
        d.filter_elapsed = started.elapsed();
        if d.feasible.is_empty() {
            d.elapsed = d.filter_elapsed;
            d.host_starved = self.starved_calls().saturating_sub(starved_before);
            return d;
        }

        // Score: one call per plugin, one value per feasible candidate. A
        // plugin not yet called when the budget runs out is skipped.
        let scoring: Vec<usize> = (0..self.scorers.len()).collect();
        let feasible = &d.feasible;
        let answers = self.each(&scoring, |&i| {
            if late() {
                return None;
            }
            let m = &self.scorers[i];
            let version = m.slot.current();
            let at = started.elapsed();
            let answered = m.slot.call(|v| self.ask(i, v, Kind::Score, pod, &wit_pod, feasible));
            Some((answered, version, at, started.elapsed() - at))
        });
        let mut hints: Option<(f64, Vec<u8>)> = None;
        for (m, answer) in self.scorers.iter().zip(answers) {
            let Some((answered, version, at, took)) = answer else {
                d.deadline_hit = true;
                continue;
            };
            let mut outcome = PluginOutcome {
                plugin: m.name.clone(),
                version: version.version().to_string(),
                weight: m.weight,
                scores: Vec::new(),
                error: None,
                started: at,
                elapsed: took,
            };
            match answered {
                Ok(out) => {
                    d.reused += out.reused as u64;
                    d.errors.extend(out.broken);
                    score::accumulate(&mut d.totals, &out.values, m.weight);
                    if !out.hints.is_empty() && hints.as_ref().is_none_or(|(w, _)| m.weight > *w) {
                        hints = Some((m.weight, out.hints));
                    }
                    outcome.scores = out.values;
                }
                Err(e) => {
                    outcome.error = Some(e.clone());
                    d.errors.push(e);
                }
            }
            d.outcomes.push(outcome);
        }
        if let Some(i) = score::select_by(&d.totals, &d.feasible, self.tie_break) {
            d.chosen = Some(d.feasible[i]);
            d.gpu_hint = hints.and_then(|(_, h)| h.get(i).copied()).filter(|&g| g != u8::MAX);
        }
        d.elapsed = started.elapsed();
        d.host_starved = self.starved_calls().saturating_sub(starved_before);
        d
    }
}

/// A policy places pods in the simulator (and, later, the live scheduler).
impl tessera_core::framework::Placer for Policy {
    fn nodes_changed(&mut self, nodes: &[&Node]) {
        self.upsert_nodes(nodes.iter().copied());
    }

    fn prime(&mut self) {
        // Faults are counted in the plugin's slot; the next decision
        // retries on a fresh instance.
        let _ = Policy::prime(self);
    }

    fn set_weights(&mut self, weights: &[f64]) {
        if weights.len() == self.scorers.len() {
            for (m, &w) in self.scorers.iter_mut().zip(weights) {
                m.weight = w;
            }
        }
    }

    fn zone_carbon(&mut self, zone: &str, g_per_kwh: u32) {
        self.set_zone_carbon(zone, g_per_kwh);
    }

    fn detect(&mut self, frame: &tessera_core::telemetry::DetectionFrame) -> Vec<tessera_core::telemetry::Detection> {
        use crate::bindings::types::{FindingKind, TelemetryFrame};
        use tessera_core::telemetry::FindingKind as Kind;
        let wit_frame = TelemetryFrame {
            seq: frame.seq,
            nodes: frame.nodes.clone(),
            gpu_util_permille: frame.gpu_util_permille.clone(),
            memory_free_permille: frame.memory_free_permille.clone(),
            cpu_util_permille: frame.cpu_util_permille.clone(),
            stranded_gpu_milli: frame.stranded_gpu_milli.clone(),
        };
        let mut out = Vec::new();
        for m in &self.detectors {
            // A detector that faults or errs reports nothing this round;
            // its slot counts the fault.
            let Ok(findings) = m.slot.call(|v| v.observe(&wit_frame).and_then(|()| v.detect())) else { continue };
            let own = &mut self.own_kinds;
            out.extend(findings.into_iter().map(|f| tessera_core::telemetry::Detection {
                detector: m.name.clone(),
                node: f.node,
                kind: match f.kind {
                    FindingKind::Overload => Kind::Overload,
                    FindingKind::MemoryPressure => Kind::MemoryPressure,
                    FindingKind::Fragmentation => Kind::Fragmentation,
                    FindingKind::LowLoad => Kind::LowLoad,
                    // Bounded: a detector cannot mint unbounded series.
                    FindingKind::Other(k) => own.admit(&m.name, k),
                },
                severity: f.severity,
                message: clip_message(f.message),
            }));
        }
        out
    }

    fn place(&mut self, pod: &Pod, candidates: &[NodeId]) -> tessera_core::framework::Choice {
        self.decide(pod, candidates).choice()
    }
}

/// Longest detection message kept, bytes (it goes into reports and traces).
const MAX_FINDING_MESSAGE: usize = 512;

fn clip_message(mut m: String) -> String {
    if m.len() > MAX_FINDING_MESSAGE {
        let mut at = MAX_FINDING_MESSAGE;
        while !m.is_char_boundary(at) {
            at -= 1;
        }
        m.truncate(at);
        m.push('…');
    }
    m
}
