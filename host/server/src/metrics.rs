//! The service's metrics, served on `/metrics` in the OpenMetrics text
//! format. Latency histograms and failure counters carry the trace id of
//! the decision or cycle behind their latest sample as an exemplar, so a
//! spike on a dashboard leads to the traces that made it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::{CounterWithExemplar, HistogramWithExemplars};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::record::MoveState;

/// The exemplar's label set: the W3C trace id, as Grafana expects it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TraceLabel {
    /// 32 hex digits.
    pub trace_id: String,
}

impl TraceLabel {
    /// The label for a sampled trace; none for an unsampled one (its trace
    /// would lead nowhere).
    pub fn of(trace_id: &str, sampled: bool) -> Option<Self> {
        sampled.then(|| Self { trace_id: trace_id.to_string() })
    }
}

/// `outcome` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// bound, preempted, unschedulable (decisions); CANDIDATE, NO-GAIN,
    /// SKIPPED, ERROR (fine-tuning runs).
    pub outcome: String,
}

/// `code` label: a stable reason code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    /// e.g. `SCHED-GPU-INSUFFICIENT`.
    pub code: String,
}

/// `plugin` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabel {
    /// Plugin name in the policy.
    pub plugin: String,
}

/// `plugin` and `code` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginCodeLabel {
    /// Plugin name.
    pub plugin: String,
    /// Fault code (`PLUGIN-TIMEOUT`, …).
    pub code: String,
}

/// `level` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LevelLabel {
    /// Queue level, 0 first.
    pub level: String,
}

/// `queue` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    /// Queue name (the policy's `queues:`).
    pub queue: String,
}

/// `queue` and `resource` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueResourceLabel {
    /// Queue name.
    pub queue: String,
    /// `gpus`, `gpus/V100`, `cpu_milli`, `memory_mib`.
    pub resource: String,
}

/// `strategy` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StrategyLabel {
    /// Rescheduling strategy.
    pub strategy: String,
}

/// `phase` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    /// detect, plan, execute.
    pub phase: String,
}

/// `trigger` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TriggerLabel {
    /// periodic, anomalies.
    pub trigger: String,
}

/// `verdict` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabel {
    /// PROMOTE, BLOCK, ERROR, SKIPPED.
    pub verdict: String,
}

type Hist = HistogramWithExemplars<TraceLabel>;
type HistFamily<L> = Family<L, Hist, fn() -> Hist>;

fn decision_hist() -> Hist {
    // 50 µs … 1.6 s: decisions of a few plugins over thousands of nodes.
    HistogramWithExemplars::new(exponential_buckets(0.000_05, 2.0, 16))
}

fn plugin_hist() -> Hist {
    // 10 µs … 0.33 s.
    HistogramWithExemplars::new(exponential_buckets(0.000_01, 2.0, 16))
}

fn policy_hist() -> Hist {
    // 1 ms … 33 s: detection, planning and executing a plan.
    HistogramWithExemplars::new(exponential_buckets(0.001, 2.0, 16))
}

/// Every metric, registered once.
pub struct Metrics {
    registry: Registry,
    /// Decisions by outcome.
    pub decisions: Family<OutcomeLabel, CounterWithExemplar<TraceLabel>>,
    /// Failed decisions by reason code.
    pub failures: Family<CodeLabel, CounterWithExemplar<TraceLabel>>,
    /// Decision latency.
    pub decision_latency: Hist,
    /// Per-plugin scoring call latency.
    pub plugin_latency: HistFamily<PluginLabel>,
    /// Plugin faults and errors by plugin and code.
    pub plugin_faults: Family<PluginCodeLabel, CounterWithExemplar<TraceLabel>>,
    /// Plugins quarantined now (1) or not (0).
    pub plugin_quarantined: Family<PluginLabel, Gauge>,
    /// Calls of a plugin's current version that the host starved (past
    /// the deadline on the wall clock with less than the deadline of CPU):
    /// host overload, never counted as the plugin's fault.
    pub plugin_host_starved: Family<PluginLabel, Gauge>,
    /// Pods queued per level.
    pub queue_depth: Family<LevelLabel, Gauge>,
    /// Pods waiting (queued or parked) in each queue, or under it.
    pub queue_pending: Family<QueueLabel, Gauge>,
    /// Pods running from each queue, or under it.
    pub queue_running: Family<QueueLabel, Gauge>,
    /// Pods placed from each queue since its policy was installed.
    pub queue_admitted: Family<QueueLabel, Gauge>,
    /// What each queue uses, by resource (GPUs, millicores, MiB).
    pub queue_used: Family<QueueResourceLabel, Gauge<f64, AtomicU64>>,
    /// What each queue uses past its guarantee (borrowed), by resource.
    pub queue_borrowed: Family<QueueResourceLabel, Gauge<f64, AtomicU64>>,
    /// Each queue's guarantee, by resource.
    pub queue_guarantee: Family<QueueResourceLabel, Gauge<f64, AtomicU64>>,
    /// Each queue's fair share now, by resource.
    pub queue_fair_share: Family<QueueResourceLabel, Gauge<f64, AtomicU64>>,
    /// Each queue's dominant share of the cluster, 0..1.
    pub queue_dominant_share: Family<QueueLabel, Gauge<f64, AtomicU64>>,
    /// With `usage_half_life_s`: the fairness across queues the gate
    /// remembers (Jain over held ÷ fair share), what `fairness_target`
    /// is compared with.
    pub queue_fairness: Gauge<f64, AtomicU64>,
    /// Pods parked as unschedulable.
    pub parked: Gauge,
    /// Pods running.
    pub running: Gauge,
    /// Rescheduling cycles by trigger.
    pub reschedule_attempts: Family<TriggerLabel, CounterWithExemplar<TraceLabel>>,
    /// Pods moved, by strategy.
    pub migrations: Family<StrategyLabel, CounterWithExemplar<TraceLabel>>,
    /// Moves that failed, were rolled back or dropped, by code.
    pub migration_failures: Family<CodeLabel, CounterWithExemplar<TraceLabel>>,
    /// Rescheduling time by phase.
    pub policy_execution: HistFamily<PhaseLabel>,
    /// GPU allocation, 0..1.
    pub gpu_allocation: Gauge<f64, AtomicU64>,
    /// Fragmentation rate: share of free GPU capacity the workload cannot
    /// use, 0..1.
    pub gpu_fragmentation: Gauge<f64, AtomicU64>,
    /// GPUs in the cluster.
    pub gpus: Gauge,
    /// Share of nodes at or above 90% of a resource, 0..1.
    pub hotspot_ratio: Gauge<f64, AtomicU64>,
    /// Anomalies found by the detectors, by kind.
    pub anomalies: Family<CodeLabel, Counter>,
    /// API requests by route and status class.
    pub api_requests: Family<Vec<(String, String)>, Counter>,
    /// Decisions the backend could not carry out, by code.
    pub backend_errors: Family<CodeLabel, Counter>,
    /// Pods a rollout's candidate decided beside the active policy, by
    /// stage and whether they agreed.
    pub rollout_decisions: Family<Vec<(String, String)>, Counter>,
    /// Scheduled or manual chaos campaigns run by the service, by verdict
    /// (SKIPPED: a tick found one running).
    pub chaos_campaigns: Family<VerdictLabel, Counter>,
    /// Wall time of a chaos campaign run by the service.
    pub chaos_campaign_duration: Histogram,
    /// Fine-tuning runs of the learned plugin, by outcome.
    pub learning_runs: Family<OutcomeLabel, Counter>,
    /// 1 while this replica decides and acts (it holds the leader lease;
    /// always on the simulator), 0 while it stands by.
    pub leader: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric under the `tessera_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tessera");
        let m = Self {
            decisions: Family::default(),
            failures: Family::default(),
            decision_latency: decision_hist(),
            plugin_latency: Family::new_with_constructor(plugin_hist),
            plugin_faults: Family::default(),
            plugin_quarantined: Family::default(),
            plugin_host_starved: Family::default(),
            queue_depth: Family::default(),
            queue_pending: Family::default(),
            queue_running: Family::default(),
            queue_admitted: Family::default(),
            queue_used: Family::default(),
            queue_borrowed: Family::default(),
            queue_guarantee: Family::default(),
            queue_fair_share: Family::default(),
            queue_dominant_share: Family::default(),
            queue_fairness: Gauge::default(),
            parked: Gauge::default(),
            running: Gauge::default(),
            reschedule_attempts: Family::default(),
            migrations: Family::default(),
            migration_failures: Family::default(),
            policy_execution: Family::new_with_constructor(policy_hist),
            gpu_allocation: Gauge::default(),
            gpu_fragmentation: Gauge::default(),
            gpus: Gauge::default(),
            hotspot_ratio: Gauge::default(),
            anomalies: Family::default(),
            api_requests: Family::default(),
            backend_errors: Family::default(),
            rollout_decisions: Family::default(),
            chaos_campaigns: Family::default(),
            // 1 s … 4.5 h.
            chaos_campaign_duration: Histogram::new(exponential_buckets(1.0, 2.0, 15)),
            learning_runs: Family::default(),
            leader: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register("decisions", "Placement decisions by outcome", m.decisions.clone());
        registry.register(
            "scheduling_failures",
            "Decisions that placed nothing, by stable reason code",
            m.failures.clone(),
        );
        registry.register_with_unit(
            "decision_latency",
            "Wall time of one placement decision (filter, score, select, bind)",
            prometheus_client::registry::Unit::Seconds,
            m.decision_latency.clone(),
        );
        registry.register_with_unit(
            "plugin_call_latency",
            "Wall time of one plugin's scoring call",
            prometheus_client::registry::Unit::Seconds,
            m.plugin_latency.clone(),
        );
        registry.register(
            "plugin_faults",
            "Plugin faults and guest errors by plugin and code",
            m.plugin_faults.clone(),
        );
        registry.register("plugin_quarantined", "1 while a plugin is quarantined", m.plugin_quarantined.clone());
        registry.register(
            "plugin_host_starved_calls",
            "Calls of a plugin's current version the host starved (host overload, not the plugin's fault)",
            m.plugin_host_starved.clone(),
        );
        registry.register("queue_depth", "Pods queued per MLFQ level", m.queue_depth.clone());
        registry.register("pods_parked", "Pods parked as unschedulable", m.parked.clone());
        registry.register("queue_pending", "Pods waiting in a queue or under it", m.queue_pending.clone());
        registry.register("queue_running", "Pods running from a queue or under it", m.queue_running.clone());
        registry.register(
            "queue_admitted",
            "Pods placed from a queue since its policy was installed",
            m.queue_admitted.clone(),
        );
        registry.register("queue_used", "What a queue uses, by resource", m.queue_used.clone());
        registry.register("queue_borrowed", "What a queue uses past its guarantee", m.queue_borrowed.clone());
        registry.register("queue_guarantee", "A queue's guarantee, by resource", m.queue_guarantee.clone());
        registry.register("queue_fair_share", "A queue's fair share now, by resource", m.queue_fair_share.clone());
        registry.register(
            "queue_dominant_share",
            "A queue's largest share of any resource of the cluster",
            m.queue_dominant_share.clone(),
        );
        registry.register(
            "queue_fairness",
            "Fairness across queues as the gate remembers it: Jain over held / fair share GPU-seconds",
            m.queue_fairness.clone(),
        );
        registry.register("pods_running", "Pods running", m.running.clone());
        registry.register("reschedule_attempts", "Rescheduling cycles by trigger", m.reschedule_attempts.clone());
        registry.register("migrations", "Pods moved by the rescheduler, by strategy", m.migrations.clone());
        registry.register(
            "migration_failures",
            "Moves that failed, were rolled back or dropped, by code",
            m.migration_failures.clone(),
        );
        registry.register_with_unit(
            "policy_execution",
            "Wall time of a rescheduling phase (detect, plan, execute)",
            prometheus_client::registry::Unit::Seconds,
            m.policy_execution.clone(),
        );
        registry.register("gpu_allocation_ratio", "Allocated share of GPU capacity", m.gpu_allocation.clone());
        registry.register(
            "gpu_fragmentation_ratio",
            "Share of free GPU capacity the target workload cannot use",
            m.gpu_fragmentation.clone(),
        );
        registry.register("gpus", "GPUs in the cluster", m.gpus.clone());
        registry.register("hotspot_ratio", "Share of nodes at or above 90% of a resource", m.hotspot_ratio.clone());
        registry.register("anomalies", "Anomalies the detectors reported, by kind", m.anomalies.clone());
        registry.register("api_requests", "API requests by route and status class", m.api_requests.clone());
        registry.register(
            "rollout_decisions",
            "Pods a candidate policy decided beside the active one, by stage and agreement",
            m.rollout_decisions.clone(),
        );
        registry.register(
            "chaos_campaigns",
            "Chaos campaigns the service ran, by verdict (SKIPPED: one was running)",
            m.chaos_campaigns.clone(),
        );
        registry.register_with_unit(
            "chaos_campaign_duration",
            "Wall time of a chaos campaign the service ran",
            prometheus_client::registry::Unit::Seconds,
            m.chaos_campaign_duration.clone(),
        );
        registry.register(
            "learning_runs",
            "Fine-tuning runs of the learned plugin, by outcome (CANDIDATE: the tuned model is the rollout's candidate)",
            m.learning_runs.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica decides and acts (holds the leader lease), 0 while it stands by",
            m.leader.clone(),
        );
        registry.register(
            "backend_errors",
            "Binds and evictions the backend could not carry out, by code",
            m.backend_errors.clone(),
        );
        Self { registry, ..m }
    }

    /// Creates every series the loop can later touch at zero, so that rate
    /// and ratio queries over them return data (a zero rate, not nothing)
    /// from the first scrape on, and so that alerts on them can resolve.
    pub fn zero_known_series(&self, doc: &tessera_policy::PolicyDocument) {
        for outcome in ["bound", "preempted", "unschedulable"] {
            let _ = self.decisions.get_or_create(&OutcomeLabel { outcome: outcome.into() });
        }
        for reason in tessera_core::cluster::FilterReason::ALL {
            let _ = self.failures.get_or_create(&CodeLabel { code: reason.code().into() });
        }
        for code in tessera_core::framework::GangWait::CODES.iter().chain(&tessera_core::framework::QueueWait::CODES) {
            let _ = self.failures.get_or_create(&CodeLabel { code: (*code).into() });
        }
        for p in &doc.plugins {
            let plugin = PluginLabel { plugin: p.name.clone() };
            let _ = self.plugin_quarantined.get_or_create(&plugin);
            let _ = self.plugin_host_starved.get_or_create(&plugin);
            if matches!(p.role, tessera_policy::Role::Scorer) {
                let _ = self.plugin_latency.get_or_create(&plugin);
            }
            for code in tessera_wasm::CallFault::CODES {
                let _ =
                    self.plugin_faults.get_or_create(&PluginCodeLabel { plugin: p.name.clone(), code: code.into() });
            }
        }
        for trigger in ["periodic", "anomalies"] {
            let _ = self.reschedule_attempts.get_or_create(&TriggerLabel { trigger: trigger.into() });
        }
        for s in tessera_resched::Strategy::ALL {
            let _ = self.migrations.get_or_create(&StrategyLabel { strategy: s.name().into() });
        }
        for code in MoveState::ALL.iter().filter_map(|s| s.failure_code()) {
            let _ = self.migration_failures.get_or_create(&CodeLabel { code: code.into() });
        }
        for code in crate::backend::BackendError::CODES.iter().chain(&tessera_core::driver::EventError::CODES) {
            let _ = self.backend_errors.get_or_create(&CodeLabel { code: (*code).into() });
        }
        for verdict in ["PROMOTE", "BLOCK", "ERROR", "SKIPPED"] {
            let _ = self.chaos_campaigns.get_or_create(&VerdictLabel { verdict: verdict.into() });
        }
        for outcome in ["CANDIDATE", "NO-GAIN", "SKIPPED", "ERROR"] {
            let _ = self.learning_runs.get_or_create(&OutcomeLabel { outcome: outcome.into() });
        }
        for phase in ["detect", "plan", "execute"] {
            let _ = self.policy_execution.get_or_create(&PhaseLabel { phase: phase.into() });
        }
    }

    /// Counts a backend error under `code` (`BACKEND-BIND`, …).
    pub fn count_backend_error(&self, code: &str) {
        self.backend_errors.get_or_create(&CodeLabel { code: code.into() }).inc();
    }

    /// Decisions counted so far, every outcome.
    pub fn decisions_total(&self) -> u64 {
        ["bound", "preempted", "unschedulable"]
            .iter()
            .map(|o| self.decisions.get_or_create(&OutcomeLabel { outcome: (*o).into() }).get().0)
            .sum()
    }

    /// The OpenMetrics text exposition (ends with `# EOF`).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exemplars_carry_the_trace_id_in_openmetrics_text() {
        let m = Metrics::new();
        let t = "0af7651916cd43dd8448eb211c80319c";
        m.decision_latency.observe(0.0012, TraceLabel::of(t, true), None);
        m.failures.get_or_create(&CodeLabel { code: "SCHED-GPU-INSUFFICIENT".into() }).inc_by(
            1,
            TraceLabel::of(t, true),
            None,
        );
        // An unsampled trace is counted without an exemplar.
        m.decision_latency.observe(0.5, TraceLabel::of("ff", false), None);
        let text = m.encode();
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(text.contains("# TYPE tessera_decision_latency_seconds histogram"), "{text}");
        assert!(text.contains(&format!("# {{trace_id=\"{t}\"}} 0.0012")), "{text}");
        assert!(
            text.contains(&format!(
                "tessera_scheduling_failures_total{{code=\"SCHED-GPU-INSUFFICIENT\"}} 1 # {{trace_id=\"{t}\"}} 1.0"
            )),
            "{text}"
        );
        assert!(!text.contains("trace_id=\"ff\""), "{text}");
    }
}
