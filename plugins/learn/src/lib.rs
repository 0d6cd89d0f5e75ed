//! **learned**: a placement policy trained in Tessera's simulator by
//! `tessera train`, shipped as a component like any other plugin.
//!
//! For each candidate node it computes features ([`features`]): FGD's
//! terms for the pod on that node (the fragmentation change against the
//! target workload, FGD's score and tie-break, the GPU gap's residue) and
//! the node's resources after placement; a small network ([`model`])
//! turns them into a score. The weights are embedded
//! (`model/learned.json`, written by `tessera train`), or given in the
//! configuration with their digest:
//!
//! ```yaml
//! config: { model: { format: 1, … }, digest: "sha256:…" }
//! ```
//!
//! Inference is plain arithmetic (no ML dependency in the component), the
//! same code natively (the twin `tessera train` trains through) and in
//! Wasm. A sharing pod's GPU is the one FGD's residue rule picks.

use serde::Deserialize;
use tessera_openb_policies::{Fgd, FgdConfig, PartsKind, ShapeConfig};
use tessera_sdk::{Node, NodeTable, Pod, Score, Scorer};

pub mod features;
pub mod model;

pub use model::{Model, ModelError};

/// The score of a node no GPU of which fits a sharing pod: below any
/// other ([`Model::score`] saturates above it).
pub const UNFIT: i64 = -9_000_000_000_000_001;

/// The plugin's configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LearnedConfig {
    /// The target workload (the host fills it in from the trace); empty:
    /// learned from the pods placed, as FGD does.
    #[serde(default)]
    pub workload: Vec<ShapeConfig>,
    /// Weights to use instead of the embedded ones.
    #[serde(default)]
    pub model: Option<Model>,
    /// With `model`: its digest (`sha256:…` of its canonical JSON), which
    /// must match.
    #[serde(default)]
    pub digest: Option<String>,
}

/// The plugin.
#[derive(Debug)]
pub struct Learned {
    model: Model,
    fgd: Fgd,
    pod: features::PodFeatures,
    /// Per node id: bumped whenever the node changes.
    epochs: Vec<u32>,
    /// Per node id × pod kind: `(FGD generation, epoch, score, GPU)`: a
    /// node's score depends on the pod's kind and the node alone, so
    /// between two changes of a node it is looked up, not recomputed.
    memo: std::cell::RefCell<Vec<(u32, u32, i64, u8)>>,
}

impl Learned {
    /// The model in use.
    pub fn model(&self) -> &Model {
        &self.model
    }
}

/// The model a configuration names: its own (digest checked) or the
/// embedded one.
pub fn model_of(config: &LearnedConfig) -> Result<Model, ModelError> {
    match (&config.model, &config.digest) {
        (Some(m), digest) => {
            m.check()?;
            let actual = m.digest();
            match digest {
                Some(given) if *given == actual => Ok(m.clone()),
                Some(given) => Err(ModelError::Digest { given: given.clone(), actual }),
                None => Err(ModelError::Digest { given: "(none)".into(), actual }),
            }
        }
        (None, Some(given)) => {
            let m = Model::embedded();
            let actual = m.digest();
            if *given == actual { Ok(m) } else { Err(ModelError::Digest { given: given.clone(), actual }) }
        }
        (None, None) => Ok(Model::embedded()),
    }
}

impl Scorer for Learned {
    type Config = LearnedConfig;
    const NAME: &'static str = "learned";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "a placement policy trained in the simulator (tessera train) over FGD's terms";
    const SUGGESTS_GPU: bool = true;

    fn new(config: LearnedConfig) -> Result<Self, String> {
        let model = model_of(&config).map_err(|e| e.to_string())?;
        let fgd = Fgd::new(FgdConfig {
            workload: config.workload,
            spare_gpu_nodes: true,
            balance_cpu: true,
            fill_residue: true,
            residue_first: true,
        })?;
        Ok(Self { model, fgd, pod: [0.0; features::POD.len()], epochs: Vec::new(), memo: Default::default() })
    }

    fn on_node(&mut self, node: &Node<'_>) {
        self.fgd.on_node(node);
        self.forget(node.id());
    }

    fn on_remove(&mut self, id: tessera_sdk::NodeId) {
        self.fgd.on_remove(id);
        self.forget(id);
    }

    fn prepare(&mut self, pod: &Pod, nodes: &NodeTable) {
        self.fgd.prepare(pod, nodes);
        self.pod = features::pod(pod);
    }

    fn score(&self, pod: &Pod, node: &Node<'_>) -> Score {
        let i = node.id() as usize;
        let epoch = self.epochs.get(i).copied().unwrap_or(0);
        let generation = self.fgd.generation();
        let slot = self.fgd.kind().map(|k| i * self.fgd.kind_count() + k);
        if let Some(slot) = slot
            && let Some(&(g, e, value, gpu)) = self.memo.borrow().get(slot)
            && g == generation
            && e == epoch
        {
            return if gpu == u8::MAX { Score::new(value) } else { Score::with_gpu(value, gpu) };
        }
        let parts = self.fgd.parts(pod, node);
        let value = if parts.kind == PartsKind::Unfit {
            // A sharing pod no GPU of the node fits (the host's filter
            // keeps such nodes out): last, as FGD puts it.
            UNFIT
        } else {
            Model::score(self.model.forward(&features::candidate(pod, node, &parts), &self.pod))
        };
        let gpu = parts.gpu.filter(|_| pod.is_gpu_sharing());
        if let Some(slot) = slot {
            let mut memo = self.memo.borrow_mut();
            if slot >= memo.len() {
                memo.resize(slot + 1, (0, 0, 0, u8::MAX));
            }
            memo[slot] = (generation, epoch, value, gpu.unwrap_or(u8::MAX));
        }
        match gpu {
            Some(g) => Score::with_gpu(value, g),
            None => Score::new(value),
        }
    }
}

impl Learned {
    fn forget(&mut self, id: tessera_sdk::NodeId) {
        let i = id as usize;
        if i >= self.epochs.len() {
            self.epochs.resize(i + 1, 0);
        }
        self.epochs[i] = self.epochs[i].wrapping_add(1);
    }
}

#[cfg(test)]
mod tests;
