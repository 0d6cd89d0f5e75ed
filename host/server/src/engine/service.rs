//! The service around the loop: the loop's [`World`] in `tessera serve`.
//! The backend's events and telemetry go in; each pass's decisions go out
//! to the backend ([`Binder`]) and become explanations, traces and
//! metrics ([`Explain`]); the rollout's comparisons are folded
//! ([`Recorder`]); detection rounds are timed; rescheduling cycles plan
//! and execute ([`Cycles`]), live ones across passes ([`LiveMoves`]); a
//! standby only follows.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tessera_core::cluster::Placement;
use tessera_core::driver::{ClusterEvent, Model, World};
use tessera_core::framework::{Cycle, Placer};
use tessera_core::model::{Node, Pod, PodId};
use tessera_core::sched::Event;
use tessera_core::telemetry::{Detection, DetectionFrame, NodeSample};
use tessera_policy::PolicyDocument;
use tessera_wasm::Policy;

use super::bind::Binder;
use super::cycles::Cycles;
use super::env::Env;
use super::explain::Explain;
use super::live::LiveMoves;
use super::pods::Pods;
use super::recorder::Recorder;
use crate::backend::Backend;
use crate::config::EngineConfig;
use crate::observe::Tracing;
use crate::state::Shared;

/// The [`Env`] of `$s` (a `Service`), borrowing only the fields it names
/// so the others stay free to use beside it.
macro_rules! env {
    ($s:expr) => {
        Env {
            backend: $s.backend.as_mut(),
            shared: &$s.shared,
            tracing: &$s.tracing,
            movement: &$s.doc.movement,
            now_s: $s.now_s,
        }
    };
}

/// Everything the service keeps around the loop.
pub(super) struct Service {
    pub cfg: EngineConfig,
    pub backend: Box<dyn Backend>,
    pub top_k: usize,
    pub placer: Recorder,
    pub doc: PolicyDocument,
    pub policy_label: String,
    pods: Pods,
    binder: Binder,
    cycles: Cycles,
    live: LiveMoves,
    /// Backend time of this step, seconds.
    pub now_s: u64,
    /// The backend's events of this step still to happen.
    pending: VecDeque<(u64, ClusterEvent)>,
    /// This replica led in the last pass.
    leading: bool,
    /// When the pass under way started.
    pass_started: Option<(SystemTime, Instant)>,
    pub tracing: Tracing,
    pub shared: Arc<Shared>,
    /// The pods that arrived, oldest first, for fine-tuning (`learning:`).
    arrivals: VecDeque<Pod>,
    /// At most this many are kept (0: none).
    pub arrivals_cap: usize,
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
        Self {
            cycles: Cycles::new(&doc, backend.moves()),
            cfg,
            backend,
            top_k,
            placer,
            policy_label: String::new(),
            doc,
            pods: Pods::default(),
            binder: Binder::default(),
            live: LiveMoves::default(),
            now_s: 0,
            pending: VecDeque::new(),
            leading: false,
            pass_started: None,
            tracing,
            shared,
            arrivals: VecDeque::new(),
            arrivals_cap: 0,
        }
    }

    /// The pods that arrived lately, oldest first.
    pub(super) fn arrivals(&self) -> Vec<Pod> {
        self.arrivals.iter().cloned().collect()
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

    /// A new active policy (already in the placer's place): its planner and
    /// movement settings from now on.
    pub(super) fn install(&mut self, policy: Policy, doc: PolicyDocument) {
        self.placer.policy = policy;
        self.cycles.install(&doc);
        self.doc = doc;
    }

    /// A live plan takes its step of this pass.
    pub(super) fn tick_live(&mut self, model: &mut Model) {
        self.live.tick(&mut env!(self), model);
    }

    /// The loop stops: a live plan stays in the journal for the next
    /// leader.
    pub(super) fn abandon_live(&mut self, model: &mut Model) {
        self.live.abandon(&mut env!(self), model);
    }

    fn show_leading(&self, leading: bool) {
        self.shared.status.write().unwrap_or_else(|p| p.into_inner()).active = leading;
        self.shared.metrics.leader.set(i64::from(leading));
    }

    /// One event of the backend's, at `now`.
    fn take_event(&mut self, model: &mut Model, event: ClusterEvent, now: u64) {
        // Whatever the backend says of a held pod supersedes the hold.
        if let ClusterEvent::Deleted { id } | ClusterEvent::Running { id, .. } | ClusterEvent::Submitted { id, .. } =
            &event
        {
            self.binder.heard_of(*id, matches!(event, ClusterEvent::Deleted { .. }));
        }
        if let ClusterEvent::Submitted { pod, .. } = &event
            && self.arrivals_cap > 0
        {
            if self.arrivals.len() == self.arrivals_cap {
                self.arrivals.pop_front();
            }
            self.arrivals.push_back(pod.clone());
        }
        let named = match &event {
            ClusterEvent::Submitted { id, pod } | ClusterEvent::Running { id, pod, .. } => {
                Some((*id, pod.name.clone(), pod.workload.clone()))
            }
            ClusterEvent::Deleted { id } => {
                self.pods.remove(*id);
                None
            }
            _ => None,
        };
        match model.apply(event, now) {
            Ok(()) => {
                if let Some((id, name, workload)) = named {
                    self.pods.insert(id, &name, &workload);
                }
            }
            Err(e) => {
                tracing::warn!(backend = self.backend.name(), "{e}");
                self.shared.metrics.count_backend_error(e.code());
            }
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
        self.cycles.last_detect = Some((wall, took));
        self.shared
            .metrics
            .policy_execution
            .get_or_create(&crate::metrics::PhaseLabel { phase: "detect".into() })
            .observe(took.as_secs_f64(), None, None);
        found
    }

    fn found(&mut self, anomalies: &[Detection]) {
        for d in anomalies {
            self.shared
                .metrics
                .anomalies
                .get_or_create(&crate::metrics::CodeLabel { code: d.kind.as_str().into() })
                .inc();
        }
    }

    fn acting(&self) -> bool {
        self.leading && self.backend.active()
    }

    fn before_pass(&mut self, model: &mut Model, t: u64) -> bool {
        for id in self.binder.release(model, t) {
            self.pods.remove(id);
        }
        if !self.backend.active() {
            // A standby: its model follows the cluster; the leader acts.
            if std::mem::take(&mut self.leading) {
                self.show_leading(false);
                self.abandon_live(model);
                self.binder.abandon(model);
            }
            return false;
        }
        if !std::mem::replace(&mut self.leading, true) {
            // Shown before it acts: whoever sees its binds sees it lead.
            self.show_leading(true);
            if let Some(id) = self.live.resume(&mut env!(self), model) {
                self.cycles.resumed(id);
            }
        }
        // Replacements of moved pods take their held room before the pass;
        // preemptors whose victims are gone are bound.
        self.live.steer(&mut env!(self), model, &mut self.binder);
        self.binder.settle(&mut env!(self), model);
        self.pass_started = Some((SystemTime::now(), Instant::now()));
        true
    }

    fn after_pass(&mut self, model: &mut Model, t: u64, events: &[Event]) {
        let (pass_wall, started) = self.pass_started.take().unwrap_or_else(|| (SystemTime::now(), Instant::now()));
        let pass = started.elapsed();
        let attempts = model.take_attempts();
        self.binder.carry_out(&mut env!(self), model, events);
        let recorded = std::mem::take(&mut self.placer.recorded);
        self.placer.fold(model, &self.shared);
        let mut explain = Explain {
            shared: &self.shared,
            tracing: &self.tracing,
            pods: &mut self.pods,
            placer: &self.placer,
            policy: &self.doc.name,
            policy_label: &self.policy_label,
            top_k: self.top_k,
        };
        explain.record_pass(model, t, pass_wall, pass, attempts, recorded);
    }

    fn reschedule(&mut self, model: &mut Model, cycle: &Cycle<'_>) -> Option<Vec<(PodId, Placement)>> {
        // One live plan at a time.
        if self.live.moving() {
            return None;
        }
        Some(self.cycles.run(&mut env!(self), model, &self.pods, &mut self.live, &self.doc.name, cycle))
    }
}
