//! What a training run did: the record `tessera train` prints and writes
//! as `train.json`, and the card and curves are drawn from.

use serde::Serialize;

/// One generation's figures: gains are `1 − ours ÷ FGD` in unallocated
/// GPUs at 130%, averaged over episodes (positive: better than FGD).
#[derive(Debug, Clone, Serialize)]
pub struct Generation {
    /// 1-based.
    pub generation: usize,
    /// The model's gain on this generation's episodes.
    pub train_gain: f64,
    /// The best perturbation's gain on them.
    pub best_gain: f64,
    /// The model's gain on the fixed validation episodes after the step.
    pub validation_gain: f64,
}

/// One policy on a set of episodes.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    /// Episodes.
    pub episodes: usize,
    /// Mean unallocated GPUs at 130%, %.
    pub unallocated_pct: f64,
    /// Mean of ours ÷ FGD per episode.
    pub ratio_to_fgd: f64,
    /// Episodes where ours leaves more unallocated than FGD.
    pub worse_than_fgd: usize,
}

/// `learned`, `default` and FGD on one set of episodes.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Which set.
    pub set: String,
    /// FGD.
    pub fgd: Evaluation,
    /// The hand-written `default`.
    pub default: Evaluation,
    /// The model before training (`default`'s rules as a model).
    pub initial: Evaluation,
    /// The trained model.
    pub learned: Evaluation,
}

/// What a training run did.
#[derive(Debug, Clone, Serialize)]
pub struct TrainReport {
    /// Families trained on.
    pub families: Vec<&'static str>,
    /// Families held out.
    pub holdout: Vec<&'static str>,
    /// The model training started from.
    pub started_from: String,
    /// The options as given (for the card).
    pub options: OptionsRecord,
    /// Per generation.
    pub generations: Vec<Generation>,
    /// The generation whose model was kept (best validation objective;
    /// 0: the initial model).
    pub kept_generation: usize,
    /// The starting model's validation objective: its mean gain over FGD
    /// (each episode's capped at `1 − aim` with an aim).
    pub start_gain: f64,
    /// The kept model's.
    pub kept_gain: f64,
    /// Validation and held-out comparisons of the kept model.
    pub comparisons: Vec<Comparison>,
    /// The kept model's digest.
    pub digest: String,
    /// Weights.
    pub params: usize,
    /// Episodes played.
    pub episodes_played: usize,
    /// Wall time, seconds.
    pub wall_s: f64,
}

/// The options in the record: the optimiser's, and the run's own.
#[derive(Debug, Clone, Serialize)]
pub struct OptionsRecord {
    /// See [`super::Hyper`].
    #[serde(flatten)]
    pub hyper: super::Hyper,
    /// See [`super::TrainOptions::with_traces`]; left out of the record when
    /// off.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub with_traces: bool,
    /// See [`super::TrainOptions`].
    pub hidden: usize,
}
