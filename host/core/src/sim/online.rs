//! The online protocol: pods arrive and leave over time and go through the
//! scheduling loop ([`crate::sched`]: queue, tiers, preemption); every
//! telemetry interval the nodes report utilisation from the
//! [`crate::telemetry`] model and the zones their carbon intensity, SLA
//! violations are counted, and, with adaptive weights, a Thompson-sampling
//! bandit picks the weight set for the next interval, rewarded by what the
//! interval brought (fragmentation and SLA violations).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Arrival, Kind, Placer};
use crate::bandit::{ArmReport, ThompsonBandit};
use crate::metrics::{FragmentationTracker, Reading, TargetWorkload, percentile};
use crate::model::{Node, NodeId, Tier};
use crate::sched::{Event, SchedConfig, Scheduler, Why};
use crate::telemetry::{TelemetryConfig, TelemetryModel};

/// Settings of an online run.
#[derive(Debug, Clone, Default)]
pub struct OnlineConfig {
    /// The scheduling loop.
    pub sched: SchedConfig,
    /// The telemetry model.
    pub telemetry: TelemetryConfig,
    /// Seed of the telemetry model and the bandit.
    pub seed: u64,
    /// Candidate weight sets (one weight per scorer, in policy order) for
    /// the bandit; empty: the policy's own weights throughout.
    pub weight_sets: Vec<Vec<f64>>,
    /// Detection rounds.
    pub detection: crate::telemetry::DetectionConfig,
    /// With a rescheduler: most moves per plan, as a share of the pods
    /// running.
    pub max_moves_share: f64,
}

/// Waiting times of one tier.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Waits {
    /// Pods bound.
    pub bound: u64,
    /// Median wait from arrival to bind, seconds.
    pub p50_s: u64,
    /// 99th percentile wait, seconds.
    pub p99_s: u64,
}

/// The result of an online run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OnlineReport {
    /// Pods that arrived.
    pub submitted: u64,
    /// Binds (a pod preempted and bound again counts twice).
    pub binds: u64,
    /// Pods that left after running.
    pub departed: u64,
    /// Pods that left before they could run.
    pub abandoned: u64,
    /// Pods still waiting at the end, by the reason code of their last
    /// failure ("" if not yet tried).
    pub waiting_by_reason: BTreeMap<String, u64>,
    /// Preemptions and the pods they evicted.
    pub preemptions: u64,
    /// Pods evicted by preemption.
    pub evicted: u64,
    /// Waiting times by tier.
    pub waits: BTreeMap<String, Waits>,
    /// Soft-tier pods on a node at or above the SLA threshold, counted per
    /// telemetry interval.
    pub sla_violations: u64,
    /// Mean carbon intensity (gCO₂/kWh) of the zones GPU pods were bound
    /// in, at bind time, weighted by GPUs.
    pub mean_bind_carbon: f64,
    /// Highest number of pods waiting at once.
    pub peak_waiting: u64,
    /// Telemetry intervals simulated.
    pub intervals: u64,
    /// Plugin errors and faults.
    pub plugin_errors: u64,
    /// Decisions past their time budget.
    pub deadline_hits: u64,
    /// Mean feasible nodes handed to the placer per decision.
    pub nodes_scored_per_decision: f64,
    /// Total GPUs.
    pub total_gpus: u64,
    /// Fragmentation and allocation after the last event.
    pub last: Reading,
    /// GPU allocation, %, averaged over the telemetry intervals while pods
    /// were arriving (not over the drain after the last arrival).
    pub mean_allocation: f64,
    /// Fragmentation rate (% of free GPU share), averaged likewise.
    pub mean_fragmentation_rate: f64,
    /// The bandit's arms, if weights were adaptive.
    pub bandit: Vec<ArmReport>,
    /// Detection rounds run.
    pub detection_rounds: u64,
    /// Plans made because a detection round found anomalies.
    #[serde(default)]
    pub reschedule_plans: u64,
    /// Pods moved by those plans.
    #[serde(default)]
    pub migrations: u64,
    /// Anomalies (findings at or above the threshold) by kind, summed over
    /// rounds.
    pub anomalies: BTreeMap<String, u64>,
}

fn tier_name(t: Tier) -> &'static str {
    match t {
        Tier::Hard => "hard",
        Tier::Soft => "soft",
        Tier::Opportunistic => "opportunistic",
    }
}

/// Runs `arrivals` (pod ids are their indices) through the loop.
pub fn run_online(
    nodes: Vec<Node>,
    workload: &TargetWorkload,
    placer: &mut impl Placer,
    arrivals: &[Arrival],
    cfg: &OnlineConfig,
) -> OnlineReport {
    run_online_with(nodes, workload, placer, arrivals, cfg, None)
}

/// [`run_online`] with a rescheduler: after a detection round whose
/// findings reach `anomaly_threshold`, it plans on the cluster as it
/// stands (at most `max_moves_share` of the running pods) and its moves are
/// carried out before the next events.
pub fn run_online_with(
    nodes: Vec<Node>,
    workload: &TargetWorkload,
    placer: &mut impl Placer,
    arrivals: &[Arrival],
    cfg: &OnlineConfig,
    mut rescheduler: Option<&mut dyn super::Rescheduler>,
) -> OnlineReport {
    let model = TelemetryModel::new(cfg.telemetry, cfg.seed);
    let mut bandit = ThompsonBandit::new(cfg.weight_sets.clone(), cfg.seed ^ 0xBA4D17).ok();
    let mut s = Scheduler::new(nodes, cfg.sched);
    let mut tracker = FragmentationTracker::new(s.cluster().nodes(), workload);
    let mut zones: Vec<String> = s.cluster().nodes().iter().map(|n| n.zone.clone()).collect();
    zones.sort();
    zones.dedup();
    let mut r = OnlineReport { total_gpus: s.cluster().total_gpus(), ..OnlineReport::default() };

    let events = super::timeline(arrivals);
    let interval = cfg.telemetry.interval_s.max(1);
    let mut next_tick = events.first().map_or(0, |e| e.0);
    let mut waits: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
    let (mut carbon_sum, mut carbon_gpus) = (0.0, 0.0);
    let mut carbon_now: BTreeMap<String, u32> = BTreeMap::new();
    let mut arm: Option<usize> = None;
    let mut interval_violations = 0u64;
    let last_arrival = arrivals.iter().map(|a| a.at).max().unwrap_or(0);
    let mut arrival_intervals = 0u64;

    let mut k = 0;
    while k < events.len() {
        let t = events[k].0;
        // Telemetry intervals up to now.
        while next_tick <= t {
            // Reward the arm that ran the interval now ending.
            if let (Some(b), Some(a)) = (bandit.as_mut(), arm) {
                let soft = s.running().filter(|(_, p, _)| p.tier == Tier::Soft).count().max(1) as f64;
                let sla = 1.0 - (interval_violations as f64 / soft).min(1.0);
                let frag = 1.0 - tracker.reading().fragmentation_rate / 100.0;
                b.reward(a, 0.5 * sla + 0.5 * frag);
            }
            interval_violations = 0;
            let by_node = s.running_by_node();
            let samples: Vec<(NodeId, crate::telemetry::NodeSample)> = by_node
                .iter()
                .enumerate()
                .map(|(i, pods)| (i as NodeId, model.sample(&s.cluster().nodes()[i], pods.iter().copied(), next_tick)))
                .collect();
            for (id, pods) in by_node.iter().enumerate() {
                let sample = &samples[id].1;
                for (pod, placement) in pods {
                    if pod.tier == Tier::Soft
                        && sample.hottest(placement.gpus.indices()) >= cfg.telemetry.sla_hot_permille
                    {
                        interval_violations += 1;
                    }
                }
            }
            r.sla_violations += interval_violations;
            drop(by_node);
            let mut anomalies: Vec<crate::telemetry::Detection> = Vec::new();
            if r.intervals.is_multiple_of(cfg.detection.detection_interval.max(1)) {
                let frame = crate::telemetry::DetectionFrame::from_samples(r.detection_rounds, &samples, |id| {
                    tracker.node(id as usize).round() as u32
                });
                for d in placer.detect(&frame) {
                    if d.severity >= cfg.detection.anomaly_threshold {
                        *r.anomalies.entry(d.kind.clone()).or_insert(0) += 1;
                        anomalies.push(d);
                    }
                }
                r.detection_rounds += 1;
            }
            for (id, sample) in samples {
                let n = &s.cluster().nodes()[id as usize];
                let unchanged = n.cpu_util_permille == sample.cpu_util_permille
                    && n.memory_util_permille == sample.memory_util_permille
                    && n.gpus.iter().map(|g| g.util_permille).eq(sample.gpu_util_permille.iter().copied());
                if !unchanged {
                    s.observe_node(id, |n| sample.apply(n));
                }
            }
            // What the detectors found is answered on the cluster as this
            // interval's telemetry shows it.
            if !anomalies.is_empty()
                && let Some(rs) = rescheduler.as_deref_mut()
                && let Some(moved) =
                    super::answer_anomalies(&mut s, &mut tracker, workload, rs, cfg.max_moves_share, &anomalies)
            {
                r.reschedule_plans += 1;
                r.migrations += moved;
            }
            for z in &zones {
                let g = model.carbon(z, next_tick);
                carbon_now.insert(z.clone(), g);
                placer.zone_carbon(z, g);
            }
            if let Some(b) = bandit.as_mut() {
                let (a, w) = b.choose();
                placer.set_weights(w);
                arm = Some(a);
            }
            if next_tick <= last_arrival {
                let reading = tracker.reading();
                r.mean_allocation += reading.allocation;
                r.mean_fragmentation_rate += reading.fragmentation_rate;
                arrival_intervals += 1;
            }
            r.intervals += 1;
            next_tick += interval;
        }
        // Every event at this second, departures first.
        while k < events.len() && events[k].0 == t {
            let (_, kind, i) = &events[k];
            match kind {
                Kind::Arrive => {
                    r.submitted += 1;
                    s.submit(*i as u64, arrivals[*i].pod.clone(), t).expect("indices are unique");
                }
                Kind::Leave => {
                    let ran = s.placement(*i as u64);
                    if s.remove(*i as u64).is_some() {
                        match ran {
                            Some(p) => {
                                r.departed += 1;
                                tracker.update(&s.cluster().nodes()[p.node as usize], workload);
                            }
                            None => r.abandoned += 1,
                        }
                    }
                }
            }
            k += 1;
        }
        for ev in s.schedule(placer, t) {
            let (pod, placement, waited) = match &ev {
                Event::Bound { pod, placement, waited, .. } => (*pod, *placement, *waited),
                Event::Preempted { pod, placement, waited, .. } => (*pod, *placement, *waited),
                Event::Unschedulable { .. } => continue,
            };
            let p = &arrivals[pod as usize].pod;
            waits.entry(tier_name(p.tier)).or_default().push(waited);
            let n = &s.cluster().nodes()[placement.node as usize];
            tracker.update(n, workload);
            if p.gpu_count > 0
                && let Some(&g) = carbon_now.get(&n.zone)
            {
                let gpus = f64::from(p.gpu_count) * f64::from(p.gpu_milli.min(1000)) / 1000.0;
                carbon_sum += f64::from(g) * gpus;
                carbon_gpus += gpus;
            }
        }
        r.peak_waiting = r.peak_waiting.max(s.waiting().count() as u64);
    }

    let st = s.stats();
    r.binds = st.bound;
    r.preemptions = st.preemptions;
    r.evicted = st.evicted;
    r.plugin_errors = st.plugin_errors;
    r.deadline_hits = st.deadline_hits;
    let decisions = st.bound.saturating_sub(st.preemptions).max(1);
    r.nodes_scored_per_decision = st.nodes_scored as f64 / decisions as f64;
    for (_, _, reason) in s.waiting() {
        *r.waiting_by_reason.entry(reason.map_or("", Why::code).to_string()).or_insert(0) += 1;
    }
    for (tier, mut w) in waits {
        w.sort_unstable();
        r.waits.insert(
            tier.to_string(),
            Waits { bound: w.len() as u64, p50_s: percentile(&w, 0.5), p99_s: percentile(&w, 0.99) },
        );
    }
    r.mean_bind_carbon = if carbon_gpus > 0.0 { carbon_sum / carbon_gpus } else { 0.0 };
    r.last = tracker.reading();
    if arrival_intervals > 0 {
        r.mean_allocation /= arrival_intervals as f64;
        r.mean_fragmentation_rate /= arrival_intervals as f64;
    }
    r.bandit = bandit.map(|b| b.report()).unwrap_or_default();
    r
}

#[cfg(test)]
mod tests;
