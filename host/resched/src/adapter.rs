//! The planner as the simulator's [`Rescheduler`]: every plan it makes is
//! kept for the report (moves by strategy, cost, gain, planning time).

use std::time::Instant;

use serde::{Deserialize, Serialize};
use tessera_core::cluster::{Cluster, Placement};
use tessera_core::framework::Rescheduler;
use tessera_core::metrics::TargetWorkload;
use tessera_core::model::{NodeId, Pod};
use tessera_core::telemetry::Detection;

use crate::controller::Planner;
use crate::plan::{Plan, Strategy};

/// What the plans of a run added up to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanTotals {
    /// Plans made.
    pub plans: u64,
    /// Plans with at least one move.
    pub plans_with_moves: u64,
    /// Moves planned, by strategy name.
    pub moves_by_strategy: std::collections::BTreeMap<String, u64>,
    /// Whole GPUs the plans freed (as planned).
    pub freed_gpus: i64,
    /// Sum of the plans' costs.
    pub cost: f64,
    /// Sum of their gains.
    pub gain: f64,
    /// Estimated migration time of every move, seconds.
    pub migration_time_s: f64,
    /// Plans cut short by the time limit.
    pub timed_out: u64,
    /// Planning time, milliseconds (not serialized: run files stay
    /// byte-identical for equal inputs).
    #[serde(skip)]
    pub plan_ms_total: f64,
    /// The slowest plan, milliseconds (not serialized).
    #[serde(skip)]
    pub plan_ms_max: f64,
}

/// The planner with the workload fragmentation is weighed against.
pub struct SimPlanner {
    planner: Planner,
    workload: TargetWorkload,
    totals: PlanTotals,
    last: Option<Plan>,
}

impl SimPlanner {
    /// `planner` judging fragmentation against `workload`.
    pub fn new(planner: Planner, workload: TargetWorkload) -> Self {
        Self { planner, workload, totals: PlanTotals::default(), last: None }
    }

    /// Totals so far.
    pub fn totals(&self) -> &PlanTotals {
        &self.totals
    }

    /// The last plan made.
    pub fn last(&self) -> Option<&Plan> {
        self.last.as_ref()
    }
}

impl SimPlanner {
    fn record(&mut self, plan: Plan, ms: f64) -> Vec<(usize, Placement)> {
        let t = &mut self.totals;
        t.plans += 1;
        t.plans_with_moves += u64::from(!plan.moves.is_empty());
        for s in Strategy::ALL {
            let n = plan.moves_by_strategy(s) as u64;
            if n > 0 {
                *t.moves_by_strategy.entry(s.name().to_string()).or_insert(0) += n;
            }
        }
        t.freed_gpus += plan.freed_gpus();
        t.cost += plan.cost;
        t.gain += plan.gain;
        t.migration_time_s += plan.migration_time_s;
        t.timed_out += u64::from(plan.timed_out);
        t.plan_ms_total += ms;
        t.plan_ms_max = t.plan_ms_max.max(ms);
        let moves = plan.moves.iter().map(|m| (m.pod, m.to)).collect();
        self.last = Some(plan);
        moves
    }
}

impl Rescheduler for SimPlanner {
    fn plan(&mut self, cluster: &Cluster, running: &[(Pod, Placement)], max_moves: usize) -> Vec<(usize, Placement)> {
        let started = Instant::now();
        let plan = self.planner.plan(cluster, running, &self.workload, max_moves, None);
        self.record(plan, started.elapsed().as_secs_f64() * 1e3)
    }

    /// Moves off the flagged nodes only.
    fn plan_for(
        &mut self,
        cluster: &Cluster,
        running: &[(Pod, Placement)],
        max_moves: usize,
        anomalies: &[Detection],
    ) -> Vec<(usize, Placement)> {
        let started = Instant::now();
        let nodes: Vec<NodeId> = anomalies.iter().map(|d| d.node).collect();
        let plan = self.planner.plan_focused(cluster, running, &self.workload, max_moves, &nodes);
        self.record(plan, started.elapsed().as_secs_f64() * 1e3)
    }
}
