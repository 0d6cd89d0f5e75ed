//! # tessera-policy
//!
//! The policy document: which plugins make up a policy, their weights, their
//! hard limits, what they are granted, and their own configuration.
//!
//! ```yaml
//! name: default
//! seed: 42
//! plugins:
//!   - name: binpack
//!     source: builtin:binpack        # or a path, relative to this file
//!     weight: 2
//!     limits: { deadline_ms: 50, memory_mib: 64, fault_budget: 3 }
//!     config: { gpu_weight: 3 }      # passed to the plugin as JSON
//!   - name: spread
//!     source: builtin:topology-spread
//!     sha256: 3f5c…                  # optional digest pin
//! ```
//!
//! Parsing is strict (`deny_unknown_fields`) and every error carries the
//! file, line and column and the reason.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod movement;
pub mod rescheduling;
mod validate;

pub use validate::{Bounded, MAX_PLUGINS, MAX_WEIGHT, Weight};

/// A policy document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyDocument {
    /// Policy name.
    pub name: String,
    /// Seed for the plugins' random streams (and a seeded tie-break).
    #[serde(default)]
    pub seed: u64,
    /// How equal scores are decided: `node-id` (lowest id, the default) or
    /// `seeded-rank` (a fixed random ranking of nodes from `seed`).
    #[serde(default)]
    pub tie_break: TieBreakSpec,
    /// Budget of one placement decision, ms (1..=60000, default 120): once
    /// spent, no further scorer is asked and the best so far is chosen.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: Bounded<1, 60_000>,
    /// Plugins in evaluation order.
    pub plugins: Vec<PluginEntry>,
    /// The scheduling loop: pending queue (`levels`, `base_quantum`,
    /// `aging_after`), node `sampling` and `preemption`.
    #[serde(default)]
    pub scheduling: tessera_core::sched::SchedConfig,
    /// Adaptive weights: a Thompson-sampling bandit picks one of these
    /// weight sets per telemetry interval, rewarded by the outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<Adaptive>,
    /// Detection rounds: `detection_interval` (telemetry intervals between
    /// rounds) and `anomaly_threshold` (least severity that counts).
    #[serde(default)]
    pub detection: tessera_core::telemetry::DetectionConfig,
    /// How rescheduling plans are executed: batches, pauses, concurrency,
    /// cooldowns, caps, reservations, disruption budgets, rollback gates.
    #[serde(default)]
    pub movement: movement::MovementConfig,
    /// The rescheduler's planner: `strategy_weights {load_balance,
    /// fragment_merge, co_location}`, the cost model (`cost: {alpha, beta,
    /// gamma, min_net_gain, …}`), `time_limit_ms`, `max_moves`, load
    /// thresholds, MILP limits.
    #[serde(default)]
    pub rescheduling: rescheduling::PlannerConfig,
    /// Queues with quotas and fair share: `default_queue`, `reclaim` and
    /// `list` of queues (`name`, `parent`, `weight`, `guarantee`, `limit`,
    /// each of `cpu_milli`, `memory_mib`, `gpus`, `gpus_by_model`).
    #[serde(default)]
    pub queues: tessera_core::quota::QueuesConfig,
}

/// Adaptive weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Adaptive {
    /// Candidate weight sets, each one weight per scorer in policy order.
    pub weight_sets: Vec<Vec<f64>>,
}

fn default_timeout_ms() -> Bounded<1, 60_000> {
    Bounded(120)
}

/// How equal scores are decided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TieBreakSpec {
    /// The lowest node id wins.
    #[default]
    NodeId,
    /// A fixed random ranking of nodes drawn from the policy's seed.
    SeededRank,
}

/// Where a plugin's component comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Source {
    /// A plugin shipped inside the `tessera` binary (`builtin:NAME`).
    Builtin(String),
    /// A `.wasm` file; relative paths are relative to the policy file.
    File(PathBuf),
}

impl TryFrom<String> for Source {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        if let Some(name) = s.strip_prefix("builtin:") {
            if name.is_empty() {
                return Err("`builtin:` needs a plugin name, e.g. `builtin:binpack`".into());
            }
            return Ok(Source::Builtin(name.into()));
        }
        if s.is_empty() {
            return Err("source is empty".into());
        }
        if s.contains("://") {
            return Err(format!("source `{s}`: only `builtin:NAME` and file paths are supported"));
        }
        Ok(Source::File(s.into()))
    }
}

impl From<Source> for String {
    fn from(s: Source) -> String {
        s.to_string()
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Builtin(n) => write!(f, "builtin:{n}"),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Which world the plugin must implement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Filter and score (`scorer` world).
    #[default]
    Scorer,
    /// Detect anomalies (`detector` world).
    Detector,
}

/// One plugin of a policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginEntry {
    /// Unique name within the policy.
    pub name: String,
    /// Component source.
    pub source: Source,
    /// Optional pin: hex SHA-256 of the component bytes.
    #[serde(default)]
    pub sha256: Option<Digest>,
    /// Role; must match the component's world.
    #[serde(default)]
    pub role: Role,
    /// Weight of its normalised scores.
    #[serde(default)]
    pub weight: Weight,
    /// Hard limits.
    #[serde(default)]
    pub limits: Limits,
    /// Capabilities beyond the default sandbox.
    #[serde(default)]
    pub grants: Grants,
    /// Plugin-specific configuration, passed to the guest as JSON.
    #[serde(default)]
    pub config: serde_json::Value,
    /// Where `source` was written, for errors found after parsing.
    #[serde(skip)]
    pub source_at: WrittenAt,
}

/// Where a value was written in its document (1-based; 0 when it was not
/// read from text). Not part of what the document says: two documents
/// that differ only in layout are equal.
#[derive(Debug, Clone, Copy, Default)]
pub struct WrittenAt {
    /// Line.
    pub line: usize,
    /// Column.
    pub column: usize,
}

impl PartialEq for WrittenAt {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A hex SHA-256 digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(pub String);

impl TryFrom<String> for Digest {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let hex = s.strip_prefix("sha256:").unwrap_or(&s).to_ascii_lowercase();
        if hex.len() != 64 || hex::decode(&hex).is_err() {
            return Err(format!("`{s}` is not a SHA-256 digest (64 hex digits)"));
        }
        Ok(Digest(hex))
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.0
    }
}

/// Per-plugin hard limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Deadline of one call, ms (1..=10000): of the plugin's own CPU time in
    /// the service; in what must replay, `tessera_wasm::FUEL_PER_MS` × it of
    /// fuel (no clock).
    pub deadline_ms: Bounded<1, 10_000>,
    /// Linear memory cap per instance, MiB (1..=4096).
    pub memory_mib: Bounded<1, 4096>,
    /// Optional fuel per call (a replay meters fuel always; the service when
    /// its runtime enables it): replaces the deadline's fuel in a replay.
    pub fuel: Option<Bounded<1, { u64::MAX }>>,
    /// Faults tolerated within `fault_window` calls before quarantine.
    pub fault_budget: Bounded<0, 1_000_000>,
    /// Window, in calls, over which faults are counted.
    pub fault_window: Bounded<1, 1_000_000_000>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline_ms: Bounded(50),
            // Room for an interpreted guest's mirror of a large cluster:
            // at 10,000 nodes the JavaScript SDK's instance peaks at 101
            // MiB, Python's at 45, Rust's at 10 (docs/BENCHMARKS.md §13).
            memory_mib: Bounded(256),
            fuel: None,
            fault_budget: Bounded(3),
            fault_window: Bounded(1000),
        }
    }
}

/// Capabilities beyond the default sandbox. By default a plugin has no
/// filesystem, no network, a frozen clock, a host-seeded deterministic random
/// stream and discarded stdout/stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Grants {
    /// Real wall and monotonic clocks.
    pub clock: bool,
    /// Operating-system entropy instead of the seeded stream.
    pub random: bool,
    /// Guest stdout/stderr forwarded to the host's stderr.
    pub stdio: bool,
}

/// A rejected document.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read (missing, not a regular file, too large,
    /// not UTF-8).
    #[error(transparent)]
    Read(#[from] tessera_input::FileError),
    /// The document is invalid.
    #[error("{file}:{line}:{column}: {reason}")]
    Invalid {
        /// File.
        file: String,
        /// 1-based line (0 if unknown).
        line: usize,
        /// 1-based column (0 if unknown).
        column: usize,
        /// Why, led by the field at fault (`plugins[1].limits.deadline_ms:
        /// …`).
        reason: String,
    },
}

impl PolicyError {
    pub(crate) fn at(file: &str, e: tessera_input::YamlError) -> Self {
        let reason = if e.path.is_empty() { e.reason } else { format!("{}: {}", e.path, e.reason) };
        PolicyError::Invalid { file: file.into(), line: e.at.line, column: e.at.column, reason }
    }
}

impl PolicyDocument {
    /// Reads and validates a policy file (a regular file of at most 1 MiB).
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let text = tessera_input::file::read_to_string(path, tessera_input::Limit::POLICY)?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and validates a document; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Self, PolicyError> {
        let (mut doc, located) =
            tessera_input::yaml::parse::<PolicyDocument>(text).map_err(|e| PolicyError::at(file, e))?;
        validate::semantics(&doc, &located).map_err(|e| PolicyError::at(file, e))?;
        for (i, p) in doc.plugins.iter_mut().enumerate() {
            let at = located.at(&format!("plugins[{i}].source"));
            p.source_at = WrittenAt { line: at.line, column: at.column };
        }
        Ok(doc)
    }

    /// Resolves file sources inside `root` (relative ones are taken from
    /// it): a source that leads out of it — `..`, an absolute path
    /// elsewhere, a symbolic link — is refused, naming the plugin. A policy
    /// file's root is its own directory; a document posted to the service
    /// has the service's `sources_dir`, and none when it sets none.
    pub fn resolve_sources(&mut self, root: Option<&Path>) -> Result<(), PolicyError> {
        for p in &mut self.plugins {
            let Source::File(f) = &mut p.source else { continue };
            let refuse = |reason: String| PolicyError::Invalid {
                file: "policy".into(),
                line: p.source_at.line,
                column: p.source_at.column,
                reason: format!("plugin {}: {reason}", p.name),
            };
            let Some(root) = root else {
                return Err(refuse(format!(
                    "source {}: this document may name only `builtin:` sources (no directory for file sources is set)",
                    f.display()
                )));
            };
            *f = tessera_input::file::inside(root, f).map_err(|e| refuse(format!("source {e}")))?;
        }
        Ok(())
    }

    /// [`Self::resolve_sources`] inside the directory of the policy file.
    pub fn resolve_paths(&mut self, policy_file: &Path) -> Result<(), PolicyError> {
        let base = match policy_file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        self.resolve_sources(Some(base)).map_err(|e| match e {
            PolicyError::Invalid { reason, line, column, .. } => {
                PolicyError::Invalid { file: policy_file.display().to_string(), line, column, reason }
            }
            other => other,
        })
    }

    /// The queue tree of the `queues:` section (checked when the document
    /// was read).
    pub fn queue_tree(&self) -> tessera_core::quota::QueueTree {
        tessera_core::quota::QueueTree::new(&self.queues).expect("a parsed document's queues are valid")
    }

    /// The plugin-specific configuration of `entry` as the JSON text the
    /// guest's `configure` receives (`null` when absent).
    pub fn config_json(entry: &PluginEntry) -> String {
        entry.config.to_string()
    }
}

#[cfg(test)]
mod tests;
