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

    /// The plugin.
    pub fn plugin(&self) -> &S {
        &self.plugin
    }

    /// Applies deltas to the mirror.
    pub fn apply(&mut self, deltas: impl IntoIterator<Item = NodeDelta>) {
        for delta in deltas {
            self.nodes.apply(delta);
        }
        self.plugin.on_apply(&self.nodes);
    }

    /// One verdict per candidate: 0 = feasible, `k > 0` = reason `k - 1`.
    pub fn filter(&mut self, pod: &Pod, candidates: &[NodeId], out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        out.reserve(candidates.len());
        self.plugin.prepare(pod, &self.nodes);
        for &id in candidates {
            let node = self.nodes.get(id).ok_or_else(|| unknown(id))?;
            out.push(match self.plugin.filter(pod, node) {
                Ok(()) => 0,
                Err(reason) => reason.saturating_add(1),
            });
        }
        Ok(())
    }

    /// One score per candidate; `hints` is filled only if some score names a GPU.
    pub fn score(
        &mut self,
        pod: &Pod,
        candidates: &[NodeId],
        values: &mut Vec<i64>,
        hints: &mut Vec<u8>,
    ) -> Result<(), String> {
        values.clear();
        hints.clear();
        values.reserve(candidates.len());
        self.plugin.prepare(pod, &self.nodes);
        for (i, &id) in candidates.iter().enumerate() {
            let node = self.nodes.get(id).ok_or_else(|| unknown(id))?;
            let score = self.plugin.score(pod, node);
            values.push(score.value);
            if let Some(gpu) = score.gpu {
                if hints.is_empty() {
                    hints.resize(i, u8::MAX);
                }
                hints.push(gpu);
            } else if !hints.is_empty() {
                hints.push(u8::MAX);
            }
        }
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
