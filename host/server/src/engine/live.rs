//! Live moves: a plan executed in real time across passes, for a backend
//! whose moved pods come back under a new identity (Kubernetes: evicted,
//! then recreated by their controller).
//!
//! A step reserves room on its target by holding it in the loop's model
//! (a stand-in pod placement cannot take and preemption cannot pick),
//! evicts the pod through the backend, and from then on steers the first
//! waiting pod of the same workload and shape (its replacement) onto the
//! held room: the hold gives way and the replacement is bound there. The
//! step is done once the replacement is ready. Every step is journaled
//! before it acts, in the backend's journal, with the names of the plan's
//! nodes and each replacement, so a new leader resumes the plan.

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime};

use opentelemetry::trace::SpanContext;
use opentelemetry::{Context, KeyValue};
use tessera_core::cluster::{Placement, check, choose_gpus};
use tessera_core::driver::Model;
use tessera_core::model::{NodeId, Pod};
use tessera_core::sched::PodId;
use tessera_movement::exec::{ActError, Actuator, Executor, Health, Location, StepState};
use tessera_movement::journal::{Entry, Journal, JournalError};

use super::bind::Binder;
use super::env::Env;
use super::report::{StepTimes, conclude, record_moves};
use crate::backend::{Backend, JOURNAL_ERROR};
use crate::metrics::PhaseLabel;
use crate::observe::{self, attr};
use crate::record::{MoveRecord, MoveState, PlanRecord, PlanState};

/// Ids of the stand-ins holding room in the model (backend ids stay
/// below).
const HOLD: PodId = 1 << 63;

/// Room held on a node for a moved pod.
#[derive(Debug, Clone)]
struct Hold {
    /// The stand-in's id in the model.
    id: PodId,
    at: Placement,
    spec: Pod,
    /// The pod was evicted: its replacement is steered here.
    armed: bool,
}

/// Holds `at` for a moved pod of shape `spec` in the model: a stand-in
/// under id `id` that placement cannot take and preemption cannot pick.
fn hold_room(
    model: &mut Model,
    id: PodId,
    spec: &Pod,
    at: Placement,
    now: u64,
) -> Result<Placement, tessera_core::sched::AdoptError> {
    let stand_in = Pod { name: format!("{} (room held for its move)", spec.name), ..spec.clone() };
    let held = model.adopt(id, stand_in, at.node, Some(at.gpus), now)?;
    model.protect(id, true);
    Ok(held)
}

/// What live steps act on: the loop's model and the backend.
#[derive(Default)]
struct Steering {
    holds: BTreeMap<PodId, Hold>,
    /// What each moved pod is now (its replacement), by the moved pod.
    now_is: BTreeMap<PodId, PodId>,
}

impl Steering {
    fn current(&self, pod: PodId) -> PodId {
        self.now_is.get(&pod).copied().unwrap_or(pod)
    }
}

/// A plan under way.
struct Live {
    ex: Executor,
    journal: Box<dyn Journal + Send>,
    steering: Steering,
    root: Context,
    exec_cx: Context,
    exec_wall: SystemTime,
    started: Instant,
    times: StepTimes,
    links: Vec<Option<SpanContext>>,
    record: PlanRecord,
    trigger: String,
}

/// The executor's actuator over the model and the backend, for one tick.
struct Act<'a> {
    model: &'a mut Model,
    backend: &'a mut dyn Backend,
    steering: &'a mut Steering,
    now_s: u64,
}

impl Act<'_> {
    fn err(op: &'static str, pod: PodId, reason: impl Into<String>) -> ActError {
        ActError { op, pod, reason: reason.into() }
    }

    /// Whether the backend lets pod `id` be moved live.
    fn movable(&self, id: PodId) -> Result<(), String> {
        match self.backend.live() {
            Some(l) => l.movable(id).map_err(|r| r.reason),
            None => Err(format!("the {} backend does not move pods live", self.backend.name())),
        }
    }

    fn pods(&self) -> impl Iterator<Item = &Pod> {
        let running = self.model.running().filter(|(id, ..)| *id & HOLD == 0).map(|(_, p, _)| p);
        running.chain(self.model.waiting().map(|(_, p, _)| p))
    }
}

impl Actuator for Act<'_> {
    fn reserve(&mut self, pod: PodId, spec: &Pod, node: NodeId, hint: Option<u8>, _now: u64) -> Result<(), ActError> {
        if self.steering.holds.contains_key(&pod) {
            return Err(Self::err("reserve", pod, "already holds room"));
        }
        let cur = self.steering.current(pod);
        if self.model.placement(cur).is_some() {
            self.movable(cur).map_err(|why| Self::err("reserve", pod, why))?;
        }
        let n = self.model.cluster().node(node).ok_or_else(|| Self::err("reserve", pod, format!("no node {node}")))?;
        check(n, spec).map_err(|r| Self::err("reserve", pod, format!("node {}: {}", n.name, r.code())))?;
        let gpus = choose_gpus(n, spec, hint)
            .ok_or_else(|| Self::err("reserve", pod, format!("no room on node {}", n.name)))?;
        let id = HOLD | pod;
        let at = hold_room(self.model, id, spec, Placement { node, gpus }, self.now_s)
            .map_err(|e| Self::err("reserve", pod, e.to_string()))?;
        self.steering.holds.insert(pod, Hold { id, at, spec: spec.clone(), armed: false });
        Ok(())
    }

    fn unreserve(&mut self, pod: PodId) {
        if let Some(h) = self.steering.holds.remove(&pod) {
            self.model.take(h.id);
        }
    }

    fn reservation(&self, pod: PodId) -> Option<NodeId> {
        self.steering.holds.get(&pod).map(|h| h.at.node)
    }

    fn evict(&mut self, pod: PodId, _now: u64) -> Result<(), ActError> {
        let cur = self.steering.current(pod);
        if self.model.placement(cur).is_none() {
            return Err(Self::err("evict", pod, "it does not run"));
        }
        if !self.steering.holds.contains_key(&pod) {
            return Err(Self::err("evict", pod, "no room is held for it (lost in a change of leader); not evicted"));
        }
        self.movable(cur).map_err(|why| Self::err("evict", pod, why))?;
        self.backend.evict(cur).map_err(|e| Self::err("evict", pod, e.reason))?;
        if let Some(h) = self.steering.holds.get_mut(&pod) {
            h.armed = true;
        }
        Ok(())
    }

    fn start(&mut self, pod: PodId, _now: u64) -> Result<(), ActError> {
        // Its owner recreates it; the replacement is steered to the room
        // (or already took it).
        if self.steering.now_is.contains_key(&pod) && !self.steering.holds.contains_key(&pod) {
            return Ok(());
        }
        let h = self.steering.holds.get_mut(&pod).ok_or_else(|| Self::err("start", pod, "no room is held for it"))?;
        h.armed = true;
        Ok(())
    }

    fn locate(&self, pod: PodId, _now: u64) -> Location {
        let cur = self.steering.current(pod);
        match self.model.placement(cur) {
            Some(at) => Location::Running { node: at.node, ready: self.backend.live().is_none_or(|l| l.ready(cur)) },
            None => Location::Nowhere,
        }
    }

    fn workload_size(&self, workload: &str) -> u32 {
        self.pods().filter(|p| p.workload == workload).count() as u32
    }

    fn pods_on(&self, node: NodeId) -> u32 {
        self.model.running().filter(|(id, _, at)| *id & HOLD == 0 && at.node == node).count() as u32
    }

    fn health(&mut self, _now: u64) -> Health {
        // Live gates are readiness and its timeout; no request metrics.
        Health::default()
    }
}

/// Wall-clock seconds: live steps' time, the same on every replica.
fn unix_s() -> u64 {
    crate::wall::now_unix_ms() / 1000
}

/// The journal as it reads on this replica: the plan's node ids mapped
/// to this model's through the names journaled with it.
struct Renumbered<'a> {
    inner: &'a mut dyn Journal,
    entries: Vec<Entry>,
}

impl Journal for Renumbered<'_> {
    fn append(&mut self, entry: &Entry) -> Result<(), JournalError> {
        self.inner.append(entry)
    }
    fn read_all(&mut self) -> Result<Vec<Entry>, JournalError> {
        Ok(self.entries.clone())
    }
}

/// Live moves: the plan under way, the journal, and when each pod last
/// moved (cooldowns across plans).
#[derive(Default)]
pub(super) struct LiveMoves {
    live: Option<Live>,
    /// The movement journal, while this replica leads and no plan runs.
    journal: Option<Box<dyn Journal + Send>>,
    history: BTreeMap<PodId, u64>,
}

impl LiveMoves {
    /// Whether a live plan is under way.
    pub fn moving(&self) -> bool {
        self.live.is_some()
    }

    fn open_journal(&mut self, env: &mut Env<'_>) -> Option<Box<dyn Journal + Send>> {
        if let Some(j) = self.journal.take() {
            return Some(j);
        }
        let opened = match env.backend.live() {
            Some(l) => l.journal().map_err(|r| r.reason),
            None => Err(format!("the {} backend does not move pods live", env.backend.name())),
        };
        match opened {
            Ok(j) => Some(j),
            Err(why) => {
                tracing::warn!(backend = env.backend.name(), "movement journal: {why}; no moves until it opens");
                env.backend_error(JOURNAL_ERROR);
                None
            }
        }
    }

    /// Starts executing `plan` live; the cycle concludes when it ends.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &mut self,
        env: &mut Env<'_>,
        model: &mut Model,
        root: Context,
        plan: tessera_movement::MovePlan,
        links: Vec<Option<SpanContext>>,
        mut record: PlanRecord,
        trigger: &str,
    ) {
        let tracer = env.tracing.tracer().clone();
        let exec_wall = SystemTime::now();
        let exec_cx = observe::start(&tracer, "tessera.movement.execute", &root, exec_wall, Vec::new(), Vec::new());
        let Some(mut journal) = self.open_journal(env) else {
            (record.state, record.reason) = (PlanState::Refused, Some("the movement journal did not open".into()));
            observe::finish(&exec_cx, SystemTime::now(), record.reason.clone());
            return conclude(env.shared, &root, record, trigger);
        };
        let order = tessera_movement::dag::build(model.cluster(), &plan);
        let names: BTreeMap<NodeId, String> = plan
            .moves
            .iter()
            .flat_map(|m| [m.from.node, m.to])
            .chain(order.steps.iter().map(|s| s.mv.to))
            .filter_map(|id| model.cluster().node(id).map(|n| (id, n.name.clone())))
            .collect();
        let started = Executor::start(env.movement.clone(), &plan, order, journal.as_mut())
            .and_then(|ex| Ok((ex, journal.append(&Entry::Nodes { names })?)));
        let ex = match started {
            Ok((ex, ())) => ex,
            Err(e) => {
                (record.state, record.reason) = (PlanState::Refused, Some(e.to_string()));
                observe::finish(&exec_cx, SystemTime::now(), record.reason.clone());
                env.backend_error(JOURNAL_ERROR);
                return conclude(env.shared, &root, record, trigger);
            }
        };
        let ex = ex.with_history(std::mem::take(&mut self.history));
        record.state = PlanState::Executing;
        env.shared.plans.write().unwrap_or_else(|p| p.into_inner()).upsert(record.clone());
        let times = StepTimes::default();
        self.live = Some(Live {
            ex,
            journal,
            steering: Steering::default(),
            root,
            exec_cx,
            exec_wall,
            started: Instant::now(),
            times,
            links,
            record,
            trigger: trigger.to_string(),
        });
        self.tick(env, model);
    }

    /// This replica leads now: resume the plan the journal holds, if it
    /// is not over (the previous leader stopped in the middle of it).
    /// The plan id resumed, if any.
    pub fn resume(&mut self, env: &mut Env<'_>, model: &mut Model) -> Option<u64> {
        let mut journal = self.open_journal(env)?;
        let entries = match journal.read_all() {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("movement journal: {e}; not resumed");
                env.backend_error(JOURNAL_ERROR);
                self.journal = Some(journal);
                return None;
            }
        };
        let Some(start) = entries.iter().rposition(|e| matches!(e, Entry::Plan { .. })) else {
            self.journal = Some(journal);
            return None;
        };
        // Node ids of the journal → this model's, through their names.
        let names = entries[start..].iter().find_map(|e| match e {
            Entry::Nodes { names } => Some(names.clone()),
            _ => None,
        });
        let map: BTreeMap<NodeId, NodeId> = names
            .unwrap_or_default()
            .into_iter()
            .map(|(id, name)| (id, model.node_id(&name).unwrap_or(NodeId::MAX)))
            .collect();
        let renumber = |id: NodeId| map.get(&id).copied().unwrap_or(NodeId::MAX);
        let mut steering = Steering::default();
        let mut renumbered = Vec::with_capacity(entries.len() - start);
        for e in entries.into_iter().skip(start) {
            match e {
                Entry::Plan { plan, dag } => {
                    renumbered.push(Entry::Plan { plan: plan.renumbered(renumber), dag: dag.renumbered(renumber) })
                }
                Entry::Replaced { pod, by } => {
                    steering.now_is.insert(pod, by);
                    renumbered.push(Entry::Replaced { pod, by });
                }
                other => renumbered.push(other),
            }
        }
        let now = unix_s();
        let mut act = Act { model, backend: &mut *env.backend, steering: &mut steering, now_s: env.now_s };
        let mut rj = Renumbered { inner: journal.as_mut(), entries: renumbered };
        let resumed = Executor::resume(env.movement.clone(), &mut rj, &act, now);
        if let Ok(Some(ex)) = &resumed
            && !ex.finished()
        {
            // Hold the room again for the steps between reservation and done.
            for (i, s) in ex.states().iter().enumerate() {
                let mv = &ex.dag().steps[i].mv;
                let armed = match s {
                    StepState::Reserved { .. } => false,
                    StepState::Evicted | StepState::Started { .. } => true,
                    _ => continue,
                };
                if matches!(act.locate(mv.pod, now), Location::Running { node, .. } if node == mv.to) {
                    continue;
                }
                if act.reserve(mv.pod, &mv.spec, mv.to, mv.gpu_hint, now).is_ok() && armed {
                    act.start(mv.pod, now).expect("room just held");
                }
            }
        }
        let ex = match resumed {
            Ok(Some(ex)) if !ex.finished() => ex,
            Ok(_) => {
                self.journal = Some(journal);
                return None;
            }
            Err(e) => {
                tracing::warn!("movement journal: {e}; not resumed");
                env.backend_error(JOURNAL_ERROR);
                return None;
            }
        };
        let plan_id = ex.plan_id();
        let tracer = env.tracing.tracer().clone();
        let wall = SystemTime::now();
        let root = observe::start(
            &tracer,
            "tessera.resched.cycle",
            &Context::new(),
            wall,
            vec![attr("tessera.trigger", "resumed"), KeyValue::new("tessera.plan", plan_id as i64)],
            Vec::new(),
        );
        let exec_cx = observe::start(&tracer, "tessera.movement.execute", &root, wall, Vec::new(), Vec::new());
        let node_name = |id: NodeId| model.cluster().node(id).map_or_else(|| id.to_string(), |n| n.name.clone());
        let mut moves: Vec<MoveRecord> = Vec::new();
        for st in &ex.dag().steps {
            if moves.len() <= st.move_index {
                moves.resize_with(st.move_index + 1, || MoveRecord {
                    pod: String::new(),
                    from: String::new(),
                    to: String::new(),
                    strategy: "resumed".into(),
                    cost: 0.0,
                    state: MoveState::Planned,
                    reason: None,
                    after: Vec::new(),
                });
            }
            let m = &mut moves[st.move_index];
            if m.pod.is_empty() {
                m.pod.clone_from(&st.mv.spec.name);
                m.from = node_name(st.mv.from.node);
            }
            m.to = node_name(st.mv.to);
        }
        let waits = ex.dag().waits_for(moves.len());
        for (m, after) in moves.iter_mut().zip(waits) {
            m.after = after;
        }
        let record = PlanRecord {
            id: plan_id,
            at_unix_ms: crate::wall::unix_ms(wall),
            backend_time_s: env.now_s,
            trigger: "resumed from the movement journal".into(),
            anomalies: 0,
            solver: String::new(),
            timed_out: false,
            plan_ms: 0.0,
            fragmentation_before: 0.0,
            fragmentation_after: 0.0,
            whole_free_before: 0,
            whole_free_after: 0,
            gain: 0.0,
            cost: 0.0,
            state: PlanState::Executing,
            reason: None,
            moves,
            trace_id: String::new(),
        };
        tracing::info!(plan = plan_id, "resuming the movement plan the previous leader left");
        // Shown as executing while it runs, as a plan this replica started is.
        env.shared.plans.write().unwrap_or_else(|p| p.into_inner()).upsert(record.clone());
        let times = StepTimes::default();
        let links = vec![None; record.moves.len()];
        self.live = Some(Live {
            ex,
            journal,
            steering,
            root,
            exec_cx,
            exec_wall: wall,
            started: Instant::now(),
            times,
            links,
            record,
            trigger: "resumed".into(),
        });
        Some(plan_id)
    }

    /// Binds each waiting replacement of an evicted pod onto the room held
    /// for it. Before the pass decides, so placement does not take them.
    pub fn steer(&mut self, env: &mut Env<'_>, model: &mut Model, binder: &mut Binder) {
        let Some(mut live) = self.live.take() else { return };
        let armed: Vec<(PodId, Hold)> =
            live.steering.holds.iter().filter(|(_, h)| h.armed).map(|(&p, h)| (p, h.clone())).collect();
        for (pod, hold) in armed {
            // (Stand-ins never wait: they are adopted running.)
            let found = model.waiting().find(|(_, p, _)| {
                !hold.spec.workload.is_empty()
                    && p.workload == hold.spec.workload
                    && p.namespace == hold.spec.namespace
                    && (p.gpu_count, p.gpu_milli) == (hold.spec.gpu_count, hold.spec.gpu_milli)
                    && p.requests == hold.spec.requests
            });
            let Some((by, ..)) = found else { continue };
            model.take(hold.id);
            // The room was just freed for it: holding it again cannot fail.
            let held_again = |model: &mut Model, now: u64| hold_room(model, hold.id, &hold.spec, hold.at, now).ok();
            if let Err(e) = model.place_at(by, hold.at, env.now_s) {
                tracing::warn!("the replacement of pod {pod} does not fit the room held for it: {e}");
                held_again(model, env.now_s);
                continue;
            }
            let result = env.backend.bind(by, hold.at);
            match &result {
                Ok(()) => {
                    live.steering.holds.remove(&pod);
                    live.steering.now_is.insert(pod, by);
                    if let Err(e) = live.journal.append(&Entry::Replaced { pod, by }) {
                        tracing::warn!("movement journal: {e}");
                        env.backend_error(JOURNAL_ERROR);
                    }
                    tracing::info!(pod, by, node = hold.at.node, "a moved pod's replacement took the room held for it");
                }
                // It waits out a backoff; the room is held again for it.
                Err(_) => {
                    held_again(model, env.now_s);
                }
            }
            binder.after_bind(env, model, by, result);
        }
        self.live = Some(live);
    }

    /// Advances the live plan by one tick; concludes the cycle once the
    /// plan is over, or stops it if the journal fails (another leader
    /// owns it now).
    pub fn tick(&mut self, env: &mut Env<'_>, model: &mut Model) {
        let Some(mut live) = self.live.take() else { return };
        let now = unix_s();
        let tick_at = live.started.elapsed();
        let ticked = {
            let mut act = Act { model, backend: &mut *env.backend, steering: &mut live.steering, now_s: env.now_s };
            live.ex.tick(&mut act, live.journal.as_mut(), now)
        };
        let after = live.started.elapsed();
        live.times.saw(live.ex.states(), tick_at, after);
        match ticked {
            Ok(()) if !live.ex.finished() => {
                self.live = Some(live);
            }
            Ok(()) => self.finish(env, model, live, None),
            Err(e) => {
                tracing::warn!("movement journal: {e}; this replica stops the plan");
                env.backend_error(JOURNAL_ERROR);
                self.finish(env, model, live, Some(format!("the journal failed: {e}")));
            }
        }
    }

    /// This replica stopped leading: it lets go of the plan (the new
    /// leader resumes it from the journal) and of the room it held.
    pub fn abandon(&mut self, env: &mut Env<'_>, model: &mut Model) {
        self.journal = None;
        if let Some(live) = self.live.take() {
            self.finish(env, model, live, Some("this replica stopped leading; the new leader resumes the plan".into()));
        }
    }

    fn finish(&mut self, env: &mut Env<'_>, model: &mut Model, mut live: Live, stopped: Option<String>) {
        for (_, h) in std::mem::take(&mut live.steering.holds) {
            model.take(h.id);
        }
        // Cooldowns follow the pods the moved ones are now.
        self.history = live.ex.moved().iter().map(|(&pod, &t)| (live.steering.current(pod), t)).collect();
        let mut record = live.record;
        record_moves(env.tracing, &live.exec_cx, live.exec_wall, &live.ex, &live.times, &live.links, &mut record);
        if let Some(why) = &stopped {
            (record.state, record.reason) = (PlanState::Stopped, Some(why.clone()));
        }
        let took = live.started.elapsed();
        observe::finish(&live.exec_cx, live.exec_wall + took, stopped.or_else(|| live.ex.report().stopped.clone()));
        env.shared.metrics.policy_execution.get_or_create(&PhaseLabel { phase: "execute".into() }).observe(
            took.as_secs_f64(),
            None,
            None,
        );
        if live.ex.finished() {
            self.journal = Some(live.journal);
        }
        conclude(env.shared, &live.root, record, &live.trigger);
    }
}
