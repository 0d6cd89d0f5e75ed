//! `tessera bench fidelity`: replay every (workload, policy, seed) that has
//! published results under `DIR/expected`, with the arrival orders of
//! `DIR/arrival-order`, and compare our curves with the published ones.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::sim::SimOptions;

/// Published policy names and ours.
pub const POLICIES: [(&str, &str); 6] = [
    ("01-Random", "random"),
    ("02-DotProd", "dotprod"),
    ("03-GpuClustering", "gpu-clustering"),
    ("04-GpuPacking", "gpu-packing"),
    ("05-BestFit", "bestfit"),
    ("06-FGD", "fgd"),
];

/// One published series: values by arrived-demand bucket (0..=130).
pub type Series = BTreeMap<u32, f64>;

/// `(workload, published policy, seed)` → series.
pub type Published = BTreeMap<(String, String, u64), Series>;

/// Reads one `analysis_*_discrete.csv` (`workload,sc_policy,tune,seed,[total_gpus,]0..130`).
pub fn read_expected(path: &Path) -> Result<Published> {
    let file = path.display().to_string();
    let mut rdr = csv::Reader::from_path(path).with_context(|| format!("cannot open {file}"))?;
    let headers = rdr.headers().with_context(|| format!("{file}: no header"))?.clone();
    let col = |name: &str| headers.iter().position(|h| h == name);
    let (Some(w), Some(p), Some(s)) = (col("workload"), col("sc_policy"), col("seed")) else {
        bail!("{file}:1: needs columns workload, sc_policy and seed");
    };
    let buckets: Vec<(usize, u32)> =
        headers.iter().enumerate().filter_map(|(i, h)| h.parse::<u32>().ok().map(|b| (i, b))).collect();
    let mut out = Published::new();
    for (n, rec) in rdr.records().enumerate() {
        let rec = rec.with_context(|| format!("{file}: row {}", n + 2))?;
        let line = rec.position().map_or(0, |p| p.line());
        let seed: u64 = rec[s].parse().with_context(|| format!("{file}:{line}: seed `{}`", &rec[s]))?;
        let mut series = Series::new();
        for &(i, b) in &buckets {
            let v = rec.get(i).unwrap_or("").trim();
            if !v.is_empty() {
                series.insert(b, v.parse().with_context(|| format!("{file}:{line}: bucket {b}: `{v}`"))?);
            }
        }
        out.insert((rec[w].to_string(), rec[p].to_string(), seed), series);
    }
    Ok(out)
}

/// Deviation of one run from the published one.
#[derive(Debug, Clone, Serialize)]
pub struct RunDeviation {
    /// Workload (pod list name).
    pub workload: String,
    /// Our policy name.
    pub policy: String,
    /// Seed of the arrival order.
    pub seed: u64,
    /// Mean |ours − published| GPU allocation over common buckets, points.
    pub alloc_mean_abs_dev: f64,
    /// Max |ours − published| GPU allocation, points.
    pub alloc_max_abs_dev: f64,
    /// Mean |ours − published| fragmentation amount, points.
    pub frag_mean_abs_dev: f64,
    /// Mean |ours − published| fragmentation rate, points.
    pub frag_rate_mean_abs_dev: f64,
    /// Our unallocated GPUs at 130% arrival, %.
    pub unallocated_at_130: Option<f64>,
    /// Published unallocated GPUs at 130% arrival, %.
    pub published_unallocated_at_130: Option<f64>,
    /// Plugin errors and faults seen (counted, never fatal).
    pub plugin_errors: u64,
}

/// Seed-averaged curves compared: per workload and policy.
#[derive(Debug, Clone, Serialize)]
pub struct CurveDeviation {
    /// Workload.
    pub workload: String,
    /// Our policy name.
    pub policy: String,
    /// Seeds averaged.
    pub seeds: usize,
    /// Mean |mean ours − mean published| allocation over buckets, points.
    pub alloc_mean_abs_dev: f64,
    /// Max of the same, points.
    pub alloc_max_abs_dev: f64,
    /// Our seed-averaged allocation curve.
    #[serde(skip)]
    pub ours: Series,
    /// The published seed-averaged allocation curve.
    #[serde(skip)]
    pub published: Series,
}

/// The bench's output.
#[derive(Debug, Serialize)]
pub struct FidelityReport {
    /// Every run.
    pub runs: Vec<RunDeviation>,
    /// Seed-averaged curves against seed-averaged published curves.
    pub curves: Vec<CurveDeviation>,
    /// Wall time of all runs, seconds.
    pub wall_s: f64,
}

fn mean_abs(ours: &Series, theirs: &Series) -> (f64, f64) {
    let devs: Vec<f64> = theirs.iter().filter_map(|(b, t)| ours.get(b).map(|o| (o - t).abs())).collect();
    if devs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    (devs.iter().sum::<f64>() / devs.len() as f64, devs.iter().copied().fold(0.0, f64::max))
}

/// Runs the bench over `dir` (laid out like `shared/traces/openb`).
pub fn run(dir: &Path, only: &[String]) -> Result<FidelityReport> {
    let expected = dir.join("expected");
    let allo = read_expected(&expected.join("analysis_allo_discrete.csv"))?;
    let frag = read_expected(&expected.join("analysis_frag_discrete.csv"))?;
    let rate = read_expected(&expected.join("analysis_frag_ratio_discrete.csv"))?;
    let nodes = dir.join("openb_node_list_gpu_node.csv");
    let mut jobs: Vec<(String, String, &'static str, u64, PathBuf, PathBuf)> = Vec::new();
    for (workload, published, seed) in allo.keys() {
        let Some(&(_, ours)) = POLICIES.iter().find(|(p, _)| p == published) else { continue };
        if !only.is_empty() && !only.iter().any(|o| o == ours) {
            continue;
        }
        let pods = dir.join(format!("{workload}.csv"));
        let order = dir.join("arrival-order").join(format!("{workload}_tune1.3_seed{seed}.txt"));
        if !pods.exists() || !order.exists() {
            continue;
        }
        jobs.push((workload.clone(), published.clone(), ours, *seed, pods, order));
    }
    if jobs.is_empty() {
        bail!("{}: no (workload, policy, seed) with published results, pod list and arrival order", dir.display());
    }
    let started = Instant::now();
    let results = crate::replay::run_parallel(jobs, |rt, (workload, published, ours, seed, pods, order)| {
        let opts = SimOptions::published(nodes.clone(), pods, order, seed, ours.to_string());
        let outcome = crate::sim::run_with(rt, &opts);
        (workload, published, ours, seed, outcome)
    })?;
    let mut runs = Vec::new();
    let mut sums: BTreeMap<(String, &'static str), (usize, Series, Series)> = BTreeMap::new();
    for (workload, published, ours, seed, outcome) in results {
        let outcome = outcome.with_context(|| format!("{workload} {ours} seed {seed}"))?;
        let report = &outcome.file.report;
        let series = |f: fn(&tessera_core::sim::Bucket) -> f64| -> Series {
            report.buckets.iter().map(|b| (b.arrived_pct, f(b))).collect()
        };
        let key = (workload.clone(), published, seed);
        let empty = Series::new();
        let entry = sums.entry((workload.clone(), ours)).or_default();
        entry.0 += 1;
        for (b, v) in series(|b| b.allocation) {
            *entry.1.entry(b).or_default() += v;
        }
        for (b, v) in allo.get(&key).unwrap_or(&empty) {
            *entry.2.entry(*b).or_default() += v;
        }
        let (am, ax) = mean_abs(&series(|b| b.allocation), allo.get(&key).unwrap_or(&empty));
        let (fm, _) = mean_abs(&series(|b| b.fragmentation), frag.get(&key).unwrap_or(&empty));
        let (rm, _) = mean_abs(&series(|b| b.fragmentation_rate), rate.get(&key).unwrap_or(&empty));
        runs.push(RunDeviation {
            workload,
            policy: ours.to_string(),
            seed,
            alloc_mean_abs_dev: am,
            alloc_max_abs_dev: ax,
            frag_mean_abs_dev: fm,
            frag_rate_mean_abs_dev: rm,
            unallocated_at_130: report.allocation_at(130).map(|a| 100.0 - a),
            published_unallocated_at_130: allo.get(&key).and_then(|s| s.get(&130)).map(|a| 100.0 - a),
            plugin_errors: report.plugin_errors,
        });
    }
    let curves = sums
        .into_iter()
        .map(|((workload, policy), (n, ours, theirs))| {
            let avg = |s: Series| -> Series { s.into_iter().map(|(b, v)| (b, v / n as f64)).collect() };
            let (ours, published) = (avg(ours), avg(theirs));
            let (m, x) = mean_abs(&ours, &published);
            CurveDeviation {
                workload,
                policy: policy.to_string(),
                seeds: n,
                alloc_mean_abs_dev: m,
                alloc_max_abs_dev: x,
                ours,
                published,
            }
        })
        .collect();
    Ok(FidelityReport { runs, curves, wall_s: started.elapsed().as_secs_f64() })
}

impl FidelityReport {
    /// One SVG per workload in `dir`: each policy's seed-averaged curve,
    /// ours solid and published dashed. Returns the files written.
    pub fn plot(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut by_workload: BTreeMap<&str, Vec<&CurveDeviation>> = BTreeMap::new();
        for c in &self.curves {
            by_workload.entry(&c.workload).or_default().push(c);
        }
        let mut written = Vec::new();
        for (workload, curves) in by_workload {
            let mut lines = Vec::new();
            for c in curves {
                let colour = POLICIES.iter().position(|(_, p)| *p == c.policy).unwrap_or(0);
                let pts = |s: &Series| s.iter().map(|(&b, &v)| (f64::from(b), v)).collect();
                lines.push(crate::plot::Curve {
                    label: format!("{} (ours)", c.policy),
                    points: pts(&c.ours),
                    colour,
                    dashed: false,
                });
                lines.push(crate::plot::Curve {
                    label: format!("{} (published)", c.policy),
                    points: pts(&c.published),
                    colour,
                    dashed: true,
                });
            }
            let path = dir.join(format!("{workload}.svg"));
            crate::plot::allocation_svg(&path, &format!("{workload}: GPU allocation, mean of seeds"), &lines)?;
            written.push(path);
        }
        Ok(written)
    }

    /// Per workload and policy: means over seeds.
    pub fn to_table(&self) -> String {
        let mut groups: BTreeMap<(&str, &str), Vec<&RunDeviation>> = BTreeMap::new();
        for r in &self.runs {
            groups.entry((&r.workload, &r.policy)).or_default().push(r);
        }
        let mut s = format!(
            "{:<28} {:<15} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>12}\n",
            "workload",
            "policy",
            "seeds",
            "alloc_mad",
            "alloc_max",
            "curve_mad",
            "frag_mad",
            "rate_mad",
            "unalloc@130",
            "published"
        );
        for ((w, p), runs) in groups {
            let curve = self
                .curves
                .iter()
                .find(|c| c.workload == w && c.policy == p)
                .map_or(f64::NAN, |c| c.alloc_mean_abs_dev);
            let mean = |f: &dyn Fn(&RunDeviation) -> f64| runs.iter().map(|r| f(r)).sum::<f64>() / runs.len() as f64;
            let max = runs.iter().map(|r| r.alloc_max_abs_dev).fold(0.0, f64::max);
            s.push_str(&format!(
                "{:<28} {:<15} {:>5} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>12.2} {:>12.2}\n",
                w,
                p,
                runs.len(),
                mean(&|r| r.alloc_mean_abs_dev),
                max,
                curve,
                mean(&|r| r.frag_mean_abs_dev),
                mean(&|r| r.frag_rate_mean_abs_dev),
                mean(&|r| r.unallocated_at_130.unwrap_or(f64::NAN)),
                mean(&|r| r.published_unallocated_at_130.unwrap_or(f64::NAN)),
            ));
        }
        let errors: u64 = self.runs.iter().map(|r| r.plugin_errors).sum();
        s.push_str(&format!("{} runs in {:.1} s, {errors} plugin errors\n", self.runs.len(), self.wall_s));
        s
    }
}
