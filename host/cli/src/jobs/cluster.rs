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
        [v, p, k] => Ok(Some([v, p, k])),
        _ => bail!("vc_cluster_specs.json: {trace}: `{first}` is not V100:P100:K80 GPU counts"),
    }
}

/// V100 GPUs for a trace without a spec: its GPU-seconds (on V100, or its
/// fastest model) over its arrival span at 90% load, in whole nodes, at
/// least its largest job.
pub fn sized_cluster(jobs: &[Job]) -> [u32; 3] {
    let work: f64 = jobs.iter().map(|j| f64::from(j.gpus) * *j.seconds_on.values().min().unwrap_or(&0) as f64).sum();
    let (first, last) = jobs.iter().fold((u64::MAX, 0), |(a, b), j| (a.min(j.arrival_s), b.max(j.arrival_s)));
    let span = last.saturating_sub(first).max(1) as f64;
    let largest = jobs.iter().map(|j| j.gpus).max().unwrap_or(GPUS_PER_NODE);
    let gpus = ((work / span / 0.9).ceil() as u32).max(largest).max(1);
    [gpus.div_ceil(GPUS_PER_NODE) * GPUS_PER_NODE, 0, 0]
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
