//! Members of the openb workload families, generated from a base pod list
//! (`openb_pod_list_default.csv`), seeded.
//!
//! The FGD artifact derives its workloads from `default` by changing one
//! mix at a time (see "Workload families" in `shared/traces/README.md`).
//! A generated member does the same: each pod class — CPU-only, sharing
//! one GPU, one whole GPU, several whole GPUs — is resampled with
//! replacement from the base's rows of that class to a target count, so
//! the shapes, their joint CPU/memory/GPU values and their frequencies
//! within a class are the base's, and only the mix between classes moves.
//! Then, for `gpuspec`, a share of the GPU pods is given allowed models,
//! drawn per class from an example list (`gpuspec10`) where one is given.
//!
//! A member's level is a percentage:
//!
//! | family | level `L` means | default |
//! | --- | --- | --- |
//! | `cpu` | CPU-only pods number `L`% of the base's | 100 |
//! | `gpushare` | sharing pods ask for `L`% of the GPU demand; GPU pods keep their number (whole-GPU pods fill the rest, one to several GPUs in the base's ratio) | 28.5 |
//! | `gpuspec` | `L`% of GPU pods name allowed models | 0 |
//! | `multigpu` | multi-GPU pods ask for `L`% of the GPU demand; other pods kept | 7.3 |
//!
//! The last three read like the artifact's names: `gpushare:40`,
//! `gpuspec:10` and `multigpu:20` give the class counts of the shared
//! `gpushare40`, `gpuspec10` and `multigpu20` to within a few percent
//! (tested). The artifact's `cpuNNN` is not a count of default's
//! (`cpu100` has 789 CPU-only pods to default's 1,088), so `cpu:L` is a
//! plain percentage.
//!
//! [`inflate`] then makes an arrival order the way the published runs
//! did: the pods shuffled, then clones of random pods appended until GPU
//! demand reaches a ratio of the cluster's GPUs.
//!
//! Deterministic: the same base, member and seed give the same rows, on
//! any machine (ChaCha8 from the seed; no clock, no hash order).

use std::fmt;
use std::str::FromStr;

use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

use crate::{GPU_MILLI, NodeRow, PodRow};

/// A workload family of the openb trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Family {
    /// More or fewer CPU-only pods.
    Cpu,
    /// A larger or smaller share of GPU-sharing pods.
    GpuShare,
    /// A share of GPU pods naming allowed GPU models.
    GpuSpec,
    /// A larger share of multi-GPU pods.
    MultiGpu,
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 4] = [Family::Cpu, Family::GpuShare, Family::GpuSpec, Family::MultiGpu];

    /// Its name (`cpu`, `gpushare`, `gpuspec`, `multigpu`).
    pub fn name(self) -> &'static str {
        match self {
            Family::Cpu => "cpu",
            Family::GpuShare => "gpushare",
            Family::GpuSpec => "gpuspec",
            Family::MultiGpu => "multigpu",
        }
    }

    /// The levels a member may have, %.
    pub fn range(self) -> (f64, f64) {
        match self {
            Family::Cpu => (0.0, 400.0),
            Family::GpuShare | Family::GpuSpec => (0.0, 100.0),
            // All of the demand multi-GPU would leave no other GPU pod.
            Family::MultiGpu => (0.0, 90.0),
        }
    }
}

/// One member of a family: `FAMILY:LEVEL`, e.g. `cpu:200`, `multigpu:8`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Member {
    /// The family.
    pub family: Family,
    /// Its level, % (see the module's table).
    pub level: f64,
}

impl Member {
    /// A file-safe name: `gen-cpu200`, `gen-multigpu7.5`.
    pub fn name(&self) -> String {
        format!("gen-{}{}", self.family.name(), self.level)
    }
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.family.name(), self.level)
    }
}

/// Why a member or a generation is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FamilyError {
    /// `FAMILY:LEVEL` malformed or out of range.
    #[error("workload member `{given}`: {reason}")]
    Member {
        /// What was given.
        given: String,
        /// What is wrong.
        reason: String,
    },
    /// The base lacks pods of a class the member needs.
    #[error("the base pod list has no {class} pods to resample for {member}")]
    EmptyClass {
        /// The class.
        class: &'static str,
        /// The member.
        member: String,
    },
}

impl FromStr for Member {
    type Err = FamilyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| FamilyError::Member { given: s.to_string(), reason };
        let (f, l) = s.split_once(':').ok_or_else(|| err("expected FAMILY:LEVEL, e.g. cpu:200".into()))?;
        let family = Family::ALL.into_iter().find(|x| x.name() == f.trim()).ok_or_else(|| {
            err(format!("unknown family `{f}` (one of {})", Family::ALL.map(Family::name).join(", ")))
        })?;
        let level: f64 = l.trim().parse().map_err(|_| err(format!("`{l}` is not a level in %")))?;
        let (lo, hi) = family.range();
        if !level.is_finite() || level < lo || level > hi {
            return Err(err(format!("level {level} outside {lo}..={hi} % for {}", family.name())));
        }
        Ok(Member { family, level })
    }
}

/// A pod's class, by what it asks of GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// No GPU.
    CpuOnly,
    /// Part of one GPU.
    Sharing,
    /// One whole GPU.
    Whole,
    /// Several whole GPUs.
    Multi,
}

impl Class {
    /// Every class, in a fixed order.
    pub const ALL: [Class; 4] = [Class::CpuOnly, Class::Sharing, Class::Whole, Class::Multi];

    /// `pod`'s class.
    pub fn of(pod: &PodRow) -> Class {
        match (pod.num_gpu, pod.gpu_milli) {
            (0, _) => Class::CpuOnly,
            (1, m) if m < GPU_MILLI => Class::Sharing,
            (1, _) => Class::Whole,
            _ => Class::Multi,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Class::CpuOnly => "CPU-only",
            Class::Sharing => "GPU-sharing",
            Class::Whole => "single whole-GPU",
            Class::Multi => "multi-GPU",
        }
    }
}

/// How many pods of each class (in [`Class::ALL`]'s order) `pods` has.
pub fn class_counts(pods: &[PodRow]) -> [usize; 4] {
    let mut n = [0; 4];
    for p in pods {
        n[Class::of(p) as usize] += 1;
    }
    n
}

/// `x` rounded to the nearest count.
fn round(x: f64) -> usize {
    x.round().max(0.0) as usize
}

/// Mean GPU demand of a pod of `rows`, in GPUs.
fn mean_gpus(rows: &[&PodRow]) -> f64 {
    if rows.is_empty() {
        return 0.0;
    }
    rows.iter().map(|p| p.gpu_demand_milli() as f64).sum::<f64>() / rows.len() as f64 / f64::from(GPU_MILLI)
}

/// The pods of each class member `m` asks for, from the base's rows by
/// class. Shares of GPU demand use each class's mean demand in the base.
fn targets(by_class: &[Vec<&PodRow>; 4], m: &Member) -> [usize; 4] {
    let [cpu, share, whole, multi] = by_class.each_ref().map(Vec::len);
    let l = m.level / 100.0;
    match m.family {
        Family::Cpu => [round(cpu as f64 * l), share, whole, multi],
        Family::GpuSpec => [cpu, share, whole, multi],
        Family::GpuShare => {
            // GPU pods keep their number; n sharing pods of mean demand a_s
            // among N make share L of the demand when
            // n·a_s = L·(n·a_s + (N − n)·a_w).
            let n = share + whole + multi;
            let a_s = mean_gpus(&by_class[Class::Sharing as usize]);
            let rest: Vec<&PodRow> =
                by_class[Class::Whole as usize].iter().chain(&by_class[Class::Multi as usize]).copied().collect();
            let a_w = mean_gpus(&rest);
            let sharing =
                if l >= 1.0 || a_w == 0.0 { n } else { round(l * n as f64 * a_w / (a_s * (1.0 - l) + l * a_w)).min(n) };
            let rest = n - sharing;
            // Whole-GPU pods keep their own ratio of one GPU to several.
            let multi_rest =
                if whole + multi == 0 { 0 } else { round(rest as f64 * multi as f64 / (whole + multi) as f64) };
            [cpu, sharing, rest - multi_rest, multi_rest]
        }
        Family::MultiGpu => {
            // The other GPU pods kept; multi-GPU pods added (or removed)
            // until they make share L of the GPU demand.
            let others: f64 = [Class::Sharing, Class::Whole]
                .iter()
                .map(|&c| mean_gpus(&by_class[c as usize]) * by_class[c as usize].len() as f64)
                .sum();
            let a_m = mean_gpus(&by_class[Class::Multi as usize]);
            let n = if a_m == 0.0 { usize::from(l > 0.0) } else { round(others * l / (1.0 - l) / a_m) };
            [cpu, share, whole, n]
        }
    }
}

/// Generates member `m` from `base` with `seed`. `examples` is a pod list
/// whose rows name allowed models (`gpuspec10`): a `gpuspec` member draws
/// each GPU pod's models from the examples of its class (any class where
/// its own has none). Without examples, a pod names the models of the
/// cluster (`nodes`) that could hold it, one model drawn by GPU count. A
/// drawn list no node could hold the pod under is drawn again (then the
/// pod names none). Pods are named `gen-pod-NNNNN` in a shuffled order.
pub fn generate(
    base: &[PodRow],
    m: &Member,
    seed: u64,
    examples: &[PodRow],
    nodes: &[NodeRow],
) -> Result<Vec<PodRow>, FamilyError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut by_class: [Vec<&PodRow>; 4] = Default::default();
    for p in base {
        by_class[Class::of(p) as usize].push(p);
    }
    let want = targets(&by_class, m);
    let mut pods: Vec<PodRow> = Vec::with_capacity(want.iter().sum());
    for c in Class::ALL {
        let rows = &by_class[c as usize];
        let n = want[c as usize];
        if n > 0 && rows.is_empty() {
            return Err(FamilyError::EmptyClass { class: c.name(), member: m.to_string() });
        }
        for _ in 0..n {
            let mut p = rows[rng.random_range(0..rows.len())].clone();
            p.gpu_spec.clear();
            pods.push(p);
        }
    }
    shuffle(&mut pods, &mut rng);
    if m.family == Family::GpuSpec {
        name_models(&mut pods, m.level / 100.0, examples, nodes, &mut rng);
    }
    let width = pods.len().to_string().len().max(5);
    for (i, p) in pods.iter_mut().enumerate() {
        p.name = format!("gen-pod-{i:0width$}");
    }
    Ok(pods)
}

/// Fisher–Yates with `rng`.
fn shuffle<T>(v: &mut [T], rng: &mut ChaCha8Rng) {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.random_range(0..=i));
    }
}

/// Whether some node of `nodes` whose model is in `spec` could hold `pod`
/// on its own.
fn hostable(pod: &PodRow, spec: &[String], nodes: &[NodeRow]) -> bool {
    nodes.iter().any(|n| {
        spec.contains(&n.model)
            && n.gpus >= pod.num_gpu
            && n.cpu_milli >= pod.cpu_milli
            && n.memory_mib >= pod.memory_mib
    })
}

/// Gives `share` of the GPU pods in `pods` allowed models.
fn name_models(pods: &mut [PodRow], share: f64, examples: &[PodRow], nodes: &[NodeRow], rng: &mut ChaCha8Rng) {
    let mut gpu: Vec<usize> = (0..pods.len()).filter(|&i| pods[i].num_gpu > 0).collect();
    let k = round(gpu.len() as f64 * share).min(gpu.len());
    shuffle(&mut gpu, rng);
    let mut chosen = gpu[..k].to_vec();
    chosen.sort_unstable();
    // Examples by class, and all of them for a class with none.
    let mut lists: [Vec<&Vec<String>>; 4] = Default::default();
    for e in examples.iter().filter(|e| !e.gpu_spec.is_empty()) {
        lists[Class::of(e) as usize].push(&e.gpu_spec);
    }
    let all: Vec<&Vec<String>> = lists.iter().flatten().copied().collect();
    // Without examples: single models weighted by their GPUs.
    let mut models: Vec<(String, u64)> = Vec::new();
    for n in nodes.iter().filter(|n| n.gpus > 0 && !n.model.is_empty()) {
        match models.iter_mut().find(|(m, _)| *m == n.model) {
            Some((_, g)) => *g += u64::from(n.gpus),
            None => models.push((n.model.clone(), u64::from(n.gpus))),
        }
    }
    models.sort();
    for i in chosen {
        let pod = &pods[i];
        let pool = match &lists[Class::of(pod) as usize] {
            l if !l.is_empty() => l,
            _ => &all,
        };
        let mut spec = Vec::new();
        for _ in 0..16 {
            let draw =
                if pool.is_empty() { by_weight(&models, rng) } else { pool[rng.random_range(0..pool.len())].clone() };
            if hostable(pod, &draw, nodes) {
                spec = draw;
                break;
            }
        }
        pods[i].gpu_spec = spec;
    }
}

/// One model drawn with probability proportional to its weight.
fn by_weight(models: &[(String, u64)], rng: &mut ChaCha8Rng) -> Vec<String> {
    let total: u64 = models.iter().map(|(_, w)| w).sum();
    if total == 0 {
        return Vec::new();
    }
    let mut x = rng.random_range(0..total);
    for (m, w) in models {
        if x < *w {
            return vec![m.clone()];
        }
        x -= w;
    }
    Vec::new()
}

/// An arrival order as the published runs made theirs (`arrival-order/
/// README.md`): the pods in a shuffled order, then clones of pods drawn at
/// random appended while the arrived GPU demand stays within `ratio` of
/// the GPUs of `nodes`. As in the artifact, the stopping test adds a
/// clone's per-GPU share (`gpu_milli`), the running sum its whole demand.
/// Indices are rows of `pods`.
pub fn inflate(pods: &[PodRow], nodes: &[NodeRow], ratio: f64, seed: u64) -> Vec<u32> {
    let shares: Vec<(u32, u32)> = pods.iter().map(|p| (p.num_gpu, p.gpu_milli)).collect();
    let gpus = nodes.iter().map(|n| u64::from(n.gpus)).sum();
    inflate_shares(&shares, gpus, ratio, seed)
}

/// [`inflate`] over pods given as `(GPUs, share per GPU)` on a cluster of
/// `gpus` GPUs: the one rule, for pods that are not trace rows (a
/// service's record of arrivals).
pub fn inflate_shares(pods: &[(u32, u32)], gpus: u64, ratio: f64, seed: u64) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<u32> = (0..pods.len() as u32).collect();
    shuffle(&mut order, &mut rng);
    let demand = |&(n, m): &(u32, u32)| u64::from(n) * u64::from(m);
    let capacity = (gpus * u64::from(GPU_MILLI)) as f64 * ratio;
    let mut arrived: u64 = pods.iter().map(demand).sum();
    if pods.iter().all(|p| p.0 == 0) {
        return order;
    }
    loop {
        let i = rng.random_range(0..pods.len());
        let p = &pods[i];
        if (arrived + u64::from(p.1)) as f64 > capacity {
            return order;
        }
        order.push(i as u32);
        arrived += demand(p);
    }
}

/// Writes `pods` as a pod list `read_pods` reads back identically.
pub fn write_pods(w: impl std::io::Write, pods: &[PodRow]) -> std::io::Result<()> {
    let mut out = csv::Writer::from_writer(w);
    let header = [
        "name",
        "cpu_milli",
        "memory_mib",
        "num_gpu",
        "gpu_milli",
        "gpu_spec",
        "qos",
        "pod_phase",
        "creation_time",
        "deletion_time",
        "scheduled_time",
    ];
    out.write_record(header)?;
    let opt = |t: Option<u64>| t.map(|v| v.to_string()).unwrap_or_default();
    for p in pods {
        out.write_record([
            p.name.clone(),
            p.cpu_milli.to_string(),
            p.memory_mib.to_string(),
            p.num_gpu.to_string(),
            p.gpu_milli.to_string(),
            p.gpu_spec.join("|"),
            p.qos.clone().unwrap_or_default(),
            p.phase.clone().unwrap_or_default(),
            opt(p.creation_time),
            opt(p.deletion_time),
            opt(p.scheduled_time),
        ])?;
    }
    out.flush()
}

#[cfg(test)]
mod tests;
