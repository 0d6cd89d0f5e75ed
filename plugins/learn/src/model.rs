//! The learned policy's network: a linear term over the candidate features
//! for each pod kind, plus a small hidden layer over candidate and pod
//! features; its JSON form, checked and digested.
//!
//! `y = Σ lin[i·3 + k]·c[i]·kind[k] + Σ_m w2[m]·softsign(b1[m] + Σ_j w1[m][j]·z[j])`
//! with `c` the candidate features, `kind` the pod's one-hot kind
//! (CPU only, sharing, whole GPUs) and `z = c ++ pod features`. The score
//! is `round(y · 10⁶)`: the host compares integers.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::features::{CANDIDATE, Candidate, POD, PodFeatures, softsign};

/// The model format this crate reads.
pub const FORMAT: u32 = 1;
/// Pod kinds the linear term distinguishes (the first three pod features).
pub const KINDS: usize = 3;
/// Inputs of the hidden layer.
pub const HIDDEN_INPUTS: usize = CANDIDATE.len() + POD.len();
/// Resolution of a score: `y` in millionths.
pub const SCALE: f64 = 1e6;

/// The model shipped in the component (`tessera train` writes it).
pub const EMBEDDED: &str = include_str!("../model/learned.json");

/// A model that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModelError {
    /// Not JSON of the model's shape.
    #[error("learned model: {0}")]
    Parse(String),
    /// Another format.
    #[error("learned model: format {found}, this plugin reads format {FORMAT}")]
    Format {
        /// The model's format.
        found: u32,
    },
    /// Trained on other features.
    #[error("learned model: trained on features {found:?}, this plugin computes {expected:?}")]
    Features {
        /// The model's feature names.
        found: Vec<String>,
        /// This build's.
        expected: Vec<String>,
    },
    /// A weight array of the wrong length.
    #[error("learned model: `{field}` has {found} weights, {expected} expected for {hidden} hidden units")]
    Shape {
        /// The array.
        field: &'static str,
        /// Its length.
        found: usize,
        /// The length expected.
        expected: usize,
        /// The model's hidden units.
        hidden: usize,
    },
    /// A weight that is not a finite number.
    #[error("learned model: `{field}[{index}]` is not finite")]
    NotFinite {
        /// The array.
        field: &'static str,
        /// The index.
        index: usize,
    },
    /// Too many hidden units (a cap keeps a call's cost bounded).
    #[error("learned model: {0} hidden units, at most {MAX_HIDDEN}")]
    TooLarge(usize),
    /// The digest given does not match the model.
    #[error("learned model: digest {given} given, the model's is {actual}")]
    Digest {
        /// The digest in the configuration.
        given: String,
        /// The model's.
        actual: String,
    },
}

/// Hidden units allowed.
pub const MAX_HIDDEN: usize = 64;

/// The network's weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// [`FORMAT`].
    pub format: u32,
    /// The candidate and pod feature names it was trained on, in order.
    pub features: Vec<String>,
    /// Hidden units.
    pub hidden: usize,
    /// Linear term: candidate feature `i` for kind `k` at `i·3 + k`.
    pub lin: Vec<f64>,
    /// Hidden weights, unit `m`'s row at `m·HIDDEN_INPUTS`.
    pub w1: Vec<f64>,
    /// Hidden biases.
    pub b1: Vec<f64>,
    /// Output weights of the hidden units.
    pub w2: Vec<f64>,
}

/// The feature names of this build, candidate then pod.
pub fn feature_names() -> Vec<String> {
    CANDIDATE.iter().chain(POD.iter()).map(|s| (*s).to_string()).collect()
}

impl Model {
    /// Parses and checks a model.
    pub fn from_json(text: &str) -> Result<Self, ModelError> {
        let m: Model = serde_json::from_str(text).map_err(|e| ModelError::Parse(e.to_string()))?;
        m.check()?;
        Ok(m)
    }

    /// The model shipped with the plugin.
    pub fn embedded() -> Self {
        Self::from_json(EMBEDDED).expect("the embedded model is checked by the crate's tests")
    }

    /// Its canonical JSON (what the digest is taken over).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a model always serialises")
    }

    /// `sha256:` and the hex SHA-256 of [`Model::to_json`].
    pub fn digest(&self) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(self.to_json().as_bytes())))
    }

    /// Checks format, features, shapes and values.
    pub fn check(&self) -> Result<(), ModelError> {
        if self.format != FORMAT {
            return Err(ModelError::Format { found: self.format });
        }
        let expected = feature_names();
        if self.features != expected {
            return Err(ModelError::Features { found: self.features.clone(), expected });
        }
        if self.hidden > MAX_HIDDEN {
            return Err(ModelError::TooLarge(self.hidden));
        }
        let h = self.hidden;
        for (field, v, want) in [
            ("lin", &self.lin, CANDIDATE.len() * KINDS),
            ("w1", &self.w1, h * HIDDEN_INPUTS),
            ("b1", &self.b1, h),
            ("w2", &self.w2, h),
        ] {
            if v.len() != want {
                return Err(ModelError::Shape { field, found: v.len(), expected: want, hidden: h });
            }
            if let Some(index) = v.iter().position(|x| !x.is_finite()) {
                return Err(ModelError::NotFinite { field, index });
            }
        }
        Ok(())
    }

    /// The starting point of training: the hand-written `default` rules
    /// as a linear model (CPU-only and whole-GPU pods by FGD's score, its
    /// tie-break below; sharing pods by the residue's drop, FGD's score
    /// below), the hidden layer's input weights from `noise` (one value in
    /// −1..1 per weight, drawn by the caller) scaled by `init_scale`, its
    /// output weights 0: it ranks nodes exactly as `default`'s FGD does.
    pub fn initial(hidden: usize, init_scale: f64, mut noise: impl FnMut() -> f64) -> Self {
        let mut lin = vec![0.0; CANDIDATE.len() * KINDS];
        let at = |name: &str, kind: usize| CANDIDATE.iter().position(|c| *c == name).expect("a feature") * KINDS + kind;
        for kind in [0, 2] {
            lin[at("fgd_score", kind)] = 1.0;
            lin[at("fgd_tie", kind)] = 0.01;
        }
        lin[at("residue_drop", 1)] = 1.0;
        lin[at("fgd_score", 1)] = 0.001;
        Self {
            format: FORMAT,
            features: feature_names(),
            hidden,
            lin,
            w1: (0..hidden * HIDDEN_INPUTS).map(|_| noise() * init_scale).collect(),
            b1: (0..hidden).map(|_| noise() * init_scale).collect(),
            w2: vec![0.0; hidden],
        }
    }

    /// Every weight in one vector (lin, w1, b1, w2), for training.
    pub fn params(&self) -> Vec<f64> {
        [&self.lin, &self.w1, &self.b1, &self.w2].into_iter().flatten().copied().collect()
    }

    /// The same model with the weights `p` (as [`Model::params`] orders them).
    pub fn with_params(&self, p: &[f64]) -> Self {
        let mut m = self.clone();
        let mut it = p.iter().copied();
        for v in [&mut m.lin, &mut m.w1, &mut m.b1, &mut m.w2] {
            for x in v.iter_mut() {
                *x = it.next().expect("as many weights as the model has");
            }
        }
        m
    }

    /// `y` for one candidate.
    pub fn forward(&self, c: &Candidate, pod: &PodFeatures) -> f64 {
        let mut y = 0.0;
        for (i, &ci) in c.iter().enumerate() {
            for (k, &pk) in pod[..KINDS].iter().enumerate() {
                y += self.lin[i * KINDS + k] * ci * pk;
            }
        }
        for m in 0..self.hidden {
            let row = &self.w1[m * HIDDEN_INPUTS..(m + 1) * HIDDEN_INPUTS];
            let mut a = self.b1[m];
            for (w, x) in row.iter().zip(c.iter().chain(pod.iter())) {
                a += w * x;
            }
            y += self.w2[m] * softsign(a);
        }
        y
    }

    /// The integer score of `y` (saturating).
    pub fn score(y: f64) -> i64 {
        let v = (y * SCALE).round();
        if v.is_nan() { 0 } else { v.clamp(-9.0e15, 9.0e15) as i64 }
    }
}
