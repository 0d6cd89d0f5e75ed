//! A campaign: a cluster and a workload, a candidate and a baseline policy,
//! scenarios of faults × seeds, and the gates the candidate must pass.
//! Typed YAML, unknown fields refused, every range checked at load.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fault::{FaultError, FaultSpec};

/// The cluster of the twin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum ClusterSpec {
    /// The built-in generator.
    Builtin {
        /// Nodes.
        nodes: usize,
    },
    /// An openb node list (relative to the campaign file).
    Trace(PathBuf),
    /// A snapshot of a running service (`GET /v1/snapshot` saved to a
    /// file): its nodes, and its running and waiting pods, which arrive at
    /// the start of every run and stay (the live load).
    Snapshot(PathBuf),
}

/// The workload replayed on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum WorkloadSpec {
    /// The built-in pod shapes arriving as a Poisson stream.
    Builtin {
        /// Pods.
        pods: usize,
        /// GPU demand over GPU capacity in steady state.
        load: f64,
    },
    /// An openb pod list (relative to the campaign file): with `load`, its
    /// pods arrive as a Poisson stream at that load (each seed draws its
    /// own times) and run for exponentially distributed times; without,
    /// they are replayed by their creation and deletion times.
    Trace {
        /// The pod list.
        pods: PathBuf,
        /// GPU demand over GPU capacity in steady state.
        load: Option<f64>,
    },
}

/// A named set of faults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name (unique in the campaign).
    pub name: String,
    /// Its faults (none: the workload alone, a control).
    #[serde(default)]
    pub faults: Vec<FaultSpec>,
}

/// One gate: bounds on the candidate's value, absolute and relative to the
/// baseline's. Lower is better for every metric but GPU allocation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    /// Highest value allowed (lower-is-better metrics).
    pub max: Option<f64>,
    /// Lowest value allowed (GPU allocation).
    pub min: Option<f64>,
    /// Most the candidate may exceed the baseline by, % (lower-is-better).
    pub max_increase_pct: Option<f64>,
    /// Most the candidate may fall below the baseline by, % (allocation).
    pub max_decrease_pct: Option<f64>,
    /// Absolute tolerance added to the relative bound (noise of small counts).
    #[serde(default)]
    pub slack: f64,
}

/// The gates of a campaign. `pods_lost` is always held at zero.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gates {
    /// Pods lost (summed over seeds); must be zero.
    #[serde(default = "zero_lost")]
    pub pods_lost: Gate,
    /// Pending time p99, seconds (mean over seeds).
    pub pending_p99_s: Option<Gate>,
    /// SLA violations (summed over seeds).
    pub sla_violations: Option<Gate>,
    /// GPU allocation, % (mean over seeds).
    pub gpu_allocation_pct: Option<Gate>,
    /// Fragmentation rate, % (mean over seeds).
    pub fragmentation_pct: Option<Gate>,
    /// Migrations (summed over seeds).
    pub migrations: Option<Gate>,
    /// Time to recover after a fault, seconds (worst seed).
    pub recovery_s: Option<Gate>,
    /// Plugin faults (summed over seeds).
    pub plugin_faults: Option<Gate>,
}

fn zero_lost() -> Gate {
    Gate { max: Some(0.0), ..Gate::default() }
}

impl Default for Gates {
    fn default() -> Self {
        Self {
            pods_lost: zero_lost(),
            pending_p99_s: None,
            sla_violations: None,
            gpu_allocation_pct: None,
            fragmentation_pct: None,
            migrations: None,
            recovery_s: None,
            plugin_faults: None,
        }
    }
}

impl Gates {
    /// Every gate set, by name, with whether higher is better.
    pub fn list(&self) -> Vec<(&'static str, &Gate, bool)> {
        let mut out = vec![("pods_lost", &self.pods_lost, false)];
        let opt = [
            ("pending_p99_s", &self.pending_p99_s, false),
            ("sla_violations", &self.sla_violations, false),
            ("gpu_allocation_pct", &self.gpu_allocation_pct, true),
            ("fragmentation_pct", &self.fragmentation_pct, false),
            ("migrations", &self.migrations, false),
            ("recovery_s", &self.recovery_s, false),
            ("plugin_faults", &self.plugin_faults, false),
        ];
        out.extend(opt.into_iter().filter_map(|(n, g, hi)| g.as_ref().map(|g| (n, g, hi))));
        out
    }
}

/// A campaign file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Campaign {
    /// Name.
    pub name: String,
    /// What it is for.
    #[serde(default)]
    pub description: String,
    /// The twin's cluster (`{builtin: {nodes: 200}}`, `{trace: FILE}` or
    /// `{snapshot: FILE}`).
    #[serde(with = "serde_yaml_ng::with::singleton_map")]
    pub cluster: ClusterSpec,
    /// The workload (`{builtin: {pods: 4000, load: 0.9}}` or
    /// `{trace: {pods: FILE, load: 0.9}}`).
    #[serde(with = "serde_yaml_ng::with::singleton_map")]
    pub workload: WorkloadSpec,
    /// The policy to prove: a shipped name, a built-in plugin or a file
    /// (relative to the campaign file).
    pub candidate: String,
    /// The policy it is compared with (the running one).
    pub baseline: String,
    /// Seeds; each scenario runs once per seed per policy.
    pub seeds: Vec<u64>,
    /// Seconds between telemetry samples in the twin.
    #[serde(default = "default_interval")]
    pub telemetry_interval_s: u64,
    /// Rescheduling in the twin: most moves per plan, % of running pods
    /// (0: off).
    #[serde(default)]
    pub max_migrations_pct: f64,
    /// The scenarios.
    pub scenarios: Vec<Scenario>,
    /// The gates.
    #[serde(default)]
    pub gates: Gates,
    /// The directory relative paths are read from (the file's).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

fn default_interval() -> u64 {
    300
}

/// A campaign that cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    /// The file could not be read (missing, not a regular file, too
    /// large, not UTF-8).
    #[error(transparent)]
    Read(#[from] tessera_input::FileError),
    /// Not a campaign.
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        /// File.
        path: String,
        /// 1-based line (0 if unknown).
        line: usize,
        /// 1-based column (0 if unknown).
        column: usize,
        /// What is wrong, led by the field.
        message: String,
    },
    /// A value out of range.
    #[error("{path}:{line}:{column}: `{field}` {message}")]
    Invalid {
        /// File.
        path: String,
        /// 1-based line (0 if unknown).
        line: usize,
        /// 1-based column (0 if unknown).
        column: usize,
        /// Where.
        field: String,
        /// What.
        message: String,
    },
    /// A fault that cannot be used.
    // The fault's message is in this one; as a `source` too, a chain
    // printer (anyhow's `{:#}`) would say it twice.
    #[error("{path}:{line}:{column}: scenario `{scenario}`: {fault}")]
    Fault {
        /// File.
        path: String,
        /// 1-based line (0 if unknown).
        line: usize,
        /// 1-based column (0 if unknown).
        column: usize,
        /// Scenario.
        scenario: String,
        /// Cause.
        fault: FaultError,
    },
}

impl Campaign {
    /// Reads and validates a campaign file (a regular file of at most
    /// 1 MiB); relative paths in it are read from its directory.
    pub fn load(path: &Path) -> Result<Self, CampaignError> {
        let shown = path.display().to_string();
        let text = tessera_input::file::read_to_string(path, tessera_input::Limit::CAMPAIGN)?;
        let mut c = Self::parse(&text, &shown)?;
        c.base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(c)
    }

    /// Parses and validates `text` (from `origin`).
    pub fn parse(text: &str, origin: &str) -> Result<Self, CampaignError> {
        let (c, located) = tessera_input::yaml::parse::<Self>(text).map_err(|e| CampaignError::Parse {
            path: origin.to_string(),
            line: e.at.line,
            column: e.at.column,
            message: if e.path.is_empty() { e.reason } else { format!("{}: {}", e.path, e.reason) },
        })?;
        c.validate(origin, &located)?;
        Ok(c)
    }

    /// A path of the campaign, resolved against its directory.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() { p.to_path_buf() } else { self.base_dir.join(p) }
    }

    /// A policy reference resolved like a path when it names a file
    /// relative to the campaign.
    pub fn policy_ref(&self, name: &str) -> String {
        if name.ends_with(".yaml") || name.ends_with(".yml") {
            self.resolve(Path::new(name)).display().to_string()
        } else {
            name.to_string()
        }
    }

    /// Runs the campaign needs: scenarios × seeds × 2 policies.
    pub fn runs(&self) -> usize {
        self.scenarios.len() * self.seeds.len() * 2
    }

    /// Checks every range and name; errors are placed at the field's line
    /// and column in the document `located` describes.
    pub fn validate(&self, origin: &str, located: &tessera_input::Located) -> Result<(), CampaignError> {
        let bad = |field: &str, message: &str| {
            let at = located.at(field);
            Err(CampaignError::Invalid {
                path: origin.into(),
                line: at.line,
                column: at.column,
                field: field.into(),
                message: message.into(),
            })
        };
        if self.name.trim().is_empty() {
            return bad("name", "must not be empty");
        }
        let most = tessera_core::synthetic::MAX_LIVE_NODES;
        if let ClusterSpec::Builtin { nodes } = self.cluster
            && !(1..=most).contains(&nodes)
        {
            return bad("cluster.builtin.nodes", &format!("must be in 1..={most}"));
        }
        if let WorkloadSpec::Trace { load: Some(load), .. } = self.workload
            && !(load > 0.0 && load <= 3.0)
        {
            return bad("workload.trace.load", "must be in (0, 3]");
        }
        if let WorkloadSpec::Builtin { pods, load } = self.workload {
            if !(1..=1_000_000).contains(&pods) {
                return bad("workload.builtin.pods", "must be in 1..=1000000");
            }
            if !(load > 0.0 && load <= 3.0) {
                return bad("workload.builtin.load", "must be in (0, 3]");
            }
        }
        if self.seeds.is_empty() {
            return bad("seeds", "must list at least one seed");
        }
        if let Some(seed) = twice(self.seeds.iter()) {
            // The same run twice would count twice in every sum and mean.
            return bad("seeds", &format!("seed {seed} is listed twice"));
        }
        if self.telemetry_interval_s == 0 {
            return bad("telemetry_interval_s", "must be at least 1");
        }
        if !(0.0..=100.0).contains(&self.max_migrations_pct) {
            return bad("max_migrations_pct", "must be in 0..=100");
        }
        if self.scenarios.is_empty() {
            return bad("scenarios", "must hold at least one scenario");
        }
        if let Some(name) = twice(self.scenarios.iter().map(|s| s.name.as_str())) {
            return bad("scenarios", &format!("name `{name}` is used twice"));
        }
        for (si, s) in self.scenarios.iter().enumerate() {
            for (fi, f) in s.faults.iter().enumerate() {
                let at = format!("scenarios[{si}].faults[{fi}]");
                if f.kind == crate::FaultKind::ActuatorErrors && self.max_migrations_pct == 0.0 {
                    return bad(
                        &format!("{at}.kind"),
                        &format!(
                            "(scenario `{}`) is actuator-errors but the twin does not reschedule: set max_migrations_pct above 0",
                            s.name
                        ),
                    );
                }
                if let crate::fault::Start::BeforePeak { history_s, .. } = f.start
                    && history_s / self.telemetry_interval_s.max(1) < crate::forecast::MIN_HISTORY as u64
                {
                    return bad(
                        &format!("{at}.start.before-peak.history_s"),
                        &format!(
                            "must span at least {} telemetry intervals ({} s)",
                            crate::forecast::MIN_HISTORY,
                            crate::forecast::MIN_HISTORY as u64 * self.telemetry_interval_s
                        ),
                    );
                }
                f.validate().map_err(|fault| {
                    let m = located.at(&at);
                    CampaignError::Fault {
                        path: origin.into(),
                        line: m.line,
                        column: m.column,
                        scenario: s.name.clone(),
                        fault,
                    }
                })?;
            }
        }
        if self.gates.pods_lost.max != Some(0.0) || self.gates.pods_lost.max_increase_pct.is_some() {
            return bad("gates.pods_lost", "is always `max: 0`: a policy that loses pods is never promoted");
        }
        for (name, g, higher_better) in self.gates.list() {
            let field = format!("gates.{name}");
            let relative = if higher_better { g.max_decrease_pct } else { g.max_increase_pct };
            if higher_better && (g.max.is_some() || g.max_increase_pct.is_some()) {
                return bad(&field, "is higher-is-better: use `min` and `max_decrease_pct`");
            }
            if !higher_better && (g.min.is_some() || g.max_decrease_pct.is_some()) {
                return bad(&field, "is lower-is-better: use `max` and `max_increase_pct`");
            }
            if g.max.or(g.min).or(relative).is_none() {
                return bad(&field, "sets no bound");
            }
            if relative.is_some_and(|p| !(0.0..=1000.0).contains(&p)) || g.slack < 0.0 {
                return bad(&field, "percentages must be in 0..=1000 and slack at least 0");
            }
        }
        Ok(())
    }
}

/// The least item that occurs more than once in `items`, if any.
fn twice<T: Ord>(items: impl Iterator<Item = T>) -> Option<T> {
    let mut sorted: Vec<T> = items.collect();
    sorted.sort_unstable();
    let i = sorted.windows(2).position(|w| w[0] == w[1])?;
    Some(sorted.swap_remove(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "
name: t
cluster: {builtin: {nodes: 50}}
workload: {builtin: {pods: 500, load: 0.9}}
candidate: default
baseline: binpack
seeds: [1, 2]
scenarios:
  - name: crash
    faults:
      - {kind: node-crash, start: {at: 100}, duration_s: 600, target: {count: 2}}
  - name: control
gates:
  pending_p99_s: {max_increase_pct: 25, slack: 60}
  gpu_allocation_pct: {max_decrease_pct: 2}
";

    #[test]
    fn a_campaign_parses_with_defaults() {
        let c = Campaign::parse(GOOD, "c.yaml").unwrap();
        assert_eq!(c.runs(), 8);
        assert_eq!(c.telemetry_interval_s, 300);
        assert_eq!(c.gates.pods_lost.max, Some(0.0));
        let names: Vec<&str> = c.gates.list().iter().map(|g| g.0).collect();
        assert_eq!(names, ["pods_lost", "pending_p99_s", "gpu_allocation_pct"]);
    }

    #[test]
    fn bad_campaigns_are_refused_with_the_field_named() {
        let cases = [
            (GOOD.replace("seeds: [1, 2]", "seeds: []"), "seeds"),
            (GOOD.replace("name: control", "name: crash"), "used twice"),
            (GOOD.replace("load: 0.9", "load: 9"), "workload.builtin.load"),
            (GOOD.replace("{max_decrease_pct: 2}", "{max_increase_pct: 2}"), "higher-is-better"),
            (GOOD.replace("gates:", "gates:\n  pods_lost: {max: 3}"), "gates.pods_lost"),
            (GOOD.replace("duration_s: 600", "duration_s: 600, intensity: 2"), "intensity 2"),
            (GOOD.replace("candidate:", "colour: blue\ncandidate:"), "colour"),
            (GOOD.replace("kind: node-crash", "kind: meteor"), "meteor"),
            (GOOD.replace("{max_increase_pct: 25, slack: 60}", "{slack: 60}"), "sets no bound"),
            (GOOD.replace("kind: node-crash", "kind: actuator-errors"), "does not reschedule"),
            (GOOD.replace("seeds: [1, 2]", "seeds: [1, 2, 1]"), "seed 1 is listed twice"),
            (GOOD.replace("{count: 2}", "{percent: 500}"), "target {percent: 500} is not in (0, 100]"),
            (GOOD.replace("{count: 2}", "{percent: 0}"), "target {percent: 0} is not in (0, 100]"),
            (GOOD.replace("{count: 2}", "{count: 0}"), "target {count: 0} hits no node"),
        ];
        for (text, needle) in cases {
            let e = Campaign::parse(&text, "c.yaml").unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("c.yaml"), "{needle}: {e}");
        }
    }

    #[test]
    fn errors_give_the_line_and_column_of_the_field() {
        let e = Campaign::parse(&GOOD.replace("seeds: [1, 2]", "seeds: []"), "c.yaml").unwrap_err().to_string();
        assert!(e.starts_with("c.yaml:7:1: `seeds`"), "{e}");
        let e = Campaign::parse(&GOOD.replace("load: 0.9", "load: 9"), "c.yaml").unwrap_err().to_string();
        assert!(e.starts_with("c.yaml:4:"), "{e}");
        let e = Campaign::parse(&GOOD.replace("kind: node-crash", "kind: actuator-errors"), "c.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("c.yaml:11:10: `scenarios[0].faults[0].kind`"), "{e}");
        let e =
            Campaign::parse(&GOOD.replace("candidate:", "colour: blue\ncandidate:"), "c.yaml").unwrap_err().to_string();
        assert!(e.starts_with("c.yaml:5:1: colour: unknown field `colour`"), "{e}");
        // A fault's reason is said once, also where a chain is printed.
        let e =
            Campaign::parse(&GOOD.replace("duration_s: 600", "duration_s: 600, intensity: 2"), "c.yaml").unwrap_err();
        // As anyhow's `{:#}` prints it: each source after the error.
        let mut chained = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            chained += &format!(": {s}");
            source = s.source();
        }
        assert_eq!(chained.matches("intensity 2 is not in (0, 1]").count(), 1, "{chained}");
    }

    #[cfg(unix)]
    #[test]
    fn a_campaign_that_never_ends_is_refused_before_it_is_read() {
        let e = Campaign::load(Path::new("/dev/zero")).unwrap_err().to_string();
        assert_eq!(e, "/dev/zero: is a character device, not a regular file");
    }
}
