//! `broken-promise`: a scorer that declares the `node` reuse scope
//! (`tessera:policy/reuse`) and does not keep it. A node's score is its
//! rank by free CPU among every node of the mirror, so when one node
//! fills up, the scores of nodes that did not change move too. The host
//! must catch this (`PLUGIN-REUSE-BROKEN`) and stop reusing its answers;
//! the tests in `tests/all/reuse.rs` prove it does.

use tessera_sdk::{Node, NodeTable, Pod, Reuse, Score, Scorer};

/// The plugin.
#[derive(Debug, Default)]
pub struct BrokenPromise {
    /// Free CPU of every node in the mirror, sorted, as of this call.
    free: Vec<u32>,
}

impl Scorer for BrokenPromise {
    type Config = ();
    const NAME: &'static str = "broken-promise";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "ranks nodes by free CPU among all of them, yet promises the node scope";
    const REUSE: Reuse = Reuse::Node;

    fn new((): ()) -> Result<Self, String> {
        Ok(Self::default())
    }

    fn prepare(&mut self, _pod: &Pod, nodes: &NodeTable) {
        self.free = nodes.iter().map(|n| n.free.cpu_milli).collect();
        self.free.sort_unstable();
    }

    fn score(&self, _pod: &Pod, node: &Node<'_>) -> Score {
        Score::new(self.free.partition_point(|&f| f < node.free.cpu_milli) as i64)
    }
}

tessera_sdk::export_scorer!(BrokenPromise);
