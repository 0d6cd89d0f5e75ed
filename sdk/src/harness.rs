//! The glue between the host's calls and a plugin's per-node functions.
//!
//! The component export (on `wasm32`) and native tests run exactly this code,
//! so a plugin tested natively through a harness behaves the same inside the
//! component.

use std::collections::VecDeque;

use crate::types::{Finding, Frame, NodeDelta, NodeId, Pod};
use crate::{Detector, NodeTable, Scorer};

/// Parses plugin configuration: an empty string or JSON `null` gives the default.
pub fn parse_config<C: serde::de::DeserializeOwned + Default>(json: &str) -> Result<C, String> {
    let trimmed = json.trim();
    if trimmed.is_empty() || trimmed == "null" {
        return Ok(C::default());
    }
    serde_json::from_str(trimmed).map_err(|e| format!("invalid configuration: {e}"))
}

/// Runs a [`Scorer`] over a node mirror, one call per pod.
pub struct ScorerHarness<S: Scorer> {
    plugin: S,
    nodes: NodeTable,
}

impl<S: Scorer> ScorerHarness<S> {
    /// Configures the plugin from JSON (empty or `null` = default config).
    pub fn new(config_json: &str) -> Result<Self, String> {
        let config = parse_config::<S::Config>(config_json)?;
        Ok(Self { plugin: S::new(config)?, nodes: NodeTable::new() })
    }

    /// The node mirror.
    pub fn nodes(&self) -> &NodeTable {
        &self.nodes
    }

    /// The node mirror, to set what the host would (zone signals) in
    /// native tests and twins.
    pub fn nodes_mut(&mut self) -> &mut NodeTable {
        &mut self.nodes
    }

    /// Reads the host's zone signals into the mirror before a call (inside
    /// a component; natively they are set with [`Self::nodes_mut`]).
    fn refresh_host_signals(&mut self) {
        #[cfg(target_arch = "wasm32")]
        if S::ZONE_CARBON {
            self.nodes.refresh_zone_carbon(crate::guest::zone_carbon_intensity);
        }
    }

    /// The plugin.
    pub fn plugin(&self) -> &S {
        &self.plugin
    }

    /// Applies deltas to the mirror. On an invalid record the deltas before
    /// it stay applied and the error names the node.
    pub fn apply(&mut self, deltas: impl IntoIterator<Item = NodeDelta>) -> Result<(), String> {
        let mut result = Ok(());
        for delta in deltas {
            let id = match &delta {
                NodeDelta::Upsert(rec) => rec.id,
                NodeDelta::Remove(id) => *id,
            };
            result = self.nodes.apply(delta);
            if result.is_err() {
                break;
            }
            match self.nodes.get(id) {
                Some(node) => self.plugin.on_node(&node),
                None => self.plugin.on_remove(id),
            }
        }
        self.plugin.on_apply(&self.nodes);
        result
    }

    /// One verdict per candidate: 0 = feasible, `k > 0` = reason `k - 1`.
    pub fn filter(&mut self, pod: &Pod, candidates: &[NodeId], out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        out.reserve(candidates.len());
        self.refresh_host_signals();
        self.plugin.prepare(pod, &self.nodes);
        if !self.plugin.filters(pod) {
            if let Some(&id) = candidates.iter().find(|&&id| !self.nodes.contains(id)) {
                return Err(unknown(id));
            }
            out.resize(candidates.len(), 0);
            return Ok(());
        }
        for &id in candidates {
            let node = self.nodes.get(id).ok_or_else(|| unknown(id))?;
            out.push(match self.plugin.filter(pod, &node) {
                Ok(()) => 0,
                Err(reason) => reason.saturating_add(1),
            });
        }
        Ok(())
    }

    /// One score per candidate; `hints` gets one GPU index per candidate
    /// (255 = none) if the plugin declares [`Scorer::SUGGESTS_GPU`], else
    /// stays empty.
    pub fn score(
        &mut self,
        pod: &Pod,
        candidates: &[NodeId],
        values: &mut Vec<i64>,
        hints: &mut Vec<u8>,
    ) -> Result<(), String> {
        self.refresh_host_signals();
        self.plugin.prepare(pod, &self.nodes);
        // Outputs sized up front and written in place, and no call in the
        // loop (not even on its error path): Cranelift, which compiles the
        // component, spills every live register around a call.
        hints.clear();
        let mut missing = None;
        if S::SUGGESTS_GPU {
            values.clear();
            values.resize(candidates.len(), 0);
            hints.resize(candidates.len(), u8::MAX);
            for ((value, hint), &id) in values.iter_mut().zip(hints.iter_mut()).zip(candidates) {
                let Some(node) = self.nodes.get(id) else {
                    missing = Some(id);
                    break;
                };
                let score = self.plugin.score(pod, &node);
                *value = score.value;
                *hint = score.gpu.unwrap_or(u8::MAX);
            }
        } else {
            values.clear();
            values.resize(candidates.len(), 0);
            // Eight nodes per iteration, in a loop of fixed trip count that
            // the compiler unrolls: every Wasm loop header carries an epoch
            // check whose slow path is a call, around which Cranelift spills
            // and reloads the loop's invariants (the plugin's per-pod
            // constants), so fewer back edges matter more than natively.
            // (The GPU-naming loop above stays one node at a time: unrolled
            // the same way it ran slower, docs/BENCHMARKS.md §4.)
            const STEP: usize = 8;
            let mut out = values.chunks_exact_mut(STEP);
            let mut ids = candidates.chunks_exact(STEP);
            'chunks: for (vals, idc) in (&mut out).zip(&mut ids) {
                for k in 0..STEP {
                    match self.nodes.get(idc[k]) {
                        Some(node) => vals[k] = self.plugin.score(pod, &node).value,
                        None => {
                            missing = Some(idc[k]);
                            break 'chunks;
                        }
                    }
                }
            }
            if missing.is_none() {
                for (value, &id) in out.into_remainder().iter_mut().zip(ids.remainder()) {
                    match self.nodes.get(id) {
                        Some(node) => *value = self.plugin.score(pod, &node).value,
                        None => {
                            missing = Some(id);
                            break;
                        }
                    }
                }
            }
        }
        if let Some(id) = missing {
            return Err(unknown(id));
        }
        self.plugin.finish(pod, values);
        Ok(())
    }
}

fn unknown(id: NodeId) -> String {
    format!("unknown node id {id}: the host and the plugin's mirror disagree")
}

/// Runs a [`Detector`] over a sliding window of telemetry frames.
pub struct DetectorHarness<D: Detector> {
    plugin: D,
    window: Window,
}

impl<D: Detector> DetectorHarness<D> {
    /// Configures the plugin from JSON (empty or `null` = default config).
    pub fn new(config_json: &str) -> Result<Self, String> {
        let config = parse_config::<D::Config>(config_json)?;
        let plugin = D::new(config)?;
        let capacity = plugin.window().max(1);
        Ok(Self { plugin, window: Window { frames: VecDeque::with_capacity(capacity), capacity } })
    }

    /// Appends one frame, dropping the oldest beyond the window size.
    pub fn observe(&mut self, mut frame: Frame) {
        frame.samples.sort_unstable_by_key(|(n, _)| *n);
        if self.window.frames.len() == self.window.capacity {
            self.window.frames.pop_front();
        }
        self.window.frames.push_back(frame);
    }

    /// Findings over the current window.
    pub fn detect(&self) -> Vec<Finding> {
        self.plugin.detect(&self.window)
    }
}

/// The most recent telemetry frames, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Window {
    frames: VecDeque<Frame>,
    capacity: usize,
}

impl Window {
    /// Frames held, oldest first.
    pub fn frames(&self) -> impl DoubleEndedIterator<Item = &Frame> + ExactSizeIterator {
        self.frames.iter()
    }

    /// The newest frame.
    pub fn latest(&self) -> Option<&Frame> {
        self.frames.back()
    }

    /// How many of the newest frames in a row satisfy `pred` for `node`
    /// (a frame without a sample of the node ends the run).
    pub fn consecutive(&self, node: NodeId, mut pred: impl FnMut(&crate::Sample) -> bool) -> usize {
        self.frames.iter().rev().take_while(|f| f.get(node).is_some_and(&mut pred)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Node, NodeRecord, Resources, Score};

    /// Scores by free CPU and records the hooks it sees.
    #[derive(Default)]
    struct Probe {
        seen: Vec<NodeId>,
        removed: Vec<NodeId>,
    }

    impl Scorer for Probe {
        type Config = ();
        const NAME: &'static str = "probe";
        const VERSION: &'static str = "0";
        fn new(_: ()) -> Result<Self, String> {
            Ok(Self::default())
        }
        fn on_node(&mut self, node: &Node<'_>) {
            self.seen.push(node.id());
        }
        fn on_remove(&mut self, id: NodeId) {
            self.removed.push(id);
        }
        /// Only pods of a workload are filtered: odd ids rejected.
        fn filters(&self, pod: &Pod) -> bool {
            !pod.workload.is_empty()
        }
        fn filter(&self, _pod: &Pod, node: &Node<'_>) -> Result<(), u8> {
            if node.id() % 2 == 1 { Err(0) } else { Ok(()) }
        }
        fn score(&self, _pod: &Pod, node: &Node<'_>) -> Score {
            Score::new(i64::from(node.free.cpu_milli))
        }
    }

    fn rec(id: NodeId) -> NodeDelta {
        NodeDelta::Upsert(NodeRecord {
            id,
            free: Resources { cpu_milli: id * 10, memory_mib: 0 },
            ..NodeRecord::default()
        })
    }

    #[test]
    fn scores_in_candidate_order_for_every_count_around_the_loop_step() {
        let mut h = ScorerHarness::<Probe>::new("").unwrap();
        h.apply((0..40).map(rec)).unwrap();
        let (mut v, mut hints) = (Vec::new(), Vec::new());
        // Whole steps of eight, remainders, and none: each count from 0 to
        // 33, candidates in a scrambled order with repeats.
        for len in 0..34u32 {
            let ids: Vec<NodeId> = (0..len).map(|i| (i * 7 + 3) % 40).collect();
            h.score(&Pod::default(), &ids, &mut v, &mut hints).unwrap();
            let want: Vec<i64> = ids.iter().map(|&id| i64::from(id) * 10).collect();
            assert_eq!(v, want, "{len} candidates");
            assert!(hints.is_empty());
        }
    }

    #[test]
    fn unknown_candidates_are_errors_wherever_they_stand() {
        let mut h = ScorerHarness::<Probe>::new("").unwrap();
        h.apply((0..20).map(rec)).unwrap();
        let (mut v, mut hints) = (Vec::new(), Vec::new());
        for ids in [&[99, 0][..], &[0, 99], &[0, 1, 99], &[99]] {
            let e = h.score(&Pod::default(), ids, &mut v, &mut hints).unwrap_err();
            assert!(e.contains("unknown node id 99"), "{ids:?}: {e}");
        }
        // In a whole step of eight, at its edges and in the remainder.
        for len in [8usize, 9, 16, 17, 19] {
            for at in [0, 7.min(len - 1), 8.min(len - 1), len - 1] {
                let mut ids: Vec<NodeId> = (0..len as u32).collect();
                ids[at] = 99;
                let e = h.score(&Pod::default(), &ids, &mut v, &mut hints).unwrap_err();
                assert!(e.contains("unknown node id 99"), "{len} candidates, unknown at {at}: {e}");
            }
        }
        let mut out = Vec::new();
        let web = Pod { workload: "web".into(), ..Pod::default() };
        for pod in [&Pod::default(), &web] {
            assert!(h.filter(pod, &[0, 99], &mut out).unwrap_err().contains("unknown node id 99"));
        }
    }

    #[test]
    fn a_plugin_that_does_not_filter_a_pod_passes_every_candidate_unasked() {
        let mut h = ScorerHarness::<Probe>::new("").unwrap();
        h.apply((0..4).map(rec)).unwrap();
        let mut out = vec![9; 7];
        h.filter(&Pod { workload: "web".into(), ..Pod::default() }, &[0, 1, 2, 3], &mut out).unwrap();
        assert_eq!(out, [0, 1, 0, 1]);
        h.filter(&Pod::default(), &[3, 1, 0], &mut out).unwrap();
        assert_eq!(out, [0, 0, 0]);
    }

    #[test]
    fn node_hooks_see_each_change() {
        let mut h = ScorerHarness::<Probe>::new("").unwrap();
        h.apply([rec(2), rec(0), NodeDelta::Remove(2), rec(0)]).unwrap();
        assert_eq!(h.plugin().seen, [2, 0, 0]);
        assert_eq!(h.plugin().removed, [2]);
        assert_eq!(h.nodes().len(), 1);
    }
}
