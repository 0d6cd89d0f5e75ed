//! `tessera bench quality`: the published protocol (130% arrival, the
//! authors' arrival orders) on every workload and seed found in a trace
//! directory laid out like `shared/traces/openb`, with one policy, with or
//! without rescheduling; beside each run FGD's published result and the
//! offline bound for the same arrived pods. Where nothing is published (a
//! generated workload, `tessera workload generate`), our FGD — whose
//! fidelity to the published runs `bench fidelity` shows — is run on the
//! same arrival order as the reference.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::fidelity::read_expected;
use crate::sim::SimOptions;

/// What to run.
#[derive(Debug, Clone)]
pub struct QualityOptions {
    /// The trace directory.
    pub traces: PathBuf,
    /// Policy name or file.
    pub policy: String,
    /// Rescheduling: migrations allowed as a share of pods placed.
    pub reschedule: Option<f64>,
    /// Submissions between periodic plans (0: when a pod fits nowhere).
    pub reschedule_every: u64,
    /// Only these workloads (file stems such as `openb_pod_list_default`);
    /// empty: all.
    pub workloads: Vec<String>,
}

/// One run.
#[derive(Debug, Clone, Serialize)]
pub struct QualityRun {
    /// Workload (pod list file stem).
    pub workload: String,
    /// Seed of the arrival order.
    pub seed: u64,
    /// Our unallocated GPUs at 130% arrived demand, %.
    pub unallocated_at_130: f64,
    /// FGD's published figure for the same workload and seed, %.
    pub fgd_published_unallocated_at_130: Option<f64>,
    /// Where nothing is published: our FGD on the same arrival order
    /// (placement alone), %.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fgd_ours_unallocated_at_130: Option<f64>,
    /// The offline bound: no placement of the same arrived pods, with or
    /// without migrations, leaves fewer GPUs unallocated, %.
    pub offline_bound_unallocated: f64,
    /// With rescheduling: no re-packing that keeps every pod this run
    /// admitted (no eviction) leaves fewer GPUs unallocated, % (GPU
    /// packing only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repacking_bound_unallocated: Option<f64>,
    /// Migrations made.
    pub migrations: u64,
    /// Pods placed.
    pub placed_pods: u64,
    /// Plugin errors and faults seen (counted, never fatal).
    pub plugin_errors: u64,
    /// With rescheduling: the same run with placement alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_only_unallocated_at_130: Option<f64>,
}

/// All runs.
#[derive(Debug, Clone, Serialize)]
pub struct QualityReport {
    /// The policy.
    pub policy: String,
    /// Migration cap, % of placed (with rescheduling).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_migrations_pct: Option<f64>,
    /// Runs by workload and seed.
    pub runs: Vec<QualityRun>,
    /// Wall time, seconds.
    pub wall_s: f64,
}

/// `(workload, seed, pod list, order file)` for every arrival order found.
fn jobs(dir: &Path, only: &[String]) -> Result<Vec<(String, u64, PathBuf, PathBuf)>> {
    let orders = dir.join("arrival-order");
    let mut out = Vec::new();
    let entries = std::fs::read_dir(&orders).with_context(|| format!("cannot read {}", orders.display()))?;
    for e in entries {
        let name = e?.file_name().to_string_lossy().into_owned();
        // `<workload>_tune1.3_seed<N>.txt`
        let Some(stem) = name.strip_suffix(".txt") else { continue };
        let Some((workload, seed)) = stem.rsplit_once("_tune1.3_seed") else { continue };
        let Ok(seed) = seed.parse::<u64>() else { continue };
        if !only.is_empty() && !only.iter().any(|w| w == workload) {
            continue;
        }
        let pods = dir.join(format!("{workload}.csv"));
        if pods.exists() {
            out.push((workload.to_string(), seed, pods, orders.join(&name)));
        }
    }
    out.sort();
    if out.is_empty() {
        bail!("{}: no arrival order with its pod list (arrival-order/<workload>_tune1.3_seed<N>.txt)", dir.display());
    }
    Ok(out)
}

/// Runs every workload and seed.
pub fn run(opts: &QualityOptions) -> Result<QualityReport> {
    let dir = &opts.traces;
    // Published figures are optional: a directory without them still runs.
    let published = read_expected(&dir.join("expected").join("analysis_allo_discrete.csv")).unwrap_or_default();
    let nodes = dir.join("openb_node_list_gpu_node.csv");
    let jobs = jobs(dir, &opts.workloads)?;
    let fgd_published = |w: &str, seed: u64| {
        published.get(&(w.to_string(), "06-FGD".to_string(), seed)).and_then(|s| s.get(&130)).map(|a| 100.0 - a)
    };
    // Each run, and our FGD's where nothing is published (not when FGD
    // is the policy run: it is its own reference).
    let mut work: Vec<(usize, bool)> = (0..jobs.len()).map(|i| (i, false)).collect();
    if opts.policy != "fgd" {
        work.extend((0..jobs.len()).filter(|&i| fgd_published(&jobs[i].0, jobs[i].1).is_none()).map(|i| (i, true)));
    }
    let started = Instant::now();
    let results = crate::replay::run_parallel(work, |rt, (i, reference)| {
        let (_, seed, pods, order) = jobs[i].clone();
        let sim = if reference {
            SimOptions::published(nodes.clone(), pods, order, seed, "fgd".to_string())
        } else {
            SimOptions {
                reschedule: opts.reschedule,
                reschedule_every: opts.reschedule_every,
                bound: true,
                ..SimOptions::published(nodes.clone(), pods, order, seed, opts.policy.clone())
            }
        };
        (i, reference, crate::sim::run_with(rt, &sim))
    })?;
    let mut ours_fgd: BTreeMap<usize, f64> = BTreeMap::new();
    let mut outcomes = Vec::new();
    for (i, reference, outcome) in results {
        let (workload, seed, ..) = &jobs[i];
        let o = outcome.with_context(|| format!("{workload} seed {seed}{}", if reference { " (FGD)" } else { "" }))?;
        if reference {
            ours_fgd.insert(i, o.file.report.unallocated_at(130));
        } else {
            outcomes.push((i, o));
        }
    }
    let mut runs = Vec::new();
    for (i, o) in outcomes {
        let (workload, seed, ..) = jobs[i].clone();
        let r = &o.file.report;
        let fgd_published = fgd_published(&workload, seed);
        // FGD run as the policy is its own reference (placement alone).
        let own = || o.file.placement_only.as_ref().map_or(r.unallocated_at(130), |f| f.unallocated_pct);
        let fgd_ours =
            ours_fgd.get(&i).copied().or_else(|| (fgd_published.is_none() && opts.policy == "fgd").then(own));
        runs.push(QualityRun {
            unallocated_at_130: r.unallocated_at(130),
            fgd_published_unallocated_at_130: fgd_published,
            fgd_ours_unallocated_at_130: fgd_ours,
            offline_bound_unallocated: (100.0 - o.file.bound_allocation_pct.unwrap_or(100.0)).max(0.0),
            repacking_bound_unallocated: o.file.repacking_bound_allocation_pct.map(|b| (100.0 - b).max(0.0)),
            migrations: r.migrations,
            placed_pods: r.placed,
            plugin_errors: r.plugin_errors,
            placement_only_unallocated_at_130: o.file.placement_only.as_ref().map(|f| f.unallocated_pct),
            workload,
            seed,
        });
    }
    Ok(QualityReport {
        policy: opts.policy.clone(),
        max_migrations_pct: opts.reschedule.map(|c| c * 100.0),
        runs,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

impl QualityReport {
    /// Per workload: seed means, ours against FGD's published figure.
    pub fn to_table(&self) -> String {
        let mut by: BTreeMap<&str, Vec<&QualityRun>> = BTreeMap::new();
        for r in &self.runs {
            by.entry(&r.workload).or_default().push(r);
        }
        let mean = |v: &[f64]| if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 };
        let mut out = format!(
            "policy {}{}\n{:<28} {:>5} {:>10} {:>11} {:>8} {:>9} {:>8} {:>9} {:>11} {:>9}\n",
            self.policy,
            self.max_migrations_pct
                .map(|p| format!(", rescheduling with migrations ≤ {p}% of placed"))
                .unwrap_or_default(),
            "workload",
            "seeds",
            "placement",
            "+resched",
            "FGD",
            "ours/FGD",
            "bound",
            "repack≥",
            "migrations",
            "placed"
        );
        for (w, runs) in by {
            let ours = mean(&runs.iter().map(|r| r.unallocated_at_130).collect::<Vec<_>>());
            let alone = runs.iter().filter_map(|r| r.placement_only_unallocated_at_130).collect::<Vec<_>>();
            // Published where there is a figure, else ours (marked *).
            let published = runs.iter().all(|r| r.fgd_published_unallocated_at_130.is_some());
            let fgd = runs
                .iter()
                .filter_map(
                    |r| if published { r.fgd_published_unallocated_at_130 } else { r.fgd_ours_unallocated_at_130 },
                )
                .collect::<Vec<_>>();
            let mark = if published { "" } else { "*" };
            let bound = mean(&runs.iter().map(|r| r.offline_bound_unallocated).collect::<Vec<_>>());
            let repack = runs.iter().filter_map(|r| r.repacking_bound_unallocated).collect::<Vec<_>>();
            let migrations = mean(&runs.iter().map(|r| r.migrations as f64).collect::<Vec<_>>());
            let placed = mean(&runs.iter().map(|r| r.placed_pods as f64).collect::<Vec<_>>());
            let (placement, resched) = if alone.is_empty() {
                (format!("{ours:.2}%"), "-".to_string())
            } else {
                (format!("{:.2}%", mean(&alone)), format!("{ours:.2}%"))
            };
            let fgd_mean = mean(&fgd);
            out += &format!(
                "{:<28} {:>5} {:>10} {:>11} {:>8} {:>9} {:>8} {:>9} {:>11.1} {:>9.0}\n",
                w,
                runs.len(),
                placement,
                resched,
                if fgd.is_empty() { "-".into() } else { format!("{fgd_mean:.2}%{mark}") },
                if fgd.is_empty() { "-".into() } else { format!("{:.3}", ours / fgd_mean) },
                format!("{bound:.2}%"),
                if repack.is_empty() { "-".into() } else { format!("{:.2}%", mean(&repack)) },
                migrations,
                placed
            );
        }
        let errors: u64 = self.runs.iter().map(|r| r.plugin_errors).sum();
        out + &format!(
            "{} runs in {:.1} s, {errors} plugin errors (FGD: published; * ours on the same orders)\n",
            self.runs.len(),
            self.wall_s
        )
    }
}
