//! `spread`: spread a workload's pods across topology zones.
//!
//! Soft mode scores a node by how far its zone is below the busiest zone of
//! the pod's workload (fewer pods of the workload in the zone is better).
//! With `max_skew` set, a node is rejected when placing the pod there would
//! make its zone exceed the least-loaded zone by more than `max_skew`.

use serde::Deserialize;
use tessera_sdk::{Node, NodeTable, Pod, Score, Scorer};

/// Spread settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Hard limit on the difference between the busiest and the least busy
    /// zone after placement; `None` = soft spreading only.
    pub max_skew: Option<u32>,
}

/// The plugin.
#[derive(Debug, Default)]
pub struct Spread {
    cfg: Config,
    /// Zone names, indexed by zone number.
    zones: Vec<String>,
    /// Zone number of each node id (`u16::MAX` = unknown node).
    zone_of: Vec<u16>,
    /// Pods of the current pod's workload per zone.
    counts: Vec<u32>,
    max: u32,
    min: u32,
    active: bool,
}

impl Spread {
    fn zone_count(&self, node: &Node) -> u32 {
        self.zone_of
            .get(node.id as usize)
            .and_then(|&z| self.counts.get(z as usize))
            .copied()
            .unwrap_or(0)
    }
}

impl Scorer for Spread {
    type Config = Config;
    const NAME: &'static str = "spread";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "spread a workload's pods across zones (soft score, optional max skew)";
    const FILTER_REASONS: &'static [&'static str] = &["SCHED-ZONE-SPREAD"];

    fn new(cfg: Config) -> Result<Self, String> {
        if cfg.max_skew == Some(0) {
            return Err("spread: max_skew must be at least 1".into());
        }
        Ok(Self { cfg, ..Self::default() })
    }

    fn on_apply(&mut self, nodes: &NodeTable) {
        self.zone_of.clear();
        for node in nodes.iter() {
            let z = match self.zones.iter().position(|z| *z == node.zone) {
                Some(z) => z,
                None => {
                    self.zones.push(node.zone.clone());
                    self.zones.len() - 1
                }
            };
            let i = node.id as usize;
            if i >= self.zone_of.len() {
                self.zone_of.resize(i + 1, u16::MAX);
            }
            self.zone_of[i] = z as u16;
        }
    }

    fn prepare(&mut self, pod: &Pod, nodes: &NodeTable) {
        self.active = !pod.workload.is_empty();
        self.counts.clear();
        self.counts.resize(self.zones.len(), 0);
        if !self.active {
            return;
        }
        let mut present = vec![false; self.zones.len()];
        for node in nodes.iter() {
            let z = self.zone_of[node.id as usize] as usize;
            present[z] = true;
            self.counts[z] += node.workload_pods(&pod.workload);
        }
        let live = self.counts.iter().zip(&present).filter(|(_, p)| **p).map(|(c, _)| *c);
        self.max = live.clone().max().unwrap_or(0);
        self.min = live.min().unwrap_or(0);
    }

    fn filter(&self, _pod: &Pod, node: &Node) -> Result<(), u8> {
        match self.cfg.max_skew {
            Some(skew) if self.active => {
                let after = self.zone_count(node) + 1;
                // The least busy zone after placement is still `min` unless
                // this node's zone was the only one at `min`.
                if after.saturating_sub(self.min) > skew { Err(0) } else { Ok(()) }
            }
            _ => Ok(()),
        }
    }

    fn score(&self, _pod: &Pod, node: &Node) -> Score {
        if !self.active {
            return Score::new(0);
        }
        Score::new((self.max - self.zone_count(node)) as i64)
    }
}

tessera_sdk::export_scorer!(Spread);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::{NodeDelta, ScorerHarness, WorkloadCount};

    fn node(id: u32, zone: &str, web_pods: u32) -> Node {
        let workloads = if web_pods > 0 { vec![WorkloadCount { workload: "web".into(), pods: web_pods }] } else { vec![] };
        Node { id, zone: zone.into(), ready: true, workloads, ..Node::default() }
    }

    fn harness(cfg: &str) -> ScorerHarness<Spread> {
        let mut h = ScorerHarness::<Spread>::new(cfg).unwrap();
        h.apply([
            NodeDelta::Upsert(node(0, "a", 2)),
            NodeDelta::Upsert(node(1, "a", 1)),
            NodeDelta::Upsert(node(2, "b", 1)),
            NodeDelta::Upsert(node(3, "c", 0)),
        ]);
        h
    }

    #[test]
    fn emptier_zone_scores_higher() {
        let mut h = harness("");
        let pod = Pod { workload: "web".into(), ..Pod::default() };
        let (mut v, mut hints) = (Vec::new(), Vec::new());
        h.score(&pod, &[0, 1, 2, 3], &mut v, &mut hints).unwrap();
        // zone a: 3, b: 1, c: 0; max 3.
        assert_eq!(v, [0, 0, 2, 3]);
        assert!(hints.is_empty());
        let other = Pod { workload: "".into(), ..Pod::default() };
        h.score(&other, &[0, 3], &mut v, &mut hints).unwrap();
        assert_eq!(v, [0, 0]);
    }

    #[test]
    fn max_skew_rejects_busy_zone() {
        let mut h = harness(r#"{"max_skew": 2}"#);
        let pod = Pod { workload: "web".into(), ..Pod::default() };
        let mut out = Vec::new();
        h.filter(&pod, &[0, 1, 2, 3], &mut out).unwrap();
        // zone a would hold 4 vs min 0 -> skew 4 > 2; b: 2 - 0 = 2 ok; c: 1 ok.
        assert_eq!(out, [1, 1, 0, 0]);
    }

    #[test]
    fn zero_skew_is_rejected() {
        assert!(ScorerHarness::<Spread>::new(r#"{"max_skew": 0}"#).is_err());
    }
}
