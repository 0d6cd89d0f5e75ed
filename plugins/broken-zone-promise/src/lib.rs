//! `broken-zone-promise`: a scorer that declares the `zone` reuse scope
//! (`tessera:policy/reuse`, contract 0.2.2) and does not keep it. Its score
//! is the node's free CPU, which differs between nodes of one zone, so a
//! host that asked one node per zone and copied its answer would decide
//! on scores the plugin never gave. The host must catch this
//! (`PLUGIN-REUSE-BROKEN`) and stop copying; `tests/all/reuse.rs` proves
//! it does.

use tessera_sdk::{Node, Pod, Reuse, Score, Scorer};

/// The plugin.
#[derive(Debug, Default)]
pub struct BrokenZonePromise;

impl Scorer for BrokenZonePromise {
    type Config = ();
    const NAME: &'static str = "broken-zone-promise";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "scores nodes by their own free CPU, yet promises the zone scope";
    const REUSE: Reuse = Reuse::Zone;

    fn new((): ()) -> Result<Self, String> {
        Ok(Self)
    }

    fn score(&self, _pod: &Pod, node: &Node<'_>) -> Score {
        Score::new(i64::from(node.free.cpu_milli))
    }
}

tessera_sdk::export_scorer!(BrokenZonePromise);
