//! Queues with quotas and fair share: what a team may use of the cluster.
//!
//! Queues form a tree; pods wait in leaf queues. Each queue has, per
//! resource (CPU, memory, GPUs, GPUs of a model):
//! - a **guarantee**: what it is entitled to whenever it asks for it; idle
//!   guarantee may be used by others (borrowed) and is taken back by
//!   preemption (reclaim) when its owner needs it, never taking the
//!   borrower below its own guarantee;
//! - a **limit**: what it may never exceed, borrowing included, checked at
//!   every ancestor too;
//! - a **weight**: its share of what is left once guarantees are met.
//!
//! The loop serves the sibling queue that is furthest below its guarantee
//! first, then the one with the smallest weighted dominant share
//! (dominant-resource fairness: a queue's largest share of any one
//! resource of the cluster, over its weight), down the tree to a leaf.
//! [`fair_shares`] computes what each queue would get if every queue asked
//! for what it uses and waits for (guarantee first, then the rest by
//! weight, water-filled, capped by limit and demand), for metrics and
//! status.
//!
//! Without a `queues:` section there is one queue, `default`, with no
//! guarantee and no limit: the loop behaves exactly as without queues.
//!
//! Deterministic and pure: no clock, no IO.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::Pod;

/// The queue of a pod that names none.
pub const DEFAULT_QUEUE: &str = "default";

/// Most queues a tree may have.
pub const MAX_QUEUES: usize = 1024;

/// Largest queue weight.
pub const MAX_QUEUE_WEIGHT: f64 = 1e6;

/// Shortest and longest `usage_half_life_s`: a minute, a year.
pub const USAGE_HALF_LIFE_S: std::ops::RangeInclusive<u64> = 60..=365 * 86_400;

/// The `queues:` section of a policy document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueuesConfig {
    /// The queue of a pod that names none (a leaf; created at the root if
    /// not listed).
    pub default_queue: String,
    /// Whether a queue below its guarantee may preempt pods of queues over
    /// theirs (reclaim).
    pub reclaim: bool,
    /// Whether a queue that already uses its fair share of GPUs (or more)
    /// starts no new GPU pods while other queues' demand is unmet (Volcano's
    /// `proportion` does the same with its "overused" check): room that
    /// frees goes to the queues below their share, at the cost of leaving
    /// GPUs idle until their jobs fit. A queue using nothing may always
    /// start one.
    pub fair_share_gate: bool,
    /// With the gate: time-based fair share. GPU-seconds a queue held over
    /// (or under) its fair share while demand exceeded the cluster are
    /// remembered, halving every this many seconds, and lower (raise) the
    /// share the gate holds it to until they are paid back, so a queue
    /// whose jobs are wider than its share takes turns instead of keeping
    /// more than its share (KAI's time-based fair share, Slurm's usage
    /// decay). Unset: the gate looks at the present only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_half_life_s: Option<u64>,
    /// With remembered use: the gate holds queues only while fairness, as
    /// remembered, is below this — Jain's index over the leaf queues of
    /// the GPU-seconds each held ÷ its fair share while contended, decayed
    /// by the half-life, in (0, 1]. Fairness is then a floor, not a price
    /// paid at every pass: while the queues are treated alike, freed GPUs
    /// go to whoever waits (no idle room kept). Unset: always.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fairness_target: Option<f64>,
    /// With the gate: a queue below its fair share of GPUs (the share the
    /// gate holds it to, moved by remembered use) may reclaim up to that
    /// share, not only up to its guarantee, from queues over theirs, never
    /// taking one below its own share (with remembered use, a queue that
    /// held more than its share is owed less, below its guarantee down to
    /// nothing: a guarantee over time). Time-sliced sharing: a
    /// queue whose jobs are wider than its guarantee takes its turn by
    /// preemption instead of waiting for others' jobs to end (KAI's
    /// reclaim toward fair share, Gavel's rounds). It pays where jobs
    /// checkpoint; a job without checkpoints loses its run.
    pub reclaim_to_fair_share: bool,
    /// A pod is reclaimed only once it has run this long since it last
    /// started (KAI's `reclaimMinRuntime`): the least a turn lasts, so
    /// queues do not take room back and forth. Unset: at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim_min_runtime_s: Option<u64>,
    /// The queues, parents before or after their children.
    pub list: Vec<QueueSpec>,
}

impl Default for QueuesConfig {
    fn default() -> Self {
        Self {
            default_queue: DEFAULT_QUEUE.into(),
            reclaim: true,
            fair_share_gate: false,
            usage_half_life_s: None,
            fairness_target: None,
            reclaim_to_fair_share: false,
            reclaim_min_runtime_s: None,
            list: Vec::new(),
        }
    }
}

/// One queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSpec {
    /// Unique name (1–63 of `[a-z0-9-_.]`).
    pub name: String,
    /// Its parent; none: a child of the root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Share of what is left once guarantees are met (0 < w ≤ 10⁶).
    #[serde(default = "one")]
    pub weight: f64,
    /// Entitled to whenever it asks. Unset resources: nothing guaranteed.
    #[serde(default)]
    pub guarantee: Quota,
    /// Never exceeded. Unset resources: no limit of its own.
    #[serde(default)]
    pub limit: Quota,
}

fn one() -> f64 {
    1.0
}

/// Amounts of each resource a quota sets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Quota {
    /// CPU, millicores.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_milli: Option<u64>,
    /// Memory, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// GPUs of any model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// GPUs of one model (as nodes name it, e.g. `V100`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub gpus_by_model: BTreeMap<String, u32>,
}

/// A queue of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueNode {
    /// Name.
    pub name: String,
    /// Parent's index; none: a child of the root.
    pub parent: Option<usize>,
    /// Children's indices, by name.
    pub children: Vec<usize>,
    /// Weight.
    pub weight: f64,
    /// Guaranteed amounts (set resources only).
    pub guarantee: BTreeMap<Dim, u64>,
    /// Limits (set resources only).
    pub limit: BTreeMap<Dim, u64>,
}

impl QueueNode {
    /// Whether pods may wait in it.
    pub fn is_leaf(&self) -> bool {
        self.children.is_empty()
    }

    /// Guaranteed of `d` (0 if unset).
    pub fn guaranteed(&self, d: &Dim) -> u64 {
        self.guarantee.get(d).copied().unwrap_or(0)
    }
}

/// A `queues:` section refused, the field first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct QueuesError {
    /// The field at fault (`list[2].parent`).
    pub field: String,
    /// Why.
    pub reason: String,
}

/// The queues, checked: names unique, parents known, no cycle, guarantees
/// within limits and children's guarantees within their parent's.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueTree {
    nodes: Vec<QueueNode>,
    by_name: BTreeMap<String, usize>,
    /// The root's children, by name.
    roots: Vec<usize>,
    default: usize,
    reclaim: bool,
    fair_share_gate: bool,
    usage_half_life_s: Option<u64>,
    fairness_target: Option<f64>,
    reclaim_to_fair_share: bool,
    reclaim_min_runtime_s: Option<u64>,
}

impl Default for QueueTree {
    fn default() -> Self {
        Self::new(&QueuesConfig::default()).expect("the default queues are valid")
    }
}

impl QueueTree {
    /// Checks `cfg` and builds its tree.
    pub fn new(cfg: &QueuesConfig) -> Result<Self, QueuesError> {
        let err = |field: String, reason: String| QueuesError { field, reason };
        if let Some(h) = cfg.usage_half_life_s {
            let field = "usage_half_life_s".to_string();
            if !USAGE_HALF_LIFE_S.contains(&h) {
                let (lo, hi) = (USAGE_HALF_LIFE_S.start(), USAGE_HALF_LIFE_S.end());
                return Err(err(field, format!("{h} s must be within {lo}..={hi}")));
            }
            if !cfg.fair_share_gate {
                return Err(err(field, "remembers use for the fair-share gate: set fair_share_gate: true".into()));
            }
        }
        if let Some(t) = cfg.fairness_target {
            let field = "fairness_target".to_string();
            if !(t > 0.0 && t <= 1.0) {
                return Err(err(field, format!("{t} must be in (0, 1] (Jain's index)")));
            }
            if cfg.usage_half_life_s.is_none() {
                return Err(err(field, "reads remembered use: set usage_half_life_s (and fair_share_gate)".into()));
            }
        }
        if cfg.reclaim_to_fair_share && !(cfg.reclaim && cfg.fair_share_gate) {
            let reason = "reclaims up to the fair-share gate's shares: set reclaim: true and fair_share_gate: true";
            return Err(err("reclaim_to_fair_share".into(), reason.into()));
        }
        if let Some(m) = cfg.reclaim_min_runtime_s {
            let field = "reclaim_min_runtime_s".to_string();
            if m > *USAGE_HALF_LIFE_S.end() {
                return Err(err(field, format!("{m} s is more than a year")));
            }
            if !cfg.reclaim {
                return Err(err(field, "delays reclaim: set reclaim: true".into()));
            }
        }
        if cfg.list.len() > MAX_QUEUES {
            return Err(err("list".into(), format!("{} queues; at most {MAX_QUEUES}", cfg.list.len())));
        }
        let mut by_name = BTreeMap::new();
        for (i, q) in cfg.list.iter().enumerate() {
            let ok = !q.name.is_empty()
                && q.name.len() <= 63
                && q.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c));
            if !ok {
                let shown = clip(&q.name, 64);
                return Err(err(
                    format!("list[{i}].name"),
                    format!("queue name `{shown}` must be 1-63 of [a-z0-9-_.]"),
                ));
            }
            if by_name.insert(q.name.clone(), i).is_some() {
                return Err(err(format!("list[{i}].name"), format!("queue `{}` is listed twice", q.name)));
            }
            if !(q.weight.is_finite() && q.weight > 0.0 && q.weight <= MAX_QUEUE_WEIGHT) {
                return Err(err(
                    format!("list[{i}].weight"),
                    format!("{} must be within (0, {MAX_QUEUE_WEIGHT}]", q.weight),
                ));
            }
            for (what, quota) in [("guarantee", &q.guarantee), ("limit", &q.limit)] {
                if let Some(m) = quota.gpus_by_model.keys().find(|m| m.is_empty() || m.len() > 63) {
                    let shown = clip(m, 64);
                    return Err(err(
                        format!("list[{i}].{what}.gpus_by_model"),
                        format!("`{shown}` is not a GPU model"),
                    ));
                }
            }
            let (g, l) = (amounts(&q.guarantee), amounts(&q.limit));
            if let Some((d, gv)) = g.iter().find(|(d, gv)| l.get(*d).is_some_and(|lv| *gv > lv)) {
                return Err(err(
                    format!("list[{i}].guarantee.{}", field_name(d)),
                    format!("queue `{}`: guarantee {} is above its limit {}", q.name, d.show(*gv), d.show(l[d])),
                ));
            }
        }
        let mut nodes: Vec<QueueNode> = cfg
            .list
            .iter()
            .map(|q| QueueNode {
                name: q.name.clone(),
                parent: None,
                children: Vec::new(),
                weight: q.weight,
                guarantee: amounts(&q.guarantee),
                limit: amounts(&q.limit),
            })
            .collect();
        for (i, q) in cfg.list.iter().enumerate() {
            if let Some(p) = &q.parent {
                let Some(&pi) = by_name.get(p) else {
                    let shown = clip(p, 64);
                    return Err(err(format!("list[{i}].parent"), format!("queue `{}`: no queue `{shown}`", q.name)));
                };
                nodes[i].parent = Some(pi);
            }
        }
        for i in 0..nodes.len() {
            let (mut at, mut steps) = (nodes[i].parent, 0);
            while let Some(p) = at {
                steps += 1;
                if p == i || steps > nodes.len() {
                    return Err(err(
                        format!("list[{i}].parent"),
                        format!("queue `{}` is its own ancestor", nodes[i].name),
                    ));
                }
                at = nodes[p].parent;
            }
        }
        let default = match by_name.get(&cfg.default_queue) {
            Some(&d) => d,
            None => {
                let ok = !cfg.default_queue.is_empty() && cfg.default_queue.len() <= 63;
                if !ok {
                    return Err(err("default_queue".into(), "must be a queue name (1-63 characters)".into()));
                }
                nodes.push(QueueNode {
                    name: cfg.default_queue.clone(),
                    parent: None,
                    children: Vec::new(),
                    weight: 1.0,
                    guarantee: BTreeMap::new(),
                    limit: BTreeMap::new(),
                });
                by_name.insert(cfg.default_queue.clone(), nodes.len() - 1);
                nodes.len() - 1
            }
        };
        let mut roots = Vec::new();
        for &i in by_name.values() {
            match nodes[i].parent {
                Some(p) => nodes[p].children.push(i),
                None => roots.push(i),
            }
        }
        if !nodes[default].is_leaf() {
            return Err(err(
                "default_queue".into(),
                format!("`{}` has child queues; pods wait in leaves", cfg.default_queue),
            ));
        }
        // Children's guarantees within their parent's (a parent with no
        // guarantee of a resource promises its children none of it).
        for (p, node) in nodes.iter().enumerate() {
            if node.is_leaf() {
                continue;
            }
            let mut sum: BTreeMap<&Dim, u64> = BTreeMap::new();
            for &c in &node.children {
                for (d, v) in &nodes[c].guarantee {
                    *sum.entry(d).or_insert(0) += v;
                }
            }
            if let Some((d, v)) = sum.iter().find(|(d, v)| **v > node.guaranteed(d)) {
                let i = by_name[&node.name];
                return Err(err(
                    format!("list[{i}].guarantee.{}", field_name(d)),
                    format!(
                        "queue `{}` guarantees {} but its children are guaranteed {} together",
                        nodes[p].name,
                        d.show(node.guaranteed(d)),
                        d.show(*v)
                    ),
                ));
            }
        }
        Ok(Self {
            nodes,
            by_name,
            roots,
            default,
            reclaim: cfg.reclaim,
            fair_share_gate: cfg.fair_share_gate,
            usage_half_life_s: cfg.usage_half_life_s,
            fairness_target: cfg.fairness_target,
            reclaim_to_fair_share: cfg.reclaim_to_fair_share,
            reclaim_min_runtime_s: cfg.reclaim_min_runtime_s,
        })
    }

    /// The queues, by index.
    pub fn nodes(&self) -> &[QueueNode] {
        &self.nodes
    }

    /// The root's children.
    pub fn roots(&self) -> &[usize] {
        &self.roots
    }

    /// Whether reclaim is on.
    pub fn reclaim(&self) -> bool {
        self.reclaim
    }

    /// Whether queues at their fair share of GPUs start nothing new.
    pub fn fair_share_gate(&self) -> bool {
        self.fair_share_gate
    }

    /// The half-life of remembered use, if the gate remembers
    /// (`usage_half_life_s`).
    pub fn usage_half_life_s(&self) -> Option<u64> {
        self.usage_half_life_s
    }

    /// The fairness below which the gate holds queues
    /// (`fairness_target`), if set.
    pub fn fairness_target(&self) -> Option<f64> {
        self.fairness_target
    }

    /// Whether a queue may reclaim up to its fair share
    /// (`reclaim_to_fair_share`).
    pub fn reclaim_to_fair_share(&self) -> bool {
        self.reclaim_to_fair_share
    }

    /// How long a pod runs before it may be reclaimed
    /// (`reclaim_min_runtime_s`; 0 when unset).
    pub fn reclaim_min_runtime_s(&self) -> u64 {
        self.reclaim_min_runtime_s.unwrap_or(0)
    }

    /// Whether this is the one implicit queue (no `queues:` section).
    pub fn is_trivial(&self) -> bool {
        self.nodes.len() == 1 && self.nodes[0].guarantee.is_empty() && self.nodes[0].limit.is_empty()
    }

    /// Index of queue `name`.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The leaf a pod that names no queue waits in.
    pub fn default_leaf(&self) -> usize {
        self.default
    }

    /// The leaf `pod` waits in: the one it names, or the default. `Err`:
    /// the name it gave, which is no leaf queue.
    pub fn leaf_of<'a>(&self, pod: &'a Pod) -> Result<usize, &'a str> {
        match &pod.queue {
            None => Ok(self.default),
            Some(q) => match self.by_name.get(q) {
                Some(&i) if self.nodes[i].is_leaf() => Ok(i),
                _ => Err(q),
            },
        }
    }

    /// `q` and its ancestors, nearest first.
    pub fn path(&self, q: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(Some(q), |&i| self.nodes[i].parent)
    }

    /// Whether `a` is `q` or one of its ancestors.
    pub fn contains(&self, a: usize, q: usize) -> bool {
        self.path(q).any(|i| i == a)
    }

    /// The queue on `q`'s path whose limit `extra` more would pass, with
    /// the resource, if any.
    pub fn over_limit(&self, q: usize, used: &[Amounts], extra: &Amounts) -> Option<(usize, Dim)> {
        for a in self.path(q) {
            for (d, lim) in &self.nodes[a].limit {
                let add = extra.get(d);
                if add > 0 && used[a].get(d) + add > *lim {
                    return Some((a, d.clone()));
                }
            }
        }
        None
    }

    /// How a queue ranks among its siblings for service, lowest first:
    /// below its guarantee first (by its dominant share of the guarantee),
    /// then by weighted dominant share of `capacity`.
    pub fn rank(&self, q: usize, used: &Amounts, capacity: &Amounts) -> (bool, f64) {
        let n = &self.nodes[q];
        let of_guarantee = n
            .guarantee
            .iter()
            .filter(|(_, g)| **g > 0)
            .map(|(d, g)| used.get(d) as f64 / *g as f64)
            .fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.max(s))));
        if let Some(s) = of_guarantee
            && s < 1.0
        {
            return (false, s);
        }
        (true, dominant_share(used, capacity) / n.weight)
    }
}

/// A name echoed into an error, whole only if short.
fn clip(text: &str, max: usize) -> String {
    if text.len() <= max { text.to_string() } else { format!("({} bytes)", text.len()) }
}

mod amounts;
mod share;
pub use amounts::{Amounts, Dim};
use amounts::{amounts, field_name};
pub use share::{dominant_share, fair_shares, water_fill};

#[cfg(test)]
mod tests;
