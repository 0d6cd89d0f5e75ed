//! What a rescheduling cycle leaves behind, whether its plan ran on
//! simulated time or live: each move's fate in the plan's record and a
//! span (`tessera.movement.move`, linked to the pod's placement trace),
//! the cycle's metrics (with its trace as exemplar), the record in the
//! plan log.

use std::time::{Duration, SystemTime};

use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry::{Context, KeyValue};
use tessera_movement::exec::{Executor, StepState};

use crate::metrics::{CodeLabel, StrategyLabel, TraceLabel, TriggerLabel};
use crate::observe::{self, Tracing, attr};
use crate::record::{MoveState, PlanRecord, PlanState};
use crate::state::Shared;

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

/// Each move's fate into `record` and a span under `exec_cx`; the
/// executor's counts onto `exec_cx`.
pub(super) fn record_moves(
    tracing: &Tracing,
    exec_cx: &Context,
    exec_wall: SystemTime,
    ex: &Executor,
    times: &StepTimes,
    links: &[Option<SpanContext>],
    record: &mut PlanRecord,
) {
    let tracer = tracing.tracer();
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
        let (state, reason) = MoveState::of(&fate);
        let from = exec_wall + steps.iter().filter_map(|&i| times.first(i)).min().unwrap_or_default();
        let to = exec_wall + steps.iter().filter_map(|&i| times.last(i).or(times.first(i))).max().unwrap_or_default();
        let span = observe::start(
            tracer,
            "tessera.movement.move",
            exec_cx,
            from,
            vec![
                attr("tessera.pod", mv.pod.clone()),
                attr("tessera.move.from", mv.from.clone()),
                attr("tessera.move.to", mv.to.clone()),
                attr("tessera.strategy", mv.strategy.clone()),
                KeyValue::new("tessera.move.cost", mv.cost),
                attr("tessera.move.state", state.as_str()),
            ],
            links.get(k).cloned().flatten().into_iter().collect(),
        );
        observe::finish(&span, to.max(from), reason.clone().filter(|_| state != MoveState::Done));
        mv.state = state;
        mv.reason = reason;
    }
    (record.state, record.reason) = match &report.stopped {
        Some(why) => (PlanState::Stopped, Some(why.clone())),
        None => (PlanState::Executed, None),
    };
    exec_cx.span().set_attributes([
        KeyValue::new("tessera.batches", i64::from(report.batches)),
        KeyValue::new("tessera.moves.executed", i64::from(report.executed)),
        KeyValue::new("tessera.moves.failed", i64::from(report.failed)),
        KeyValue::new("tessera.moves.rolled_back", i64::from(report.rolled_back)),
        KeyValue::new("tessera.moves.dropped", report.dropped.len() as i64),
    ]);
}

/// The cycle is over: its root span ends, its moves are counted, its
/// record is kept.
pub(super) fn conclude(shared: &Shared, root: &Context, mut record: PlanRecord, trigger: &str) {
    let done = record.moves.iter().filter(|m| m.state == MoveState::Done).count();
    root.span().set_attribute(KeyValue::new("tessera.moves.done", done as i64));
    let sc = observe::finish(root, SystemTime::now(), None);
    let (trace_id, _, sampled) = observe::ids(&sc);
    record.trace_id = trace_id.clone();
    let m = &shared.metrics;
    let ex = || TraceLabel::of(&trace_id, sampled);
    m.reschedule_attempts.get_or_create(&TriggerLabel { trigger: trigger.into() }).inc_by(1, ex(), None);
    for mv in &record.moves {
        if mv.state == MoveState::Done {
            m.migrations.get_or_create(&StrategyLabel { strategy: mv.strategy.clone() }).inc_by(1, ex(), None);
        } else if let Some(code) = mv.state.failure_code() {
            // (A move not over is a plan handed to the next leader.)
            m.migration_failures.get_or_create(&CodeLabel { code: code.into() }).inc_by(1, ex(), None);
        }
    }
    shared.plans.write().unwrap_or_else(|p| p.into_inner()).upsert(record);
}
