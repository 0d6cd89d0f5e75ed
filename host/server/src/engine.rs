//! The service's loop on a [`Backend`]: pods arrive and leave as the
//! backend reports; every pass decides the queued pods through the policy
//! and has the backend carry out the binds and evictions; every telemetry
//! interval the nodes report utilisation and the detectors run; on a
//! period, or when they report anomalies, a rescheduling cycle plans and
//! the Movement Manager executes the moves on the backend's actuator. Each
//! decision and cycle becomes a trace, metric samples and an entry of the
//! API's logs.
//!
//! The loop runs on its own thread (plugin calls are synchronous CPU work)
//! and answers control messages (policy and plugin swaps) between passes.

mod cycle;
mod decide;
mod events;
mod extend;
mod moving;
mod recorder;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::trace::SpanContext;
use tessera_core::metrics::{FragmentationTracker, TargetWorkload};
use tessera_core::model::{Node, NodeId};
use tessera_core::sched::{PodId, Scheduler};
use tessera_core::sim::Placer;
use tessera_core::telemetry::{Detection, DetectionFrame};
use tessera_policy::PolicyDocument;
use tessera_wasm::Policy;

use crate::backend::Backend;
use crate::config::EngineConfig;
use crate::observe::Tracing;
use crate::{PolicyView, Shared};
use recorder::{Recorded, Recorder};

/// What the engine is asked to do between passes.
pub enum Control {
    /// Replace the running policy (already loaded and checked).
    SwapPolicy {
        /// The new policy.
        policy: Policy,
        /// Its document.
        doc: Box<PolicyDocument>,
        /// Told once the next pass uses it.
        done: std::sync::mpsc::Sender<()>,
    },
    /// Hot-swap one plugin of the running policy to a checked new version.
    SwapPlugin {
        /// Plugin name in the policy.
        name: String,
        /// The new version.
        version: Arc<tessera_wasm::PluginVersion>,
        /// Told the version it replaced (none: no such plugin).
        done: std::sync::mpsc::Sender<Option<Arc<tessera_wasm::PluginVersion>>>,
    },
    /// Set (or, with none, drop) the candidate policy; it starts in shadow.
    SetCandidate {
        /// The candidate, loaded and checked, and its document.
        candidate: Option<(Policy, Box<PolicyDocument>)>,
        /// Told once set.
        done: std::sync::mpsc::Sender<()>,
    },
    /// Move the candidate to another stage.
    SetStage {
        /// The stage.
        stage: crate::rollout::Stage,
        /// Told once set, or why not.
        done: std::sync::mpsc::Sender<Result<(), String>>,
    },
    /// Make the candidate the active policy.
    Promote {
        /// Told once it is, or why not.
        done: std::sync::mpsc::Sender<Result<(), String>>,
    },
    /// The cluster as the loop sees it between passes.
    Snapshot {
        /// Told the snapshot.
        done: std::sync::mpsc::Sender<tessera_core::snapshot::Snapshot>,
    },
    /// A scheduler extender's call, answered from the model.
    Extender {
        /// The call.
        call: crate::extend::ExtenderCall,
        /// Told the answer.
        done: std::sync::mpsc::Sender<crate::extend::ExtenderAnswer>,
    },
    /// The active policy, the candidate and the cluster of one instant,
    /// for a scheduled chaos campaign.
    ChaosInputs {
        /// Told them.
        done: std::sync::mpsc::Sender<crate::campaigns::ChaosInputs>,
    },
}

/// What the engine keeps per live pod.
struct PodMeta {
    name: String,
    workload: String,
    /// The root span of its latest placement decision (moves link to it).
    placed_by: Option<SpanContext>,
}

/// The loop's state.
pub struct Engine {
    cfg: EngineConfig,
    backend: Box<dyn Backend>,
    top_k: usize,
    sched: Scheduler,
    placer: Recorder,
    doc: PolicyDocument,
    policy_label: String,
    workload: TargetWorkload,
    tracker: FragmentationTracker,
    pods: HashMap<PodId, PodMeta>,
    node_ids: HashMap<String, tessera_core::model::NodeId>,
    planner: tessera_resched::Planner,
    exec_clock: u64,
    exec_history: BTreeMap<u64, u64>,
    plan_seq: u64,
    now_s: u64,
    next_telemetry_s: u64,
    next_reschedule_s: u64,
    intervals: u64,
    /// Pods whose bind the backend refused, waiting out their backoff.
    held: Vec<events::Held>,
    /// Refused binds per pod, for the backoff.
    bind_failures: HashMap<PodId, u32>,
    /// A plan executing live, across passes.
    live: Option<moving::Live>,
    /// The movement journal, while this replica leads and no plan runs.
    journal: Option<Box<dyn tessera_movement::journal::Journal + Send>>,
    /// This replica led in the last pass.
    leading: bool,
    tracing: Tracing,
    shared: Arc<Shared>,
}

impl Engine {
    /// An engine over the backend's cluster running `policy` (from `doc`).
    pub fn new(
        backend: Box<dyn Backend>,
        policy: Policy,
        doc: PolicyDocument,
        cfg: EngineConfig,
        top_k: usize,
        tracing: Tracing,
        shared: Arc<Shared>,
    ) -> Self {
        let (nodes, workload) = (backend.nodes().to_vec(), backend.workload().clone());
        let tracker = FragmentationTracker::new(&nodes, &workload);
        let node_ids = Self::index_nodes(&nodes);
        let mut sched = Scheduler::new(nodes, doc.scheduling);
        sched.record_attempts(true);
        shared.metrics.gpus.set(sched.cluster().total_gpus() as i64);
        let planner = tessera_resched::Planner::new(doc.rescheduling.clone());
        let mut e = Self {
            next_reschedule_s: cfg.reschedule_every_s,
            cfg,
            backend,
            top_k,
            sched,
            placer: Recorder::new(policy),
            policy_label: String::new(),
            doc,
            workload,
            tracker,
            pods: HashMap::new(),
            node_ids,
            planner,
            exec_clock: 0,
            exec_history: BTreeMap::new(),
            plan_seq: 0,
            now_s: 0,
            next_telemetry_s: 0,
            intervals: 0,
            held: Vec::new(),
            bind_failures: HashMap::new(),
            live: None,
            journal: None,
            leading: false,
            tracing,
            shared,
        };
        e.publish_policy();
        e
    }

    /// Backend time, seconds.
    fn now_s(&self) -> u64 {
        self.now_s
    }

    /// Runs passes every `tick_ms` until `shared.stopping` is set; the pass
    /// under way finishes first (its moves run to the end), so nothing is
    /// left half done.
    pub fn run(mut self, control: Receiver<Control>) {
        // Mirror the whole cluster into the plugins before reporting ready.
        self.placer.prime();
        self.shared.ready.store(true, Ordering::SeqCst);
        let tick = Duration::from_millis(self.cfg.tick_ms);
        let mut next = Instant::now();
        while !self.shared.stopping.load(Ordering::SeqCst) {
            self.step(tick);
            next += tick;
            // Sleep until the next pass, waking for control messages.
            loop {
                let left = next.saturating_duration_since(Instant::now());
                match control.recv_timeout(left) {
                    Ok(c) => self.control(c),
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => {
                        std::thread::sleep(left);
                        break;
                    }
                }
                if self.shared.stopping.load(Ordering::SeqCst) {
                    break;
                }
            }
            // A pass that overran does not trigger a burst of catch-up passes.
            next = next.max(Instant::now() - tick);
        }
        self.shared.ready.store(false, Ordering::SeqCst);
        // A live plan stays in the journal for the next leader.
        self.abandon_live();
        self.backend.shutdown();
        self.tracing.flush();
    }

    fn control(&mut self, c: Control) {
        match c {
            Control::SwapPolicy { policy, doc, done } => {
                self.install(policy, *doc);
                self.shared.rollout.write().unwrap_or_else(|p| p.into_inner()).active = self.doc.name.clone();
                let _ = done.send(());
            }
            Control::SwapPlugin { name, version, done } => {
                let old = self.placer.policy.swap(&name, version);
                if old.is_some() {
                    // Bring the new version's mirror up to date now, not on
                    // the next decision.
                    self.placer.prime();
                    self.publish_policy();
                }
                let _ = done.send(old);
            }
            Control::SetCandidate { candidate, done } => {
                self.placer.candidate = candidate.map(|(mut policy, doc)| {
                    // Mirror the cluster into the candidate's plugins.
                    let nodes: Vec<&Node> = self.sched.cluster().nodes().iter().collect();
                    Placer::nodes_changed(&mut policy, &nodes);
                    Placer::prime(&mut policy);
                    recorder::Candidate { policy, doc: *doc, stage: crate::rollout::Stage::Shadow }
                });
                let mut v = self.shared.rollout.write().unwrap_or_else(|p| p.into_inner());
                let (active, promotions, candidate_id) = (v.active.clone(), v.promotions, v.candidate_id);
                *v = crate::rollout::RolloutView {
                    active,
                    promotions,
                    candidate_id: candidate_id + 1,
                    candidate: self.placer.candidate.as_ref().map(|c| c.doc.name.clone()),
                    stage: self.placer.candidate.as_ref().map(|c| c.stage),
                    since_unix_ms: crate::now_unix_ms(),
                    ..Default::default()
                };
                let _ = done.send(());
            }
            Control::SetStage { stage, done } => {
                let r = match &mut self.placer.candidate {
                    Some(c) => {
                        c.stage = stage;
                        let mut v = self.shared.rollout.write().unwrap_or_else(|p| p.into_inner());
                        v.stage = Some(stage);
                        v.since_unix_ms = crate::now_unix_ms();
                        Ok(())
                    }
                    None => Err("no candidate".to_string()),
                };
                let _ = done.send(r);
            }
            Control::Promote { done } => {
                let r = match self.placer.candidate.take() {
                    Some(c) => {
                        self.install(c.policy, c.doc);
                        let mut v = self.shared.rollout.write().unwrap_or_else(|p| p.into_inner());
                        *v = crate::rollout::RolloutView {
                            active: self.doc.name.clone(),
                            promotions: v.promotions + 1,
                            candidate_id: v.candidate_id,
                            since_unix_ms: crate::now_unix_ms(),
                            ..Default::default()
                        };
                        Ok(())
                    }
                    None => Err("no candidate".to_string()),
                };
                let _ = done.send(r);
            }
            Control::Snapshot { done } => {
                let _ = done.send(self.snapshot());
            }
            Control::Extender { call, done } => {
                let _ = done.send(self.extend(call));
            }
            Control::ChaosInputs { done } => {
                let candidate_id = self.shared.rollout.read().unwrap_or_else(|p| p.into_inner()).candidate_id;
                let _ = done.send(crate::campaigns::ChaosInputs {
                    active: self.doc.clone(),
                    candidate: self.placer.candidate.as_ref().map(|c| (c.doc.clone(), candidate_id)),
                    snapshot: self.snapshot(),
                });
            }
        }
    }

    /// Makes `policy` (from `doc`) the active policy: the next pass uses
    /// it, with every node told to it again.
    fn install(&mut self, policy: Policy, doc: PolicyDocument) {
        self.placer.policy = policy;
        self.planner = tessera_resched::Planner::new(doc.rescheduling.clone());
        self.doc = doc;
        self.sched.resync();
        self.publish_policy();
    }

    /// The pass's shadow and canary comparisons into the rollout view.
    fn fold_comparisons(&mut self) {
        let compared = std::mem::take(&mut self.placer.compared);
        if compared.is_empty() {
            return;
        }
        let nodes = self.sched.cluster().nodes();
        let name = |n: Option<NodeId>| n.and_then(|n| nodes.get(n as usize)).map(|n| n.name.clone());
        let stage = match self.placer.candidate.as_ref().map(|c| c.stage) {
            Some(crate::rollout::Stage::Canary { .. }) => "canary",
            _ => "shadow",
        };
        let mut v = self.shared.rollout.write().unwrap_or_else(|p| p.into_inner());
        for c in compared {
            v.compared += 1;
            v.candidate_acted += u64::from(c.candidate_acted);
            let agreed = c.active == c.candidate;
            self.shared
                .metrics
                .rollout_decisions
                .get_or_create(&vec![("stage".into(), stage.into()), ("agreed".into(), agreed.to_string())])
                .inc();
            if !agreed {
                v.disagreements += 1;
                v.recent.push_back(crate::rollout::Disagreement {
                    pod: c.pod,
                    active: name(c.active),
                    candidate: name(c.candidate),
                    acted: if c.candidate_acted { "candidate" } else { "active" }.into(),
                    at_unix_ms: crate::now_unix_ms(),
                });
                if v.recent.len() > crate::rollout::RECENT {
                    v.recent.pop_front();
                }
            }
        }
    }

    fn snapshot(&self) -> tessera_core::snapshot::Snapshot {
        use tessera_core::snapshot::{RunningPod, Snapshot};
        Snapshot {
            backend: self.backend.name().to_string(),
            backend_time_s: self.now_s,
            taken_at_unix_ms: crate::now_unix_ms(),
            nodes: self.sched.cluster().nodes().to_vec(),
            running: self
                .sched
                .running()
                .map(|(_, pod, placement)| RunningPod { pod: pod.clone(), placement })
                .collect(),
            waiting: self.sched.waiting().map(|(_, pod, _)| pod.clone()).collect(),
        }
    }

    fn publish_policy(&mut self) {
        let members: Vec<tessera_wasm::Member> =
            self.placer.policy.scorers().iter().chain(self.placer.policy.detectors()).cloned().collect();
        self.policy_label = Recorder::label(&self.doc.name, &self.placer.policy);
        *self.shared.policy.write().unwrap_or_else(|p| p.into_inner()) =
            PolicyView { name: self.doc.name.clone(), doc: self.doc.clone(), members };
    }

    /// One pass after `tick` of wall time.
    pub fn step(&mut self, tick: Duration) {
        self.now_s = self.backend.advance(tick);
        let now = self.now_s;
        self.arrivals_and_departures(now);
        self.release_held(now);
        let anomalies = self.telemetry_until(now);
        if !self.backend.active() {
            // A standby: its model follows the cluster; the leader acts.
            if std::mem::take(&mut self.leading) {
                self.abandon_live();
            }
            self.gauges();
            return;
        }
        if !std::mem::replace(&mut self.leading, true) {
            self.resume_live();
        }
        // Replacements of moved pods take their held room before the pass.
        self.steer();
        let pass_wall = SystemTime::now();
        let pass_start = Instant::now();
        let events = self.sched.schedule(&mut self.placer, now);
        let pass = pass_start.elapsed();
        let attempts = self.sched.take_attempts();
        self.carry_out(&events);
        let recorded = std::mem::take(&mut self.placer.recorded);
        self.fold_comparisons();
        self.record_pass(now, pass_wall, pass, events, attempts, recorded);
        self.tick_live();
        let periodic = self.cfg.reschedule_every_s > 0 && now >= self.next_reschedule_s;
        if periodic {
            self.next_reschedule_s = now + self.cfg.reschedule_every_s;
        }
        if self.cfg.max_migrations_pct > 0.0 && (periodic || anomalies.is_some()) && !self.moving() {
            self.reschedule(now, anomalies);
        }
        self.gauges();
    }

    /// Has the backend bind what the pass bound and stop what it preempted.
    fn carry_out(&mut self, events: &[tessera_core::sched::Event]) {
        use tessera_core::sched::Event;
        // Plain binds go to the backend together (it may run them at once);
        // a preemption evicts first, then binds.
        let batch: Vec<(PodId, tessera_core::cluster::Placement)> = events
            .iter()
            .filter_map(|e| match e {
                Event::Bound { pod, placement, .. } => Some((*pod, *placement)),
                _ => None,
            })
            .collect();
        let results = if batch.is_empty() { Vec::new() } else { self.backend.bind_all(&batch) };
        for (&(pod, _), result) in batch.iter().zip(results) {
            self.after_bind(pod, result);
        }
        for e in events {
            let (pod, placement, victims) = match e {
                Event::Bound { .. } => continue,
                Event::Preempted { pod, placement, victims, .. } => (*pod, *placement, victims.as_slice()),
                Event::Unschedulable { pod, reason } => {
                    self.backend.unschedulable(*pod, reason.code());
                    continue;
                }
            };
            let mut room = true;
            for &v in victims {
                if let Err(err) = self.backend.evict(v) {
                    tracing::warn!(backend = self.backend.name(), "{err}");
                    self.count_backend_error("BACKEND-EVICT");
                    room = false;
                }
            }
            // A victim that could not be evicted still holds its room (the
            // backend announces it running again): the pod waits.
            if !room {
                self.requeue(pod);
                continue;
            }
            let result = self.backend.bind(pod, placement);
            self.after_bind(pod, result);
        }
    }

    fn after_bind(&mut self, pod: PodId, result: Result<(), crate::backend::BackendError>) {
        match result {
            Ok(()) => {
                self.bind_failures.remove(&pod);
            }
            Err(err) => {
                tracing::warn!(backend = self.backend.name(), "{err}");
                self.count_backend_error("BACKEND-BIND");
                self.requeue(pod);
            }
        }
    }

    fn count_backend_error(&self, code: &str) {
        self.shared.metrics.backend_errors.get_or_create(&crate::metrics::CodeLabel { code: code.into() }).inc();
    }

    /// Telemetry intervals up to `now`; the anomalies of the last detection
    /// round (with when it ran) if it found any.
    fn telemetry_until(&mut self, now: u64) -> Option<cycle::Detected> {
        let mut found = None;
        while self.next_telemetry_s <= now {
            let t = self.next_telemetry_s;
            let by_node = self.sched.running_by_node();
            let samples: Vec<(NodeId, tessera_core::telemetry::NodeSample)> = by_node
                .iter()
                .enumerate()
                .map(|(i, pods)| (i as NodeId, self.backend.sample(&self.sched.cluster().nodes()[i], pods, t)))
                .collect();
            drop(by_node);
            let every = self.doc.detection.detection_interval.max(1);
            if self.intervals.is_multiple_of(every) {
                let (wall, started) = (SystemTime::now(), Instant::now());
                let frame = DetectionFrame::from_samples(self.intervals / every, &samples, |id| {
                    self.tracker.node(id as usize).round() as u32
                });
                let findings: Vec<Detection> = self
                    .placer
                    .detect(&frame)
                    .into_iter()
                    .filter(|d| d.severity >= self.doc.detection.anomaly_threshold)
                    .collect();
                let took = started.elapsed();
                self.shared
                    .metrics
                    .policy_execution
                    .get_or_create(&crate::metrics::PhaseLabel { phase: "detect".into() })
                    .observe(took.as_secs_f64(), None, None);
                for d in &findings {
                    self.shared
                        .metrics
                        .anomalies
                        .get_or_create(&crate::metrics::CodeLabel { code: d.kind.clone() })
                        .inc();
                }
                found = (!findings.is_empty()).then_some(cycle::Detected { wall, took, findings });
            }
            for (id, sample) in samples {
                self.sched.observe_node(id, |n| sample.apply(n));
            }
            for zone in self.zones() {
                let g = self.backend.zone_carbon(&zone, t);
                self.placer.zone_carbon(&zone, g);
            }
            self.intervals += 1;
            self.next_telemetry_s += self.cfg.telemetry_interval_s;
        }
        found
    }

    fn zones(&self) -> Vec<String> {
        let mut zones: Vec<String> = self.sched.cluster().nodes().iter().map(|n| n.zone.clone()).collect();
        zones.sort();
        zones.dedup();
        zones
    }

    fn gauges(&self) {
        let m = &self.shared.metrics;
        for (level, depth) in self.sched.queue_depths().into_iter().enumerate() {
            m.queue_depth.get_or_create(&crate::metrics::LevelLabel { level: level.to_string() }).set(depth as i64);
        }
        m.parked.set(self.sched.parked() as i64);
        m.running.set(self.sched.running().count() as i64);
        let reading = self.tracker.reading();
        m.gpu_allocation.set(reading.allocation / 100.0);
        m.gpu_fragmentation.set(reading.fragmentation_rate / 100.0);
        let nodes = self.sched.cluster().nodes();
        let hot = nodes.iter().filter(|n| tessera_core::sim::is_hot(n)).count();
        m.hotspot_ratio.set(hot as f64 / nodes.len().max(1) as f64);
        for member in self.placer.policy.scorers().iter().chain(self.placer.policy.detectors()) {
            let q = member.slot.stats().quarantined;
            m.plugin_quarantined
                .get_or_create(&crate::metrics::PluginLabel { plugin: member.name.clone() })
                .set(i64::from(q));
        }
        let mut status = self.shared.status.write().unwrap_or_else(|p| p.into_inner());
        if status.backend.is_empty() {
            status.backend = self.backend.name().to_string();
        }
        status.backend_time_s = self.now_s();
        status.active = self.backend.active();
        m.leader.set(i64::from(status.active));
        status.nodes = nodes.len();
        status.pods_running = self.sched.running().count();
        status.pods_waiting = self.sched.waiting().count();
    }
}
