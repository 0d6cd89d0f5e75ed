//! The episodes `tessera train` learns from and reports on: generated
//! members of the openb workload families on (a seeded sample of) the openb
//! cluster ([`Source`]), or the pods a service saw arrive on its own
//! cluster ([`Recorded`], fine-tuning); arrivals inflated to 130% as the
//! published protocol does, each run to the end through the native twin of
//! a policy.

use anyhow::{Context, Result};
use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use tessera_core::metrics::TargetWorkload;
use tessera_core::model::{Node, Pod};
use tessera_core::sim::Simulator;
use tessera_policy::PolicyDocument;
use tessera_trace::family::{self, Family, Member};
use tessera_trace::{NodeRow, PodRow};

use crate::generate::TUNE;
use crate::native::NativePolicy;
use crate::sim::{inject_workload, node_of, pod_of};

/// One workload to place.
#[derive(Debug, Clone)]
pub struct Episode {
    /// `cpu:137.5 seed 7`, `recorded seed 7`.
    pub name: String,
    /// The cluster.
    pub nodes: Vec<Node>,
    /// Submissions in arrival order.
    pub submissions: Vec<Pod>,
    /// The target workload (the member's shapes).
    pub workload: TargetWorkload,
}

/// What episodes are drawn from.
pub struct Source {
    /// The base pod list (`openb_pod_list_default.csv`).
    pub base: Vec<PodRow>,
    /// Pods naming models, for `gpuspec` members (`openb_pod_list_gpuspec10.csv`).
    pub examples: Vec<PodRow>,
    /// The cluster (`openb_node_list_gpu_node.csv`).
    pub nodes: Vec<NodeRow>,
    /// Whole workloads drawn from as they are (the trace directory's pod
    /// lists, with `--with-traces`), by name.
    pub workloads: Vec<(String, Vec<PodRow>)>,
}

impl Source {
    /// `count` episodes of `families` and then [`Source::workloads`] (when
    /// `workloads`), in turn: for a family, a level drawn uniformly in the
    /// family's range and a member generated from the base with a seed of
    /// its own; for a workload, its pods as they are; on `scale` of the
    /// cluster's nodes with `scale` of the pods (both sampled), arrivals
    /// inflated to 130%. Seeded by `seed` alone.
    pub fn episodes(
        &self,
        families: &[Family],
        workloads: bool,
        count: usize,
        scale: f64,
        seed: u64,
    ) -> Result<Vec<Episode>> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut out = Vec::with_capacity(count);
        let kinds = families.len() + if workloads { self.workloads.len() } else { 0 };
        for i in 0..count {
            let (name, pods) = match families.get(i % kinds) {
                Some(&family) => {
                    let (lo, hi) = family.range();
                    // Levels in quarter percents: names stay short and exact.
                    let level = (rng.random_range(lo..=hi) * 4.0).round() / 4.0;
                    let member = Member { family, level };
                    let member_seed = rng.random_range(0..u32::MAX as u64);
                    let pods = family::generate(&self.base, &member, member_seed, &self.examples, &self.nodes)
                        .with_context(|| format!("generating {member}"))?;
                    (format!("{member} seed {member_seed}"), pods)
                }
                None => {
                    let (name, pods) = &self.workloads[i % kinds - families.len()];
                    (format!("{name} seed {}", rng.random_range(0..u32::MAX as u64)), pods.clone())
                }
            };
            let nodes = sample(&self.nodes, scale, &mut rng);
            let pods = sample(&pods, scale, &mut rng);
            let order = family::inflate(&pods, &nodes, TUNE, rng.random_range(0..u32::MAX as u64));
            let rows: Vec<Pod> = pods.iter().map(pod_of).collect();
            out.push(Episode {
                name,
                nodes: nodes.iter().enumerate().map(|(i, r)| node_of(i, r)).collect(),
                submissions: order.iter().map(|&k| rows[k as usize].clone()).collect(),
                workload: TargetWorkload::from_pods(&rows, 0.95),
            });
        }
        Ok(out)
    }
}

/// What a service saw: its cluster and the pods that arrived on it.
pub struct Recorded {
    /// The live cluster's nodes (what is bound on them is ignored).
    pub nodes: Vec<Node>,
    /// The pods that arrived, oldest first.
    pub pods: Vec<Pod>,
}

impl Recorded {
    /// `count` episodes: `scale` of the nodes, emptied, and `scale` of the
    /// recorded pods (both sampled), arrivals inflated to 130% of the
    /// sample's GPUs by the published rule; the target workload is the
    /// recorded pods' shapes. Gangs and queues are dropped: the protocol
    /// places pods one at a time. Seeded by `seed` alone.
    pub fn episodes(&self, count: usize, scale: f64, seed: u64) -> Result<Vec<Episode>> {
        if self.nodes.is_empty() {
            anyhow::bail!("the record has no node");
        }
        if !self.pods.iter().any(|p| p.gpu_count > 0 && p.gpu_milli > 0) {
            anyhow::bail!(
                "none of the {} recorded pods asks for a GPU: nothing to learn about GPU placement",
                self.pods.len()
            );
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            let episode_seed = rng.random_range(0..u32::MAX as u64);
            let nodes: Vec<Node> =
                sample(&self.nodes, scale, &mut rng).iter().enumerate().map(|(i, n)| emptied(i as u32, n)).collect();
            let pods: Vec<Pod> = sample(&self.pods, scale, &mut rng)
                .into_iter()
                .map(|mut p| {
                    p.gang = None;
                    p.queue = None;
                    p
                })
                .collect();
            let shares: Vec<(u32, u32)> = pods.iter().map(|p| (p.gpu_count, p.gpu_milli)).collect();
            let gpus = nodes.iter().map(|n| n.gpus.len() as u64).sum();
            let order = family::inflate_shares(&shares, gpus, TUNE, rng.random_range(0..u32::MAX as u64));
            out.push(Episode {
                name: format!("recorded seed {episode_seed}"),
                nodes,
                submissions: order.iter().map(|&k| pods[k as usize].clone()).collect(),
                workload: TargetWorkload::from_pods(&pods, 0.95),
            });
        }
        Ok(out)
    }
}

/// `n` as id `id`, with nothing bound: its capacity free, every GPU whole.
fn emptied(id: u32, n: &Node) -> Node {
    let mut node = n.clone();
    node.id = id;
    node.free = node.capacity;
    for g in &mut node.gpus {
        g.free_milli = tessera_core::model::GPU_MILLI;
        g.util_permille = 0;
        g.memory_used_mib = 0;
    }
    node.cpu_util_permille = 0;
    node.memory_util_permille = 0;
    node.workloads.clear();
    node.gpu_classes.clear();
    node
}

/// `scale` of `rows` (at least one), drawn without replacement, in their
/// original order.
fn sample<T: Clone>(rows: &[T], scale: f64, rng: &mut ChaCha8Rng) -> Vec<T> {
    if scale >= 1.0 {
        return rows.to_vec();
    }
    let want = ((rows.len() as f64 * scale).round() as usize).clamp(1, rows.len());
    let mut idx: Vec<usize> = (0..rows.len()).collect();
    for i in 0..want {
        let j = rng.random_range(i..idx.len());
        idx.swap(i, j);
    }
    let mut kept = idx[..want].to_vec();
    kept.sort_unstable();
    kept.into_iter().map(|i| rows[i].clone()).collect()
}

/// Unallocated GPUs (%) at 130% arrived demand when `doc` places `ep`,
/// through the native twin of its scorers (ties as the document says).
pub fn unallocated(ep: &Episode, doc: &PolicyDocument) -> Result<f64> {
    let mut doc = doc.clone();
    inject_workload(&mut doc, &ep.workload);
    let mut policy = NativePolicy::from_document(&doc)
        .map_err(|e| anyhow::anyhow!("policy {}: {e}", doc.name))?
        .with_tie_break(crate::load::tie_break(&doc));
    let report = Simulator::new(ep.nodes.clone(), ep.workload.clone(), &mut policy).run_submissions(&ep.submissions);
    Ok(report.unallocated_at(130))
}
