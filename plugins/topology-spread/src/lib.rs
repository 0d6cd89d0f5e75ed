//! `topology-spread`: spread a workload's pods across topology zones.
//!
//! Soft mode scores a node by how far its zone is below the busiest zone of
//! the pod's workload (fewer pods of the workload in the zone is better).
//! With `max_skew` set, a node is rejected when placing the pod there would
//! make its zone exceed the least-loaded zone by more than `max_skew`.

use std::collections::HashMap;

use serde::Deserialize;
use tessera_sdk::{Node, NodeId, NodeTable, Pod, Score, Scorer, Sym, WorkloadCount};

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
    /// Pods of the current pod's workload per zone symbol.
    counts: Vec<u32>,
    max: u32,
    min: u32,
    active: bool,
    /// Kept up to date node by node, so a call costs O(zones), not
    /// O(nodes): pods per zone of every workload,
    by_workload: HashMap<String, Vec<u32>>,
    /// nodes per zone,
    nodes_per_zone: Vec<u32>,
    /// and what each node contributed (its zone and workload counts).
    seen: Vec<Option<(Sym, Vec<WorkloadCount>)>>,
}

impl Spread {
    /// Takes back what node `id` contributed.
    fn forget(&mut self, id: NodeId) {
        let Some(Some((zone, workloads))) = self.seen.get_mut(id as usize).map(Option::take) else { return };
        let z = zone as usize;
        self.nodes_per_zone[z] -= 1;
        for w in workloads {
            if let Some(c) = self.by_workload.get_mut(&w.workload) {
                c[z] -= w.pods;
            }
        }
    }
}

impl Spread {
    #[inline]
    fn zone_count(&self, node: &Node<'_>) -> u32 {
        self.counts.get(node.zone as usize).copied().unwrap_or(0)
    }
}

impl Scorer for Spread {
    type Config = Config;
    const NAME: &'static str = "topology-spread";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "spread a workload's pods across zones (soft score, optional max skew)";
    const FILTER_REASONS: &'static [&'static str] = &["SCHED-ZONE-SPREAD"];
    /// Within a call, the verdict and score for a node are functions of
    /// its zone's count alone: the host asks one node per zone.
    const REUSE: tessera_sdk::Reuse = tessera_sdk::Reuse::Zone;

    fn new(cfg: Config) -> Result<Self, String> {
        if cfg.max_skew == Some(0) {
            return Err("topology-spread: max_skew must be at least 1".into());
        }
        Ok(Self { cfg, ..Self::default() })
    }

    fn on_node(&mut self, node: &Node<'_>) {
        self.forget(node.id());
        let z = node.zone as usize;
        if z >= self.nodes_per_zone.len() {
            self.nodes_per_zone.resize(z + 1, 0);
        }
        self.nodes_per_zone[z] += 1;
        let workloads = node.meta().map(|m| m.workloads.clone()).unwrap_or_default();
        for w in &workloads {
            let c = self.by_workload.entry(w.workload.clone()).or_default();
            if z >= c.len() {
                c.resize(z + 1, 0);
            }
            c[z] += w.pods;
        }
        let i = node.id() as usize;
        if i >= self.seen.len() {
            self.seen.resize(i + 1, None);
        }
        self.seen[i] = Some((node.zone, workloads));
    }

    fn on_remove(&mut self, id: NodeId) {
        self.forget(id);
    }

    fn prepare(&mut self, pod: &Pod, nodes: &NodeTable) {
        self.active = !pod.workload.is_empty();
        self.counts.clear();
        self.counts.resize(nodes.symbol_count(), 0);
        if !self.active {
            return;
        }
        if let Some(c) = self.by_workload.get(&pod.workload) {
            for (dst, src) in self.counts.iter_mut().zip(c) {
                *dst = *src;
            }
        }
        let live = || {
            self.counts
                .iter()
                .zip(self.nodes_per_zone.iter().chain(std::iter::repeat(&0)))
                .filter(|(_, n)| **n > 0)
                .map(|(c, _)| *c)
        };
        self.max = live().max().unwrap_or(0);
        self.min = live().min().unwrap_or(0);
    }

    /// Without a skew limit it rejects nothing: the host need not ask.
    fn filter_reasons(&self) -> &'static [&'static str] {
        if self.cfg.max_skew.is_some() { Self::FILTER_REASONS } else { &[] }
    }

    fn filters(&self, _pod: &Pod) -> bool {
        self.active && self.cfg.max_skew.is_some()
    }

    fn filter(&self, _pod: &Pod, node: &Node<'_>) -> Result<(), u8> {
        match self.cfg.max_skew {
            Some(skew) if self.active => {
                let after = self.zone_count(node) + 1;
                if after.saturating_sub(self.min) > skew { Err(0) } else { Ok(()) }
            }
            _ => Ok(()),
        }
    }

    fn score(&self, _pod: &Pod, node: &Node<'_>) -> Score {
        if !self.active {
            return Score::new(0);
        }
        Score::new(i64::from(self.max - self.zone_count(node)))
    }
}

tessera_sdk::export_scorer!(Spread);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::{NodeDelta, NodeRecord, ScorerHarness, WorkloadCount};

    fn node(id: u32, zone: &str, web_pods: u32) -> NodeRecord {
        let workloads =
            if web_pods > 0 { vec![WorkloadCount { workload: "web".into(), pods: web_pods }] } else { vec![] };
        NodeRecord { id, zone: zone.into(), ready: true, workloads, ..NodeRecord::default() }
    }

    fn harness(cfg: &str) -> ScorerHarness<Spread> {
        let mut h = ScorerHarness::<Spread>::new(cfg).unwrap();
        h.apply([
            NodeDelta::Upsert(node(0, "a", 2)),
            NodeDelta::Upsert(node(1, "a", 1)),
            NodeDelta::Upsert(node(2, "b", 1)),
            NodeDelta::Upsert(node(3, "c", 0)),
        ])
        .unwrap();
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
    fn counts_follow_node_changes_and_removals() {
        let mut h = harness("");
        let pod = Pod { workload: "web".into(), ..Pod::default() };
        let (mut v, mut hints) = (Vec::new(), Vec::new());
        // Node 0 (zone a) loses its 2 web pods; node 3 (zone c) gets 4; node
        // 2 (zone b) leaves: zones a = 1, c = 4, b has no node.
        h.apply([NodeDelta::Upsert(node(0, "a", 0)), NodeDelta::Upsert(node(3, "c", 4)), NodeDelta::Remove(2)])
            .unwrap();
        h.score(&pod, &[0, 1, 3], &mut v, &mut hints).unwrap();
        assert_eq!(v, [3, 3, 0]);
        // A node moving zones moves its pods.
        h.apply([NodeDelta::Upsert(node(1, "c", 1))]).unwrap();
        h.score(&pod, &[0, 1, 3], &mut v, &mut hints).unwrap();
        assert_eq!(v, [5, 0, 0], "zone a = 0, zone c = 5");
    }

    #[test]
    fn zero_skew_is_rejected() {
        assert!(ScorerHarness::<Spread>::new(r#"{"max_skew": 0}"#).is_err());
    }
}
