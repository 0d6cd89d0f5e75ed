//! `tessera plan`: what the rescheduler would do now, acting on nothing.
//!
//! Places the workload on the simulator with the policy (the published
//! protocol), then has the policy's planner plan once on the cluster as it
//! stands, orders the plan into the Movement Manager's DAG and prints the
//! batches it would run and what each step would do (a dry run).

use anyhow::Result;
use serde::Serialize;
use tessera_core::model::GPU_MILLI;
use tessera_core::sim::Simulator;
use tessera_movement::{PodMove, dag, exec};
use tessera_resched::Plan;

use crate::load;
use crate::sim::{Inputs, SimOptions, inject_workload, load_inputs, policy_document};

/// The plan and its dry run.
#[derive(Debug, Serialize)]
pub struct PlanOutcome {
    /// The policy.
    pub policy: String,
    /// Pods running when the plan was made.
    pub running: usize,
    /// The plan (moves index the running pods in submission order).
    pub plan: Plan,
    /// Moves the DAG left out, with why.
    pub dropped: Vec<String>,
    /// The batches the Movement Manager would run, each step described.
    pub batches: Vec<Vec<String>>,
}

/// Simulates placement, then plans once with at most `max_moves` moves.
pub fn run(opts: &SimOptions, max_moves: usize) -> Result<PlanOutcome> {
    let rt = crate::replay::runtime(None)?;
    let Inputs { nodes, submissions, workload, .. } = load_inputs(opts)?;
    let mut doc = policy_document(&opts.policy, opts.seed)?;
    if let Some(t) = opts.tie_break {
        doc.tie_break = t;
    }
    inject_workload(&mut doc, &workload);
    let mut policy = load::load_policy(&rt, &doc)?.without_timeout();
    let (_, cluster, running) = Simulator::new(nodes, workload.clone(), &mut policy).run_submissions_keep(&submissions);
    let planner = tessera_resched::Planner::new(doc.rescheduling.clone());
    let plan = planner.plan(&cluster, &running, &workload, max_moves, None);
    let moves = tessera_movement::MovePlan {
        id: 1,
        moves: plan
            .moves
            .iter()
            .map(|m| {
                let spec = running[m.pod].0.clone();
                let sharing = spec.gpu_count == 1 && spec.gpu_milli < GPU_MILLI;
                PodMove {
                    pod: m.pod as u64,
                    gpu_hint: if sharing { m.to.gpus.indices().next().map(|g| g as u8) } else { None },
                    spec,
                    from: m.from,
                    to: m.to.node,
                }
            })
            .collect(),
    };
    let order = dag::build(&cluster, &moves);
    let dropped = order.dropped.iter().map(|d| format!("move {}: {}", d.move_index, d.reason)).collect();
    let batches = exec::dry_run(&doc.movement, &order);
    Ok(PlanOutcome { policy: doc.name.clone(), running: running.len(), plan, dropped, batches })
}

impl PlanOutcome {
    /// The plan's figures, then the batches.
    pub fn to_table(&self) -> String {
        let p = &self.plan;
        let mut out = format!(
            "policy {} — {} pods running; dry run, nothing acted on\n\
             moves {} (freeing {} whole GPUs: {} → {}; fragmentation {:.0} → {:.0} milli-GPU)\n\
             cost {:.2}, gain {:.2}, migration time {:.0} s; solver {:?}{}\n",
            self.policy,
            self.running,
            p.moves.len(),
            p.freed_gpus(),
            p.whole_free_before,
            p.whole_free_after,
            p.fragmentation_before,
            p.fragmentation_after,
            p.cost,
            p.gain,
            p.migration_time_s,
            p.solver,
            if p.timed_out { " (time limit: best plan so far)" } else { "" },
        );
        for d in &self.dropped {
            out += &format!("dropped: {d}\n");
        }
        for (k, b) in self.batches.iter().enumerate() {
            out += &format!("batch {}:\n", k + 1);
            for step in b {
                out += &format!("  {step}\n");
            }
        }
        out
    }
}
