//! The service around the loop: the loop's [`World`] in `tessera serve`.
//! The backend's events and telemetry go in; each pass's decisions go out
//! to the backend and become explanations, traces and metrics; detection
//! rounds and rescheduling cycles are timed and traced; live moves are
//! steered across passes; a standby only follows.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tessera_core::cluster::Placement;
use tessera_core::driver::{ClusterEvent, Model, World};
use tessera_core::framework::{Cycle, Placer};
use tessera_core::model::{Node, Pod};
use tessera_core::sched::{Event, PodId};
use tessera_core::telemetry::{Detection, DetectionFrame, NodeSample};
use tessera_movement::simulated::SimulatedMoves;
use tessera_policy::PolicyDocument;
use tessera_wasm::Policy;

use super::recorder::Recorder;
use super::{PodMeta, events, moving};
use crate::Shared;
use crate::backend::{Backend, Moves};
use crate::config::EngineConfig;
use crate::observe::Tracing;

/// Everything the service keeps around the loop.
pub(super) struct Service {
    pub cfg: EngineConfig,
    pub backend: Box<dyn Backend>,
    pub top_k: usize,
    pub placer: Recorder,
    pub doc: PolicyDocument,
    pub policy_label: String,
    pub pods: HashMap<PodId, PodMeta>,
    pub planner: tessera_resched::Planner,
    /// Moves on simulated time, within the cycle (the simulator backend);
    /// none: live, across passes.
    pub simulated: Option<SimulatedMoves>,
    pub plan_seq: u64,
    /// Backend time of this step, seconds.
    pub now_s: u64,
    /// The backend's events of this step still to happen.
    pending: VecDeque<(u64, ClusterEvent)>,
    /// Pods whose bind the backend refused, waiting out their backoff.
    pub held: Vec<events::Held>,
    /// Refused binds per pod, for the backoff.
    pub bind_failures: HashMap<PodId, u32>,
    /// A plan executing live, across passes.
    pub live: Option<moving::Live>,
    /// When each pod last moved live (cooldowns across live plans).
    pub live_history: std::collections::BTreeMap<PodId, u64>,
    /// The movement journal, while this replica leads and no plan runs.
    pub journal: Option<Box<dyn tessera_movement::journal::Journal + Send>>,
    /// This replica led in the last pass.
    leading: bool,
    /// When the pass under way started.
    pass_started: Option<(SystemTime, Instant)>,
    /// When the last detection round ran and how long it took.
    pub last_detect: Option<(SystemTime, Duration)>,
    pub tracing: Tracing,
    pub shared: Arc<Shared>,
}

impl Service {
    pub(super) fn new(
        backend: Box<dyn Backend>,
        placer: Recorder,
        doc: PolicyDocument,
        cfg: EngineConfig,
        top_k: usize,
        tracing: Tracing,
        shared: Arc<Shared>,
    ) -> Self {
        let simulated = match backend.moves() {
            Moves::Simulated(actuator) => Some(SimulatedMoves::new(doc.movement.clone(), actuator)),
            Moves::Live => None,
        };
        Self {
            planner: tessera_resched::Planner::new(doc.rescheduling.clone()),
            simulated,
            cfg,
            backend,
            top_k,
            placer,
            policy_label: String::new(),
            doc,
            pods: HashMap::new(),
            plan_seq: 0,
            now_s: 0,
            pending: VecDeque::new(),
            held: Vec::new(),
            bind_failures: HashMap::new(),
            live: None,
            live_history: Default::default(),
            journal: None,
            leading: false,
            pass_started: None,
            last_detect: None,
            tracing,
            shared,
        }
    }

    /// The backend's events up to `now`, for the loop to take in time
    /// order.
    pub(super) fn pull_events(&mut self, now: u64) {
        self.now_s = now;
        self.pending.extend(self.backend.events(now));
    }

    /// This replica leads and acts.
    pub(super) fn leading(&self) -> bool {
        self.leading
    }

    /// A new active policy: its planner and movement settings from now on.
    pub(super) fn install(&mut self, policy: Policy, doc: &PolicyDocument) {
        self.placer.policy = policy;
        self.planner = tessera_resched::Planner::new(doc.rescheduling.clone());
        if let Some(m) = &mut self.simulated {
            m.set_movement(doc.movement.clone());
        }
    }
}

impl World for Service {
    fn placer(&mut self) -> &mut dyn Placer {
        &mut self.placer
    }

    fn next_event(&mut self, until: u64) -> Option<u64> {
        self.pending.front().map(|e| e.0).filter(|&t| t <= until)
    }

    fn happen(&mut self, t: u64, model: &mut Model) {
        while let Some((at, _)) = self.pending.front()
            && *at <= t
        {
            let (_, event) = self.pending.pop_front().expect("just looked");
            self.take_event(model, event, t);
        }
    }

    fn sample(&mut self, node: &Node, pods: &[(&Pod, Placement)], t: u64) -> NodeSample {
        self.backend.sample(node, pods, t)
    }

    fn zone_carbon(&mut self, zone: &str, t: u64) -> u32 {
        self.backend.zone_carbon(zone, t)
    }

    fn detect(&mut self, frame: &DetectionFrame) -> Vec<Detection> {
        let (wall, started) = (SystemTime::now(), Instant::now());
        let found = self.placer.detect(frame);
        let took = started.elapsed();
        self.last_detect = Some((wall, took));
        self.shared
            .metrics
            .policy_execution
            .get_or_create(&crate::metrics::PhaseLabel { phase: "detect".into() })
            .observe(took.as_secs_f64(), None, None);
        found
    }

    fn found(&mut self, anomalies: &[Detection]) {
        for d in anomalies {
            self.shared.metrics.anomalies.get_or_create(&crate::metrics::CodeLabel { code: d.kind.clone() }).inc();
        }
    }

    fn acting(&self) -> bool {
        self.leading && self.backend.active()
    }

    fn before_pass(&mut self, model: &mut Model, t: u64) -> bool {
        self.release_held(model, t);
        if !self.backend.active() {
            // A standby: its model follows the cluster; the leader acts.
            if std::mem::take(&mut self.leading) {
                self.abandon_live(model);
            }
            return false;
        }
        if !std::mem::replace(&mut self.leading, true) {
            self.resume_live(model);
        }
        // Replacements of moved pods take their held room before the pass.
        self.steer(model);
        self.pass_started = Some((SystemTime::now(), Instant::now()));
        true
    }

    fn after_pass(&mut self, model: &mut Model, t: u64, events: &[Event]) {
        let (pass_wall, started) = self.pass_started.take().unwrap_or_else(|| (SystemTime::now(), Instant::now()));
        let pass = started.elapsed();
        let attempts = model.take_attempts();
        self.carry_out(model, events);
        let recorded = std::mem::take(&mut self.placer.recorded);
        self.fold_comparisons(model);
        self.record_pass(model, t, pass_wall, pass, events, attempts, recorded);
    }

    fn reschedule(&mut self, model: &mut Model, cycle: &Cycle<'_>) -> Option<Vec<(PodId, Placement)>> {
        // One live plan at a time.
        if self.moving() {
            return None;
        }
        Some(self.cycle(model, cycle))
    }
}
