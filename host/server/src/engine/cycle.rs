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
use tessera_core::model::{GPU_MILLI, Pod};
use tessera_core::telemetry::Detection;
use tessera_movement::exec::{Executor, StepState};
use tessera_movement::journal::MemJournal;

use super::Engine;
use crate::metrics::{CodeLabel, PhaseLabel, StrategyLabel, TraceLabel, TriggerLabel};
use crate::observe::{self, attr};
use crate::record::{MoveRecord, PlanRecord};

/// Seconds the executor's clock advances per tick.
const EXEC_TICK_S: u64 = 5;
/// Bug guard: ticks one plan may take.
const MAX_EXEC_TICKS: u64 = 100_000;

/// A detection round that found anomalies.
pub(crate) struct Detected {
    pub wall: SystemTime,
    pub took: Duration,
    pub findings: Vec<Detection>,
}

fn state_of(s: &StepState) -> (String, Option<String>) {
    match s {
        StepState::Done => ("done".into(), None),
        StepState::Failed { reason } => ("failed".into(), Some(reason.clone())),
        StepState::RolledBack { reason } => ("rolled_back".into(), Some(reason.clone())),
        StepState::Dropped { reason } => ("dropped".into(), Some(reason.clone())),
        StepState::Restoring { reason, .. } => ("restoring".into(), Some(reason.clone())),
        other => (format!("{other:?}").to_lowercase(), None),
    }
}

impl Engine {
    pub(super) fn reschedule(&mut self, now: u64, detected: Option<Detected>) {
        let cycle_wall = detected.as_ref().map_or_else(SystemTime::now, |d| d.wall);
        let trigger = if detected.is_some() { "anomalies" } else { "periodic" };
        let (ids, running): (Vec<u64>, Vec<(Pod, Placement)>) =
            self.sched.running().map(|(id, p, at)| (id, (p.clone(), at))).unzip();
        let max_moves = (self.cfg.max_migrations_pct / 100.0 * running.len() as f64).floor() as usize;
        let tracer = self.tracing.tracer().clone();
        let mut by_kind: BTreeMap<&str, u32> = BTreeMap::new();
        for f in detected.iter().flat_map(|d| &d.findings) {
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
        if let Some(d) = &detected {
            observe::child(
                &tracer,
                "tessera.resched.detect",
                &root,
                d.wall,
                d.wall + d.took,
                vec![
                    attr("tessera.anomalies", kinds.clone()),
                    KeyValue::new("tessera.findings", d.findings.len() as i64),
                ],
                None,
            );
        }

        // Plan.
        let (plan_wall, started) = (SystemTime::now(), Instant::now());
        let plan = if max_moves == 0 {
            tessera_resched::Plan::default()
        } else if let Some(d) = &detected {
            let nodes: Vec<u32> = d.findings.iter().map(|f| f.node).collect();
            self.planner.plan_focused(self.sched.cluster(), &running, &self.workload, max_moves, &nodes)
        } else {
            self.planner.plan(self.sched.cluster(), &running, &self.workload, max_moves, None)
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
        let node_name = |id: u32| self.sched.cluster().node(id).map_or_else(|| id.to_string(), |n| n.name.clone());
        let mut record = PlanRecord {
            id: self.plan_seq,
            at_unix_ms: crate::unix_ms(cycle_wall),
            backend_time_s: now,
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

        let mut failures = 0u64;
        if !plan.moves.is_empty() {
            let links: Vec<Option<SpanContext>> =
                plan.moves.iter().map(|m| self.pods.get(&ids[m.pod]).and_then(|p| p.placed_by.clone())).collect();
            failures = self.execute(&root, &plan, &ids, &running, &links, &mut record);
        }
        let done = record.moves.iter().filter(|m| m.state == "done").count();
        root.span().set_attribute(KeyValue::new("tessera.moves.done", done as i64));
        let sc = observe::finish(&root, SystemTime::now(), None);
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
                "planned" => {}
                other => {
                    let code = format!("MOVE-{}", other.to_uppercase().replace('_', "-"));
                    m.migration_failures.get_or_create(&CodeLabel { code }).inc_by(1, ex(), None);
                }
            }
        }
        debug_assert!(failures as usize <= record.moves.len());
        self.shared.plans.write().unwrap_or_else(|p| p.into_inner()).upsert(record);
    }

    /// Runs the plan through the Movement Manager; applies the moves that
    /// ended done to the cluster; the number that did not.
    fn execute(
        &mut self,
        root: &Context,
        plan: &tessera_resched::Plan,
        ids: &[u64],
        running: &[(Pod, Placement)],
        links: &[Option<SpanContext>],
        record: &mut PlanRecord,
    ) -> u64 {
        let tracer = self.tracing.tracer().clone();
        let (exec_wall, started) = (SystemTime::now(), Instant::now());
        let mplan = tessera_movement::Plan {
            id: self.plan_seq,
            moves: plan
                .moves
                .iter()
                .map(|m| {
                    let spec = &running[m.pod].0;
                    let sharing = spec.gpu_count == 1 && spec.gpu_milli < GPU_MILLI;
                    tessera_movement::Move {
                        pod: m.pod as u64,
                        spec: spec.clone(),
                        from: m.from,
                        to: m.to.node,
                        gpu_hint: if sharing { m.to.gpus.indices().next().map(|g| g as u8) } else { None },
                    }
                })
                .collect(),
        };
        let cluster = self.sched.cluster().clone();
        let order = tessera_movement::dag::build(&cluster, &mplan);
        let pods = running.iter().enumerate().map(|(i, (p, at))| (i as u64, p.clone(), *at)).collect();
        let mut act = self.backend.actuator(&cluster, pods, self.plan_seq);
        let mut journal = MemJournal::default();
        let exec_cx = observe::start(&tracer, "tessera.movement.execute", root, exec_wall, Vec::new(), Vec::new());
        let Ok(ex) = Executor::start(self.doc.movement.clone(), &mplan, order, &mut journal) else {
            record.state = "refused".into();
            observe::finish(&exec_cx, SystemTime::now(), Some("the executor refused the plan".into()));
            return plan.moves.len() as u64;
        };
        let mut ex = ex.with_history(std::mem::take(&mut self.exec_history));
        // When each step first left `Pending` and when it ended, wall time.
        let n = mplan.moves.len();
        let mut first: Vec<Option<Duration>> = vec![None; n];
        let mut last: Vec<Option<Duration>> = vec![None; n];
        let mut clock = self.exec_clock;
        let begin = clock;
        while !ex.finished() && clock - begin < MAX_EXEC_TICKS * EXEC_TICK_S {
            let tick_at = started.elapsed();
            if ex.tick(act.as_mut(), &mut journal, clock).is_err() {
                break;
            }
            let after = started.elapsed();
            for (i, s) in ex.states().iter().enumerate() {
                if first[i].is_none() && *s != StepState::Pending {
                    first[i] = Some(tick_at);
                }
                if last[i].is_none() && s.is_terminal() {
                    last[i] = Some(after);
                }
            }
            clock += EXEC_TICK_S;
        }
        self.exec_clock = clock;
        self.exec_history = ex.moved().clone();
        let report = ex.report().clone();

        // Apply what ended done; record every move's fate.
        let placements = act.placements();
        let mut failed = 0u64;
        for (i, m) in mplan.moves.iter().enumerate() {
            let (state, reason) = state_of(&ex.states()[i]);
            let now_at = placements.get(&m.pod).copied().flatten();
            if let Some(to) = now_at.filter(|p| *p != m.from)
                && self.sched.migrate(ids[m.pod as usize], to).is_ok()
            {
                self.tracker.update(&self.sched.cluster().nodes()[m.from.node as usize], &self.workload);
                self.tracker.update(&self.sched.cluster().nodes()[to.node as usize], &self.workload);
            }
            failed += u64::from(state != "done");
            let from = exec_wall + first[i].unwrap_or_default();
            let to = exec_wall + last[i].or(first[i]).unwrap_or_default();
            let mut cx_links = Vec::new();
            if let Some(l) = &links[i] {
                cx_links.push(l.clone());
            }
            let mv = &mut record.moves[i];
            let span = observe::start(
                &tracer,
                "tessera.movement.move",
                &exec_cx,
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
        let took = started.elapsed();
        exec_cx.span().set_attributes([
            KeyValue::new("tessera.batches", i64::from(report.batches)),
            KeyValue::new("tessera.moves.executed", i64::from(report.executed)),
            KeyValue::new("tessera.moves.failed", i64::from(report.failed)),
            KeyValue::new("tessera.moves.rolled_back", i64::from(report.rolled_back)),
            KeyValue::new("tessera.moves.dropped", report.dropped.len() as i64),
            KeyValue::new("tessera.executor_time_s", (clock - begin) as i64),
        ]);
        observe::finish(&exec_cx, exec_wall + took, report.stopped.clone());
        self.shared.metrics.policy_execution.get_or_create(&PhaseLabel { phase: "execute".into() }).observe(
            took.as_secs_f64(),
            None,
            None,
        );
        failed
    }
}
