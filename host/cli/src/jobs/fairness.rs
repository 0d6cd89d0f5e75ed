//! How `fair-share` shares room beyond guarantees (the gate, remembered
//! use, reservations, queue order: [`Fairness`], over the policy's own
//! settings) and the built-in queues it runs with: equal queues, or one
//! per Philly virtual cluster.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use tessera_core::quota::{QueueSpec, QueueTree, QueuesConfig, Quota};

use super::SPEC_MODELS;
use crate::sim::policy_document;

/// How room is shared beyond guarantees: the fair-share gate of
/// `fair-share`'s built-in queues (`queues.fair_share_gate`,
/// `queues.usage_half_life_s`) and reservations for gangs that wait too
/// long for room (`scheduling.reserve_after_s`, every mode).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Fairness {
    /// Whether a queue at its fair share of GPUs starts nothing new while
    /// another is below its own.
    pub gate: bool,
    /// With the gate: use over or under the share is remembered with this
    /// half-life, s (time-based fair share).
    pub usage_half_life_s: Option<u64>,
    /// With remembered use: hold queues only while remembered fairness is
    /// below this (`queues.fairness_target`).
    pub fairness_target: Option<f64>,
    /// Nodes are reserved for a gang that waited this long for room, s.
    pub reserve_after_s: Option<u64>,
    /// One reservation per leaf queue (`scheduling.reserve_per_queue`).
    pub reserve_per_queue: bool,
    /// Within a queue, smaller jobs first (`scheduling.queue.smallest_first`).
    pub smallest_first: bool,
    /// With the gate: queues reclaim up to their fair share, not only their
    /// guarantee (`queues.reclaim_to_fair_share`).
    pub reclaim_to_fair_share: bool,
    /// Pods are reclaimed only after running this long, s
    /// (`queues.reclaim_min_runtime_s`).
    pub reclaim_min_runtime_s: Option<u64>,
}

impl Fairness {
    /// Policy `policy`'s document with these options over its own, and
    /// the fairness that comes to ([`Self::over`], then [`Self::apply`]).
    pub(super) fn document(self, policy: &str, seed: u64) -> Result<(tessera_policy::PolicyDocument, Self)> {
        let mut doc = policy_document(policy, seed)?;
        let fairness = self.over(&doc);
        fairness.apply(&mut doc);
        Ok((doc, fairness))
    }

    /// These options over the policy's own: its `queues:` settings (the
    /// gate, remembered use, the floor, reclaim to the fair share) and its
    /// reservations and queue order, each where the options leave it
    /// unset. So `bench jobs --policy training` runs the training policy's
    /// fairness as shipped.
    pub(super) fn over(self, doc: &tessera_policy::PolicyDocument) -> Self {
        let q = &doc.queues;
        Self {
            gate: self.gate || q.fair_share_gate,
            usage_half_life_s: self.usage_half_life_s.or(q.usage_half_life_s),
            fairness_target: self.fairness_target.or(q.fairness_target),
            reserve_after_s: self.reserve_after_s.or(doc.scheduling.reserve_after_s),
            reserve_per_queue: self.reserve_per_queue || doc.scheduling.reserve_per_queue,
            smallest_first: self.smallest_first || doc.scheduling.queue.smallest_first,
            reclaim_to_fair_share: self.reclaim_to_fair_share || q.reclaim_to_fair_share,
            reclaim_min_runtime_s: self.reclaim_min_runtime_s.or(q.reclaim_min_runtime_s),
        }
    }

    /// The queues `list` with this gate, reclaim on.
    pub(super) fn queues(self, list: Vec<QueueSpec>) -> Result<QueueTree> {
        let what = "fair-share's queues (--gate, --usage-half-life, --fairness-target, --reclaim-to-share, \
                    --reclaim-min-runtime, over the policy's queues:)";
        QueueTree::new(&QueuesConfig {
            list,
            fair_share_gate: self.gate,
            usage_half_life_s: self.usage_half_life_s,
            fairness_target: self.fairness_target,
            reclaim_to_fair_share: self.reclaim_to_fair_share,
            reclaim_min_runtime_s: self.reclaim_min_runtime_s,
            ..QueuesConfig::default()
        })
        .context(what)
    }

    /// `doc` with these reservations (if set) and this order.
    pub(super) fn apply(self, doc: &mut tessera_policy::PolicyDocument) {
        if self.reserve_after_s.is_some() {
            doc.scheduling.reserve_after_s = self.reserve_after_s;
        }
        if self.smallest_first {
            doc.scheduling.queue.smallest_first = true;
        }
        if self.reserve_per_queue {
            doc.scheduling.reserve_per_queue = true;
        }
    }

    /// As a run's name shows it: `+gate`, `+gate~3600s`, `≥0.9`,
    /// `+reserve@600s`, `+smallest`, `+reclaim>share`, `+turn@600s`.
    pub fn suffix(self) -> String {
        let mut s = match (self.gate, self.usage_half_life_s) {
            (false, _) => String::new(),
            (true, None) => "+gate".into(),
            (true, Some(h)) => format!("+gate~{h}s"),
        };
        if let Some(t) = self.fairness_target {
            s += &format!("≥{t}");
        }
        if let Some(r) = self.reserve_after_s {
            s += &format!("+reserve@{r}s");
        }
        if self.reserve_per_queue {
            s += "/queue";
        }
        if self.smallest_first {
            s += "+smallest";
        }
        if self.reclaim_to_fair_share {
            s += "+reclaim>share";
        }
        if let Some(m) = self.reclaim_min_runtime_s {
            s += &format!("+turn@{m}s");
        }
        s
    }
}

/// `queues` equal leaf queues `q0`, `q1`, …, each guaranteed an equal
/// share of the GPUs of each model (rounded down), reclaim on, with the
/// gate of `fairness`.
pub fn equal_queues(queues: u32, gpus: [u32; 3], fairness: Fairness) -> Result<QueueTree> {
    let names: Vec<String> = (0..queues.max(1)).map(|q| format!("q{q}")).collect();
    equal_named_queues(&names, gpus, fairness)
}

/// One leaf queue per name, equal weights, each guaranteed an equal share
/// of the GPUs of each model (rounded down), reclaim on, with the gate of
/// `fairness`.
pub fn equal_named_queues(names: &[String], gpus: [u32; 3], fairness: Fairness) -> Result<QueueTree> {
    let n = (names.len() as u32).max(1);
    let by_model: BTreeMap<String, u32> =
        SPEC_MODELS.iter().zip(gpus).filter(|(_, g)| *g / n > 0).map(|(m, g)| (m.to_string(), g / n)).collect();
    let total: u32 = by_model.values().sum();
    let list = names
        .iter()
        .map(|name| QueueSpec {
            name: name.clone(),
            parent: None,
            weight: 1.0,
            guarantee: Quota { gpus: Some(total), gpus_by_model: by_model.clone(), ..Quota::default() },
            limit: Quota::default(),
        })
        .collect();
    fairness.queues(list)
}

/// One leaf queue per virtual cluster, named as its trace, guaranteed the
/// GPUs of each model its spec gives it (Philly's VC quotas), reclaim on,
/// with the gate of `fairness`.
pub fn vc_queues(vcs: &[(String, [u32; 3])], fairness: Fairness) -> Result<QueueTree> {
    let list = vcs
        .iter()
        .map(|(name, gpus)| {
            let by_model: BTreeMap<String, u32> =
                SPEC_MODELS.iter().zip(gpus).filter(|(_, g)| **g > 0).map(|(m, g)| (m.to_string(), *g)).collect();
            QueueSpec {
                name: name.clone(),
                parent: None,
                weight: 1.0,
                guarantee: Quota { gpus: Some(gpus.iter().sum()), gpus_by_model: by_model, ..Quota::default() },
                limit: Quota::default(),
            }
        })
        .collect();
    fairness.queues(list)
}
