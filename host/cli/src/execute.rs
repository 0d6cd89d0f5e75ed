//! Plans executed by the Movement Manager inside a simulation: the
//! simulator's [`Rescheduler`] that plans with the policy's planner, orders
//! the plan into a DAG, runs it in gray-release batches through a
//! [`SimActuator`] (reservations first, delays, failure rates, health
//! gates and rollback, disruption budgets, cooldowns across plans) on a
//! copy of the cluster, and hands back only the moves that ended done.
//!
//! The submissions protocol has no clock, so each plan runs to the end on
//! the executor's own clock before the next pod arrives; that clock runs on
//! across plans, so cooldowns hold between them.

use std::collections::BTreeMap;

use serde::Serialize;
use tessera_core::cluster::{Cluster, Placement};
use tessera_core::model::{GPU_MILLI, Pod};
use tessera_core::sim::Rescheduler;
use tessera_movement::exec::{Executor, MovementReport};
use tessera_movement::journal::MemJournal;
use tessera_movement::sim::{SimActuator, SimActuatorConfig};
use tessera_movement::{Move, MovementConfig, Plan, dag};
use tessera_resched::SimPlanner;

/// Seconds the executor's clock advances per tick.
const TICK_S: u64 = 5;

/// Most ticks one plan may take before it is abandoned (a bug guard: the
/// executor always finishes).
const MAX_TICKS: u64 = 1_000_000;

/// What executing every plan of a run added up to.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ExecutionTotals {
    /// Plans executed.
    pub plans: u64,
    /// Moves handed to the executor.
    pub moves_planned: u64,
    /// Moves done.
    pub executed: u64,
    /// Moves that failed (the pod stayed or was put back).
    pub failed: u64,
    /// Moves done, then moved back by a rollback.
    pub rolled_back: u64,
    /// Moves never attempted (cooldown, caps, budgets, no safe order).
    pub dropped: u64,
    /// Batches run.
    pub batches: u64,
    /// Plans stopped early by a health gate.
    pub stopped: u64,
    /// Most pods of each workload unavailable at once, over all plans
    /// (pods without a workload under `""`).
    pub peak_unavailable: BTreeMap<String, u32>,
    /// Workloads whose disruption budget a plan broke (must stay empty).
    pub budget_violations: Vec<String>,
    /// Seconds of executor time over all plans.
    pub execution_s: u64,
    /// Pods the executor lost (must be 0).
    pub lost: u64,
}

/// Plans with the planner, executes with the Movement Manager.
pub struct ExecutingRescheduler {
    planner: SimPlanner,
    movement: MovementConfig,
    actuator: SimActuatorConfig,
    clock: u64,
    history: BTreeMap<u64, u64>,
    totals: ExecutionTotals,
}

impl ExecutingRescheduler {
    /// `planner` executed with `movement` settings on a simulated
    /// actuator with `actuator` delays and failure rates.
    pub fn new(planner: SimPlanner, movement: MovementConfig, actuator: SimActuatorConfig) -> Self {
        Self { planner, movement, actuator, clock: 0, history: BTreeMap::new(), totals: ExecutionTotals::default() }
    }

    /// The planner (for its totals).
    pub fn planner(&self) -> &SimPlanner {
        &self.planner
    }

    /// Execution totals so far.
    pub fn totals(&self) -> &ExecutionTotals {
        &self.totals
    }

    fn absorb(&mut self, r: &MovementReport, moves: usize) {
        let t = &mut self.totals;
        t.plans += 1;
        t.moves_planned += moves as u64;
        t.executed += u64::from(r.executed);
        t.failed += u64::from(r.failed);
        t.rolled_back += u64::from(r.rolled_back);
        t.dropped += r.dropped.len() as u64;
        t.batches += u64::from(r.batches);
        t.stopped += u64::from(r.stopped.is_some());
        for (w, &n) in &r.peak_unavailable {
            let peak = t.peak_unavailable.entry(w.clone()).or_insert(0);
            *peak = (*peak).max(n);
        }
    }
}

impl tessera_chaos::twin::TwinRescheduler for ExecutingRescheduler {
    fn set_move_failure_rate(&mut self, p: f64) {
        self.actuator.evict_failure = p;
        self.actuator.start_failure = p;
    }

    fn moves_failed(&self) -> u64 {
        self.totals.failed + self.totals.rolled_back + self.totals.dropped
    }
}

impl Rescheduler for ExecutingRescheduler {
    fn plan(&mut self, cluster: &Cluster, running: &[(Pod, Placement)], max_moves: usize) -> Vec<(usize, Placement)> {
        let planned = self.planner.plan(cluster, running, max_moves);
        self.execute(cluster, running, planned)
    }

    fn plan_for(
        &mut self,
        cluster: &Cluster,
        running: &[(Pod, Placement)],
        max_moves: usize,
        anomalies: &[tessera_core::telemetry::Detection],
    ) -> Vec<(usize, Placement)> {
        let planned = self.planner.plan_for(cluster, running, max_moves, anomalies);
        self.execute(cluster, running, planned)
    }
}

impl ExecutingRescheduler {
    /// Runs `planned` through the Movement Manager; the moves that ended
    /// done, as final placements.
    fn execute(
        &mut self,
        cluster: &Cluster,
        running: &[(Pod, Placement)],
        planned: Vec<(usize, Placement)>,
    ) -> Vec<(usize, Placement)> {
        if planned.is_empty() {
            return Vec::new();
        }
        let plan = Plan {
            id: self.totals.plans + 1,
            moves: planned
                .iter()
                .map(|&(i, to)| {
                    let (spec, from) = &running[i];
                    let sharing = spec.gpu_count == 1 && spec.gpu_milli < GPU_MILLI;
                    Move {
                        pod: i as u64,
                        spec: spec.clone(),
                        from: *from,
                        to: to.node,
                        gpu_hint: if sharing { to.gpus.indices().next().map(|g| g as u8) } else { None },
                    }
                })
                .collect(),
        };
        let order = dag::build(cluster, &plan);
        let pods = running.iter().enumerate().map(|(i, (p, at))| (i as u64, p.clone(), *at)).collect();
        let mut act = SimActuator::new(
            cluster.clone(),
            pods,
            SimActuatorConfig { seed: self.actuator.seed ^ plan.id, ..self.actuator },
        );
        let mut journal = MemJournal::default();
        let Ok(ex) = Executor::start(self.movement.clone(), &plan, order, &mut journal) else { return Vec::new() };
        let mut ex = ex.with_history(std::mem::take(&mut self.history));
        let start = self.clock;
        let mut now = start;
        while !ex.finished() && now - start < MAX_TICKS * TICK_S {
            if ex.tick(&mut act, &mut journal, now).is_err() {
                break;
            }
            now += TICK_S;
        }
        self.clock = now;
        self.totals.execution_s += now - start;
        self.history = ex.moved().clone();
        let report = ex.report().clone();
        self.absorb(&report, plan.moves.len());
        for b in &self.movement.budgets {
            let peak = report.peak_unavailable.get(&b.workload).copied().unwrap_or(0);
            let size = running.iter().filter(|(p, _)| p.workload == b.workload).count() as u32;
            if peak > b.allowed_unavailable(size) && !self.totals.budget_violations.contains(&b.workload) {
                self.totals.budget_violations.push(b.workload.clone());
            }
        }
        // The moves that ended done: each pod's final placement if it moved.
        let now_at = act.placements();
        let mut out = Vec::new();
        for m in &plan.moves {
            match now_at.get(&m.pod).copied().flatten() {
                Some(p) if p != m.from => out.push((m.pod as usize, p)),
                Some(_) => {}
                None => self.totals.lost += 1,
            }
        }
        out
    }
}
