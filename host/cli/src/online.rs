//! `tessera sim --online`: the scheduling loop (queue, tiers, preemption,
//! node sampling, adaptive weights) over arrivals and departures in time,
//! with the telemetry model and zone carbon intensity feeding the plugins.

use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;
use tessera_core::driver::{DriverConfig, LoopReport};
use tessera_core::sim::online::run_online_with;
use tessera_core::synthetic;
use tessera_core::telemetry::TelemetryConfig;
use tessera_movement::simulated::{Executing, ExecutionTotals};

use crate::load;
use crate::sim::describe;
use crate::sim::{Inputs, SimOptions, load_inputs, policy_document, trace_arrivals};

/// What `run.json` holds for an online run (no timings).
#[derive(Debug, Serialize)]
pub struct OnlineFile {
    /// Policy name.
    pub policy: String,
    /// Seed.
    pub seed: u64,
    /// Node source.
    pub nodes: String,
    /// Pod source.
    pub pods: String,
    /// Always `online`.
    pub protocol: &'static str,
    /// Whether weights were adaptive.
    pub adaptive: bool,
    /// The report.
    pub report: LoopReport,
    /// With rescheduling: what the plans added up to and how the Movement
    /// Manager executed them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plans: Option<tessera_resched::PlanTotals>,
    /// Execution of the plans.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution: Option<ExecutionTotals>,
}

/// A finished online run.
pub struct OnlineOutcome {
    /// What goes into `run.json`.
    pub file: OnlineFile,
    /// Nodes simulated.
    pub nodes: usize,
    /// Wall time, seconds.
    pub wall_s: f64,
}

/// Runs the online protocol: trace pods by their creation and deletion
/// times, or the built-in workload as a Poisson stream at `inflate` × the
/// GPU capacity.
pub fn run(opts: &SimOptions, telemetry_interval_s: u64) -> Result<OnlineOutcome> {
    let rt = crate::replay::runtime(None)?;
    let Inputs { nodes, trace_pods, rows, workload, .. } = load_inputs(opts)?;
    let total_gpus: u64 = nodes.iter().map(|n| n.gpus.len() as u64).sum();
    let arrivals = match &rows {
        Some(rows) => trace_arrivals(rows),
        None => {
            // Enough pods for the cluster to run in a steady state for a
            // few mean run times (the published lists are ~1.3 pods/GPU).
            let models = synthetic::gpu_models(&nodes);
            let count = trace_pods.len().max(6 * total_gpus as usize);
            synthetic::arrivals(&synthetic::pods(count, &models, opts.seed), total_gpus, opts.inflate, opts.seed)
        }
    };
    let mut doc = policy_document(&opts.policy, opts.seed)?;
    if let Some(t) = opts.tie_break {
        doc.tie_break = t;
    }
    crate::sim::inject_workload(&mut doc, &workload);
    let mut policy = load::load_policy(&rt, &doc)?.without_timeout();
    let cfg = DriverConfig {
        sched: doc.scheduling,
        queues: doc.queue_tree(),
        telemetry: TelemetryConfig { interval_s: telemetry_interval_s, ..TelemetryConfig::default() },
        seed: opts.seed,
        weight_sets: doc.adaptive.as_ref().map(|a| a.weight_sets.clone()).unwrap_or_default(),
        detection: doc.detection,
        max_moves_share: opts.reschedule.unwrap_or(0.0),
        ..DriverConfig::default()
    };
    // With --reschedule, anomalies found by the policy's detectors trigger a
    // plan, executed through the Movement Manager.
    let mut exec = opts.reschedule.map(|_| {
        let planner =
            tessera_resched::SimPlanner::new(tessera_resched::Planner::new(doc.rescheduling.clone()), workload.clone());
        Executing::new(planner, doc.movement.clone(), opts.actuator)
    });
    let n_nodes = nodes.len();
    let started = Instant::now();
    let report = run_online_with(
        nodes,
        &workload,
        &mut policy,
        &arrivals,
        &cfg,
        exec.as_mut().map(|e| e as &mut dyn tessera_core::framework::Reschedule),
    );
    let wall_s = started.elapsed().as_secs_f64();
    Ok(OnlineOutcome {
        file: OnlineFile {
            policy: doc.name.clone(),
            seed: opts.seed,
            nodes: describe(&opts.nodes),
            pods: describe(&opts.pods),
            protocol: "online",
            adaptive: doc.adaptive.is_some(),
            report,
            plans: exec.as_ref().map(|e| e.planner().totals().clone()),
            execution: exec.as_ref().map(|e| e.totals().clone()),
        },
        nodes: n_nodes,
        wall_s,
    })
}

/// The summary table.
pub fn summary(o: &OnlineOutcome) -> String {
    let r = &o.file.report;
    let mut rows: Vec<(String, String)> = vec![
        ("policy".into(), o.file.policy.clone()),
        ("protocol".into(), "online (queue, tiers, preemption, telemetry)".into()),
        ("nodes / GPUs".into(), format!("{} / {}", o.nodes, r.total_gpus)),
        ("pods arrived".into(), r.submitted.to_string()),
        ("binds".into(), r.binds.to_string()),
        ("departed / left unplaced".into(), format!("{} / {}", r.departed, r.abandoned)),
        ("preemptions (pods evicted)".into(), format!("{} ({})", r.preemptions, r.evicted)),
        ("peak pods waiting".into(), r.peak_waiting.to_string()),
        ("gangs whole / rolled back".into(), format!("{} / {}", r.gangs_admitted, r.gang_rollbacks)),
        ("partial-gang GPU·s".into(), r.partial_gang_gpu_s.to_string()),
    ];
    for (tier, w) in &r.waits {
        rows.push((format!("wait {tier} p50 / p99"), format!("{} s / {} s ({} bound)", w.p50_s, w.p99_s, w.bound)));
    }
    for (code, n) in &r.waiting_by_reason {
        let code = if code.is_empty() { "not yet tried" } else { code };
        rows.push((format!("waiting at end: {code}"), n.to_string()));
    }
    rows.push(("SLA violations (pod-intervals)".into(), r.sla_violations.to_string()));
    rows.push(("mean carbon at bind".into(), format!("{:.0} gCO2/kWh per GPU", r.mean_bind_carbon)));
    rows.push(("GPU allocation (mean)".into(), format!("{:.2}%", r.mean_allocation)));
    rows.push(("fragmentation (mean)".into(), format!("{:.2}% of free GPU share", r.mean_fragmentation_rate)));
    rows.push(("nodes scored per decision".into(), format!("{:.0}", r.nodes_scored_per_decision)));
    for (i, a) in r.bandit.iter().enumerate() {
        rows.push((
            format!("weights #{i} {:?}", a.weights),
            format!("chosen {} times, mean reward {:.3}", a.pulls, a.mean_reward),
        ));
    }
    rows.push(("detection rounds".into(), r.detection_rounds.to_string()));
    for (kind, n) in &r.anomalies {
        rows.push((format!("anomalies: {kind}"), format!("{n} (node-rounds)")));
    }
    if let Some(x) = &o.file.execution {
        rows.push((
            "plans on anomalies".into(),
            format!(
                "{} ({} moves planned: {} executed, {} failed, {} rolled back, {} dropped; {} lost)",
                r.reschedule_plans, x.moves_planned, x.executed, x.failed, x.rolled_back, x.dropped, x.lost
            ),
        ));
        rows.push(("pods migrated".into(), r.migrations.to_string()));
    }
    rows.push(("telemetry intervals".into(), r.intervals.to_string()));
    rows.push(("plugin errors".into(), r.plugin_errors.to_string()));
    rows.push(("wall time".into(), format!("{:.3} s", o.wall_s)));
    rows.iter().map(|(k, v)| format!("{k:<30} {v}\n")).collect()
}

/// Writes `run.json`.
pub fn write(o: &OnlineOutcome, path: &std::path::Path) -> Result<()> {
    let json = serde_json::to_string_pretty(&o.file)?;
    std::fs::write(path, json + "\n").with_context(|| format!("cannot write {}", path.display()))
}
