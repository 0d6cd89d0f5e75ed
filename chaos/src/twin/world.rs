//! The twin as a world of the loop: the workload's arrivals and
//! departures, and each fault's start and end, carried out on the loop's
//! model; telemetry measured with degraded GPUs running hot, and lost or
//! late on its way to the scheduler; the accounting of displaced pods.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use tessera_core::cluster::Placement;
use tessera_core::driver::{DriverConfig, Model, World};
use tessera_core::framework::{Cycle, Placer};
use tessera_core::model::{Arrival, GpuHealth, Node, NodeId, Pod};
use tessera_core::sched::{Event, PodId};
use tessera_core::telemetry::{NodeSample, TelemetryModel};

use super::inject::{Faulty, combined, recompute_plugin_faults, spike};
use super::outcome::{FaultReport, MAX_DELAY_INTERVALS, Outcome, TwinRescheduler};
use crate::fault::{FaultKind, ResolvedFault};

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
    /// Telemetry faults started so far: from the first one on, samples
    /// are kept for delays and losses.
    faults: u32,
    loss: Vec<f64>,
    delay: Vec<usize>,
    withheld: u64,
}

/// The twin's side of the loop.
pub(super) struct Twin<'a, P: Placer> {
    placer: Faulty<'a, P>,
    arrivals: Vec<Arrival>,
    faults: &'a [ResolvedFault],
    events: Vec<(u64, Ev)>,
    next: usize,
    telemetry: TelemetryModel,
    feed: Feed,
    rescheduler: Option<&'a mut dyn TwinRescheduler>,
    last_arrival: Option<u64>,
    // Active fault state, counted so that overlapping faults compose.
    down: Vec<u32>,
    failed: BTreeMap<(NodeId, usize), u32>,
    degraded: BTreeMap<(NodeId, usize), (u32, f64)>,
    active: BTreeSet<usize>,
    reports: Vec<FaultReport>,
    /// Displaced pods waiting to run again, by the fault that displaced
    /// them.
    displaced: BTreeMap<PodId, usize>,
    displaced_total: u64,
    last_rebind: Vec<u64>,
    completed: BTreeSet<PodId>,
    abandoned: BTreeSet<PodId>,
    end_s: u64,
    /// Every pass's events, with its time.
    log: Vec<(u64, Event)>,
}

impl<'a, P: Placer> Twin<'a, P> {
    pub(super) fn new(
        model: &Model,
        mut arrivals: Vec<Arrival>,
        faults: &'a [ResolvedFault],
        placer: &'a mut P,
        rescheduler: Option<&'a mut dyn TwinRescheduler>,
        cfg: &DriverConfig,
    ) -> Self {
        let extra = spike(&mut arrivals, faults, cfg.seed);
        let n_nodes = model.cluster().nodes().len();
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
        let reports = faults
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
                exercised: false,
            })
            .collect();
        Self {
            placer: Faulty {
                inner: placer,
                trap: 0.0,
                slow: 0.0,
                rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x7A4B),
                traps: 0,
                slows: 0,
            },
            last_arrival: arrivals.iter().map(|a| a.at).max(),
            arrivals,
            faults,
            events,
            next: 0,
            telemetry: TelemetryModel::new(cfg.telemetry, cfg.seed),
            feed: Feed {
                history: vec![VecDeque::new(); n_nodes],
                delivered: vec![None; n_nodes],
                rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x7E1E),
                faults: 0,
                loss: vec![0.0; n_nodes],
                delay: vec![0; n_nodes],
                withheld: 0,
            },
            rescheduler,
            down: vec![0; n_nodes],
            failed: BTreeMap::new(),
            degraded: BTreeMap::new(),
            active: BTreeSet::new(),
            reports,
            displaced: BTreeMap::new(),
            displaced_total: 0,
            last_rebind: vec![0; faults.len()],
            completed: BTreeSet::new(),
            abandoned: BTreeSet::new(),
            end_s: 0,
            log: Vec::new(),
        }
    }

    pub(super) fn take_log(&mut self) -> Vec<(u64, Event)> {
        std::mem::take(&mut self.log)
    }

    pub(super) fn injected_traps(&self) -> u64 {
        self.placer.traps
    }

    pub(super) fn injected_slows(&self) -> u64 {
        self.placer.slows
    }

    /// The twin's accounting at the end: every pod in exactly one place,
    /// each fault's displacement and recovery.
    pub(super) fn outcome(&mut self, model: &Model) -> Outcome {
        let running: BTreeSet<u64> = model.running().map(|(id, _, _)| id).collect();
        let waiting: BTreeSet<u64> = model.waiting().map(|(id, _, _)| id).collect();
        let mut r = Outcome {
            running: running.len() as u64,
            waiting: waiting.len() as u64,
            completed: self.completed.len() as u64,
            abandoned: self.abandoned.len() as u64,
            displaced: self.displaced_total,
            telemetry_withheld: self.feed.withheld,
            end_s: self.end_s,
            ..Outcome::default()
        };
        r.lost = (0..self.arrivals.len() as u64)
            .filter(|id| {
                let places = [&running, &waiting, &self.completed, &self.abandoned]
                    .iter()
                    .filter(|set| set.contains(id))
                    .count();
                places != 1
            })
            .count() as u64;
        for (fi, rep) in self.reports.iter_mut().enumerate() {
            rep.unrecovered = self.displaced.values().filter(|&&f| f == fi).count() as u64;
            rep.recovery_s = if rep.displaced == 0 {
                0
            } else if rep.unrecovered > 0 {
                r.end_s.saturating_sub(rep.start)
            } else {
                self.last_rebind[fi].saturating_sub(rep.start)
            };
        }
        r.recovery_s = self.reports.iter().filter(|f| f.kind.displaces()).map(|f| f.recovery_s).max().unwrap_or(0);
        r.unrecovered = self.displaced.len() as u64;
        r.migrations_failed = self.rescheduler.as_ref().map_or(0, |rs| rs.moves_failed());
        r.faults = self.reports.clone();
        r
    }

    fn delay_of(intensity: f64) -> usize {
        ((intensity * MAX_DELAY_INTERVALS as f64).round() as usize).max(1)
    }

    fn fault_start(&mut self, fi: usize, t: u64, model: &mut Model) {
        self.active.insert(fi);
        if model.running().next().is_some() || model.waiting().next().is_some() {
            self.reports[fi].exercised = true;
        }
        let f = &self.faults[fi];
        // Pods taken off their nodes go back to their controllers, which
        // resubmit them at once.
        let mut off: Vec<PodId> = Vec::new();
        match f.kind {
            FaultKind::NodeCrash | FaultKind::ZonePartition => {
                for &n in &f.nodes {
                    self.down[n as usize] += 1;
                    model.update_node(n, |node| node.ready = false);
                    off.extend(model.running().filter(|(_, _, at)| at.node == n).map(|(id, _, _)| id));
                }
            }
            FaultKind::GpuFailure => {
                for &(n, g) in &f.gpus {
                    *self.failed.entry((n, g)).or_insert(0) += 1;
                    model.update_node(n, |node| node.gpus[g].health = GpuHealth::Failed);
                    off.extend(
                        model
                            .running()
                            .filter(|(_, _, at)| at.node == n && at.gpus.indices().any(|i| i == g))
                            .map(|(id, _, _)| id),
                    );
                }
            }
            FaultKind::GpuDegradation => {
                for &(n, g) in &f.gpus {
                    let e = self.degraded.entry((n, g)).or_insert((0, 0.0));
                    e.0 += 1;
                    e.1 = e.1.max(f.intensity);
                    if !self.failed.contains_key(&(n, g)) {
                        model.update_node(n, |node| node.gpus[g].health = GpuHealth::Degraded);
                    }
                }
            }
            FaultKind::TelemetryLoss => {
                self.feed.faults += 1;
                for &n in &f.nodes {
                    self.feed.loss[n as usize] = self.feed.loss[n as usize].max(f.intensity);
                }
            }
            FaultKind::TelemetryDelay => {
                self.feed.faults += 1;
                let d = Self::delay_of(f.intensity);
                for &n in &f.nodes {
                    self.feed.delay[n as usize] = self.feed.delay[n as usize].max(d);
                }
            }
            FaultKind::LoadSpike | FaultKind::PluginTrap | FaultKind::PluginSlow => {}
            FaultKind::ActuatorErrors => self.set_move_failure_rate(),
        }
        off.sort_unstable();
        off.dedup();
        for id in off {
            let (pod, _) = model.take(id).expect("running");
            model.resubmit(id, pod, t).expect("taken just now");
            self.displaced.insert(id, fi);
            self.reports[fi].displaced += 1;
            self.displaced_total += 1;
        }
        recompute_plugin_faults(&mut self.placer, self.faults, &self.active);
    }

    fn fault_end(&mut self, fi: usize, model: &mut Model) {
        self.active.remove(&fi);
        let f = &self.faults[fi];
        match f.kind {
            FaultKind::NodeCrash | FaultKind::ZonePartition => {
                for &n in &f.nodes {
                    self.down[n as usize] -= 1;
                    if self.down[n as usize] == 0 {
                        model.update_node(n, |node| node.ready = true);
                    }
                }
            }
            FaultKind::GpuFailure | FaultKind::GpuDegradation => {
                for &(n, g) in &f.gpus {
                    let over = if f.kind == FaultKind::GpuFailure {
                        let c = self.failed.get_mut(&(n, g)).expect("counted at start");
                        *c -= 1;
                        *c == 0
                    } else {
                        let c = self.degraded.get_mut(&(n, g)).expect("counted at start");
                        c.0 -= 1;
                        c.0 == 0
                    };
                    if over {
                        if f.kind == FaultKind::GpuFailure {
                            self.failed.remove(&(n, g));
                        } else {
                            self.degraded.remove(&(n, g));
                        }
                    }
                    let health = if self.failed.contains_key(&(n, g)) {
                        GpuHealth::Failed
                    } else if self.degraded.contains_key(&(n, g)) {
                        GpuHealth::Degraded
                    } else {
                        GpuHealth::Healthy
                    };
                    model.update_node(n, |node| node.gpus[g].health = health);
                }
            }
            FaultKind::TelemetryLoss | FaultKind::TelemetryDelay => {
                // Recompute from the faults still active.
                self.feed.loss.iter_mut().for_each(|l| *l = 0.0);
                self.feed.delay.iter_mut().for_each(|d| *d = 0);
                for &a in &self.active {
                    let g = &self.faults[a];
                    for &n in &g.nodes {
                        match g.kind {
                            FaultKind::TelemetryLoss => {
                                self.feed.loss[n as usize] = self.feed.loss[n as usize].max(g.intensity)
                            }
                            FaultKind::TelemetryDelay => {
                                self.feed.delay[n as usize] =
                                    self.feed.delay[n as usize].max(Self::delay_of(g.intensity))
                            }
                            _ => {}
                        }
                    }
                }
            }
            FaultKind::LoadSpike => {}
            FaultKind::PluginTrap | FaultKind::PluginSlow => {
                recompute_plugin_faults(&mut self.placer, self.faults, &self.active)
            }
            FaultKind::ActuatorErrors => self.set_move_failure_rate(),
        }
    }

    fn set_move_failure_rate(&mut self) {
        if let Some(rs) = self.rescheduler.as_deref_mut() {
            rs.set_move_failure_rate(combined(self.faults, &self.active, FaultKind::ActuatorErrors));
        }
    }
}

impl<P: Placer> World for Twin<'_, P> {
    fn placer(&mut self) -> &mut dyn Placer {
        &mut self.placer
    }

    fn next_event(&mut self, until: u64) -> Option<u64> {
        self.events.get(self.next).map(|e| e.0).filter(|&t| t <= until)
    }

    fn happen(&mut self, t: u64, model: &mut Model) {
        while let Some(&(at, ev)) = self.events.get(self.next)
            && at <= t
        {
            self.next += 1;
            match ev {
                Ev::Arrive(i) => {
                    model.submit(i as PodId, self.arrivals[i].pod.clone(), t).expect("arrival indices are unique");
                    for &fi in &self.active {
                        self.reports[fi].exercised = true;
                    }
                }
                Ev::Leave(i) => {
                    let id = i as PodId;
                    if let Some((_, ran)) = model.depart(id) {
                        self.displaced.remove(&id);
                        if ran.is_some() {
                            self.completed.insert(id);
                        } else {
                            self.abandoned.insert(id);
                        }
                    }
                }
                Ev::FaultStart(fi) => self.fault_start(fi, t, model),
                Ev::FaultEnd(fi) => self.fault_end(fi, model),
            }
        }
        self.end_s = t;
    }

    /// True utilisation, with degraded GPUs running hot.
    fn sample(&mut self, node: &Node, pods: &[(&Pod, Placement)], t: u64) -> NodeSample {
        let mut s = self.telemetry.sample(node, pods.iter().copied(), t);
        for (&(_, g), &(_, heat)) in self.degraded.range((node.id, 0)..=(node.id, usize::MAX)) {
            if let Some(u) = s.gpu_util_permille.get_mut(g) {
                *u = (f64::from(*u) * (1.0 + heat) + 300.0 * heat).min(1000.0) as u16;
            }
        }
        s
    }

    /// What reaches the scheduler: under telemetry faults, a sample may be
    /// lost or late (the last one delivered stands in).
    fn deliver(&mut self, measured: Vec<NodeSample>) -> Vec<(NodeId, NodeSample)> {
        let feed = &mut self.feed;
        let mut out = Vec::with_capacity(measured.len());
        for (i, sample) in measured.into_iter().enumerate() {
            if feed.faults == 0 {
                // The common case: delivered as measured, nothing kept.
                out.push((i as NodeId, sample));
                continue;
            }
            let h = &mut feed.history[i];
            h.push_back(sample);
            if h.len() > MAX_DELAY_INTERVALS + 1 {
                h.pop_front();
            }
            let lost = feed.loss[i] > 0.0 && feed.rng.random_bool(feed.loss[i].min(1.0));
            let late = h.len().checked_sub(1 + feed.delay[i]).and_then(|j| h.get(j)).cloned();
            match (lost, late) {
                (false, Some(x)) => {
                    feed.delivered[i] = Some(x.clone());
                    out.push((i as NodeId, x));
                }
                _ => {
                    feed.withheld += 1;
                    if let Some(old) = &feed.delivered[i] {
                        out.push((i as NodeId, old.clone()));
                    }
                }
            }
        }
        out
    }

    fn zone_carbon(&mut self, zone: &str, t: u64) -> u32 {
        self.telemetry.carbon(zone, t)
    }

    fn after_pass(&mut self, _model: &mut Model, t: u64, events: &[Event]) {
        self.log.extend(events.iter().map(|e| (t, e.clone())));
        for ev in events {
            if let Event::Bound { pod, .. } | Event::Preempted { pod, .. } = ev
                && let Some(fi) = self.displaced.remove(pod)
            {
                self.last_rebind[fi] = self.last_rebind[fi].max(t);
            }
        }
    }

    fn reschedule(&mut self, model: &mut Model, cycle: &Cycle<'_>) -> Option<Vec<(PodId, Placement)>> {
        let rs = self.rescheduler.as_deref_mut()?;
        Some(model.reschedule_with(rs, cycle))
    }

    fn last_arrival(&self) -> Option<u64> {
        self.last_arrival
    }
}
