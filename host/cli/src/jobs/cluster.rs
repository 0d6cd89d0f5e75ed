//! The cluster a trace runs on — Gavel's spec for its virtual cluster, or
//! V100 nodes sized to it — and which of its jobs that cluster can never
//! hold.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use tessera_core::model::{Node, Resources};
use tessera_core::sim::jobs::Job;

use super::{GPUS_PER_NODE, SPEC_MODELS};

/// GPUs per model of Gavel's spec for the trace's virtual cluster, if
/// `specs` (the text of `vc_cluster_specs.json`) lists it.
pub fn spec_cluster(specs: &str, trace: &str) -> Result<Option<[u32; 3]>> {
    let specs: BTreeMap<String, Vec<String>> = serde_json::from_str(specs).context("vc_cluster_specs.json")?;
    let Some(first) = specs.get(trace).and_then(|s| s.first()) else { return Ok(None) };
    let counts: Vec<u32> = first
        .split(':')
        .map(|c| c.trim().parse::<u32>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("vc_cluster_specs.json: {trace}: `{first}` is not V100:P100:K80 GPU counts"))?;
    match counts[..] {
        [v, p, k] if u64::from(v) + u64::from(p) + u64::from(k) > MAX_CLUSTER_GPUS => {
            bail!("vc_cluster_specs.json: {trace}: `{first}` is more than the {MAX_CLUSTER_GPUS} GPUs supported")
        }
        [v, p, k] => Ok(Some([v, p, k])),
        _ => bail!("vc_cluster_specs.json: {trace}: `{first}` is not V100:P100:K80 GPU counts"),
    }
}

/// The most GPUs a cluster of `bench jobs` or `sim --jobs` may have
/// (131,072 nodes of 8): a spec or a trace asking for more is refused
/// rather than built.
pub const MAX_CLUSTER_GPUS: u64 = 1 << 20;

/// V100 GPUs for a trace without a spec, in whole nodes: its GPU-seconds
/// (on V100, or its fastest model) over its arrival span at 90% load —
/// the offered load of its arrival rate — at least its largest job and at
/// most the most GPUs that run at once with room for every job on arrival
/// (more would only stand idle). The cap matters where the arrivals' span
/// is short against the jobs' runs: two long jobs that arrive together
/// were offered a cluster as large as their work in GPU-seconds.
pub fn sized_cluster(jobs: &[Job]) -> Result<[u32; 3]> {
    // (time, change in GPUs running) with room for every job on arrival.
    let mut changes: Vec<(u64, i64)> = Vec::with_capacity(jobs.len() * 2);
    let mut work = 0.0_f64;
    for j in jobs {
        let run = j.seconds_on.values().min().copied().unwrap_or(0);
        work += f64::from(j.gpus) * run as f64;
        changes.push((j.arrival_s, i64::from(j.gpus)));
        changes.push((j.arrival_s.saturating_add(run), -i64::from(j.gpus)));
    }
    // Ends before starts at the same instant: a job that ends frees its
    // GPUs for one that arrives then.
    changes.sort_unstable();
    let (mut running, mut peak) = (0_i64, 0_i64);
    for &(_, d) in &changes {
        running += d;
        peak = peak.max(running);
    }
    let (first, last) = jobs.iter().fold((u64::MAX, 0), |(a, b), j| (a.min(j.arrival_s), b.max(j.arrival_s)));
    let span = last.saturating_sub(first).max(1) as f64;
    let largest = jobs.iter().map(|j| u64::from(j.gpus)).max().unwrap_or(u64::from(GPUS_PER_NODE));
    let loaded = (work / span / 0.9).ceil() as u64;
    let gpus =
        loaded.min(peak as u64).max(largest).max(1).div_ceil(u64::from(GPUS_PER_NODE)) * u64::from(GPUS_PER_NODE);
    if gpus > MAX_CLUSTER_GPUS {
        bail!("the cluster sized to this trace would have {gpus} GPUs; at most {MAX_CLUSTER_GPUS} are supported");
    }
    Ok([gpus as u32, 0, 0])
}

/// Nodes of 8 GPUs for `counts` GPUs of each of [`SPEC_MODELS`].
pub fn cluster(counts: [u32; 3]) -> Vec<Node> {
    let mut nodes = Vec::new();
    for (model, count) in SPEC_MODELS.iter().zip(counts) {
        for _ in 0..count.div_ceil(GPUS_PER_NODE) {
            let id = nodes.len() as u32;
            let cpu = tessera_core::sim::jobs::CPU_MILLI_PER_GPU * u64::from(GPUS_PER_NODE) * 3;
            let mem = tessera_core::sim::jobs::MEMORY_MIB_PER_GPU * u64::from(GPUS_PER_NODE) * 3;
            nodes.push(Node::new(
                id,
                format!("{}-{id}", model.to_lowercase()),
                Resources { cpu_milli: cpu, memory_mib: mem },
                GPUS_PER_NODE as usize,
                model,
            ));
        }
    }
    nodes
}

/// How many of `jobs` ask for more GPUs at once than `nodes` have of
/// every model they can use, and the most GPUs one of them asks for.
pub(super) fn never_fitting(nodes: &[Node], jobs: &[Job]) -> (u64, u32) {
    let mut per_model: BTreeMap<&str, u64> = BTreeMap::new();
    for n in nodes {
        *per_model.entry(n.gpu_model.as_str()).or_default() += n.gpus.len() as u64;
    }
    let never: Vec<u32> = jobs
        .iter()
        .filter(|j| j.seconds_on.keys().all(|m| per_model.get(m.as_str()).copied().unwrap_or(0) < u64::from(j.gpus)))
        .map(|j| j.gpus)
        .collect();
    (never.len() as u64, never.iter().copied().max().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(arrival_s: u64, gpus: u32, run_s: u64) -> Job {
        Job {
            name: format!("j{arrival_s}-{gpus}"),
            arrival_s,
            gpus,
            seconds_on: [("V100".to_string(), run_s), ("K80".to_string(), run_s * 3)].into(),
            queue: "q".into(),
            checkpoint_s: None,
            limit_s: None,
        }
    }

    #[test]
    fn long_jobs_that_arrive_together_get_the_room_they_use_not_their_gpu_seconds() {
        // Before: 2 GPU × 10^6 s of work over a 1-second arrival span asked
        // for 2.2 million GPUs.
        assert_eq!(sized_cluster(&[job(0, 1, 1_000_000), job(0, 1, 1_000_000)]).unwrap(), [8, 0, 0]);
        // A 12-GPU job alone: two nodes.
        assert_eq!(sized_cluster(&[job(5, 12, 100)]).unwrap(), [16, 0, 0]);
    }

    #[test]
    fn a_steady_trace_is_sized_to_its_load_and_never_past_its_peak() {
        // One 4-GPU job every 100 s, each running 1,000 s: 40 GPUs run at
        // once when the run is steady; 4·10^6 GPU·s over the arrivals'
        // 99,900 s is 40.04 GPUs → 45 at 90% load, capped at the peak of
        // 40, in nodes of 8.
        let steady: Vec<Job> = (0..1000).map(|i| job(i * 100, 4, 1_000)).collect();
        assert_eq!(sized_cluster(&steady).unwrap(), [40, 0, 0]);
        // Sparse: one 1-GPU job every 1,000 s running 100 s: load 0.1 GPU,
        // peak 1; at least the largest job, in a node of 8.
        let sparse: Vec<Job> = (0..100).map(|i| job(i * 1_000, 1, 100)).collect();
        assert_eq!(sized_cluster(&sparse).unwrap(), [8, 0, 0]);
        // A job that ends as another arrives frees its GPUs for it.
        assert_eq!(sized_cluster(&[job(0, 8, 10), job(10, 8, 10)]).unwrap(), [8, 0, 0]);
    }

    #[test]
    fn a_trace_or_spec_past_the_supported_size_is_refused() {
        let wide: Vec<Job> = (0..300).map(|_| job(0, 4096, 1_000)).collect();
        let e = sized_cluster(&wide).unwrap_err().to_string();
        assert!(e.contains("1228800 GPUs") && e.contains("at most 1048576"), "{e}");
        let e = spec_cluster(r#"{"t": ["4000000000:0:0"]}"#, "t").unwrap_err().to_string();
        assert!(e.contains("`4000000000:0:0` is more than the 1048576 GPUs"), "{e}");
        assert_eq!(spec_cluster(r#"{"t": ["16:8:0"]}"#, "t").unwrap(), Some([16, 8, 0]));
    }
}
