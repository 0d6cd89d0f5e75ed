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
    #[arg(long, default_value_t = 1000)]
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
    /// Built-in workload: submit until GPU demand is this × capacity.
    #[arg(long, default_value_t = 1.3)]
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
