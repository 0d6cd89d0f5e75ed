//! Plans executed on simulated time: the one place a plan runs to the end
//! on the executor's own clock (the simulator, the chaos twin, `tessera
//! serve` on the simulator backend).
//!
//! [`SimulatedMoves`] orders a plan into a DAG and runs it in gray-release
//! batches through a [`SimActuator`] (reservations first, delays, failure
//! rates, health gates and rollback, disruption budgets) on a copy of the
//! cluster, and hands back the moves that ended done. Its clock runs on
//! across plans (5 s a tick), and so does the history of what moved when,
//! so cooldowns hold between plans. [`Executing`] puts a planner in front
//! of it: the simulator's rescheduler.

use std::collections::BTreeMap;

use serde::Serialize;
use tessera_core::cluster::{Cluster, Placement};
use tessera_core::framework::{Cycle, Reschedule, Rescheduler};
use tessera_core::model::{GPU_MILLI, Pod};
use tessera_core::sched::PodId;

use crate::exec::Executor;
use crate::journal::MemJournal;
use crate::sim::{SimActuator, SimActuatorConfig};
use crate::step::MovementReport;
use crate::{MovePlan, MovementConfig, PodMove, dag};

/// Seconds the executor's clock advances per tick.
pub const TICK_S: u64 = 5;

/// Most ticks one plan may take before it is abandoned (a bug guard: the
/// executor always finishes).
pub const MAX_TICKS: u64 = 1_000_000;

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

/// The move of `spec` from `from` to `to`: a pod sharing a GPU keeps the
/// planner's choice of GPU there as a hint.
pub fn move_of(pod: PodId, spec: &Pod, from: Placement, to: Placement) -> PodMove {
    let sharing = spec.gpu_count == 1 && spec.gpu_milli < GPU_MILLI;
    PodMove {
        pod,
        spec: spec.clone(),
        from,
        to: to.node,
        gpu_hint: if sharing { to.gpus.indices().next().map(|g| g as u8) } else { None },
    }
}

/// One plan's execution, for whoever reports on it.
pub struct Executed {
    /// The plan as the executor got it (pod ids are the caller's).
    pub plan: MovePlan,
    /// The executor at the end (its steps' states, DAG and report); none
    /// if it refused the plan.
    pub executor: Option<Executor>,
    /// Seconds of executor time it took.
    pub execution_s: u64,
    /// The moves that ended done: the index of each pod in the plan's
    /// `running` and where it runs now.
    pub done: Vec<(usize, Placement)>,
}

/// Plans run to the end on simulated time.
#[derive(Debug)]
pub struct SimulatedMoves {
    movement: MovementConfig,
    actuator: SimActuatorConfig,
    clock: u64,
    history: BTreeMap<PodId, u64>,
    totals: ExecutionTotals,
}

impl SimulatedMoves {
    /// Executes with `movement` settings on a simulated actuator with
    /// `actuator` delays and failure rates (each plan's draws seeded by
    /// `actuator.seed` and the plan's number).
    pub fn new(movement: MovementConfig, actuator: SimActuatorConfig) -> Self {
        Self { movement, actuator, clock: 0, history: BTreeMap::new(), totals: ExecutionTotals::default() }
    }

    /// Totals so far.
    pub fn totals(&self) -> &ExecutionTotals {
        &self.totals
    }

    /// New movement settings (a new policy); the clock and history stay.
    pub fn set_movement(&mut self, movement: MovementConfig) {
        self.movement = movement;
    }

    /// Probability that one step of a move (evict, start) fails, from now.
    pub fn set_failure_rate(&mut self, p: f64) {
        self.actuator.evict_failure = p;
        self.actuator.start_failure = p;
    }

    /// When each pod last moved (cooldowns), by pod id.
    pub fn history(&self) -> &BTreeMap<PodId, u64> {
        &self.history
    }

    /// Replaces the history (moves made elsewhere, e.g. live).
    pub fn set_history(&mut self, history: BTreeMap<PodId, u64>) {
        self.history = history;
    }

    /// Runs `moves` (index into `running`, target) over the pods running
    /// now on `cluster` (ids `ids`, in the same order) to the end;
    /// `on_tick` sees the executor after every tick.
    pub fn execute(
        &mut self,
        cluster: &Cluster,
        running: &[(Pod, Placement)],
        ids: &[PodId],
        moves: &[(usize, Placement)],
        on_tick: &mut dyn FnMut(&Executor),
    ) -> Executed {
        let plan = MovePlan {
            id: self.totals.plans + 1,
            moves: moves.iter().map(|&(i, to)| move_of(ids[i], &running[i].0, running[i].1, to)).collect(),
        };
        let index: BTreeMap<PodId, usize> = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let order = dag::build(cluster, &plan);
        let pods = ids.iter().zip(running).map(|(&id, (p, at))| (id, p.clone(), *at)).collect();
        let mut act = SimActuator::new(
            cluster.clone(),
            pods,
            SimActuatorConfig { seed: self.actuator.seed ^ plan.id, ..self.actuator },
        );
        let mut journal = MemJournal::default();
        let Ok(ex) = Executor::start(self.movement.clone(), &plan, order, &mut journal) else {
            return Executed { plan, executor: None, execution_s: 0, done: Vec::new() };
        };
        let mut ex = ex.with_history(std::mem::take(&mut self.history));
        let start = self.clock;
        let mut now = start;
        while !ex.finished() && now - start < MAX_TICKS * TICK_S {
            if ex.tick(&mut act, &mut journal, now).is_err() {
                break;
            }
            on_tick(&ex);
            now += TICK_S;
        }
        self.clock = now;
        self.history = ex.moved().clone();
        let report = ex.report().clone();
        self.absorb(&report, plan.moves.len(), now - start);
        for b in &self.movement.budgets {
            let peak = report.peak_unavailable.get(&b.workload).copied().unwrap_or(0);
            let size = running.iter().filter(|(p, _)| p.workload == b.workload).count() as u32;
            if peak > b.allowed_unavailable(size) && !self.totals.budget_violations.contains(&b.workload) {
                self.totals.budget_violations.push(b.workload.clone());
            }
        }
        // The moves that ended done: each pod's final placement if it moved.
        let now_at = act.placements();
        let mut done = Vec::new();
        for m in &plan.moves {
            match now_at.get(&m.pod).copied().flatten() {
                Some(p) if p != m.from => done.push((index[&m.pod], p)),
                Some(_) => {}
                None => self.totals.lost += 1,
            }
        }
        Executed { plan, executor: Some(ex), execution_s: now - start, done }
    }

    fn absorb(&mut self, r: &MovementReport, moves: usize, execution_s: u64) {
        let t = &mut self.totals;
        t.plans += 1;
        t.moves_planned += moves as u64;
        t.executed += u64::from(r.executed);
        t.failed += u64::from(r.failed);
        t.rolled_back += u64::from(r.rolled_back);
        t.dropped += r.dropped.len() as u64;
        t.batches += u64::from(r.batches);
        t.stopped += u64::from(r.stopped.is_some());
        t.execution_s += execution_s;
        for (w, &n) in &r.peak_unavailable {
            let peak = t.peak_unavailable.entry(w.clone()).or_insert(0);
            *peak = (*peak).max(n);
        }
    }
}

/// A planner whose plans are executed on simulated time: the simulator's
/// rescheduler.
pub struct Executing<R> {
    planner: R,
    moves: SimulatedMoves,
}

impl<R: Rescheduler> Executing<R> {
    /// `planner`'s plans executed with `movement` settings on a simulated
    /// actuator with `actuator` delays and failure rates.
    pub fn new(planner: R, movement: MovementConfig, actuator: SimActuatorConfig) -> Self {
        Self { planner, moves: SimulatedMoves::new(movement, actuator) }
    }

    /// The planner (for its totals).
    pub fn planner(&self) -> &R {
        &self.planner
    }

    /// Execution totals so far.
    pub fn totals(&self) -> &ExecutionTotals {
        self.moves.totals()
    }

    /// Probability that one step of a move fails, from now.
    pub fn set_failure_rate(&mut self, p: f64) {
        self.moves.set_failure_rate(p);
    }

    fn run(
        &mut self,
        cluster: &Cluster,
        running: &[(Pod, Placement)],
        ids: &[PodId],
        planned: Vec<(usize, Placement)>,
    ) -> Vec<(usize, Placement)> {
        if planned.is_empty() {
            return Vec::new();
        }
        self.moves.execute(cluster, running, ids, &planned, &mut |_| {}).done
    }
}

/// The submissions protocol (no pod ids: a pod's index in `running` is
/// its identity there, and stays so).
impl<R: Rescheduler> Rescheduler for Executing<R> {
    fn plan(&mut self, cluster: &Cluster, running: &[(Pod, Placement)], max_moves: usize) -> Vec<(usize, Placement)> {
        let planned = self.planner.plan(cluster, running, max_moves);
        let ids: Vec<PodId> = (0..running.len() as PodId).collect();
        self.run(cluster, running, &ids, planned)
    }
}

/// The online loop's cycles.
impl<R: Rescheduler> Reschedule for Executing<R> {
    fn reschedule(
        &mut self,
        cluster: &Cluster,
        running: &[(Pod, Placement)],
        ids: &[PodId],
        cycle: &Cycle<'_>,
    ) -> Vec<(usize, Placement)> {
        let planned = if cycle.anomalies.is_empty() {
            self.planner.plan(cluster, running, cycle.max_moves)
        } else {
            self.planner.plan_for(cluster, running, cycle.max_moves, cycle.anomalies)
        };
        self.run(cluster, running, ids, planned)
    }
}
