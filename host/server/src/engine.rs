//! The service's loop: the one online loop ([`tessera_core::driver`]) on
//! a [`Backend`]. Pods arrive and leave as the backend reports; every
//! pass decides the queued pods through the policy and has the backend
//! carry out the binds and evictions; every telemetry interval the nodes
//! report utilisation and the detectors run; on a period, or when they
//! report anomalies, a rescheduling cycle plans and the Movement Manager
//! executes the moves on the backend. Each decision and cycle becomes a
//! trace, metric samples and an entry of the API's logs.
//!
//! The loop runs on its own thread (plugin calls are synchronous CPU work)
//! and answers control messages (policy and plugin swaps) between passes.

mod bind;
mod cycles;
mod env;
mod explain;
mod extend;
mod live;
mod pods;
mod recorder;
mod report;
mod service;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use tessera_core::driver::{Driver, DriverConfig};
use tessera_core::framework::Placer;
use tessera_core::model::Node;
use tessera_core::telemetry::TelemetryConfig;
use tessera_policy::PolicyDocument;
use tessera_wasm::Policy;

use crate::backend::Backend;
use crate::config::EngineConfig;
use crate::control::{ChaosInputs, Control, LearningInputs};
use crate::observe::Tracing;
use crate::state::{PolicyView, Shared};
use crate::wall::now_unix_ms;
use recorder::Recorder;
use service::Service;

/// The loop's settings from the service's and the policy's (what a bare
/// loop on the same work must run with to make the same decisions).
pub fn driver_config(cfg: &EngineConfig, doc: &PolicyDocument, seed: u64) -> DriverConfig {
    DriverConfig {
        sched: doc.scheduling,
        queues: doc.queue_tree(),
        telemetry: TelemetryConfig { interval_s: cfg.telemetry_interval_s, ..TelemetryConfig::default() },
        detection: doc.detection,
        seed,
        weight_sets: doc.adaptive.as_ref().map(|a| a.weight_sets.clone()).unwrap_or_default(),
        max_moves_share: cfg.max_migrations_pct / 100.0,
        reschedule_every_s: cfg.reschedule_every_s,
        dead_band_permille: 0,
        start_s: Some(0),
    }
}

/// The loop: the driver and the service around it.
pub struct Engine {
    driver: Driver,
    svc: Service,
    /// Queues set from outside the policy (`Control::SetQueues`), kept
    /// across policy changes; they run with the active policy's queue
    /// settings ([`queues_with`]).
    queues: Option<tessera_core::quota::QueuesConfig>,
    /// The per-queue series the last pass published: a queue that is gone
    /// (a new policy, objects set or removed) loses its series rather than
    /// keep reporting its last values.
    queue_series: QueueSeries,
}

/// Label sets of the per-queue gauges published by one pass.
#[derive(Debug, Default)]
struct QueueSeries {
    queues: std::collections::HashSet<crate::metrics::QueueLabel>,
    resources: std::collections::HashSet<crate::metrics::QueueResourceLabel>,
}

impl Engine {
    /// An engine over the backend's cluster running `policy` (from `doc`);
    /// the bandit of adaptive weights is seeded with `seed`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        backend: Box<dyn Backend>,
        policy: Policy,
        doc: PolicyDocument,
        cfg: EngineConfig,
        seed: u64,
        top_k: usize,
        tracing: Tracing,
        shared: Arc<Shared>,
    ) -> Self {
        let (nodes, workload) = (backend.nodes().to_vec(), backend.workload().clone());
        let mut driver = Driver::new(nodes, workload, driver_config(&cfg, &doc, seed));
        driver.model_mut().record_attempts(true);
        shared.metrics.gpus.set(driver.model().cluster().total_gpus() as i64);
        let svc = Service::new(backend, Recorder::new(policy), doc, cfg, top_k, tracing, shared);
        let mut e = Self { driver, svc, queues: None, queue_series: QueueSeries::default() };
        e.publish_policy();
        e
    }

    /// Keeps the latest `cap` pods that arrive, for fine-tuning.
    pub fn record_arrivals(mut self, cap: usize) -> Self {
        self.svc.arrivals_cap = cap;
        self
    }

    /// Runs passes every `tick_ms` until `shared.stopping` is set; the pass
    /// under way finishes first (its moves run to the end), so nothing is
    /// left half done.
    pub fn run(mut self, control: Receiver<Control>) {
        // Mirror the whole cluster into the plugins before reporting ready.
        self.svc.placer.prime();
        self.svc.shared.ready.store(true, Ordering::SeqCst);
        let tick = Duration::from_millis(self.svc.cfg.tick_ms);
        let mut next = Instant::now();
        while !self.svc.shared.stopping.load(Ordering::SeqCst) {
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
                if self.svc.shared.stopping.load(Ordering::SeqCst) {
                    break;
                }
            }
            // A pass that overran does not trigger a burst of catch-up passes.
            next = next.max(Instant::now() - tick);
        }
        self.svc.shared.ready.store(false, Ordering::SeqCst);
        // A live plan stays in the journal for the next leader.
        self.svc.abandon_live(self.driver.model_mut());
        self.svc.backend.shutdown();
        self.svc.tracing.flush();
    }

    /// One pass after `tick` of wall time: the backend's clock advances,
    /// the loop runs every instant up to it, a live plan takes a step.
    pub fn step(&mut self, tick: Duration) {
        let now = self.svc.backend.advance(tick);
        self.svc.pull_events(now);
        self.driver.run_until(now, &mut self.svc);
        if self.svc.leading() {
            self.svc.tick_live(self.driver.model_mut());
        }
        self.gauges();
    }

    fn control(&mut self, c: Control) {
        match c {
            Control::SwapPolicy { policy, doc, done } => {
                self.install(policy, *doc);
                self.svc.shared.rollout.write().unwrap_or_else(|p| p.into_inner()).active = self.svc.doc.name.clone();
                let _ = done.send(());
            }
            Control::SwapPlugin { name, version, done } => {
                let old = self.svc.placer.policy.swap(&name, version);
                if old.is_some() {
                    // Bring the new version's mirror up to date now, not on
                    // the next decision.
                    self.svc.placer.prime();
                    self.publish_policy();
                }
                let _ = done.send(old);
            }
            Control::SetCandidate { candidate, only_if_none, done } => {
                if only_if_none && self.svc.placer.candidate.is_some() {
                    let _ = done.send(false);
                    return;
                }
                let nodes: Vec<&Node> = self.driver.model().cluster().nodes().iter().collect();
                self.svc.placer.candidate = candidate.map(|(mut policy, doc)| {
                    // Mirror the cluster into the candidate's plugins.
                    Placer::nodes_changed(&mut policy, &nodes);
                    Placer::prime(&mut policy);
                    recorder::Candidate { policy, doc: *doc, stage: crate::rollout::Stage::Shadow }
                });
                let name = self.svc.placer.candidate.as_ref().map(|c| c.doc.name.as_str());
                self.svc.shared.rollout.write().unwrap_or_else(|p| p.into_inner()).set_candidate(name);
                let _ = done.send(true);
            }
            Control::SetStage { stage, done } => {
                let r = match &mut self.svc.placer.candidate {
                    Some(c) => {
                        c.stage = stage;
                        self.svc.shared.rollout.write().unwrap_or_else(|p| p.into_inner()).set_stage(stage)
                    }
                    None => Err(crate::rollout::RolloutError::NoCandidate),
                };
                let _ = done.send(r);
            }
            Control::Promote { done } => {
                let r = match self.svc.placer.candidate.take() {
                    Some(c) => {
                        self.install(c.policy, c.doc);
                        self.svc.shared.rollout.write().unwrap_or_else(|p| p.into_inner()).promoted(&self.svc.doc.name);
                        Ok(())
                    }
                    None => Err(crate::rollout::RolloutError::NoCandidate),
                };
                let _ = done.send(r);
            }
            Control::Snapshot { done } => {
                let _ = done.send(self.snapshot());
            }
            Control::Room { pod, max_moves, done } => {
                let _ = done.send(self.room(&pod, max_moves));
            }
            Control::Extender { call, done } => {
                let _ = done.send(self.svc.extend(self.driver.model_mut(), *call));
            }
            Control::SetQueues { queues, done } => {
                let r = queues_with(queues.as_ref(), &self.svc.doc).map(|active| {
                    self.queues = queues;
                    self.driver.model_mut().set_queues(active);
                });
                let _ = done.send(r);
            }
            Control::Queues { done } => {
                let _ = done.send(self.driver.model().sched().queues());
            }
            Control::LearningInputs { done } => {
                let _ = done.send(LearningInputs {
                    active: self.svc.doc.clone(),
                    candidate: self.svc.placer.candidate.is_some(),
                    nodes: self.driver.model().cluster().nodes().to_vec(),
                    arrivals: self.svc.arrivals(),
                });
            }
            Control::ChaosInputs { done } => {
                let candidate_id = self.svc.shared.rollout.read().unwrap_or_else(|p| p.into_inner()).candidate_id;
                let _ = done.send(ChaosInputs {
                    active: self.svc.doc.clone(),
                    candidate: self.svc.placer.candidate.as_ref().map(|c| (c.doc.clone(), candidate_id)),
                    snapshot: self.snapshot(),
                });
            }
        }
    }

    /// Makes `policy` (from `doc`) the active policy: the next pass uses
    /// it, with every node told to it again; its adaptive weights (if
    /// any) start afresh.
    fn install(&mut self, policy: Policy, doc: PolicyDocument) {
        self.driver.set_weight_sets(doc.adaptive.as_ref().map(|a| a.weight_sets.clone()).unwrap_or_default());
        // The objects' queues as they were if the new settings do not fit
        // them (they were checked with the old ones).
        let queues = queues_with(self.queues.as_ref(), &doc)
            .ok()
            .or_else(|| {
                let as_set = self.queues.as_ref()?;
                tessera_core::quota::QueueTree::new(as_set).ok()
            })
            .unwrap_or_else(|| doc.queue_tree());
        self.svc.install(policy, doc);
        self.driver.model_mut().resync();
        self.driver.model_mut().set_queues(queues);
        self.publish_policy();
    }

    /// The room-making search for the waiting pod `name`, on a copy of
    /// the cluster: the nodes a moved pod may go to in the hard filter's
    /// order.
    fn room(&self, name: &str, max_moves: usize) -> crate::record::RoomAnswer {
        use crate::record::{RoomAnswer, RoomMove};
        let model = self.driver.model();
        let mut answer =
            RoomAnswer { pod: name.into(), waiting: false, reason: None, node: None, moves: Vec::new(), max_moves };
        let Some((_, pod, why)) = model.waiting().find(|(_, p, _)| p.name == name) else { return answer };
        answer.waiting = true;
        answer.reason = why.map(|w| w.code().to_string());
        let pod = pod.clone();
        let running: Vec<(tessera_core::model::Pod, tessera_core::cluster::Placement)> =
            model.running().map(|(_, p, at)| (p.clone(), at)).collect();
        let mut cluster = model.cluster().clone();
        let borrowed = tessera_core::room::borrow_running(&running);
        let room =
            tessera_core::room::make_room(&mut cluster, &borrowed, &pod, max_moves, &mut |_, nodes| nodes.to_vec());
        if let Some(room) = room {
            let name_of = |id: u32| cluster.node(id).map(|n| n.name.clone()).unwrap_or_default();
            answer.node = Some(name_of(room.node));
            answer.moves = room
                .moves
                .iter()
                .map(|m| {
                    let (p, from) = &running[m.running];
                    RoomMove {
                        pod: p.name.clone(),
                        from: name_of(from.node),
                        to: name_of(m.to.node),
                        gpus: m.to.gpus.indices().map(|g| g as u8).collect(),
                    }
                })
                .collect();
        }
        answer
    }

    fn snapshot(&self) -> tessera_core::snapshot::Snapshot {
        use tessera_core::snapshot::{RunningPod, Snapshot};
        let model = self.driver.model();
        Snapshot {
            backend: self.svc.backend.name().to_string(),
            backend_time_s: self.svc.now_s,
            taken_at_unix_ms: now_unix_ms(),
            nodes: model.cluster().nodes().to_vec(),
            running: model.running().map(|(_, pod, placement)| RunningPod { pod: pod.clone(), placement }).collect(),
            waiting: model.waiting().map(|(_, pod, _)| pod.clone()).collect(),
        }
    }

    fn publish_policy(&mut self) {
        let svc = &mut self.svc;
        let members: Vec<tessera_wasm::Member> =
            svc.placer.policy.scorers().iter().chain(svc.placer.policy.detectors()).cloned().collect();
        svc.policy_label = Recorder::label(&svc.doc.name, &svc.placer.policy);
        *svc.shared.policy.write().unwrap_or_else(|p| p.into_inner()) =
            PolicyView { name: svc.doc.name.clone(), doc: svc.doc.clone(), members };
    }

    /// Per-queue gauges (only when the policy sets queues: they cost a
    /// pass over the pods). The series of queues no longer there (a new
    /// policy, queue objects set or removed) are removed first, so a
    /// scrape never shows a gone queue beside its successors.
    fn queue_gauges(&mut self) {
        use crate::metrics::{QueueLabel, QueueResourceLabel};
        use tessera_core::quota::Dim;
        let m = &self.svc.shared.metrics;
        let sched = self.driver.model().sched();
        let queues = if sched.has_queues() { sched.queues() } else { Vec::new() };
        let mut now = QueueSeries::default();
        let mut published = Vec::with_capacity(queues.len());
        for q in &queues {
            let dims: std::collections::BTreeSet<&Dim> =
                q.used.0.keys().chain(q.guarantee.0.keys()).chain(q.fair_share.0.keys()).collect();
            let labels: Vec<(QueueResourceLabel, &Dim)> = dims
                .into_iter()
                .map(|d| (QueueResourceLabel { queue: q.name.clone(), resource: d.name() }, d))
                .collect();
            now.queues.insert(QueueLabel { queue: q.name.clone() });
            now.resources.extend(labels.iter().map(|(l, _)| l.clone()));
            published.push((q, QueueLabel { queue: q.name.clone() }, labels));
        }
        for gone in self.queue_series.queues.difference(&now.queues) {
            m.queue_pending.remove(gone);
            m.queue_running.remove(gone);
            m.queue_admitted.remove(gone);
            m.queue_dominant_share.remove(gone);
        }
        for gone in self.queue_series.resources.difference(&now.resources) {
            m.queue_used.remove(gone);
            m.queue_borrowed.remove(gone);
            m.queue_guarantee.remove(gone);
            m.queue_fair_share.remove(gone);
        }
        if let Some(f) = sched.remembered_fairness().filter(|_| sched.has_queues()) {
            m.queue_fairness.set(f);
        }
        for (q, label, resources) in published {
            m.queue_pending.get_or_create(&label).set(q.pending as i64);
            m.queue_running.get_or_create(&label).set(q.running as i64);
            m.queue_admitted.get_or_create(&label).set(q.admitted as i64);
            m.queue_dominant_share.get_or_create(&label).set(q.dominant_share);
            for (label, d) in resources {
                let unit = |v: u64| match d {
                    Dim::Gpu | Dim::Model(_) => v as f64 / 1000.0,
                    _ => v as f64,
                };
                m.queue_used.get_or_create(&label).set(unit(q.used.get(d)));
                m.queue_borrowed.get_or_create(&label).set(unit(q.borrowed.get(d)));
                m.queue_guarantee.get_or_create(&label).set(unit(q.guarantee.get(d)));
                m.queue_fair_share.get_or_create(&label).set(unit(q.fair_share.get(d)));
            }
        }
        self.queue_series = now;
    }

    fn gauges(&mut self) {
        self.queue_gauges();
        let (svc, model) = (&self.svc, self.driver.model());
        let m = &svc.shared.metrics;
        for (level, depth) in model.sched().queue_depths().into_iter().enumerate() {
            m.queue_depth.get_or_create(&crate::metrics::LevelLabel { level: level.to_string() }).set(depth as i64);
        }
        m.parked.set(model.sched().parked() as i64);
        m.running.set(model.running().count() as i64);
        m.gpus.set(model.cluster().total_gpus() as i64);
        let reading = model.tracker().reading();
        m.gpu_allocation.set(reading.allocation / 100.0);
        m.gpu_fragmentation.set(reading.fragmentation_rate / 100.0);
        let nodes = model.cluster().nodes();
        let hot = nodes.iter().filter(|n| tessera_core::metrics::is_hot(n)).count();
        m.hotspot_ratio.set(hot as f64 / nodes.len().max(1) as f64);
        for member in svc.placer.policy.scorers().iter().chain(svc.placer.policy.detectors()) {
            let st = member.slot.stats();
            let plugin = crate::metrics::PluginLabel { plugin: member.name.clone() };
            m.plugin_quarantined.get_or_create(&plugin).set(i64::from(st.quarantined));
            m.plugin_host_starved.get_or_create(&plugin).set(st.host_starved as i64);
        }
        let mut status = svc.shared.status.write().unwrap_or_else(|p| p.into_inner());
        if status.backend.is_empty() {
            status.backend = svc.backend.name().to_string();
        }
        status.backend_time_s = svc.now_s;
        status.active = svc.backend.active();
        m.leader.set(i64::from(status.active));
        status.nodes = nodes.len();
        status.pods_running = model.running().count();
        status.pods_waiting = model.waiting().count();
    }
}

/// The loop's queues: `objects`' queues (the Kubernetes `TesseraQueue`
/// objects) with `doc`'s queue settings — the fair-share gate, remembered
/// use, the fairness floor, reclaim — or, with no objects, `doc`'s own.
fn queues_with(
    objects: Option<&tessera_core::quota::QueuesConfig>,
    doc: &PolicyDocument,
) -> Result<tessera_core::quota::QueueTree, tessera_core::quota::QueuesError> {
    match objects {
        Some(o) => tessera_core::quota::QueueTree::new(&tessera_core::quota::QueuesConfig {
            default_queue: o.default_queue.clone(),
            list: o.list.clone(),
            ..doc.queues.clone()
        }),
        None => Ok(doc.queue_tree()),
    }
}
