//! A rescheduling cycle: plan on the cluster as it stands, execute the plan
//! through the Movement Manager on the backend's actuator, apply the moves
//! that ended done. Its trace:
//!
//! ```text
//! tessera.resched.cycle           trigger, anomalies, budget, moves done
//! ├── tessera.resched.detect      the detection round that triggered it (findings by kind)
//! ├── tessera.resched.plan        solver, gain, cost, fragmentation before/after
//! │   ├── tessera.resched.strategy   one per strategy run: moves it proposed
//! │   └── tessera.resched.solve      the exact MILP, when it ran
//! └── tessera.movement.execute    batches, failures, rollbacks
//!     └── tessera.movement.move   one per move, linked to the pod's placement trace
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry::{Context, KeyValue};
use tessera_core::cluster::Placement;
use tessera_core::driver::Model;
use tessera_core::framework::{Cycle, Trigger};
use tessera_core::model::{Pod, Tier};
use tessera_core::sched::PodId;
use tessera_movement::exec::{Executor, StepState};
use tessera_movement::simulated::{Executed, move_of};

use super::service::Service;
use crate::metrics::{CodeLabel, PhaseLabel, StrategyLabel, TraceLabel, TriggerLabel};
use crate::observe::{self, attr};
use crate::record::{MoveRecord, PlanRecord};

pub(super) fn state_of(s: &StepState) -> (String, Option<String>) {
    match s {
        StepState::Done => ("done".into(), None),
        StepState::Failed { reason } => ("failed".into(), Some(reason.clone())),
        StepState::RolledBack { reason } => ("rolled_back".into(), Some(reason.clone())),
        StepState::Dropped { reason } => ("dropped".into(), Some(reason.clone())),
        StepState::Restoring { reason, .. } => ("restoring".into(), Some(reason.clone())),
        // Under way (a live plan handed to another leader stops here).
        StepState::Pending => ("pending".into(), None),
        StepState::Reserving | StepState::Reserved { .. } => ("reserved".into(), None),
        StepState::Evicting | StepState::Evicted => ("evicted".into(), None),
        StepState::Starting | StepState::Started { .. } => ("started".into(), None),
    }
}

impl Service {
    /// A rescheduling cycle the loop asked for: plan on the cluster as it
    /// stands, execute (on simulated time, or start a live plan); the
    /// moves done, for the loop to apply.
    pub(super) fn cycle(&mut self, model: &mut Model, cycle: &Cycle<'_>) -> Vec<(PodId, Placement)> {
        let detected = (cycle.trigger == Trigger::Anomalies).then_some(self.last_detect).flatten();
        let cycle_wall = detected.map_or_else(SystemTime::now, |(wall, _)| wall);
        let trigger = cycle.trigger.name();
        let (ids, mut running): (Vec<PodId>, Vec<(Pod, Placement)>) =
            model.running().map(|(id, p, at)| (id, (p.clone(), at))).unzip();
        // Pods the backend will not move (nothing would recreate them, a
        // disruption budget forbids it now) are pinned for the planner,
        // which never moves a hard-tier pod.
        for ((pod, _), &id) in running.iter_mut().zip(&ids) {
            if pod.tier != Tier::Hard && self.backend.movable(id).is_err() {
                pod.tier = Tier::Hard;
            }
        }
        let max_moves = cycle.max_moves;
        let tracer = self.tracing.tracer().clone();
        let mut by_kind: BTreeMap<&str, u32> = BTreeMap::new();
        for f in cycle.anomalies {
            *by_kind.entry(f.kind.as_str()).or_insert(0) += 1;
        }
        let kinds = by_kind.iter().map(|(k, n)| format!("{k}={n}")).collect::<Vec<_>>().join(",");
        let root = observe::start(
            &tracer,
            "tessera.resched.cycle",
            &Context::new(),
            cycle_wall,
            vec![
                attr("tessera.trigger", trigger),
                attr("tessera.anomalies", kinds.clone()),
                KeyValue::new("tessera.max_moves", max_moves as i64),
                KeyValue::new("tessera.pods_running", running.len() as i64),
                attr("tessera.policy", self.doc.name.clone()),
            ],
            Vec::new(),
        );
        if let Some((wall, took)) = detected {
            observe::child(
                &tracer,
                "tessera.resched.detect",
                &root,
                wall,
                wall + took,
                vec![
                    attr("tessera.anomalies", kinds.clone()),
                    KeyValue::new("tessera.findings", cycle.anomalies.len() as i64),
                ],
                None,
            );
        }

        // Plan.
        let (plan_wall, started) = (SystemTime::now(), Instant::now());
        let plan = if cycle.anomalies.is_empty() {
            self.planner.plan(model.cluster(), &running, model.workload(), max_moves, None)
        } else {
            let nodes: Vec<u32> = cycle.anomalies.iter().map(|f| f.node).collect();
            self.planner.plan_focused(model.cluster(), &running, model.workload(), max_moves, &nodes)
        };
        let plan_took = started.elapsed();
        let plan_cx = observe::start(
            &tracer,
            "tessera.resched.plan",
            &root,
            plan_wall,
            vec![
                attr("tessera.solver", format!("{:?}", plan.solver).to_lowercase()),
                KeyValue::new("tessera.moves", plan.moves.len() as i64),
                KeyValue::new("tessera.gain", plan.gain),
                KeyValue::new("tessera.cost", plan.cost),
                KeyValue::new("tessera.fragmentation.before", plan.fragmentation_before),
                KeyValue::new("tessera.fragmentation.after", plan.fragmentation_after),
                KeyValue::new("tessera.whole_free_gpus.before", plan.whole_free_before as i64),
                KeyValue::new("tessera.whole_free_gpus.after", plan.whole_free_after as i64),
                KeyValue::new("tessera.timed_out", plan.timed_out),
            ],
            Vec::new(),
        );
        for ph in &plan.phases.0 {
            let name = if ph.name == "milp" { "tessera.resched.solve" } else { "tessera.resched.strategy" };
            observe::child(
                &tracer,
                name,
                &plan_cx,
                plan_wall + ph.start,
                plan_wall + ph.start + ph.took,
                vec![attr("tessera.strategy", ph.name), KeyValue::new("tessera.moves", ph.moves as i64)],
                None,
            );
        }
        observe::finish(&plan_cx, plan_wall + plan_took, None);
        self.shared.metrics.policy_execution.get_or_create(&PhaseLabel { phase: "plan".into() }).observe(
            plan_took.as_secs_f64(),
            None,
            None,
        );

        self.plan_seq += 1;
        let node_name = |id: u32| model.cluster().node(id).map_or_else(|| id.to_string(), |n| n.name.clone());
        let mut record = PlanRecord {
            id: self.plan_seq,
            at_unix_ms: crate::unix_ms(cycle_wall),
            backend_time_s: cycle.at,
            trigger: if kinds.is_empty() { trigger.to_string() } else { format!("{trigger}: {kinds}") },
            anomalies: by_kind.values().sum(),
            solver: format!("{:?}", plan.solver).to_lowercase(),
            timed_out: plan.timed_out,
            plan_ms: plan_took.as_secs_f64() * 1e3,
            fragmentation_before: plan.fragmentation_before,
            fragmentation_after: plan.fragmentation_after,
            whole_free_before: plan.whole_free_before,
            whole_free_after: plan.whole_free_after,
            gain: plan.gain,
            cost: plan.cost,
            state: if plan.moves.is_empty() { "empty".into() } else { "planned".into() },
            moves: plan
                .moves
                .iter()
                .map(|m| MoveRecord {
                    pod: self.pods.get(&ids[m.pod]).map_or_else(|| format!("pod-{}", ids[m.pod]), |p| p.name.clone()),
                    from: node_name(m.from.node),
                    to: node_name(m.to.node),
                    strategy: m.strategy.name().to_string(),
                    cost: m.cost,
                    state: "planned".into(),
                    reason: None,
                })
                .collect(),
            trace_id: String::new(),
        };

        if plan.moves.is_empty() {
            self.conclude(&root, record, trigger);
            return Vec::new();
        }
        let links: Vec<Option<SpanContext>> =
            plan.moves.iter().map(|m| self.pods.get(&ids[m.pod]).and_then(|p| p.placed_by.clone())).collect();
        let planned: Vec<(usize, Placement)> = plan.moves.iter().map(|m| (m.pod, m.to)).collect();
        if self.simulated.is_some() {
            let done = self.execute(model, &root, &running, &ids, &planned, &links, &mut record);
            self.conclude(&root, record, trigger);
            done.into_iter().map(|(i, to)| (ids[i], to)).collect()
        } else {
            let mplan = tessera_movement::Plan {
                id: self.plan_seq,
                moves: planned.iter().map(|&(i, to)| move_of(ids[i], &running[i].0, running[i].1, to)).collect(),
            };
            self.start_live(model, root, mplan, links, record, trigger);
            Vec::new()
        }
    }

    /// The cycle is over: its root span ends, its moves are counted, its
    /// record is kept.
    pub(super) fn conclude(&mut self, root: &Context, mut record: PlanRecord, trigger: &str) {
        let done = record.moves.iter().filter(|m| m.state == "done").count();
        root.span().set_attribute(KeyValue::new("tessera.moves.done", done as i64));
        let sc = observe::finish(root, SystemTime::now(), None);
        let (trace_id, _, sampled) = observe::ids(&sc);
        record.trace_id = trace_id.clone();
        let m = &self.shared.metrics;
        let ex = || TraceLabel::of(&trace_id, sampled);
        m.reschedule_attempts.get_or_create(&TriggerLabel { trigger: trigger.into() }).inc_by(1, ex(), None);
        for mv in &record.moves {
            match mv.state.as_str() {
                "done" => {
                    m.migrations.get_or_create(&StrategyLabel { strategy: mv.strategy.clone() }).inc_by(1, ex(), None);
                }
                // Not over here: a plan handed to the next leader.
                "planned" | "pending" | "reserved" | "evicted" | "started" => {}
                other => {
                    let code = format!("MOVE-{}", other.to_uppercase().replace('_', "-"));
                    m.migration_failures.get_or_create(&CodeLabel { code }).inc_by(1, ex(), None);
                }
            }
        }
        self.shared.plans.write().unwrap_or_else(|p| p.into_inner()).upsert(record);
    }

    /// Runs the plan through the Movement Manager on simulated time, all
    /// at once ([`tessera_movement::simulated`]); the moves done.
    #[allow(clippy::too_many_arguments)]
    fn execute(
        &mut self,
        model: &Model,
        root: &Context,
        running: &[(Pod, Placement)],
        ids: &[PodId],
        planned: &[(usize, Placement)],
        links: &[Option<SpanContext>],
        record: &mut PlanRecord,
    ) -> Vec<(usize, Placement)> {
        let Some(moves) = &mut self.simulated else { return Vec::new() };
        let tracer = self.tracing.tracer().clone();
        let (exec_wall, started) = (SystemTime::now(), Instant::now());
        let exec_cx = observe::start(&tracer, "tessera.movement.execute", root, exec_wall, Vec::new(), Vec::new());
        let mut times = StepTimes::default();
        let mut last = Duration::ZERO;
        let Executed { executor, execution_s, done, .. } =
            moves.execute(model.cluster(), running, ids, planned, &mut |ex| {
                let now = started.elapsed();
                times.saw(ex.states(), last, now);
                last = now;
            });
        let Some(ex) = executor else {
            record.state = "refused".into();
            observe::finish(&exec_cx, SystemTime::now(), Some("the executor refused the plan".into()));
            return Vec::new();
        };
        let took = started.elapsed();
        self.record_moves(&exec_cx, exec_wall, &ex, &times, links, record);
        exec_cx.span().set_attribute(KeyValue::new("tessera.executor_time_s", execution_s as i64));
        observe::finish(&exec_cx, exec_wall + took, ex.report().stopped.clone());
        self.shared.metrics.policy_execution.get_or_create(&PhaseLabel { phase: "execute".into() }).observe(
            took.as_secs_f64(),
            None,
            None,
        );
        done
    }

    /// Each move's fate into the record and a span under `exec_cx`; the
    /// report's counts onto `exec_cx`.
    pub(super) fn record_moves(
        &self,
        exec_cx: &Context,
        exec_wall: SystemTime,
        ex: &Executor,
        times: &StepTimes,
        links: &[Option<SpanContext>],
        record: &mut PlanRecord,
    ) {
        let tracer = self.tracing.tracer().clone();
        let report = ex.report();
        let dag = ex.dag();
        for (k, mv) in record.moves.iter_mut().enumerate() {
            let steps: Vec<usize> = (0..dag.steps.len()).filter(|&i| dag.steps[i].move_index == k).collect();
            let fate = match steps.iter().map(|&i| &ex.states()[i]).find(|s| **s != StepState::Done) {
                Some(s) => s.clone(),
                None if steps.is_empty() => {
                    let why = dag.dropped.iter().find(|d| d.move_index == k).map(|d| d.reason.clone());
                    StepState::Dropped { reason: why.unwrap_or_else(|| "not ordered".into()) }
                }
                None => StepState::Done,
            };
            let (state, reason) = state_of(&fate);
            let from = exec_wall + steps.iter().filter_map(|&i| times.first(i)).min().unwrap_or_default();
            let to =
                exec_wall + steps.iter().filter_map(|&i| times.last(i).or(times.first(i))).max().unwrap_or_default();
            let mut cx_links = Vec::new();
            if let Some(l) = &links[k] {
                cx_links.push(l.clone());
            }
            let span = observe::start(
                &tracer,
                "tessera.movement.move",
                exec_cx,
                from,
                vec![
                    attr("tessera.pod", mv.pod.clone()),
                    attr("tessera.move.from", mv.from.clone()),
                    attr("tessera.move.to", mv.to.clone()),
                    attr("tessera.strategy", mv.strategy.clone()),
                    KeyValue::new("tessera.move.cost", mv.cost),
                    attr("tessera.move.state", state.clone()),
                ],
                cx_links,
            );
            observe::finish(&span, to.max(from), reason.clone().filter(|_| state != "done"));
            mv.state = state;
            mv.reason = reason;
        }
        record.state = match &report.stopped {
            Some(why) => format!("stopped: {why}"),
            None => "executed".into(),
        };
        exec_cx.span().set_attributes([
            KeyValue::new("tessera.batches", i64::from(report.batches)),
            KeyValue::new("tessera.moves.executed", i64::from(report.executed)),
            KeyValue::new("tessera.moves.failed", i64::from(report.failed)),
            KeyValue::new("tessera.moves.rolled_back", i64::from(report.rolled_back)),
            KeyValue::new("tessera.moves.dropped", report.dropped.len() as i64),
        ]);
    }
}

/// When each step first left `Pending` and when it ended, as offsets from
/// the start of execution.
#[derive(Debug, Default)]
pub(super) struct StepTimes {
    first: Vec<Option<Duration>>,
    last: Vec<Option<Duration>>,
}

impl StepTimes {
    fn first(&self, step: usize) -> Option<Duration> {
        self.first.get(step).copied().flatten()
    }

    fn last(&self, step: usize) -> Option<Duration> {
        self.last.get(step).copied().flatten()
    }

    /// The states after a tick that began at `tick_at` and ended at `after`.
    pub(super) fn saw(&mut self, states: &[StepState], tick_at: Duration, after: Duration) {
        if self.first.len() < states.len() {
            self.first.resize(states.len(), None);
            self.last.resize(states.len(), None);
        }
        for (i, s) in states.iter().enumerate() {
            if self.first[i].is_none() && *s != StepState::Pending {
                self.first[i] = Some(tick_at);
            }
            if self.last[i].is_none() && s.is_terminal() {
                self.last[i] = Some(after);
            }
        }
    }
}
