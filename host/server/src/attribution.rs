//! "Which decisions caused this spike?": the decisions, plugins and plans
//! behind one of the service's metrics over a window of wall time, read
//! from the explain logs. A dashboard panel's time range and metric name go
//! in; the culprits come out, each with its trace id.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::record::{DecisionLog, DecisionRecord, MoveState, Outcome, PlanLog, PlanRecord};

/// Decisions and plans listed at most, most relevant first.
pub const MAX_LISTED: usize = 50;

/// The metrics attribution understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// `tessera_decision_latency_seconds`: the slowest decisions and each
    /// plugin's share of the time.
    DecisionLatency,
    /// `tessera_decisions_total`: every decision, by outcome.
    Decisions,
    /// `tessera_scheduling_failures_total`: the unschedulable decisions,
    /// by code, with the filters that rejected.
    SchedulingFailures,
    /// `tessera_plugin_call_latency_seconds`: per plugin, the slowest calls.
    PluginCallLatency,
    /// `tessera_plugin_faults_total`: the decisions where a plugin faulted.
    PluginFaults,
    /// `tessera_reschedule_attempts_total`: the cycles.
    RescheduleAttempts,
    /// `tessera_migrations_total`: the moves done.
    Migrations,
    /// `tessera_migration_failures_total`: the moves that did not end done.
    MigrationFailures,
}

impl Metric {
    /// Every metric, with its base name.
    pub const ALL: [(Metric, &'static str); 8] = [
        (Metric::DecisionLatency, "decision_latency_seconds"),
        (Metric::Decisions, "decisions"),
        (Metric::SchedulingFailures, "scheduling_failures"),
        (Metric::PluginCallLatency, "plugin_call_latency_seconds"),
        (Metric::PluginFaults, "plugin_faults"),
        (Metric::RescheduleAttempts, "reschedule_attempts"),
        (Metric::Migrations, "migrations"),
        (Metric::MigrationFailures, "migration_failures"),
    ];

    /// Parses a metric as it appears in PromQL: with or without the
    /// `tessera_` prefix and the `_total`, `_bucket`, `_sum`, `_count`
    /// suffixes (and `_seconds` left out).
    pub fn parse(name: &str) -> Option<Self> {
        let mut n = name.trim();
        n = n.strip_prefix("tessera_").unwrap_or(n);
        for suffix in ["_total", "_bucket", "_sum", "_count"] {
            if let Some(s) = n.strip_suffix(suffix) {
                n = s;
                break;
            }
        }
        Self::ALL.iter().find(|(_, base)| *base == n || base.strip_suffix("_seconds") == Some(n)).map(|(m, _)| *m)
    }

    /// Names accepted, for error messages.
    pub fn names() -> String {
        Self::ALL.iter().map(|(_, b)| format!("tessera_{b}")).collect::<Vec<_>>().join(", ")
    }

    fn about_plans(self) -> bool {
        matches!(self, Metric::RescheduleAttempts | Metric::Migrations | Metric::MigrationFailures)
    }
}

/// One plugin's part in the matched decisions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PluginShare {
    /// Plugin name.
    pub plugin: String,
    /// Versions seen in the window.
    pub versions: Vec<String>,
    /// Matched decisions it took part in (scored or filtered).
    pub decisions: u64,
    /// Its scoring time over them, microseconds.
    pub latency_us_sum: u64,
    /// Its slowest call, microseconds.
    pub latency_us_max: u64,
    /// Its share of the matched decisions' total time, 0..1.
    pub latency_share: f64,
    /// Its faults and guest errors, by code.
    pub faults: BTreeMap<String, u64>,
    /// Nodes its filter rejected over the matched decisions.
    pub nodes_rejected: u64,
}

/// A decision, briefly, with its trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DecisionRef {
    /// Pod.
    pub pod: String,
    /// Unix ms.
    pub at_unix_ms: u64,
    /// Outcome.
    pub outcome: Outcome,
    /// Chosen node.
    pub node: Option<String>,
    /// Reason code when unschedulable.
    pub reason: Option<String>,
    /// Decision latency, µs.
    pub latency_us: u64,
    /// Trace id.
    pub trace_id: String,
}

impl From<&DecisionRecord> for DecisionRef {
    fn from(d: &DecisionRecord) -> Self {
        Self {
            pod: d.pod.clone(),
            at_unix_ms: d.at_unix_ms,
            outcome: d.outcome,
            node: d.node.clone(),
            reason: d.reason.clone(),
            latency_us: d.latency_us,
            trace_id: d.trace_id.clone(),
        }
    }
}

/// A plan, briefly, with its trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanRef {
    /// Plan id.
    pub id: u64,
    /// Unix ms.
    pub at_unix_ms: u64,
    /// What triggered it.
    pub trigger: String,
    /// Moves done.
    pub done: u64,
    /// Moves that did not end done.
    pub failed: u64,
    /// Trace id.
    pub trace_id: String,
}

impl From<&PlanRecord> for PlanRef {
    fn from(p: &PlanRecord) -> Self {
        let done = p.moves.iter().filter(|m| m.state == MoveState::Done).count() as u64;
        let failed = p.moves.iter().filter(|m| m.state.failure_code().is_some()).count() as u64;
        Self {
            id: p.id,
            at_unix_ms: p.at_unix_ms,
            trigger: p.trigger.clone(),
            done,
            failed,
            trace_id: p.trace_id.clone(),
        }
    }
}

/// What lies behind a metric over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Attribution {
    /// The metric.
    pub metric: Metric,
    /// Window start, Unix ms.
    pub from_unix_ms: u64,
    /// Window end, Unix ms.
    pub to_unix_ms: u64,
    /// Decisions (or plans, for the rescheduling metrics) in the window.
    pub in_window: u64,
    /// Of those, the ones the metric counts.
    pub matched: u64,
    /// The matched events by code (reason, fault, outcome or move state).
    pub by_code: BTreeMap<String, u64>,
    /// Nodes the host's hard filter rejected over the matched decisions,
    /// by reason code.
    pub host_rejections: BTreeMap<String, u64>,
    /// The plugins behind the matched decisions, most involved first.
    pub plugins: Vec<PluginShare>,
    /// The matched decisions, most relevant first (at most 50).
    pub decisions: Vec<DecisionRef>,
    /// The matched plans, newest first (at most 50).
    pub plans: Vec<PlanRef>,
    /// The window reaches back past the oldest decision held: older
    /// events have been forgotten.
    pub truncated: bool,
}

/// Attributes `metric` over `[from, to]` (Unix ms).
pub fn attribute(metric: Metric, from: u64, to: u64, decisions: &DecisionLog, plans: &PlanLog) -> Attribution {
    let mut out = Attribution {
        metric,
        from_unix_ms: from,
        to_unix_ms: to,
        in_window: 0,
        matched: 0,
        by_code: BTreeMap::new(),
        host_rejections: BTreeMap::new(),
        plugins: Vec::new(),
        decisions: Vec::new(),
        plans: Vec::new(),
        truncated: false,
    };
    if metric.about_plans() {
        let mut matched: Vec<&PlanRecord> = Vec::new();
        for p in plans.window(from, to) {
            out.in_window += 1;
            let counts = |m: &crate::record::MoveRecord| match metric {
                Metric::Migrations => m.state == MoveState::Done,
                // As the metric counts them: moves that ended other than done.
                Metric::MigrationFailures => m.state.failure_code().is_some(),
                _ => true,
            };
            let mut hit = metric == Metric::RescheduleAttempts;
            for m in p.moves.iter().filter(|m| counts(m)) {
                hit = true;
                let code = match metric {
                    Metric::Migrations => m.strategy.clone(),
                    _ => m.state.as_str().to_string(),
                };
                *out.by_code.entry(code).or_default() += 1;
            }
            if metric == Metric::RescheduleAttempts {
                *out.by_code.entry(p.trigger.split(':').next().unwrap_or_default().to_string()).or_default() += 1;
            }
            if hit {
                matched.push(p);
            }
        }
        out.matched = matched.len() as u64;
        out.plans = matched.iter().rev().take(MAX_LISTED).map(|p| PlanRef::from(*p)).collect();
        return out;
    }

    out.truncated = decisions.oldest().is_some_and(|d| d.at_unix_ms > from) && decisions.len() >= decisions.cap();
    let mut matched: Vec<&DecisionRecord> = Vec::new();
    for d in decisions.window(from, to) {
        out.in_window += 1;
        let hit = match metric {
            Metric::SchedulingFailures => d.outcome == Outcome::Unschedulable,
            Metric::PluginFaults => d.plugins.iter().any(|p| p.error_code.is_some()),
            _ => true,
        };
        if hit {
            matched.push(d);
        }
    }
    out.matched = matched.len() as u64;
    let total_us: u64 = matched.iter().map(|d| d.latency_us).sum();
    let mut shares: BTreeMap<&str, PluginShare> = BTreeMap::new();
    for d in &matched {
        let code = match metric {
            Metric::SchedulingFailures => d.reason.clone(),
            Metric::Decisions => Some(d.outcome.as_str().to_string()),
            _ => None,
        };
        if let Some(c) = code {
            *out.by_code.entry(c).or_default() += 1;
        }
        for p in &d.plugins {
            let s = shares
                .entry(&p.plugin)
                .or_insert_with(|| PluginShare { plugin: p.plugin.clone(), ..Default::default() });
            if !s.versions.contains(&p.version) {
                s.versions.push(p.version.clone());
            }
            s.decisions += 1;
            s.latency_us_sum += p.latency_us;
            s.latency_us_max = s.latency_us_max.max(p.latency_us);
            if let Some(c) = &p.error_code {
                *s.faults.entry(c.clone()).or_default() += 1;
                if metric == Metric::PluginFaults {
                    *out.by_code.entry(c.clone()).or_default() += 1;
                }
            }
        }
        for r in &d.plugin_filter {
            let s = shares
                .entry(&r.plugin)
                .or_insert_with(|| PluginShare { plugin: r.plugin.clone(), ..Default::default() });
            s.nodes_rejected += u64::from(r.nodes);
        }
        for (code, n) in &d.host_filter {
            *out.host_rejections.entry(code.clone()).or_default() += u64::from(*n);
        }
    }
    for s in shares.values_mut() {
        s.latency_share = if total_us == 0 { 0.0 } else { s.latency_us_sum as f64 / total_us as f64 };
    }
    let mut plugins: Vec<PluginShare> = shares.into_values().collect();
    match metric {
        Metric::PluginFaults => plugins.sort_by_key(|s| std::cmp::Reverse(s.faults.values().sum::<u64>())),
        Metric::SchedulingFailures => plugins.sort_by_key(|s| std::cmp::Reverse(s.nodes_rejected)),
        _ => plugins.sort_by_key(|s| std::cmp::Reverse(s.latency_us_sum)),
    }
    out.plugins = plugins;
    // Most relevant first: the slowest for latency metrics, else newest.
    match metric {
        Metric::DecisionLatency | Metric::PluginCallLatency => {
            matched.sort_by_key(|d| std::cmp::Reverse(d.latency_us));
        }
        _ => matched.reverse(),
    }
    out.decisions = matched.iter().take(MAX_LISTED).map(|d| DecisionRef::from(*d)).collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{MoveRecord, PluginPart, PluginRejections};

    fn decision(pod: &str, at: u64, latency_us: u64, reason: Option<&str>, fault: Option<&str>) -> DecisionRecord {
        let part = |plugin: &str, us: u64, code: Option<&str>| PluginPart {
            plugin: plugin.into(),
            version: "0.1.0".into(),
            weight: 1.0,
            winner_score: None,
            latency_us: us,
            error_code: code.map(str::to_string),
            error: code.map(|c| format!("{c}: it broke")),
        };
        let bound = reason.is_none();
        DecisionRecord {
            outcome: if bound { Outcome::Bound } else { Outcome::Unschedulable },
            node: bound.then(|| "n1".to_string()),
            reason: reason.map(str::to_string),
            candidates: 3,
            host_filter: [("SCHED-GPU-INSUFFICIENT".to_string(), 2)].into_iter().collect(),
            plugin_filter: vec![PluginRejections {
                plugin: "spread".into(),
                reason: "SCHED-ZONE-SPREAD".into(),
                nodes: 1,
            }],
            plugins: vec![part("fgd", latency_us * 3 / 4, None), part("spread", latency_us / 4, fault)],
            latency_us,
            trace_id: format!("{pod:0>32}"),
            ..crate::record::sample_decision(pod, at)
        }
    }

    fn logs() -> (DecisionLog, PlanLog) {
        let mut d = DecisionLog::new(100);
        d.push(decision("a", 1_000, 100, None, None));
        d.push(decision("b", 2_000, 9_000, None, Some("PLUGIN-TIMEOUT")));
        d.push(decision("c", 3_000, 400, Some("SCHED-GPU-INSUFFICIENT"), None));
        d.push(decision("d", 9_000, 50_000, None, None));
        let mut p = PlanLog::new(10);
        let mv = |state: MoveState| MoveRecord {
            pod: "a".into(),
            from: "n1".into(),
            to: "n2".into(),
            strategy: "fragment-merge".into(),
            cost: 1.0,
            state,
            reason: None,
            after: Vec::new(),
        };
        p.upsert(PlanRecord {
            id: 1,
            at_unix_ms: 2_500,
            backend_time_s: 0,
            trigger: "anomalies: low-load=2".into(),
            anomalies: 2,
            solver: "greedy".into(),
            timed_out: false,
            plan_ms: 1.0,
            fragmentation_before: 0.0,
            fragmentation_after: 0.0,
            whole_free_before: 0,
            whole_free_after: 0,
            gain: 0.0,
            cost: 0.0,
            state: crate::record::PlanState::Executed,
            reason: None,
            moves: vec![mv(MoveState::Done), mv(MoveState::RolledBack), mv(MoveState::Done)],
            trace_id: "t".into(),
        });
        (d, p)
    }

    #[test]
    fn metric_names_parse_as_promql_writes_them() {
        for n in ["tessera_decision_latency_seconds_bucket", "decision_latency", "tessera_decision_latency_seconds"] {
            assert_eq!(Metric::parse(n), Some(Metric::DecisionLatency), "{n}");
        }
        assert_eq!(Metric::parse("tessera_scheduling_failures_total"), Some(Metric::SchedulingFailures));
        assert_eq!(Metric::parse("tessera_migrations_total"), Some(Metric::Migrations));
        assert_eq!(Metric::parse("tessera_gpus"), None);
    }

    #[test]
    fn latency_lists_the_slowest_decisions_of_the_window_and_each_plugins_share() {
        let (d, p) = logs();
        let a = attribute(Metric::DecisionLatency, 0, 5_000, &d, &p);
        assert_eq!((a.in_window, a.matched), (3, 3), "d is outside the window");
        let pods: Vec<&str> = a.decisions.iter().map(|d| d.pod.as_str()).collect();
        assert_eq!(pods, ["b", "c", "a"], "slowest first");
        assert_eq!(a.plugins[0].plugin, "fgd");
        assert_eq!(a.plugins[0].latency_us_sum, 75 + 6_750 + 300);
        assert!((a.plugins[0].latency_share - 7_125.0 / 9_500.0).abs() < 1e-9);
        assert_eq!(a.plugins[1].faults["PLUGIN-TIMEOUT"], 1);
        assert_eq!(a.host_rejections["SCHED-GPU-INSUFFICIENT"], 6);
    }

    #[test]
    fn failures_and_faults_match_only_their_decisions() {
        let (d, p) = logs();
        let f = attribute(Metric::SchedulingFailures, 0, 10_000, &d, &p);
        assert_eq!(f.matched, 1);
        assert_eq!(f.decisions[0].pod, "c");
        assert_eq!(f.by_code["SCHED-GPU-INSUFFICIENT"], 1);
        assert_eq!(f.plugins[0].plugin, "spread", "the plugin whose filter rejected comes first");
        let f = attribute(Metric::PluginFaults, 0, 10_000, &d, &p);
        assert_eq!(f.matched, 1);
        assert_eq!(f.decisions[0].pod, "b");
        assert_eq!(f.by_code["PLUGIN-TIMEOUT"], 1);
    }

    #[test]
    fn migration_metrics_read_the_plans() {
        let (d, p) = logs();
        let m = attribute(Metric::Migrations, 0, 10_000, &d, &p);
        assert_eq!(m.by_code["fragment-merge"], 2);
        assert_eq!(m.plans[0].done, 2);
        let f = attribute(Metric::MigrationFailures, 0, 10_000, &d, &p);
        assert_eq!(f.by_code["rolled_back"], 1);
        assert_eq!(f.plans[0].failed, 1);
        let r = attribute(Metric::RescheduleAttempts, 0, 10_000, &d, &p);
        assert_eq!(r.by_code["anomalies"], 1);
        assert_eq!(attribute(Metric::Migrations, 3_000, 10_000, &d, &p).matched, 0);
    }
}
