//! `tessera workload generate`: members of the openb workload families
//! (`tessera_trace::family`) written as a trace directory laid out like
//! `shared/traces/openb` — the cluster's node list, one pod list per
//! member, arrival orders inflated to 130% — so `bench quality`, `sim` and
//! `train` read them like the shared ones.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use tessera_trace::NodeRow;
use tessera_trace::family::{self, Member};

use crate::sim::{read_pod_rows, read_trace_text};

/// The base pod list every member is resampled from.
pub const BASE: &str = "openb_pod_list_default.csv";
/// The pod list whose named models a `gpuspec` member draws from.
pub const SPEC_EXAMPLES: &str = "openb_pod_list_gpuspec10.csv";
/// The cluster.
pub const NODES: &str = "openb_node_list_gpu_node.csv";
/// The published inflation: GPU demand up to 130% of the cluster's GPUs.
pub const TUNE: f64 = 1.3;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// A directory laid out like shared/traces/openb (the base, the node
    /// list, and optionally the gpuspec examples).
    pub traces: PathBuf,
    /// The members.
    pub members: Vec<Member>,
    /// Seeds of the members' pods: one member per seed.
    pub seeds: Vec<u64>,
    /// Seeds of the arrival orders of each member.
    pub order_seeds: Vec<u64>,
    /// Where to write.
    pub out: PathBuf,
}

/// One member written.
#[derive(Debug, Clone, Serialize)]
pub struct Written {
    /// The workload's name (its pod list's stem).
    pub workload: String,
    /// `FAMILY:LEVEL`.
    pub member: String,
    /// The seed of its pods.
    pub seed: u64,
    /// Pods by class: CPU-only, sharing, one whole GPU, several.
    pub classes: [usize; 4],
    /// Arrivals in each order (clones included), by order seed.
    pub arrivals: Vec<(u64, usize)>,
}

/// Everything written.
#[derive(Debug, Clone, Serialize)]
pub struct Generated {
    /// The directory.
    pub out: PathBuf,
    /// The members, by workload.
    pub workloads: Vec<Written>,
}

/// The workload name of `member` with pods from `seed`.
pub fn workload_name(member: &Member, seed: u64) -> String {
    format!("openb_pod_list_{}-w{seed}", member.name())
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

/// Generates every member × seed with its orders into `opts.out`.
pub fn run(opts: &GenerateOptions) -> Result<Generated> {
    if opts.members.is_empty() || opts.seeds.is_empty() || opts.order_seeds.is_empty() {
        bail!("nothing to generate: give at least one member, one seed and one order seed");
    }
    let base = read_pod_rows(&opts.traces.join(BASE))?;
    let nodes_path = opts.traces.join(NODES);
    let nodes_text = read_trace_text(&nodes_path)?;
    let nodes: Vec<NodeRow> = tessera_trace::read_nodes(nodes_text.as_bytes(), &nodes_path.display().to_string())?;
    let examples_path = opts.traces.join(SPEC_EXAMPLES);
    let examples = if examples_path.exists() { read_pod_rows(&examples_path)? } else { Vec::new() };
    let orders_dir = opts.out.join("arrival-order");
    std::fs::create_dir_all(&orders_dir).with_context(|| format!("cannot create {}", orders_dir.display()))?;
    // The cluster travels with its workloads, so the directory stands alone.
    write(&opts.out.join(NODES), nodes_text.as_bytes())?;
    let mut out = Vec::new();
    for m in &opts.members {
        for &seed in &opts.seeds {
            let pods = family::generate(&base, m, seed, &examples, &nodes)?;
            let name = workload_name(m, seed);
            let mut csv = Vec::new();
            family::write_pods(&mut csv, &pods)?;
            write(&opts.out.join(format!("{name}.csv")), &csv)?;
            let mut arrivals = Vec::new();
            for &s in &opts.order_seeds {
                let order = family::inflate(&pods, &nodes, TUNE, s);
                let text: String = order.iter().map(|i| format!("{i}\n")).collect();
                write(&orders_dir.join(format!("{name}_tune1.3_seed{s}.txt")), text.as_bytes())?;
                arrivals.push((s, order.len()));
            }
            out.push(Written {
                workload: name,
                member: m.to_string(),
                seed,
                classes: family::class_counts(&pods),
                arrivals,
            });
        }
    }
    Ok(Generated { out: opts.out.clone(), workloads: out })
}

impl Generated {
    /// What was written, one line per member.
    pub fn to_table(&self) -> String {
        let mut s = format!(
            "{:<36} {:>8} {:>9} {:>8} {:>7} {:>7}  arrivals per order\n",
            "workload", "CPU-only", "sharing", "1 GPU", "multi", "total"
        );
        for w in &self.workloads {
            let [c, sh, wh, mu] = w.classes;
            let arrivals: Vec<String> = w.arrivals.iter().map(|(_, n)| n.to_string()).collect();
            s += &format!(
                "{:<36} {c:>8} {sh:>9} {wh:>8} {mu:>7} {:>7}  {}\n",
                w.workload,
                c + sh + wh + mu,
                arrivals.join(" ")
            );
        }
        s + &format!("written to {}\n", self.out.display())
    }
}
