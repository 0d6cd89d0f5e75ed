//! Policy rollout: a candidate policy moves candidate → shadow (it decides
//! beside the active policy for every pod without acting; disagreements
//! are counted and explained) → canary (it acts for a configurable share of
//! pods) → active, and back on rollback. Promotion requires a passing
//! chaos verdict (`tessera chaos verify --format json`) no older than
//! `rollout.max_verdict_age_s`.
//!
//! Every rule of the rollout is here: what each stage change does to the
//! view, how a decision compared between the two policies is counted, and
//! whether a promotion may go ahead. The loop and the API call these.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::config::RolloutConfig;
use crate::wall::now_unix_ms;

/// Disagreements kept for explanation.
pub const RECENT: usize = 100;

/// Where the candidate stands.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case", tag = "stage")]
pub enum Stage {
    /// Decides beside the active policy; never acts.
    Shadow,
    /// Acts for `share` of the pods (chosen by a hash of the pod's name).
    Canary {
        /// Share of pods, (0, 1].
        share: f64,
    },
}

impl Stage {
    /// Its name in metrics and the API.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Shadow => "shadow",
            Stage::Canary { .. } => "canary",
        }
    }

    /// Whether the candidate's choice is carried out for pod `name`.
    pub fn acts_for(self, name: &str) -> bool {
        matches!(self, Stage::Canary { share } if canary_pick(name, share))
    }
}

/// Whether the canary takes pod `name` at `share`: a stable hash of the
/// name, so a pod's lot does not change between retries.
pub fn canary_pick(name: &str, share: f64) -> bool {
    let h = tessera_core::hash::fnv1a(name.bytes());
    (h as f64 / u64::MAX as f64) < share
}

/// A pod the two policies placed differently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Disagreement {
    /// Pod.
    pub pod: String,
    /// The active policy's node.
    pub active: Option<String>,
    /// The candidate's node.
    pub candidate: Option<String>,
    /// Whose choice was carried out.
    pub acted: String,
    /// The pod's decision, explained (`/v1/decisions/{pod}`).
    pub at_unix_ms: u64,
}

/// A chaos verdict as recorded for the candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VerdictRecord {
    /// `PROMOTE` or `BLOCK`.
    pub verdict: String,
    /// Campaign name.
    pub campaign: String,
    /// The gates that failed.
    pub failing: Vec<String>,
    /// The candidate it was recorded for.
    pub for_candidate: String,
    /// When it was recorded, Unix ms.
    pub recorded_unix_ms: u64,
}

/// The rollout, as the API shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RolloutView {
    /// The active policy.
    pub active: String,
    /// The candidate, if one is being rolled out.
    pub candidate: Option<String>,
    /// Changes whenever a candidate is set or dropped: a verdict is
    /// recorded for one candidate (a new one of the same name is another).
    pub candidate_id: u64,
    /// Its stage.
    pub stage: Option<Stage>,
    /// Since when, Unix ms.
    pub since_unix_ms: u64,
    /// Pods both policies decided since the candidate was set.
    pub compared: u64,
    /// Of those, pods they placed differently.
    pub disagreements: u64,
    /// Pods the candidate's choice was carried out for (canary).
    pub candidate_acted: u64,
    /// The latest disagreements, newest last.
    #[schema(value_type = Vec<Disagreement>)]
    pub recent: VecDeque<Disagreement>,
    /// The chaos verdict recorded for the candidate.
    pub verdict: Option<VerdictRecord>,
    /// Promotions so far.
    pub promotions: u64,
}

impl RolloutView {
    /// Records a chaos verdict for the current candidate; false when there
    /// is none.
    pub fn record(&mut self, verdict: String, campaign: String, failing: Vec<String>) -> bool {
        let Some(candidate) = self.candidate.clone() else { return false };
        self.verdict = Some(VerdictRecord {
            verdict,
            campaign,
            failing,
            for_candidate: candidate,
            recorded_unix_ms: now_unix_ms(),
        });
        true
    }
}

/// Why a rollout step is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RolloutError {
    /// There is no candidate.
    #[error("no candidate: POST /v1/rollout/candidate first")]
    NoCandidate,
    /// Promotion from shadow.
    #[error("{candidate} is in shadow: run it as a canary before promoting")]
    InShadow {
        /// The candidate.
        candidate: String,
    },
    /// No chaos verdict was recorded.
    #[error("no chaos verdict for {candidate}: POST /v1/rollout/verdict")]
    NoVerdict {
        /// The candidate.
        candidate: String,
    },
    /// The verdict was BLOCK.
    #[error("campaign {campaign} blocked {candidate}: failing gates {}", failing.join(", "))]
    Blocked {
        /// The candidate.
        candidate: String,
        /// The campaign.
        campaign: String,
        /// Its failing gates.
        failing: Vec<String>,
    },
    /// The verdict is older than the configuration allows.
    #[error("the verdict is {age_s} s old; promotions accept at most {max_s} s")]
    Stale {
        /// Its age.
        age_s: u64,
        /// The most allowed.
        max_s: u64,
    },
}

/// One pod as both policies decided it.
#[derive(Debug, Clone, PartialEq)]
pub struct Compared {
    /// The pod.
    pub pod: String,
    /// The active policy's node.
    pub active: Option<String>,
    /// The candidate's node.
    pub candidate: Option<String>,
    /// The candidate's choice was the one carried out (canary).
    pub candidate_acted: bool,
}

impl RolloutView {
    /// A rollout with `active` in force and no candidate.
    pub fn new(active: &str) -> Self {
        Self { active: active.into(), ..Self::default() }
    }

    /// A new candidate (none: dropped), in shadow; the comparisons start
    /// afresh and a verdict must be recorded for it.
    pub fn set_candidate(&mut self, candidate: Option<&str>) {
        *self = Self {
            active: std::mem::take(&mut self.active),
            promotions: self.promotions,
            candidate_id: self.candidate_id + 1,
            candidate: candidate.map(str::to_string),
            stage: candidate.map(|_| Stage::Shadow),
            since_unix_ms: now_unix_ms(),
            ..Self::default()
        };
    }

    /// The candidate moves to `stage`.
    pub fn set_stage(&mut self, stage: Stage) -> Result<(), RolloutError> {
        if self.candidate.is_none() {
            return Err(RolloutError::NoCandidate);
        }
        self.stage = Some(stage);
        self.since_unix_ms = now_unix_ms();
        Ok(())
    }

    /// Whether the candidate may be promoted now: in canary, with a
    /// `PROMOTE` verdict no older than the configuration allows.
    pub fn may_promote(&self, cfg: &RolloutConfig, now_unix_ms: u64) -> Result<(), RolloutError> {
        let candidate = self.candidate.clone().ok_or(RolloutError::NoCandidate)?;
        if !matches!(self.stage, Some(Stage::Canary { .. })) {
            return Err(RolloutError::InShadow { candidate });
        }
        let verdict = self.verdict.as_ref().ok_or_else(|| RolloutError::NoVerdict { candidate: candidate.clone() })?;
        if verdict.verdict != "PROMOTE" {
            return Err(RolloutError::Blocked {
                candidate,
                campaign: verdict.campaign.clone(),
                failing: verdict.failing.clone(),
            });
        }
        let age_s = now_unix_ms.saturating_sub(verdict.recorded_unix_ms) / 1000;
        if age_s > cfg.max_verdict_age_s {
            return Err(RolloutError::Stale { age_s, max_s: cfg.max_verdict_age_s });
        }
        Ok(())
    }

    /// The candidate became the active policy `active`.
    pub fn promoted(&mut self, active: &str) {
        *self = Self {
            active: active.into(),
            promotions: self.promotions + 1,
            candidate_id: self.candidate_id,
            since_unix_ms: now_unix_ms(),
            ..Self::default()
        };
    }

    /// Counts one pod both policies decided; whether they agreed.
    pub fn compare(&mut self, c: Compared) -> bool {
        self.compared += 1;
        self.candidate_acted += u64::from(c.candidate_acted);
        let agreed = c.active == c.candidate;
        if !agreed {
            self.disagreements += 1;
            self.recent.push_back(Disagreement {
                pod: c.pod,
                active: c.active,
                candidate: c.candidate,
                acted: if c.candidate_acted { "candidate" } else { "active" }.into(),
                at_unix_ms: now_unix_ms(),
            });
            if self.recent.len() > RECENT {
                self.recent.pop_front();
            }
        }
        agreed
    }

    /// Records `verdict` for candidate `name` (id `candidate_id`), if it
    /// is still the candidate (a scheduled campaign ran on it).
    pub fn record_for(
        &mut self,
        name: &str,
        candidate_id: u64,
        verdict: String,
        campaign: String,
        failing: Vec<String>,
    ) -> bool {
        if self.candidate.as_deref() != Some(name) || self.candidate_id != candidate_id {
            return false;
        }
        self.record(verdict, campaign, failing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_promotion_needs_a_canary_and_a_fresh_promote_verdict() {
        let cfg = RolloutConfig { max_verdict_age_s: 60 };
        let mut v = RolloutView::new("old");
        assert_eq!(v.may_promote(&cfg, now_unix_ms()), Err(RolloutError::NoCandidate));
        v.set_candidate(Some("new"));
        assert!(matches!(v.may_promote(&cfg, now_unix_ms()), Err(RolloutError::InShadow { .. })));
        v.set_stage(Stage::Canary { share: 0.1 }).unwrap();
        assert!(matches!(v.may_promote(&cfg, now_unix_ms()), Err(RolloutError::NoVerdict { .. })));
        assert!(v.record("BLOCK".into(), "c".into(), vec!["lost".into()]));
        assert!(matches!(v.may_promote(&cfg, now_unix_ms()), Err(RolloutError::Blocked { .. })));
        assert!(v.record("PROMOTE".into(), "c".into(), Vec::new()));
        assert_eq!(v.may_promote(&cfg, now_unix_ms()), Ok(()));
        assert!(matches!(v.may_promote(&cfg, now_unix_ms() + 120_000), Err(RolloutError::Stale { .. })));
        let id = v.candidate_id;
        v.promoted("new");
        assert_eq!((v.active.as_str(), v.candidate.as_deref(), v.promotions), ("new", None, 1));
        assert!(!v.record_for("new", id, "PROMOTE".into(), "c".into(), Vec::new()), "no longer a candidate");
    }

    #[test]
    fn disagreements_are_counted_and_the_latest_kept() {
        let mut v = RolloutView::new("a");
        v.set_candidate(Some("b"));
        for i in 0..(RECENT + 5) {
            let same = i % 2 == 0;
            let c = Compared {
                pod: format!("p{i}"),
                active: Some("n1".into()),
                candidate: Some(if same { "n1" } else { "n2" }.into()),
                candidate_acted: false,
            };
            assert_eq!(v.compare(c), same);
        }
        assert_eq!(v.compared as usize, RECENT + 5);
        assert_eq!(v.disagreements as usize, (RECENT + 5) / 2);
        assert!(v.recent.len() <= RECENT);
    }

    #[test]
    fn the_canary_takes_about_its_share_and_always_the_same_pods() {
        let taken = (0..10_000).filter(|i| canary_pick(&format!("pod-{i}"), 0.2)).count();
        assert!((1_700..2_300).contains(&taken), "{taken}");
        assert_eq!(canary_pick("pod-42", 0.2), canary_pick("pod-42", 0.2));
        assert!((0..1000).all(|i| canary_pick(&format!("p{i}"), 1.0)));
        assert!(!(0..1000).any(|i| canary_pick(&format!("p{i}"), 0.0)));
    }
}
