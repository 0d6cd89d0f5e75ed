//! The same plugin logic compiled natively, for comparisons with the Wasm
//! path (`plugin bench`) and for differential tests: conversions from the
//! core model to the SDK's types, and the built-in plugins by name.

use tessera_core::reuse::{self, AnswerCache, Changes, Kind};
use tessera_core::{GpuHealth, Node, Pod, Tier};
use tessera_sdk as sdk;

fn sat(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn resources(r: &tessera_core::Resources) -> sdk::Resources {
    sdk::Resources { cpu_milli: sat(r.cpu_milli), memory_mib: sat(r.memory_mib) }
}

/// A core node as the SDK's mirror receives it.
pub fn sdk_node(n: &Node) -> sdk::NodeRecord {
    sdk::NodeRecord {
        id: n.id,
        name: n.name.clone(),
        zone: n.zone.clone(),
        gpu_model: n.gpu_model.clone(),
        capacity: resources(&n.capacity),
        free: resources(&n.free),
        gpus: n
            .gpus
            .iter()
            .map(|g| sdk::GpuRecord {
                free_milli: g.free_milli,
                memory_mib: g.memory_mib,
                health: match g.health {
                    GpuHealth::Healthy => sdk::GpuHealth::Healthy,
                    GpuHealth::Degraded => sdk::GpuHealth::Degraded,
                    GpuHealth::Failed => sdk::GpuHealth::Failed,
                },
                util_permille: g.util_permille,
                link: g.link,
            })
            .collect(),
        cpu_util_permille: n.cpu_util_permille,
        memory_util_permille: n.memory_util_permille,
        ready: n.ready,
        workloads: n.workloads.iter().map(|(w, &pods)| sdk::WorkloadCount { workload: w.clone(), pods }).collect(),
        gpu_classes: n.gpu_classes.iter().map(|(c, &pods)| sdk::WorkloadCount { workload: c.clone(), pods }).collect(),
        gpu_memory_used_mib: n.gpus.iter().map(|g| g.memory_used_mib).collect(),
    }
}

/// A core pod as the SDK sees it.
pub fn sdk_pod(p: &Pod) -> sdk::Pod {
    sdk::Pod {
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        workload: p.workload.clone(),
        requests: resources(&p.requests),
        gpu_count: p.gpu_count,
        gpu_milli: p.gpu_milli,
        allowed_models: p.allowed_models.clone(),
        priority: p.priority,
        tier: match p.tier {
            Tier::Hard => sdk::Tier::Hard,
            Tier::Soft => sdk::Tier::Soft,
            Tier::Opportunistic => sdk::Tier::Opportunistic,
        },
    }
}

/// A natively compiled scorer behind one interface.
pub trait NativeScorer: Send {
    /// Whether its filter can reject (it declares reason codes).
    fn filters(&self) -> bool;
    /// Its filter's reason codes (verdict `k` is `reasons()[k - 1]`).
    fn reasons(&self) -> &'static [&'static str];
    /// Applies node deltas.
    fn apply(&mut self, nodes: &[Node]) -> Result<(), String>;
    /// Sets a zone's carbon intensity, as the host function reports it.
    fn set_zone_carbon(&mut self, zone: &str, g_per_kwh: u32);
    /// Filters candidates: 0 = feasible, k > 0 = rejected.
    fn filter(&mut self, pod: &sdk::Pod, candidates: &[u32], out: &mut Vec<u8>) -> Result<(), String>;
    /// Scores candidates.
    fn score(
        &mut self,
        pod: &sdk::Pod,
        candidates: &[u32],
        values: &mut Vec<i64>,
        hints: &mut Vec<u8>,
    ) -> Result<(), String>;
    /// How far its answers may be reused.
    fn reuse(&self) -> sdk::Reuse;
}

impl<S: sdk::Scorer + Send> NativeScorer for sdk::ScorerHarness<S> {
    fn filters(&self) -> bool {
        !self.plugin().filter_reasons().is_empty()
    }
    fn reasons(&self) -> &'static [&'static str] {
        self.plugin().filter_reasons()
    }
    fn set_zone_carbon(&mut self, zone: &str, g_per_kwh: u32) {
        // Only fails past 65535 distinct names, which the Wasm side would
        // refuse as well.
        let _ = self.nodes_mut().set_zone_carbon(zone, Some(g_per_kwh));
    }
    fn apply(&mut self, nodes: &[Node]) -> Result<(), String> {
        sdk::ScorerHarness::apply(self, nodes.iter().map(|n| sdk::NodeDelta::Upsert(sdk_node(n))))
    }
    fn filter(&mut self, pod: &sdk::Pod, candidates: &[u32], out: &mut Vec<u8>) -> Result<(), String> {
        sdk::ScorerHarness::filter(self, pod, candidates, out)
    }
    fn score(
        &mut self,
        pod: &sdk::Pod,
        candidates: &[u32],
        values: &mut Vec<i64>,
        hints: &mut Vec<u8>,
    ) -> Result<(), String> {
        sdk::ScorerHarness::score(self, pod, candidates, values, hints)
    }
    fn reuse(&self) -> sdk::Reuse {
        S::REUSE
    }
}

/// The native build of a built-in scorer, by name.
pub fn builtin(name: &str, config_json: &str) -> Option<Result<Box<dyn NativeScorer>, String>> {
    fn boxed<S: sdk::Scorer + Send>(config: &str) -> Result<Box<dyn NativeScorer>, String> {
        Ok(Box::new(sdk::ScorerHarness::<S>::new(config)?))
    }
    Some(match name {
        "binpack" => boxed::<tessera_plugin_binpack::BinPack>(config_json),
        "topology-spread" => boxed::<tessera_plugin_topology_spread::Spread>(config_json),
        "gpu-aware" => boxed::<tessera_placement_policies::GpuAware>(config_json),
        "load-aware" => boxed::<tessera_placement_policies::LoadAware>(config_json),
        "hybrid-score" => boxed::<tessera_placement_policies::HybridScore>(config_json),
        "gpu-topology" => boxed::<tessera_plugin_gpu_topology::GpuTopology>(config_json),
        "fgd" => boxed::<tessera_openb_policies::Fgd>(config_json),
        "learned" => boxed::<tessera_learned_policy::Learned>(config_json),
        _ => return None,
    })
}

/// What the host may reuse a native scorer's answers by.
fn reuse_scope(r: sdk::Reuse) -> Option<reuse::Scope> {
    match r {
        sdk::Reuse::Fresh => None,
        sdk::Reuse::Node => Some(reuse::Scope::Node),
        sdk::Reuse::NodeShape => Some(reuse::Scope::NodeShape),
        sdk::Reuse::Zone => Some(reuse::Scope::Zone),
    }
}

/// One native scorer with its weight and answer buffers.
struct NativeMember {
    scorer: Box<dyn NativeScorer>,
    weight: f64,
    verdicts: Vec<u8>,
    values: Vec<i64>,
    hints: Vec<u8>,
    answered: bool,
    /// Its answers kept for reuse, as the Wasm policy keeps them (a
    /// scorer of the `node` scope, reuse on).
    cache: Option<AnswerCache>,
}

impl NativeMember {
    /// Filter verdicts on `ids` into `verdicts`, reused where promised.
    fn filter(&mut self, changes: &Changes, pod: &Pod, p: &sdk::Pod, ids: &[u32]) -> bool {
        let scorer = &mut self.scorer;
        match &mut self.cache {
            Some(cache) => {
                let mut buf = Vec::new();
                let answered = reuse::answer(cache, changes, Kind::Verdict, pod, ids, |asked| {
                    scorer
                        .filter(p, asked, &mut buf)
                        .map(|()| (buf.iter().map(|&v| i64::from(v)).collect(), Vec::new()))
                });
                answered.map(|a| self.verdicts = a.values.into_iter().map(|v| v as u8).collect()).is_ok()
            }
            None => scorer.filter(p, ids, &mut self.verdicts).is_ok(),
        }
    }

    /// Scores on `ids` into `values` and `hints`, reused where promised.
    fn score(&mut self, changes: &Changes, pod: &Pod, p: &sdk::Pod, ids: &[u32]) -> bool {
        let scorer = &mut self.scorer;
        match &mut self.cache {
            Some(cache) => {
                let (mut v, mut h) = (Vec::new(), Vec::new());
                let answered = reuse::answer(cache, changes, Kind::Score, pod, ids, |asked| {
                    scorer.score(p, asked, &mut v, &mut h).map(|()| (std::mem::take(&mut v), std::mem::take(&mut h)))
                });
                answered.map(|a| (self.values, self.hints) = (a.values, a.hints)).is_ok()
            }
            None => scorer.score(p, ids, &mut self.values, &mut self.hints).is_ok(),
        }
    }
}

/// A policy of natively compiled scorers, combined exactly as the Wasm
/// [`tessera_wasm::Policy`] combines its plugins (filters skipped for
/// scorers without reasons, normalised weighted scores, tie-break, the
/// same worker threads), for like-for-like comparisons.
pub struct NativePolicy {
    members: Vec<NativeMember>,
    tie: tessera_core::score::TieBreak,
    workers: Option<rayon::ThreadPool>,
    /// Which nodes changed when, and which were seen (for reuse).
    changes: Changes,
    seen: Vec<bool>,
    /// Zone carbon intensities as last told (a repeat changes nothing).
    carbon: std::collections::BTreeMap<String, u32>,
}

impl NativePolicy {
    /// Builds the native twin of a policy document's scorers.
    pub fn from_document(doc: &tessera_policy::PolicyDocument) -> Result<Self, String> {
        let mut members = Vec::new();
        for e in doc.plugins.iter().filter(|e| e.role == tessera_policy::Role::Scorer) {
            let tessera_policy::Source::Builtin(name) = &e.source else {
                return Err(format!("plugin {}: only built-in plugins have a native build", e.name));
            };
            let scorer = builtin(name, &tessera_policy::PolicyDocument::config_json(e))
                .ok_or_else(|| format!("plugin {}: `{name}` has no native build", e.name))??;
            let cache = reuse_scope(scorer.reuse()).map(|scope| {
                let mut c = AnswerCache::new(AnswerCache::AUDIT_EVERY);
                c.owned_by(1, scope);
                c
            });
            members.push(NativeMember {
                scorer,
                weight: e.weight.0,
                verdicts: Vec::new(),
                values: Vec::new(),
                hints: Vec::new(),
                answered: false,
                cache,
            });
        }
        Ok(Self {
            members,
            tie: tessera_core::score::TieBreak::NodeId,
            workers: None,
            changes: Changes::default(),
            seen: Vec::new(),
            carbon: Default::default(),
        })
    }

    /// Reuses the answers of scorers of the `node` scope (on by default),
    /// as [`tessera_wasm::Policy::with_reuse`] does.
    pub fn with_reuse(mut self, on: bool, audit_every: u64) -> Self {
        for m in &mut self.members {
            m.cache = reuse_scope(m.scorer.reuse()).filter(|_| on).map(|scope| {
                let mut c = AnswerCache::new(audit_every);
                c.owned_by(1, scope);
                c
            });
        }
        self
    }

    /// Decides equal totals by `tie` (the lowest node id by default), as
    /// [`tessera_wasm::Policy::with_tie_break`] does.
    pub fn with_tie_break(mut self, tie: tessera_core::score::TieBreak) -> Self {
        self.tie = tie;
        self
    }

    /// Runs the scorers of one decision on `n` threads, as
    /// [`tessera_wasm::Policy::with_workers`] does.
    pub fn with_workers(mut self, n: usize) -> Result<Self, String> {
        self.workers = if n > 1 {
            Some(rayon::ThreadPoolBuilder::new().num_threads(n).build().map_err(|e| e.to_string())?)
        } else {
            None
        };
        Ok(self)
    }

    fn each(&mut self, f: impl Fn(&mut NativeMember, &Changes) + Sync + Send) {
        use rayon::prelude::*;
        let changes = &self.changes;
        match &self.workers {
            Some(pool) => pool.install(|| self.members.par_iter_mut().with_max_len(1).for_each(|m| f(m, changes))),
            None => self.members.iter_mut().for_each(|m| f(m, changes)),
        }
    }
}

impl tessera_core::framework::Placer for NativePolicy {
    fn nodes_changed(&mut self, nodes: &[&Node]) {
        let owned: Vec<Node> = nodes.iter().map(|n| (*n).clone()).collect();
        for m in &mut self.members {
            m.scorer.apply(&owned).expect("valid nodes");
        }
        for n in nodes {
            let i = n.id as usize;
            if i >= self.seen.len() {
                self.seen.resize(i + 1, false);
            }
            self.changes.changed(n.id, !std::mem::replace(&mut self.seen[i], true));
            self.changes.set_zone(n.id, &n.zone);
        }
    }

    fn set_weights(&mut self, weights: &[f64]) {
        if weights.len() == self.members.len() {
            for (m, &w) in self.members.iter_mut().zip(weights) {
                m.weight = w;
            }
        }
    }

    fn zone_carbon(&mut self, zone: &str, g_per_kwh: u32) {
        if self.carbon.get(zone) == Some(&g_per_kwh) {
            return;
        }
        self.carbon.insert(zone.to_string(), g_per_kwh);
        for m in &mut self.members {
            m.scorer.set_zone_carbon(zone, g_per_kwh);
        }
        self.changes.everything();
    }

    fn place(&mut self, pod: &Pod, candidates: &[u32]) -> tessera_core::framework::Choice {
        let p = sdk_pod(pod);
        self.each(|m, changes| m.answered = m.scorer.filters() && m.filter(changes, pod, &p, candidates));
        // As the Wasm policy does: a candidate's reason is that of the
        // first plugin, in policy order, that rejects it.
        let mut ok = vec![true; candidates.len()];
        let mut reasons: Vec<&str> = Vec::new();
        for m in self.members.iter().filter(|m| m.answered) {
            for (o, &v) in ok.iter_mut().zip(&m.verdicts) {
                if v != 0 && *o {
                    *o = false;
                    reasons.push(m.scorer.reasons().get(usize::from(v) - 1).copied().unwrap_or(""));
                }
            }
        }
        let feasible: Vec<u32> = candidates.iter().zip(&ok).filter(|(_, o)| **o).map(|(c, _)| *c).collect();
        let mut totals = vec![0.0; feasible.len()];
        if !feasible.is_empty() {
            self.each(|m, changes| m.answered = m.score(changes, pod, &p, &feasible));
        }
        let mut hint: Option<(f64, &[u8])> = None;
        for m in self.members.iter().filter(|m| m.answered && !feasible.is_empty()) {
            tessera_core::score::accumulate(&mut totals, &m.values, m.weight);
            if !m.hints.is_empty() && hint.is_none_or(|(hw, _)| m.weight > hw) {
                hint = Some((m.weight, &m.hints));
            }
        }
        let chosen = tessera_core::score::select_by(&totals, &feasible, self.tie);
        tessera_core::framework::Choice {
            node: chosen.map(|i| feasible[i]),
            gpu_hint: chosen.and_then(|i| hint.and_then(|(_, h)| h.get(i).copied())).filter(|&g| g != u8::MAX),
            plugin_errors: 0,
            deadline_hit: false,
            filtered: if feasible.is_empty() { tessera_core::score::most_common(reasons.into_iter()) } else { None },
        }
    }
}
