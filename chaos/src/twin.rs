//! The simulated twin: a workload replayed through the scheduling loop on
//! a copy of the cluster while faults strike, with the accounting a
//! verdict needs. Deterministic: the same inputs and seed give the same
//! outcome, bit for bit; no clock, no IO.
//!
//! Every pod is accounted for at the end: running, waiting, completed or
//! abandoned (it left before it could run). A pod in none of these is
//! *lost* — the gate every campaign holds at zero.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tessera_core::metrics::{FragmentationTracker, TargetWorkload, percentile};
use tessera_core::model::{GpuHealth, Node, NodeId, Tier};
use tessera_core::sched::{Event, SchedConfig, Scheduler};
use tessera_core::sim::{Arrival, Placer, Rescheduler};

/// A rescheduler whose moves the twin can make fail: it plans (through
/// [`Rescheduler`]) and executes the moves on an actuator whose failure
/// rate the `actuator-errors` fault sets.
pub trait TwinRescheduler: Rescheduler {
    /// Probability that one step of a move (evict, start) fails, from now.
    fn set_move_failure_rate(&mut self, p: f64);
    /// Moves that did not end done so far (failed, rolled back, dropped).
    fn moves_failed(&self) -> u64;
}
use tessera_core::telemetry::{DetectionConfig, DetectionFrame, NodeSample, TelemetryConfig, TelemetryModel};

use crate::fault::{FaultKind, ResolvedFault};

mod inject;

use inject::{Faulty, combined, recompute_plugin_faults, spike};

/// Smallest utilisation change (‰) a node's telemetry reports to the
/// scheduler.
pub const DEAD_BAND_PERMILLE: u16 = 20;

/// Longest telemetry delay, intervals.
pub const MAX_DELAY_INTERVALS: usize = 10;

/// Settings of a twin run.
#[derive(Debug, Clone, Default)]
pub struct TwinConfig {
    /// The scheduling loop (the policy's `scheduling:`).
    pub sched: SchedConfig,
    /// Telemetry model and interval.
    pub telemetry: TelemetryConfig,
    /// Detection rounds (the policy's `detection:`).
    pub detection: DetectionConfig,
    /// Seed of telemetry, faults' draws and load spikes.
    pub seed: u64,
    /// With a rescheduler: most moves per plan, as a share of running pods.
    pub max_moves_share: f64,
}

/// What one fault did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultReport {
    /// Kind.
    pub kind: FaultKind,
    /// Window, seconds.
    pub start: u64,
    /// End of the window.
    pub end: u64,
    /// Nodes hit.
    pub nodes: usize,
    /// GPUs hit.
    pub gpus: usize,
    /// Pods it took off their nodes.
    pub displaced: u64,
    /// Seconds from its start until the last displaced pod ran again.
    pub recovery_s: u64,
    /// Displaced pods still not running at the end.
    pub unrecovered: u64,
    /// Extra pods a load spike brought.
    pub extra_arrivals: u64,
}

/// The outcome of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Pods that arrived (load spikes included).
    pub submitted: u64,
    /// Pods that ran and left.
    pub completed: u64,
    /// Pods that left before they could run.
    pub abandoned: u64,
    /// Pods running at the end.
    pub running: u64,
    /// Pods waiting at the end.
    pub waiting: u64,
    /// Pods in none of the above: lost by the scheduler's bookkeeping.
    pub lost: u64,
    /// Pods faults took off their nodes (each time).
    pub displaced: u64,
    /// Median wait from (re)submission to bind, seconds.
    pub pending_p50_s: u64,
    /// 99th percentile wait.
    pub pending_p99_s: u64,
    /// Soft-tier pods on a node at or above the SLA threshold, per interval.
    pub sla_violations: u64,
    /// GPU allocation, %, averaged over the intervals while pods arrived.
    pub mean_allocation_pct: f64,
    /// Fragmentation rate, %, averaged likewise.
    pub mean_fragmentation_pct: f64,
    /// Pods moved by the rescheduler.
    pub migrations: u64,
    /// Moves that failed, were rolled back or dropped.
    #[serde(default)]
    pub migrations_failed: u64,
    /// Longest recovery of a fault that displaced pods, seconds.
    pub recovery_s: u64,
    /// Displaced pods never running again.
    pub unrecovered: u64,
    /// Decisions whose plugins faulted (injected traps and real faults).
    pub plugin_faults: u64,
    /// Decisions past their time budget (injected and real).
    pub deadline_hits: u64,
    /// Telemetry samples lost or not yet delivered.
    pub telemetry_withheld: u64,
    /// Each fault.
    pub faults: Vec<FaultReport>,
    /// Time of the last event, seconds.
    pub end_s: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    FaultEnd(usize),
    Leave(usize),
    FaultStart(usize),
    Arrive(usize),
}

/// Telemetry as the scheduler receives it: lost or late under faults.
struct Feed {
    history: Vec<VecDeque<NodeSample>>,
    delivered: Vec<Option<NodeSample>>,
    rng: ChaCha8Rng,
}

/// Runs `arrivals` on `nodes` through `placer` while `faults` strike.
pub fn run(
    nodes: Vec<Node>,
    workload: &TargetWorkload,
    arrivals: Vec<Arrival>,
    faults: &[ResolvedFault],
    placer: &mut impl Placer,
    mut rescheduler: Option<&mut dyn TwinRescheduler>,
    cfg: &TwinConfig,
) -> Outcome {
    let mut arrivals = arrivals;
    let extra = spike(&mut arrivals, faults, cfg.seed);
    let mut placer = Faulty {
        inner: placer,
        trap: 0.0,
        slow: 0.0,
        rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x7A4B),
        traps: 0,
        slows: 0,
    };
    let model = TelemetryModel::new(cfg.telemetry, cfg.seed);
    let mut s = Scheduler::new(nodes, cfg.sched);
    let n_nodes = s.cluster().nodes().len();
    let mut tracker = FragmentationTracker::new(s.cluster().nodes(), workload);
    let mut zones: Vec<String> = s.cluster().nodes().iter().map(|n| n.zone.clone()).collect();
    zones.sort();
    zones.dedup();
    let mut feed = Feed {
        history: vec![VecDeque::new(); n_nodes],
        delivered: vec![None; n_nodes],
        rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x7E1E),
    };

    let mut events: Vec<(u64, Ev)> = Vec::with_capacity(arrivals.len() * 2 + faults.len() * 2);
    for (i, a) in arrivals.iter().enumerate() {
        events.push((a.at, Ev::Arrive(i)));
        if let Some(t) = a.leaves_at {
            events.push((t.max(a.at), Ev::Leave(i)));
        }
    }
    for (i, f) in faults.iter().enumerate() {
        events.push((f.start, Ev::FaultStart(i)));
        events.push((f.end, Ev::FaultEnd(i)));
    }
    events.sort();

    let mut r = Outcome { submitted: arrivals.len() as u64, ..Outcome::default() };
    let mut reports: Vec<FaultReport> = faults
        .iter()
        .zip(&extra)
        .map(|(f, &e)| FaultReport {
            kind: f.kind,
            start: f.start,
            end: f.end,
            nodes: f.nodes.len(),
            gpus: f.gpus.len(),
            displaced: 0,
            recovery_s: 0,
            unrecovered: 0,
            extra_arrivals: e,
        })
        .collect();
    // Active fault state, counted so that overlapping faults compose.
    let mut down: Vec<u32> = vec![0; n_nodes];
    let mut failed: HashMap<(NodeId, usize), u32> = HashMap::new();
    let mut degraded: HashMap<(NodeId, usize), (u32, f64)> = HashMap::new();
    let mut loss: Vec<f64> = vec![0.0; n_nodes];
    let mut delay: Vec<usize> = vec![0; n_nodes];
    let mut active: BTreeSet<usize> = BTreeSet::new();
    // Telemetry faults started so far: from the first one on, samples are
    // kept for delays and losses.
    let mut telemetry_faults = 0u32;
    // Displaced pods waiting to run again, by the fault that displaced them.
    let mut displaced: BTreeMap<u64, usize> = BTreeMap::new();
    let mut last_rebind: Vec<u64> = vec![0; faults.len()];
    let (mut completed, mut abandoned): (BTreeSet<u64>, BTreeSet<u64>) = (BTreeSet::new(), BTreeSet::new());
    let mut waits: Vec<u64> = Vec::new();

    let interval = cfg.telemetry.interval_s.max(1);
    let mut next_tick = events.first().map_or(0, |e| e.0);
    let last_arrival = arrivals.iter().map(|a| a.at).max().unwrap_or(0);
    let (mut ticks, mut arrival_ticks) = (0u64, 0u64);

    let mut k = 0;
    while k < events.len() {
        let t = events[k].0;
        while next_tick <= t {
            // True utilisation, with degraded GPUs running hot.
            let by_node = s.running_by_node();
            let mut truth: Vec<NodeSample> = by_node
                .iter()
                .enumerate()
                .map(|(i, pods)| model.sample(&s.cluster().nodes()[i], pods.iter().copied(), next_tick))
                .collect();
            for (&(n, g), &(_, heat)) in &degraded {
                if let Some(u) = truth[n as usize].gpu_util_permille.get_mut(g) {
                    *u = (f64::from(*u) * (1.0 + heat) + 300.0 * heat).min(1000.0) as u16;
                }
            }
            for (i, pods) in by_node.iter().enumerate() {
                for (pod, at) in pods {
                    if pod.tier == Tier::Soft && truth[i].hottest(at.gpus.indices()) >= cfg.telemetry.sla_hot_permille {
                        r.sla_violations += 1;
                    }
                }
            }
            drop(by_node);
            // What reaches the scheduler.
            let mut delivered: Vec<(NodeId, NodeSample)> = Vec::with_capacity(n_nodes);
            let faulty_feed = telemetry_faults > 0;
            for (i, sample) in truth.into_iter().enumerate() {
                if !faulty_feed {
                    // The common case: delivered as measured, nothing kept.
                    delivered.push((i as NodeId, sample));
                    continue;
                }
                let h = &mut feed.history[i];
                h.push_back(sample);
                if h.len() > MAX_DELAY_INTERVALS + 1 {
                    h.pop_front();
                }
                let lost = loss[i] > 0.0 && feed.rng.random_bool(loss[i].min(1.0));
                let late = h.len().checked_sub(1 + delay[i]).and_then(|j| h.get(j)).cloned();
                match (lost, late) {
                    (false, Some(x)) => {
                        feed.delivered[i] = Some(x.clone());
                        delivered.push((i as NodeId, x));
                    }
                    _ => {
                        r.telemetry_withheld += 1;
                        if let Some(old) = &feed.delivered[i] {
                            delivered.push((i as NodeId, old.clone()));
                        }
                    }
                }
            }
            // Detection only feeds the rescheduler.
            let mut anomalies = Vec::new();
            if rescheduler.is_some() && ticks.is_multiple_of(cfg.detection.detection_interval.max(1)) {
                let frame =
                    DetectionFrame::from_samples(ticks, &delivered, |id| tracker.node(id as usize).round() as u32);
                anomalies = placer
                    .detect(&frame)
                    .into_iter()
                    .filter(|d| d.severity >= cfg.detection.anomaly_threshold)
                    .collect();
            }
            for (id, sample) in delivered {
                // Like a node agent with a dead band, only a change of at
                // least DEAD_BAND reaches the scheduler and its plugins (a
                // node delta each); SLA and heat above use the truth.
                let n = &s.cluster().nodes()[id as usize];
                let moved = |a: u16, b: u16| a.abs_diff(b) >= DEAD_BAND_PERMILLE;
                let changed = moved(n.cpu_util_permille, sample.cpu_util_permille)
                    || moved(n.memory_util_permille, sample.memory_util_permille)
                    || n.gpus.iter().zip(&sample.gpu_util_permille).any(|(g, &u)| moved(g.util_permille, u));
                if changed {
                    s.observe_node(id, |n| sample.apply(n));
                }
            }
            if !anomalies.is_empty()
                && let Some(rs) = rescheduler.as_deref_mut()
            {
                r.migrations += tessera_core::sim::answer_anomalies(
                    &mut s,
                    &mut tracker,
                    workload,
                    rs,
                    cfg.max_moves_share,
                    &anomalies,
                )
                .unwrap_or(0);
            }
            for z in &zones {
                placer.zone_carbon(z, model.carbon(z, next_tick));
            }
            if next_tick <= last_arrival {
                let reading = tracker.reading();
                r.mean_allocation_pct += reading.allocation;
                r.mean_fragmentation_pct += reading.fragmentation_rate;
                arrival_ticks += 1;
            }
            ticks += 1;
            next_tick += interval;
        }

        while k < events.len() && events[k].0 == t {
            match events[k].1 {
                Ev::Arrive(i) => {
                    s.submit(i as u64, arrivals[i].pod.clone(), t).expect("arrival indices are unique");
                }
                Ev::Leave(i) => {
                    let id = i as u64;
                    let ran = s.placement(id);
                    if s.remove(id).is_some() {
                        displaced.remove(&id);
                        match ran {
                            Some(p) => {
                                completed.insert(id);
                                tracker.update(&s.cluster().nodes()[p.node as usize], workload);
                            }
                            None => {
                                abandoned.insert(id);
                            }
                        }
                    }
                }
                Ev::FaultStart(fi) => {
                    active.insert(fi);
                    let f = &faults[fi];
                    // Pods taken off their nodes go back to their
                    // controllers, which resubmit them at once.
                    let mut off: Vec<u64> = Vec::new();
                    match f.kind {
                        FaultKind::NodeCrash | FaultKind::ZonePartition => {
                            for &n in &f.nodes {
                                down[n as usize] += 1;
                                s.update_node(n, |node| node.ready = false);
                                off.extend(s.running().filter(|(_, _, at)| at.node == n).map(|(id, _, _)| id));
                            }
                        }
                        FaultKind::GpuFailure => {
                            for &(n, g) in &f.gpus {
                                *failed.entry((n, g)).or_insert(0) += 1;
                                s.update_node(n, |node| node.gpus[g].health = GpuHealth::Failed);
                                off.extend(
                                    s.running()
                                        .filter(|(_, _, at)| at.node == n && at.gpus.indices().any(|i| i == g))
                                        .map(|(id, _, _)| id),
                                );
                            }
                        }
                        FaultKind::GpuDegradation => {
                            for &(n, g) in &f.gpus {
                                let e = degraded.entry((n, g)).or_insert((0, 0.0));
                                e.0 += 1;
                                e.1 = e.1.max(f.intensity);
                                if !failed.contains_key(&(n, g)) {
                                    s.update_node(n, |node| node.gpus[g].health = GpuHealth::Degraded);
                                }
                            }
                        }
                        FaultKind::TelemetryLoss => {
                            telemetry_faults += 1;
                            for &n in &f.nodes {
                                loss[n as usize] = loss[n as usize].max(f.intensity);
                            }
                        }
                        FaultKind::TelemetryDelay => {
                            telemetry_faults += 1;
                            let d = ((f.intensity * MAX_DELAY_INTERVALS as f64).round() as usize).max(1);
                            for &n in &f.nodes {
                                delay[n as usize] = delay[n as usize].max(d);
                            }
                        }
                        FaultKind::LoadSpike => {}
                        FaultKind::PluginTrap | FaultKind::PluginSlow => {}
                        FaultKind::ActuatorErrors => {
                            if let Some(rs) = rescheduler.as_deref_mut() {
                                rs.set_move_failure_rate(combined(faults, &active, FaultKind::ActuatorErrors));
                            }
                        }
                    }
                    off.sort_unstable();
                    off.dedup();
                    for id in off {
                        let at = s.placement(id).expect("running");
                        let pod = s.remove(id).expect("running");
                        tracker.update(&s.cluster().nodes()[at.node as usize], workload);
                        s.submit(id, pod, t).expect("removed just now");
                        displaced.insert(id, fi);
                        reports[fi].displaced += 1;
                        r.displaced += 1;
                    }
                    recompute_plugin_faults(&mut placer, faults, &active);
                }
                Ev::FaultEnd(fi) => {
                    active.remove(&fi);
                    let f = &faults[fi];
                    match f.kind {
                        FaultKind::NodeCrash | FaultKind::ZonePartition => {
                            for &n in &f.nodes {
                                down[n as usize] -= 1;
                                if down[n as usize] == 0 {
                                    s.update_node(n, |node| node.ready = true);
                                }
                            }
                        }
                        FaultKind::GpuFailure | FaultKind::GpuDegradation => {
                            for &(n, g) in &f.gpus {
                                let map_done = if f.kind == FaultKind::GpuFailure {
                                    let c = failed.get_mut(&(n, g)).expect("counted at start");
                                    *c -= 1;
                                    *c == 0
                                } else {
                                    let c = degraded.get_mut(&(n, g)).expect("counted at start");
                                    c.0 -= 1;
                                    c.0 == 0
                                };
                                if map_done {
                                    if f.kind == FaultKind::GpuFailure {
                                        failed.remove(&(n, g));
                                    } else {
                                        degraded.remove(&(n, g));
                                    }
                                }
                                let health = if failed.contains_key(&(n, g)) {
                                    GpuHealth::Failed
                                } else if degraded.contains_key(&(n, g)) {
                                    GpuHealth::Degraded
                                } else {
                                    GpuHealth::Healthy
                                };
                                s.update_node(n, |node| node.gpus[g].health = health);
                            }
                        }
                        FaultKind::TelemetryLoss | FaultKind::TelemetryDelay => {
                            // Recompute from the faults still active.
                            loss.iter_mut().for_each(|l| *l = 0.0);
                            delay.iter_mut().for_each(|d| *d = 0);
                            for &a in &active {
                                let g = &faults[a];
                                for &n in &g.nodes {
                                    match g.kind {
                                        FaultKind::TelemetryLoss => {
                                            loss[n as usize] = loss[n as usize].max(g.intensity)
                                        }
                                        FaultKind::TelemetryDelay => {
                                            let d =
                                                ((g.intensity * MAX_DELAY_INTERVALS as f64).round() as usize).max(1);
                                            delay[n as usize] = delay[n as usize].max(d);
                                        }
                                        _ => {}
                                    }
                                }
                            }
                        }
                        FaultKind::LoadSpike => {}
                        FaultKind::PluginTrap | FaultKind::PluginSlow => {
                            recompute_plugin_faults(&mut placer, faults, &active)
                        }
                        FaultKind::ActuatorErrors => {
                            if let Some(rs) = rescheduler.as_deref_mut() {
                                rs.set_move_failure_rate(combined(faults, &active, FaultKind::ActuatorErrors));
                            }
                        }
                    }
                }
            }
            k += 1;
        }

        for ev in s.schedule(&mut placer, t) {
            let (pod, placement, waited) = match &ev {
                Event::Bound { pod, placement, waited, .. } | Event::Preempted { pod, placement, waited, .. } => {
                    (*pod, *placement, *waited)
                }
                Event::Unschedulable { .. } => continue,
            };
            waits.push(waited);
            tracker.update(&s.cluster().nodes()[placement.node as usize], workload);
            if let Some(fi) = displaced.remove(&pod) {
                last_rebind[fi] = last_rebind[fi].max(t);
            }
        }
        r.end_s = t;
    }

    // Accounting: every pod in exactly one place.
    let running: BTreeSet<u64> = s.running().map(|(id, _, _)| id).collect();
    let waiting: BTreeSet<u64> = s.waiting().map(|(id, _, _)| id).collect();
    r.running = running.len() as u64;
    r.waiting = waiting.len() as u64;
    r.completed = completed.len() as u64;
    r.abandoned = abandoned.len() as u64;
    r.lost = (0..arrivals.len() as u64)
        .filter(|id| {
            let places = [&running, &waiting, &completed, &abandoned].iter().filter(|set| set.contains(id)).count();
            places != 1
        })
        .count() as u64;

    for (fi, rep) in reports.iter_mut().enumerate() {
        rep.unrecovered = displaced.values().filter(|&&f| f == fi).count() as u64;
        rep.recovery_s = if rep.displaced == 0 {
            0
        } else if rep.unrecovered > 0 {
            r.end_s.saturating_sub(rep.start)
        } else {
            last_rebind[fi].saturating_sub(rep.start)
        };
    }
    r.recovery_s = reports.iter().filter(|f| f.kind.displaces()).map(|f| f.recovery_s).max().unwrap_or(0);
    r.unrecovered = displaced.len() as u64;
    waits.sort_unstable();
    r.pending_p50_s = percentile(&waits, 0.5);
    r.pending_p99_s = percentile(&waits, 0.99);
    if arrival_ticks > 0 {
        r.mean_allocation_pct /= arrival_ticks as f64;
        r.mean_fragmentation_pct /= arrival_ticks as f64;
    }
    let st = s.stats();
    r.plugin_faults = st.plugin_errors;
    r.deadline_hits = st.deadline_hits;
    debug_assert!(placer.traps <= r.plugin_faults && placer.slows <= r.deadline_hits);
    r.migrations_failed = rescheduler.map_or(0, |rs| rs.moves_failed());
    r.faults = reports;
    r
}

#[cfg(test)]
mod tests;
