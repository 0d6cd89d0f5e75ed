//! Range-checked values (checked while parsing, so errors carry a location)
//! and the cross-field checks that need the whole document.

use serde::{Deserialize, Serialize};

use tessera_input::{Located, YamlError};

use crate::PolicyDocument;

/// An integer that must lie in `MIN..=MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct Bounded<const MIN: u64, const MAX: u64>(pub u64);

impl<const MIN: u64, const MAX: u64> TryFrom<u64> for Bounded<MIN, MAX> {
    type Error = String;
    fn try_from(v: u64) -> Result<Self, String> {
        if (MIN..=MAX).contains(&v) { Ok(Self(v)) } else { Err(format!("{v} is out of range {MIN}..={MAX}")) }
    }
}

impl<const MIN: u64, const MAX: u64> From<Bounded<MIN, MAX>> for u64 {
    fn from(b: Bounded<MIN, MAX>) -> u64 {
        b.0
    }
}

/// Largest weight a scorer (or a weight set) may have: with scores
/// normalised to 0..=100, any number of plugins keeps every total finite
/// (`1e308` passed a plain "finite" check and made totals NaN).
pub const MAX_WEIGHT: f64 = 1e6;

/// A finite weight within `0..=MAX_WEIGHT` (default 1).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Weight(pub f64);

impl Default for Weight {
    fn default() -> Self {
        Weight(1.0)
    }
}

/// Whether `v` may be a weight.
pub fn weight_ok(v: f64) -> bool {
    v.is_finite() && (0.0..=MAX_WEIGHT).contains(&v)
}

impl TryFrom<f64> for Weight {
    type Error = String;
    fn try_from(v: f64) -> Result<Self, String> {
        if weight_ok(v) { Ok(Weight(v)) } else { Err(format!("weight {v} must be within 0..={MAX_WEIGHT}")) }
    }
}

impl From<Weight> for f64 {
    fn from(w: Weight) -> f64 {
        w.0
    }
}

/// The field a `validate()` message starts with (`cost.alpha must be …`).
fn field_of(reason: &str) -> &str {
    let end = reason.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')).unwrap_or(reason.len());
    reason[..end].trim_end_matches('.')
}

pub(crate) fn semantics(doc: &PolicyDocument, loc: &Located) -> Result<(), YamlError> {
    if doc.name.trim().is_empty() {
        return Err(loc.error("name", "policy name is empty"));
    }
    if doc.plugins.is_empty() {
        return Err(loc.error("plugins", "a policy needs at least one plugin"));
    }
    if doc.plugins.len() > MAX_PLUGINS {
        return Err(loc.error("plugins", format!("{} plugins; a policy has at most {MAX_PLUGINS}", doc.plugins.len())));
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, p) in doc.plugins.iter().enumerate() {
        let valid = !p.name.is_empty()
            && p.name.len() <= 63
            && p.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        let name = format!("plugins[{i}].name");
        if !valid {
            let shown = tessera_input::clip(&p.name, 64);
            return Err(loc.error(&name, format!("plugin name `{shown}` must be 1-63 of [a-z0-9-_]")));
        }
        if seen.contains(&p.name.as_str()) {
            return Err(loc.error(&name, format!("plugin `{}` is listed twice", p.name)));
        }
        seen.push(&p.name);
        if !p.config.is_null() && !p.config.is_object() {
            return Err(
                loc.error(&format!("plugins[{i}].config"), format!("plugin `{}`: `config` must be a mapping", p.name))
            );
        }
    }
    if doc.plugins.iter().all(|p| p.role != crate::Role::Scorer || p.weight.0 == 0.0)
        && doc.plugins.iter().any(|p| p.role == crate::Role::Scorer)
    {
        return Err(loc.error("plugins", "every scorer has weight 0: the policy would express no preference"));
    }
    let s = &doc.scheduling;
    if s.queue.levels == 0 || s.queue.levels > 16 {
        return Err(loc.error("scheduling.queue.levels", "must be 1..=16"));
    }
    if s.queue.base_quantum == 0 {
        return Err(loc.error("scheduling.queue.base_quantum", "must be at least 1"));
    }
    if s.sampling.percentage.is_some_and(|p| p == 0 || p > 100) {
        return Err(loc.error("scheduling.sampling.percentage", "sampling percentage must be 1..=100"));
    }
    if doc.detection.detection_interval == 0 {
        return Err(loc.error("detection.detection_interval", "must be at least 1"));
    }
    if doc.detection.anomaly_threshold > 1000 {
        return Err(loc.error("detection.anomaly_threshold", "must be within 0..=1000"));
    }
    if let Err(reason) = doc.rescheduling.validate() {
        return Err(loc.error(&format!("rescheduling.{}", field_of(&reason)), reason));
    }
    if let Err(e) = tessera_core::quota::QueueTree::new(&doc.queues) {
        return Err(loc.error(&format!("queues.{}", e.field), e.reason));
    }
    if let Err(reason) = doc.movement.validate() {
        return Err(loc.error(&format!("movement.{}", field_of(&reason)), reason));
    }
    if let Some(a) = &doc.adaptive {
        let scorers = doc.plugins.iter().filter(|p| p.role == crate::Role::Scorer).count();
        if a.weight_sets.is_empty() {
            return Err(loc.error("adaptive.weight_sets", "is empty"));
        }
        for (i, set) in a.weight_sets.iter().enumerate() {
            let at = format!("adaptive.weight_sets[{i}]");
            if set.len() != scorers {
                return Err(loc.error(&at, format!("has {} weights, the policy has {scorers} scorers", set.len())));
            }
            if set.iter().any(|w| !weight_ok(*w)) || set.iter().all(|w| *w == 0.0) {
                return Err(loc.error(&at, format!("weights must be within 0..={MAX_WEIGHT} and not all 0")));
            }
        }
    }
    Ok(())
}

/// Most plugins one policy may have.
pub const MAX_PLUGINS: usize = 64;
