//! Range-checked values (checked while parsing, so errors carry a location)
//! and the cross-field checks that need the whole document.

use serde::{Deserialize, Serialize};

use crate::{PolicyDocument, PolicyError};

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

/// A finite, non-negative weight (default 1).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Weight(pub f64);

impl Default for Weight {
    fn default() -> Self {
        Weight(1.0)
    }
}

impl TryFrom<f64> for Weight {
    type Error = String;
    fn try_from(v: f64) -> Result<Self, String> {
        if v.is_finite() && v >= 0.0 { Ok(Weight(v)) } else { Err(format!("weight {v} must be finite and >= 0")) }
    }
}

impl From<Weight> for f64 {
    fn from(w: Weight) -> f64 {
        w.0
    }
}

/// serde_yaml_ng appends " at line X column Y" to messages; the location is
/// reported separately, so strip it.
pub(crate) fn clean(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// 1-based line of the `nth` (0-based) line of `text` that, trimmed, starts
/// with `prefix`; 0 if none.
fn line_of(text: &str, prefix: &str, nth: usize) -> usize {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().trim_start_matches("- ").starts_with(prefix))
        .nth(nth)
        .map_or(0, |(i, _)| i + 1)
}

pub(crate) fn semantics(doc: &PolicyDocument, text: &str, file: &str) -> Result<(), PolicyError> {
    let err = |line: usize, reason: String| PolicyError::Invalid { file: file.into(), line, column: 0, reason };
    if doc.name.trim().is_empty() {
        return Err(err(line_of(text, "name:", 0), "policy name is empty".into()));
    }
    if doc.plugins.is_empty() {
        return Err(err(line_of(text, "plugins:", 0), "a policy needs at least one plugin".into()));
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, p) in doc.plugins.iter().enumerate() {
        let valid = !p.name.is_empty()
            && p.name.len() <= 63
            && p.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        // Line of this entry's `name:`: names inside entries come after the
        // policy's own `name:`, hence `i + 1`.
        let line = line_of(text, "name:", i + 1);
        if !valid {
            return Err(err(line, format!("plugin name `{}` must be 1-63 of [a-z0-9-_]", p.name)));
        }
        if seen.contains(&p.name.as_str()) {
            return Err(err(line, format!("plugin `{}` is listed twice", p.name)));
        }
        seen.push(&p.name);
        if !p.config.is_null() && !p.config.is_object() {
            return Err(err(line, format!("plugin `{}`: `config` must be a mapping", p.name)));
        }
    }
    if doc.plugins.iter().all(|p| p.role != crate::Role::Scorer || p.weight.0 == 0.0)
        && doc.plugins.iter().any(|p| p.role == crate::Role::Scorer)
    {
        return Err(err(
            line_of(text, "plugins:", 0),
            "every scorer has weight 0: the policy would express no preference".into(),
        ));
    }
    let s = &doc.scheduling;
    if s.queue.levels == 0 || s.queue.levels > 16 || s.queue.base_quantum == 0 {
        return Err(err(line_of(text, "scheduling:", 0), "queue: levels must be 1..=16, base_quantum >= 1".into()));
    }
    if s.sampling.percentage.is_some_and(|p| p == 0 || p > 100) {
        return Err(err(line_of(text, "percentage:", 0), "sampling percentage must be 1..=100".into()));
    }
    if doc.detection.detection_interval == 0 || doc.detection.anomaly_threshold > 1000 {
        return Err(err(
            line_of(text, "detection:", 0),
            "detection: detection_interval must be at least 1 and anomaly_threshold within 0..=1000".into(),
        ));
    }
    if let Err(reason) = doc.rescheduling.validate() {
        return Err(err(line_of(text, "rescheduling:", 0), format!("rescheduling: {reason}")));
    }
    if let Err(reason) = doc.movement.validate() {
        return Err(err(line_of(text, "movement:", 0), format!("movement: {reason}")));
    }
    if let Some(a) = &doc.adaptive {
        let scorers = doc.plugins.iter().filter(|p| p.role == crate::Role::Scorer).count();
        let line = line_of(text, "adaptive:", 0);
        if a.weight_sets.is_empty() {
            return Err(err(line, "adaptive: weight_sets is empty".into()));
        }
        for (i, set) in a.weight_sets.iter().enumerate() {
            if set.len() != scorers {
                return Err(err(
                    line,
                    format!("adaptive: weight set {i} has {} weights, the policy has {scorers} scorers", set.len()),
                ));
            }
            if set.iter().any(|w| !w.is_finite() || *w < 0.0) || set.iter().all(|w| *w == 0.0) {
                return Err(err(line, format!("adaptive: weight set {i} must be finite, >= 0 and not all 0")));
            }
        }
    }
    Ok(())
}
