//! The cluster, the workload and the policy a simulation runs, as the
//! command line names them.

use std::path::PathBuf;

use clap::ValueEnum;
use tessera::sim;

/// The cluster, the workload and the policy of a simulation.
#[derive(clap::Args)]
pub struct WorkloadArgs {
    /// Node list (openb CSV) or `builtin`.
    #[arg(long, default_value = "builtin")]
    pub nodes: sim::Input,
    /// Nodes to generate for `--nodes builtin`.
    #[arg(long, default_value_t = 1000, value_parser = super::count::<usize>(1, super::MAX_NODES))]
    pub node_count: usize,
    /// Pod list (openb CSV) or `builtin`.
    #[arg(long, default_value = "builtin")]
    pub pods: sim::Input,
    /// Arrival order file (one pod row index per line).
    #[arg(long)]
    pub order: Option<PathBuf>,
    /// Seed of the built-in workload and of the plugins' random streams.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// `default`, a built-in plugin name, or a policy file.
    #[arg(long, default_value = "default")]
    pub policy: String,
    /// Built-in workload: submit until GPU demand is this × capacity
    /// (above 0, at most 10).
    #[arg(long, default_value_t = 1.3, value_parser = inflation)]
    pub inflate: f64,
}

impl WorkloadArgs {
    /// Simulator options for these inputs; nothing else set.
    pub fn options(self) -> sim::SimOptions {
        sim::SimOptions {
            nodes: self.nodes,
            node_count: self.node_count,
            pods: self.pods,
            order: self.order,
            seed: self.seed,
            policy: self.policy,
            time_replay: false,
            inflate: self.inflate,
            tie_break: None,
            reschedule: None,
            reschedule_every: 0,
            actuator: Default::default(),
            bound: false,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum TieBreakArg {
    /// The lowest node id wins.
    NodeId,
    /// A fixed random ranking of nodes from the seed.
    SeededRank,
}

impl TieBreakArg {
    /// The policy document's setting.
    pub fn spec(self) -> tessera_policy::TieBreakSpec {
        match self {
            TieBreakArg::NodeId => tessera_policy::TieBreakSpec::NodeId,
            TieBreakArg::SeededRank => tessera_policy::TieBreakSpec::SeededRank,
        }
    }
}

/// `tessera workload …`.
#[derive(clap::Subcommand)]
pub enum WorkloadCmd {
    /// Generate members of the openb workload families (`cpu`, `gpushare`,
    /// `gpuspec`, `multigpu`) from the default pod list, seeded: each pod
    /// class resampled from default's rows to the member's mix, with
    /// arrival orders inflated to 130% as the published runs did. Writes a
    /// directory `bench quality --traces` reads.
    Generate {
        /// A directory laid out like shared/traces/openb
        /// (openb_pod_list_default.csv, openb_node_list_gpu_node.csv, and
        /// openb_pod_list_gpuspec10.csv for the models gpuspec names).
        #[arg(long)]
        traces: PathBuf,
        /// Members as FAMILY:LEVEL, comma-separated: `cpu:L` (CPU-only pods
        /// = L% of default's), `gpushare:L` (sharing pods ask for L% of the
        /// GPU demand), `gpuspec:L` (L% of GPU pods name allowed models),
        /// `multigpu:L` (multi-GPU pods ask for L% of the GPU demand).
        #[arg(long = "member", value_delimiter = ',', required = true)]
        members: Vec<tessera_trace::family::Member>,
        /// Seeds of each member's pods (one workload per seed).
        #[arg(long, value_delimiter = ',', default_value = "1")]
        seeds: Vec<u64>,
        /// Arrival orders per workload, seeded 42, 43, … like the
        /// published ones.
        #[arg(long, default_value_t = 3, value_parser = super::count::<u64>(1, super::MAX_REPS))]
        orders: u64,
        /// The directory to write.
        #[arg(long)]
        out: PathBuf,
        #[arg(long, value_enum, default_value = "table")]
        format: tessera::report::Format,
    },
}

/// Runs it.
pub fn run(cmd: WorkloadCmd) -> anyhow::Result<std::process::ExitCode> {
    let WorkloadCmd::Generate { traces, members, seeds, orders, out, format } = cmd;
    let g = tessera::generate::run(&tessera::generate::GenerateOptions {
        traces,
        members,
        seeds,
        order_seeds: (42..42 + orders).collect(),
        out,
    })?;
    tessera::report::emit(&g, format)?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// `--inflate`: a finite ratio in (0, 10] (past that the workload only
/// grows, to the memory's end).
fn inflation(s: &str) -> Result<f64, String> {
    let r: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if r.is_finite() && r > 0.0 && r <= 10.0 { Ok(r) } else { Err(format!("{s} is not within (0, 10]")) }
}
