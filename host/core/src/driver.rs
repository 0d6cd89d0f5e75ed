//! The online scheduling loop — the one that `tessera sim --online`, the
//! chaos twin and `tessera serve` all run.
//!
//! The loop owns the model of the cluster ([`Model`]: queue, pods, nodes,
//! fragmentation) and the clock of the run; everything around it is a
//! [`World`]: where pods and node changes come from (a replayed workload,
//! a twin under faults, a backend), what telemetry measures and what of it
//! reaches the scheduler, the placer that decides, how a rescheduling
//! cycle is carried out, and what is done with each pass's decisions.
//!
//! Time advances through instants, in order: every telemetry interval's
//! end and every time something happens. At an instant the loop
//!
//! 1. ends the telemetry intervals due: rewards the bandit's arm, samples
//!    every node, counts SLA violations on what was measured, hands what
//!    reaches the scheduler to the detectors (every `detection_interval`)
//!    and to the model (changes beyond the dead band only), runs a
//!    rescheduling cycle when the detectors found anomalies or the period
//!    came round, tells the placer each zone's carbon intensity, and lets
//!    the bandit pick the weights of the next interval;
//! 2. has the world carry out what happens then (arrivals, departures,
//!    node changes, faults);
//! 3. runs a scheduling pass (queue → filter → score → bind, preemption,
//!    parking) and hands its events to the world.
//!
//! Deterministic: time is the world's, nothing here reads a clock, and the
//! bandit is seeded.

mod model;
mod report;

use std::collections::BTreeMap;

pub use model::{ClusterEvent, EventError, Model, Tally};
pub use report::{LoopReport, Waits};

use crate::bandit::ThompsonBandit;
use crate::cluster::Placement;
use crate::framework::{Cycle, Placer, Trigger, Why};
use crate::metrics::percentile;
use crate::model::{Node, NodeId, Pod, PodId, Tier};
use crate::sched::{Event, SchedConfig};
use crate::telemetry::{Detection, DetectionConfig, DetectionFrame, NodeSample, TelemetryConfig};

/// Settings of the loop.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DriverConfig {
    /// The scheduling pass (the policy's `scheduling:`).
    pub sched: SchedConfig,
    /// Telemetry interval and the SLA threshold.
    pub telemetry: TelemetryConfig,
    /// Detection rounds (the policy's `detection:`).
    pub detection: DetectionConfig,
    /// Seed of the bandit.
    pub seed: u64,
    /// Candidate weight sets (one weight per scorer, in policy order) for
    /// the bandit (the policy's `adaptive:`); empty: the policy's own
    /// weights throughout.
    pub weight_sets: Vec<Vec<f64>>,
    /// Most moves per rescheduling cycle, as a share of the pods running;
    /// 0: no cycle.
    pub max_moves_share: f64,
    /// A rescheduling cycle every this many seconds (0: only on
    /// anomalies).
    pub reschedule_every_s: u64,
    /// Smallest utilisation change (‰) of a node that reaches the
    /// scheduler and its plugins (a node agent's dead band); 0: any
    /// change.
    pub dead_band_permille: u16,
    /// The end of the first telemetry interval; unset: the first instant.
    pub start_s: Option<u64>,
    /// The queues (the policy's `queues:`); default: one queue.
    pub queues: crate::quota::QueueTree,
}

/// Everything around the loop.
pub trait World {
    /// The placer deciding this world's pods (its detectors too).
    fn placer(&mut self) -> &mut dyn Placer;

    /// The earliest time at or before `until` something happens, if any.
    fn next_event(&mut self, until: u64) -> Option<u64>;

    /// Carries out on the model everything due at `t` (or before: an
    /// event the world learnt of late happens now).
    fn happen(&mut self, t: u64, model: &mut Model);

    /// The telemetry of `node`, which runs `pods`, over the interval
    /// ending at `t`: what was measured.
    fn sample(&mut self, node: &Node, pods: &[(&Pod, Placement)], t: u64) -> NodeSample;

    /// What of the interval's measurements (index = node id) reaches the
    /// scheduler: by default all of it.
    fn deliver(&mut self, measured: Vec<NodeSample>) -> Vec<(NodeId, NodeSample)> {
        measured.into_iter().enumerate().map(|(i, s)| (i as NodeId, s)).collect()
    }

    /// Carbon intensity of `zone` at `t`, gCO₂/kWh.
    fn zone_carbon(&mut self, zone: &str, t: u64) -> u32;

    /// One detection round of the placer's detectors: what they find.
    fn detect(&mut self, frame: &DetectionFrame) -> Vec<Detection> {
        self.placer().detect(frame)
    }

    /// A detection round's findings at or above the threshold.
    fn found(&mut self, anomalies: &[Detection]) {
        let _ = anomalies;
    }

    /// Whether this loop decides and acts now (a standby replica only
    /// follows the cluster).
    fn acting(&self) -> bool {
        true
    }

    /// Before a pass at `t`; false: no pass now (a standby).
    fn before_pass(&mut self, model: &mut Model, t: u64) -> bool {
        let _ = (model, t);
        self.acting()
    }

    /// A pass at `t` decided `events`: carry them out.
    fn after_pass(&mut self, model: &mut Model, t: u64, events: &[Event]) {
        let _ = (model, t, events);
    }

    /// A rescheduling cycle: the moves it carried out (pod, where it runs
    /// now) for the loop to apply; `None` if no plan was made.
    fn reschedule(&mut self, model: &mut Model, cycle: &Cycle<'_>) -> Option<Vec<(PodId, Placement)>> {
        let _ = (model, cycle);
        None
    }

    /// The last arrival, if the workload is finite: allocation and
    /// fragmentation are averaged over the intervals up to it.
    fn last_arrival(&self) -> Option<u64> {
        None
    }
}

/// What the loop sums up while it runs.
#[derive(Debug, Default)]
struct Sums {
    waits: BTreeMap<&'static str, Vec<u64>>,
    carbon: f64,
    carbon_gpus: f64,
    allocation: f64,
    fragmentation: f64,
    arrival_intervals: u64,
    /// Thousandths of a GPU held by short gangs since the last pass, and
    /// their integral (thousandths of GPU-seconds).
    partial_gang_milli: u64,
    partial_gang_milli_s: u64,
}

/// The loop.
#[derive(Debug)]
pub struct Driver {
    model: Model,
    cfg: DriverConfig,
    bandit: Option<ThompsonBandit>,
    arm: Option<usize>,
    next_tick: Option<u64>,
    next_reschedule: u64,
    last_pass: Option<u64>,
    interval_violations: u64,
    carbon_now: BTreeMap<String, u32>,
    report: LoopReport,
    sums: Sums,
}

impl Driver {
    /// A loop over `nodes` with nothing pending; fragmentation is measured
    /// against `workload`.
    pub fn new(nodes: Vec<Node>, workload: crate::metrics::TargetWorkload, cfg: DriverConfig) -> Self {
        let mut model = Model::new(nodes, workload, cfg.sched);
        model.set_queues(cfg.queues.clone());
        let report = LoopReport { total_gpus: model.cluster().total_gpus(), ..LoopReport::default() };
        let mut d = Self {
            model,
            bandit: None,
            arm: None,
            next_tick: cfg.start_s,
            next_reschedule: cfg.start_s.unwrap_or(0) + cfg.reschedule_every_s,
            last_pass: None,
            interval_violations: 0,
            carbon_now: BTreeMap::new(),
            report,
            sums: Sums::default(),
            cfg,
        };
        d.set_weight_sets(d.cfg.weight_sets.clone());
        d
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The model, to change between passes (a decision made outside the
    /// loop, a policy swap).
    pub fn model_mut(&mut self) -> &mut Model {
        &mut self.model
    }

    /// The settings.
    pub fn config(&self) -> &DriverConfig {
        &self.cfg
    }

    /// Adaptive weights from now on over `sets` (a new policy's
    /// `adaptive:`); empty: the placer's own weights. The bandit starts
    /// afresh, seeded as at the start.
    pub fn set_weight_sets(&mut self, sets: Vec<Vec<f64>>) {
        self.bandit = ThompsonBandit::new(sets.clone(), self.cfg.seed ^ 0xBA4D17).ok();
        self.arm = None;
        self.cfg.weight_sets = sets;
    }

    /// Telemetry intervals ended so far.
    pub fn intervals(&self) -> u64 {
        self.report.intervals
    }

    /// Runs every instant up to `until`: what happens by then, the
    /// telemetry intervals that end by then, and a closing pass at
    /// `until` (a live loop runs one every tick, however quiet).
    pub fn run_until<W: World + ?Sized>(&mut self, until: u64, world: &mut W) {
        loop {
            while let Some(t) = world.next_event(until) {
                self.instant(t, world, true);
            }
            // A tick's pass may have set the world something to do first.
            if self.last_pass == Some(until) || self.instant(until, world, false) {
                break;
            }
        }
    }

    /// Runs until nothing more happens (a finite workload): the last
    /// instant is the last event's.
    pub fn run_to_end<W: World + ?Sized>(&mut self, world: &mut W) {
        while let Some(t) = world.next_event(u64::MAX) {
            self.instant(t, world, true);
        }
    }

    /// The intervals that end by `t`, then what happens at `t` and its
    /// pass. False, with nothing done at `t`, when a pass at an earlier
    /// tick set the world an event before `t` (a job it started ends): the
    /// caller asks the world again, so that event happens at its own time.
    fn instant<W: World + ?Sized>(&mut self, t: u64, world: &mut W, events: bool) -> bool {
        // Time does not run back: what the world reports late happens now.
        let t = t.max(self.last_pass.unwrap_or(0));
        let interval = self.cfg.telemetry.interval_s.max(1);
        let mut tick = *self.next_tick.get_or_insert(t);
        while tick <= t {
            self.tick(tick, world);
            // An interval that ends between events has a pass of its own
            // (pods a move let fit are placed at once).
            if tick < t {
                self.pass(tick, world);
            }
            tick += interval;
            self.next_tick = Some(tick);
            if world.next_event(t.saturating_sub(1)).is_some() {
                return false;
            }
        }
        if events {
            world.happen(t, &mut self.model);
        }
        self.pass(t, world);
        true
    }

    fn pass<W: World + ?Sized>(&mut self, t: u64, world: &mut W) {
        if let Some(prev) = self.last_pass {
            self.sums.partial_gang_milli_s += self.sums.partial_gang_milli * t.saturating_sub(prev);
        }
        self.last_pass = Some(t);
        if !world.before_pass(&mut self.model, t) {
            self.sums.partial_gang_milli = self.model.sched().partial_gang_gpu_milli();
            return;
        }
        let events = self.model.schedule(world.placer(), t);
        for ev in &events {
            let (pod, placement, waited) = match ev {
                Event::Bound { pod, placement, waited, .. } | Event::Preempted { pod, placement, waited, .. } => {
                    (*pod, *placement, *waited)
                }
                Event::Unschedulable { .. } => continue,
            };
            let Some(p) = self.model.sched().pod(pod) else { continue };
            self.sums.waits.entry(p.tier.name()).or_default().push(waited);
            let n = &self.model.cluster().nodes()[placement.node as usize];
            if p.gpu_count > 0
                && let Some(&g) = self.carbon_now.get(&n.zone)
            {
                let gpus = f64::from(p.gpu_count) * f64::from(p.gpu_milli.min(1000)) / 1000.0;
                self.sums.carbon += f64::from(g) * gpus;
                self.sums.carbon_gpus += gpus;
            }
        }
        self.report.peak_waiting = self.report.peak_waiting.max(self.model.waiting().count() as u64);
        world.after_pass(&mut self.model, t, &events);
        self.sums.partial_gang_milli = self.model.sched().partial_gang_gpu_milli();
    }

    /// The telemetry interval ending at `tick`.
    fn tick<W: World + ?Sized>(&mut self, tick: u64, world: &mut W) {
        // Reward the arm that ran the interval now ending.
        if let (Some(b), Some(a)) = (self.bandit.as_mut(), self.arm) {
            let soft = self.model.running().filter(|(_, p, _)| p.tier == Tier::Soft).count().max(1) as f64;
            let sla = 1.0 - (self.interval_violations as f64 / soft).min(1.0);
            let frag = 1.0 - self.model.tracker().reading().fragmentation_rate / 100.0;
            b.reward(a, 0.5 * sla + 0.5 * frag);
        }
        let measured = self.measure(tick, world);
        let delivered = world.deliver(measured);
        let anomalies = self.detect(&delivered, world);
        self.observe(delivered);
        self.maybe_reschedule(tick, &anomalies, world);
        for z in self.model.zones() {
            let g = world.zone_carbon(z, tick);
            self.carbon_now.insert(z.clone(), g);
            world.placer().zone_carbon(z, g);
        }
        if let Some(b) = self.bandit.as_mut() {
            let (a, w) = b.choose();
            world.placer().set_weights(w);
            self.arm = Some(a);
        }
        if world.last_arrival().is_none_or(|last| tick <= last) {
            let reading = self.model.tracker().reading();
            self.sums.allocation += reading.allocation;
            self.sums.fragmentation += reading.fragmentation_rate;
            self.sums.arrival_intervals += 1;
        }
        self.report.intervals += 1;
    }

    /// Every node's measured telemetry; SLA violations counted on it.
    fn measure<W: World + ?Sized>(&mut self, tick: u64, world: &mut W) -> Vec<NodeSample> {
        let by_node = self.model.sched().running_by_node();
        let nodes = self.model.cluster().nodes();
        let measured: Vec<NodeSample> =
            by_node.iter().enumerate().map(|(i, pods)| world.sample(&nodes[i], pods, tick)).collect();
        self.interval_violations = 0;
        let hot = self.cfg.telemetry.sla_hot_permille;
        for (sample, pods) in measured.iter().zip(&by_node) {
            for (pod, at) in pods {
                if pod.tier == Tier::Soft && sample.hottest(at.gpus.indices()) >= hot {
                    self.interval_violations += 1;
                }
            }
        }
        self.report.sla_violations += self.interval_violations;
        measured
    }

    /// A detection round, if one is due: the findings at or above the
    /// threshold.
    fn detect<W: World + ?Sized>(&mut self, delivered: &[(NodeId, NodeSample)], world: &mut W) -> Vec<Detection> {
        let det = self.cfg.detection;
        if !self.report.intervals.is_multiple_of(det.detection_interval.max(1)) {
            return Vec::new();
        }
        let tracker = self.model.tracker();
        let frame = DetectionFrame::from_samples(self.report.detection_rounds, delivered, |id| {
            tracker.node(id as usize).round() as u32
        });
        self.report.detection_rounds += 1;
        let found: Vec<Detection> =
            world.detect(&frame).into_iter().filter(|d| d.severity >= det.anomaly_threshold).collect();
        for d in &found {
            *self.report.anomalies.entry(d.kind.as_str().to_string()).or_insert(0) += 1;
        }
        world.found(&found);
        found
    }

    /// What reached the scheduler into the model: a node whose utilisation
    /// moved by at least the dead band (plugins see it as a node delta).
    fn observe(&mut self, delivered: Vec<(NodeId, NodeSample)>) {
        let band = self.cfg.dead_band_permille.max(1);
        let moved = |a: u16, b: u16| a.abs_diff(b) >= band;
        for (id, sample) in delivered {
            let Some(n) = self.model.cluster().node(id) else { continue };
            let changed = moved(n.cpu_util_permille, sample.cpu_util_permille)
                || moved(n.memory_util_permille, sample.memory_util_permille)
                || n.gpus.len() != sample.gpu_util_permille.len()
                || n.gpus.iter().zip(&sample.gpu_util_permille).any(|(g, &u)| moved(g.util_permille, u));
            if changed {
                self.model.observe_node(id, |n| sample.apply(n));
            }
        }
    }

    /// A rescheduling cycle when the detectors found anomalies or the
    /// period came round, on the cluster as this interval shows it.
    fn maybe_reschedule<W: World + ?Sized>(&mut self, tick: u64, anomalies: &[Detection], world: &mut W) {
        let periodic = self.cfg.reschedule_every_s > 0 && tick >= self.next_reschedule;
        if periodic {
            self.next_reschedule = tick + self.cfg.reschedule_every_s;
        }
        if (anomalies.is_empty() && !periodic) || self.cfg.max_moves_share <= 0.0 || !world.acting() {
            return;
        }
        let running = self.model.running().count();
        let max_moves = (self.cfg.max_moves_share * running as f64).floor() as usize;
        if max_moves == 0 {
            return;
        }
        let trigger = if anomalies.is_empty() { Trigger::Periodic } else { Trigger::Anomalies };
        let cycle = Cycle { trigger, anomalies, max_moves, at: tick };
        if let Some(moves) = world.reschedule(&mut self.model, &cycle) {
            self.report.reschedule_plans += 1;
            self.report.migrations += self.model.carry_out(moves);
        }
    }

    /// What the run came to so far.
    pub fn report(&self) -> LoopReport {
        let mut r = self.report.clone();
        let tally = self.model.tally();
        r.submitted = tally.submitted;
        r.departed = tally.departed;
        r.abandoned = tally.abandoned;
        let st = self.model.stats();
        r.binds = st.bound;
        r.preemptions = st.preemptions;
        r.evicted = st.evicted;
        r.plugin_errors = st.plugin_errors;
        r.deadline_hits = st.deadline_hits;
        r.gangs_admitted = st.gangs_admitted;
        r.gang_rollbacks = st.gang_rollbacks;
        r.gang_reservations = st.reservations;
        r.partial_gang_gpu_s = self.sums.partial_gang_milli_s / u64::from(crate::model::GPU_MILLI);
        let decisions = st.bound.saturating_sub(st.preemptions).max(1);
        r.nodes_scored_per_decision = st.nodes_scored as f64 / decisions as f64;
        for (_, _, reason) in self.model.waiting() {
            *r.waiting_by_reason.entry(reason.map_or("", Why::code).to_string()).or_insert(0) += 1;
        }
        for (tier, w) in &self.sums.waits {
            let mut w = w.clone();
            w.sort_unstable();
            r.waits.insert(
                tier.to_string(),
                Waits { bound: w.len() as u64, p50_s: percentile(&w, 0.5), p99_s: percentile(&w, 0.99) },
            );
        }
        r.mean_bind_carbon = if self.sums.carbon_gpus > 0.0 { self.sums.carbon / self.sums.carbon_gpus } else { 0.0 };
        r.last = self.model.tracker().reading();
        if self.sums.arrival_intervals > 0 {
            r.mean_allocation = self.sums.allocation / self.sums.arrival_intervals as f64;
            r.mean_fragmentation_rate = self.sums.fragmentation / self.sums.arrival_intervals as f64;
        }
        r.bandit = self.bandit.as_ref().map(ThompsonBandit::report).unwrap_or_default();
        r
    }

    /// Every wait from submission to bind so far, sorted (all tiers).
    pub fn waits(&self) -> Vec<u64> {
        let mut all: Vec<u64> = self.sums.waits.values().flatten().copied().collect();
        all.sort_unstable();
        all
    }
}

#[cfg(test)]
mod tests;
