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
use tessera_core::model::{Pod, PodId, Tier};
use tessera_movement::simulated::{Executed, SimulatedMoves, move_of};
use tessera_policy::PolicyDocument;

use super::env::Env;
use super::live::LiveMoves;
use super::pods::Pods;
use super::report::{StepTimes, conclude, record_moves};
use crate::backend::Moves;
use crate::metrics::PhaseLabel;
use crate::observe::{self, attr};
use crate::record::{MoveRecord, MoveState, PlanRecord, PlanState};

/// The rescheduler of the service: the policy's planner, moves on
/// simulated time (the simulator backend) or live, plan numbers, and the
/// last detection round's timing (the cycle's trace shows it).
pub(super) struct Cycles {
    planner: tessera_resched::Planner,
    /// None: moves are live, across passes.
    simulated: Option<SimulatedMoves>,
    plan_seq: u64,
    /// When the last detection round ran and how long it took.
    pub last_detect: Option<(SystemTime, Duration)>,
}

impl Cycles {
    /// The cycles of `doc`'s planner, moves carried out as the backend's
    /// `moves` say.
    pub fn new(doc: &PolicyDocument, moves: Moves) -> Self {
        let simulated = match moves {
            Moves::Simulated(actuator) => Some(SimulatedMoves::new(doc.movement.clone(), actuator)),
            Moves::Live => None,
        };
        Self {
            planner: tessera_resched::Planner::new(doc.rescheduling.clone()),
            simulated,
            plan_seq: 0,
            last_detect: None,
        }
    }

    /// A new active policy: its planner and movement settings from now on
    /// (the moves' clock and cooldowns stay).
    pub fn install(&mut self, doc: &PolicyDocument) {
        self.planner = tessera_resched::Planner::new(doc.rescheduling.clone());
        if let Some(m) = &mut self.simulated {
            m.set_movement(doc.movement.clone());
        }
    }

    /// A plan resumed from the journal took number `id`: later ones follow.
    pub fn resumed(&mut self, id: u64) {
        self.plan_seq = self.plan_seq.max(id);
    }

    /// A rescheduling cycle the loop asked for: plan on the cluster as it
    /// stands, execute (on simulated time, or start a live plan); the
    /// moves done, for the loop to apply.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &mut self,
        env: &mut Env<'_>,
        model: &mut Model,
        pods: &Pods,
        live: &mut LiveMoves,
        policy: &str,
        cycle: &Cycle<'_>,
    ) -> Vec<(PodId, Placement)> {
        let detected = (cycle.trigger == Trigger::Anomalies).then_some(self.last_detect).flatten();
        let cycle_wall = detected.map_or_else(SystemTime::now, |(wall, _)| wall);
        let trigger = cycle.trigger.name();
        let (ids, mut running) = model.for_planner();
        // Pods the backend will not move (nothing would recreate them, a
        // disruption budget forbids it now) are pinned for the planner,
        // which never moves a hard-tier pod.
        for ((pod, _), &id) in running.iter_mut().zip(&ids) {
            if pod.tier != Tier::Hard && env.backend.live().is_some_and(|l| l.movable(id).is_err()) {
                pod.tier = Tier::Hard;
            }
        }
        let max_moves = cycle.max_moves;
        let tracer = env.tracing.tracer().clone();
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
                attr("tessera.policy", policy.to_string()),
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
        env.shared.metrics.policy_execution.get_or_create(&PhaseLabel { phase: "plan".into() }).observe(
            plan_took.as_secs_f64(),
            None,
            None,
        );

        self.plan_seq += 1;
        let node_name = |id: u32| model.cluster().node(id).map_or_else(|| id.to_string(), |n| n.name.clone());
        let mut record = PlanRecord {
            id: self.plan_seq,
            at_unix_ms: crate::wall::unix_ms(cycle_wall),
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
            state: if plan.moves.is_empty() { PlanState::Empty } else { PlanState::Planned },
            reason: None,
            moves: plan
                .moves
                .iter()
                .map(|m| MoveRecord {
                    pod: pods.name(ids[m.pod]),
                    from: node_name(m.from.node),
                    to: node_name(m.to.node),
                    strategy: m.strategy.name().to_string(),
                    cost: m.cost,
                    state: MoveState::Planned,
                    reason: None,
                    after: Vec::new(),
                })
                .collect(),
            trace_id: String::new(),
        };

        if plan.moves.is_empty() {
            conclude(env.shared, &root, record, trigger);
            return Vec::new();
        }
        let links: Vec<Option<SpanContext>> = plan.moves.iter().map(|m| pods.placed_by(ids[m.pod])).collect();
        let planned: Vec<(usize, Placement)> = plan.moves.iter().map(|m| (m.pod, m.to)).collect();
        let mplan = tessera_movement::MovePlan {
            id: self.plan_seq,
            moves: planned.iter().map(|&(i, to)| move_of(ids[i], &running[i].0, running[i].1, to)).collect(),
        };
        // What each move waits for, as the Movement Manager orders them
        // (the console draws the plan's DAG from it).
        let waits = tessera_movement::dag::build(model.cluster(), &mplan).waits_for(record.moves.len());
        for (m, after) in record.moves.iter_mut().zip(waits) {
            m.after = after;
        }
        if self.simulated.is_some() {
            let done = self.execute(env, model, &root, &running, &ids, &planned, &links, &mut record);
            conclude(env.shared, &root, record, trigger);
            done.into_iter().map(|(i, to)| (ids[i], to)).collect()
        } else {
            live.start(env, model, root, mplan, links, record, trigger);
            Vec::new()
        }
    }

    /// Runs the plan through the Movement Manager on simulated time, all
    /// at once ([`tessera_movement::simulated`]); the moves done.
    #[allow(clippy::too_many_arguments)]
    fn execute(
        &mut self,
        env: &mut Env<'_>,
        model: &Model,
        root: &Context,
        running: &[(Pod, Placement)],
        ids: &[PodId],
        planned: &[(usize, Placement)],
        links: &[Option<SpanContext>],
        record: &mut PlanRecord,
    ) -> Vec<(usize, Placement)> {
        let Some(moves) = &mut self.simulated else { return Vec::new() };
        let tracer = env.tracing.tracer().clone();
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
            (record.state, record.reason) = (PlanState::Refused, Some("the executor refused the plan".into()));
            observe::finish(&exec_cx, SystemTime::now(), record.reason.clone());
            return Vec::new();
        };
        let took = started.elapsed();
        record_moves(env.tracing, &exec_cx, exec_wall, &ex, &times, links, record);
        exec_cx.span().set_attribute(KeyValue::new("tessera.executor_time_s", execution_s as i64));
        observe::finish(&exec_cx, exec_wall + took, ex.report().stopped.clone());
        env.shared.metrics.policy_execution.get_or_create(&PhaseLabel { phase: "execute".into() }).observe(
            took.as_secs_f64(),
            None,
            None,
        );
        done
    }
}
