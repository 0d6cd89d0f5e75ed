//! `tessera train`: a placement policy learned in the embedded simulator,
//! shipped as the `learned` plugin.
//!
//! **What is learned.** The `learned` scorer (`tessera-learned-policy`)
//! scores each candidate node from per-candidate features (FGD's
//! fragmentation change against the target workload, its score and
//! tie-break, the GPU gap's residue, resources left, whole GPUs left) and
//! the pod's kind and size; the candidates' scores are a softmax policy
//! with the host's hard filter as the action mask, played greedily.
//!
//! **How.** Evolution strategies (OpenAI-ES, Salimans et al. 2017): each
//! generation perturbs the weights in ± pairs, plays every perturbation on
//! the same sampled episodes (common random numbers), ranks them by the
//! episode's return — unallocated GPUs at 130% arrived demand relative to
//! FGD's on the same episode, the published protocol's figure — and steps
//! the weights along the rank-weighted perturbations with AdamW (candle).
//! Why not PPO: the signal that matters is terminal (fragmentation at the
//! end of thousands of placements, each among hundreds of candidates), so
//! per-step credit assignment would rest on a learned value function with
//! little to learn it from; ES needs only episode returns, does not care
//! about the horizon, runs the very scorer that ships (its native twin,
//! bit for bit the component's arithmetic) with no second, differentiable
//! copy, and is reproducible from one seed. It starts from `default`'s
//! rules written as the model's linear term (`Model::initial`), so it
//! learns corrections to them.
//!
//! Deterministic: the same options give the same model, byte for byte
//! (seeded ChaCha8 noise, episodes and results in a fixed order whatever
//! the threads do).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use rand::SeedableRng as _;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution as _, StandardNormal};
use rayon::prelude::*;
use tessera_learned_policy::Model;
use tessera_policy::PolicyDocument;
use tessera_trace::family::Family;

pub mod episodes;
mod record;
mod report;

pub use record::{Comparison, Evaluation, Generation, OptionsRecord, TrainReport};

use episodes::{Episode, Source};

/// What to train.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// An openb trace directory (the base pod list, the cluster, the
    /// `gpuspec10` examples).
    pub traces: PathBuf,
    /// Families trained on.
    pub families: Vec<Family>,
    /// Families held out: reported on, never trained on.
    pub holdout: Vec<Family>,
    /// Also train on the trace directory's own pod lists
    /// (`openb_pod_list_*.csv`), each drawn from like a family member.
    pub with_traces: bool,
    /// The optimiser's settings.
    pub hyper: Hyper,
    /// Hidden units.
    pub hidden: usize,
    /// Where the model, its card, the curves and the record are written.
    pub out: Option<PathBuf>,
    /// Draw a progress bar on stderr.
    pub progress: bool,
}

/// The trace directory's pod lists (`openb_pod_list_*.csv`), by stem, in
/// name order.
fn pod_lists(dir: &Path) -> Result<Vec<(String, Vec<tessera_trace::PodRow>)>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("openb_pod_list_") && n.ends_with(".csv"))
        })
        .collect();
    paths.sort();
    if paths.is_empty() {
        bail!("--with-traces: no openb_pod_list_*.csv in {}", dir.display());
    }
    paths
        .into_iter()
        .map(|p| {
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default().trim_start_matches("openb_pod_list_");
            Ok((stem.to_string(), crate::sim::read_pod_rows(&p)?))
        })
        .collect()
}

use crate::generate::{BASE, NODES, SPEC_EXAMPLES};

/// The published protocol's tie-break on `doc`.
fn published(mut doc: PolicyDocument) -> PolicyDocument {
    doc.tie_break = tessera_policy::TieBreakSpec::SeededRank;
    doc
}

/// Unallocated GPUs of `doc` on every episode, in order (on every core).
fn play(docs: &[PolicyDocument], eps: &[Episode]) -> Result<Vec<Vec<f64>>> {
    let jobs: Vec<(usize, usize)> = (0..docs.len()).flat_map(|d| (0..eps.len()).map(move |e| (d, e))).collect();
    let flat: Vec<f64> =
        jobs.par_iter().map(|&(d, e)| episodes::unallocated(&eps[e], &docs[d])).collect::<Result<Vec<_>>>()?;
    Ok(flat.chunks(eps.len().max(1)).map(<[f64]>::to_vec).collect())
}

/// Mean `1 − ours ÷ FGD`.
fn gain(ours: &[f64], fgd: &[f64]) -> f64 {
    objective(ours, fgd, None)
}

/// What training maximises: the mean over episodes of `1 − ours ÷ FGD`,
/// each capped at `1 − aim` when there is an aim.
fn objective(ours: &[f64], fgd: &[f64], aim: Option<f64>) -> f64 {
    let cap = aim.map_or(f64::INFINITY, |a| 1.0 - a);
    ours.iter().zip(fgd).map(|(&o, &f)| (1.0 - o / f.max(0.01)).min(cap)).sum::<f64>() / ours.len().max(1) as f64
}

fn evaluation(ours: &[f64], fgd: &[f64]) -> Evaluation {
    let n = ours.len().max(1) as f64;
    Evaluation {
        episodes: ours.len(),
        unallocated_pct: ours.iter().sum::<f64>() / n,
        ratio_to_fgd: ours.iter().zip(fgd).map(|(&o, &f)| o / f.max(0.01)).sum::<f64>() / n,
        worse_than_fgd: ours.iter().zip(fgd).filter(|(o, f)| o > f).count(),
    }
}

/// Centred ranks in −0.5..=0.5 (ties share their mean rank).
fn centred_ranks(x: &[f64]) -> Vec<f64> {
    let n = x.len();
    let mut idx: Vec<usize> = (0..n).collect();
    idx.sort_by(|&a, &b| x[a].total_cmp(&x[b]).then(a.cmp(&b)));
    let mut ranks = vec![0.0; n];
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && x[idx[j + 1]] == x[idx[i]] {
            j += 1;
        }
        let r = (i + j) as f64 / 2.0;
        for &k in &idx[i..=j] {
            ranks[k] = if n > 1 { r / (n - 1) as f64 - 0.5 } else { 0.0 };
        }
        i = j + 1;
    }
    ranks
}

/// The optimiser's settings of a run (from [`TrainOptions`] or a
/// service's fine-tuning configuration), as the record keeps them.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Hyper {
    /// Generations.
    pub generations: usize,
    /// ± perturbation pairs per generation.
    pub pairs: usize,
    /// Episodes per generation.
    pub episodes: usize,
    /// Fixed validation (and held-out) episodes.
    pub validation: usize,
    /// Share of the cluster's nodes and of the pods an episode uses.
    pub scale: f64,
    /// Perturbation scale.
    pub sigma: f64,
    /// AdamW learning rate.
    pub lr: f64,
    /// The ratio to FGD training aims at: an episode already at or under
    /// it earns no more for going further, so the weights move for the
    /// episodes that miss it (None: the mean gain over all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aim: Option<f64>,
    /// Seed of everything.
    pub seed: u64,
}

impl From<&tessera_server::config::TrainingConfig> for Hyper {
    /// A service's fine-tuning settings, aiming at no ratio.
    fn from(t: &tessera_server::config::TrainingConfig) -> Self {
        let tessera_server::config::TrainingConfig { generations, pairs, episodes, validation, scale, sigma, lr, seed } =
            *t;
        Self { generations, pairs, episodes, validation, scale, sigma, lr, aim: None, seed }
    }
}

impl Hyper {
    fn check(&self) -> Result<()> {
        if self.pairs == 0 || self.episodes == 0 || self.validation == 0 {
            bail!("pairs, episodes and validation must be at least 1");
        }
        let positive = |x: f64| x > 0.0 && x.is_finite();
        if !(positive(self.scale) && self.scale <= 1.0 && positive(self.sigma) && positive(self.lr)) {
            bail!("scale must be in (0, 1], sigma and lr above 0");
        }
        if self.aim.is_some_and(|a| !(positive(a) && a <= 1.0)) {
            bail!("aim must be in (0, 1]");
        }
        Ok(())
    }
}

/// Which episodes [`Run::draw`] is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Set {
    Train,
    Validation,
    Holdout,
}

/// A model → the policy document deciding with it.
type Place<'a> = Box<dyn Fn(&Model) -> Result<PolicyDocument> + 'a>;
/// `(set, count, seed)` → episodes.
type Draw<'a> = Box<dyn Fn(Set, usize, u64) -> Result<Vec<Episode>> + 'a>;

/// One training run, whatever its episodes.
struct Run<'a> {
    hyper: Hyper,
    /// The model training starts from.
    start: Model,
    /// How the card and table name it.
    started_from: String,
    /// The policy document deciding with a model.
    place: Place<'a>,
    /// `count` episodes of a set, seeded.
    draw: Draw<'a>,
    families: Vec<&'static str>,
    /// The trace directory's pod lists are among the episodes.
    with_traces: bool,
    holdout: Vec<&'static str>,
    hidden: usize,
    progress: bool,
}

/// Trains; writes the model and its card when `out` is set.
pub fn run(opts: &TrainOptions) -> Result<(Model, TrainReport)> {
    if opts.families.is_empty() {
        bail!("--families: train on at least one family");
    }
    if let Some(f) = opts.families.iter().find(|f| opts.holdout.contains(f)) {
        bail!("family {} is both trained on and held out", f.name());
    }
    let hyper = opts.hyper;
    hyper.check().context("tessera train")?;
    let source = Source {
        base: crate::sim::read_pod_rows(&opts.traces.join(BASE))?,
        examples: match opts.traces.join(SPEC_EXAMPLES) {
            p if p.exists() => crate::sim::read_pod_rows(&p)?,
            _ => Vec::new(),
        },
        nodes: {
            let p = opts.traces.join(NODES);
            let text = crate::sim::read_trace_text(&p)?;
            tessera_trace::read_nodes(text.as_bytes(), &p.display().to_string())?
        },
        workloads: if opts.with_traces { pod_lists(&opts.traces)? } else { Vec::new() },
    };
    let start = {
        let mut r = ChaCha8Rng::seed_from_u64(hyper.seed ^ 0x1111);
        // Hidden inputs start small: the initial model is `default`'s rules.
        Model::initial(opts.hidden, 0.5, || noise(&mut r).clamp(-3.0, 3.0) / 3.0)
    };
    let base = crate::sim::policy_document("learned", 42)?;
    let (model, report) = evolve(Run {
        hyper,
        start,
        started_from: "default's rules".into(),
        place: Box::new(move |m| with_model(&base, "learned", m)),
        draw: Box::new(|set, count, seed| match set {
            Set::Train | Set::Validation => source.episodes(&opts.families, true, count, hyper.scale, seed),
            Set::Holdout if opts.holdout.is_empty() => Ok(Vec::new()),
            Set::Holdout => source.episodes(&opts.holdout, false, count, hyper.scale, seed),
        }),
        families: opts.families.iter().map(|f| f.name()).collect(),
        with_traces: opts.with_traces,
        holdout: opts.holdout.iter().map(|f| f.name()).collect(),
        hidden: opts.hidden,
        progress: opts.progress,
    })?;
    if let Some(out) = &opts.out {
        write_outputs(out, &model, &report)?;
    }
    Ok((model, report))
}

/// Fine-tuning from what a service recorded: its active policy, the name
/// of the `learned` plugin in it, its cluster and the pods that arrived.
pub struct FineTune<'a> {
    /// The active policy document.
    pub active: &'a PolicyDocument,
    /// The plugin whose model is tuned (a `builtin:learned` entry).
    pub plugin: &'a str,
    /// What the service saw.
    pub record: &'a episodes::Recorded,
    /// The optimiser's settings.
    pub hyper: Hyper,
}

/// What fine-tuning found.
pub struct Tuned {
    /// `active` with the plugin's model replaced (and digested), when the
    /// tuned model beats the one in use on the validation episodes by
    /// more than `min_gain`; none otherwise.
    pub candidate: Option<PolicyDocument>,
    /// The tuned model.
    pub model: Model,
    /// The run's record.
    pub report: TrainReport,
    /// Validation gain over FGD of the model in use and of the tuned one.
    pub gains: (f64, f64),
}

/// Fine-tunes the model `job.plugin` uses in `job.active` on episodes
/// drawn from the record, starting from that model (its configured one,
/// else the embedded one).
pub fn fine_tune(job: &FineTune<'_>, min_gain: f64) -> Result<Tuned> {
    job.hyper.check().context("fine-tuning")?;
    let entry = job
        .active
        .plugins
        .iter()
        .find(|e| e.name == job.plugin)
        .with_context(|| format!("the active policy {} has no plugin `{}`", job.active.name, job.plugin))?;
    if !matches!(&entry.source, tessera_policy::Source::Builtin(n) if n == "learned") {
        bail!("plugin `{}` of policy {} is not builtin:learned", job.plugin, job.active.name);
    }
    let config: tessera_learned_policy::LearnedConfig = if entry.config.is_null() {
        Default::default()
    } else {
        serde_json::from_value(entry.config.clone())
            .with_context(|| format!("plugin `{}`: its configuration", job.plugin))?
    };
    let start =
        tessera_learned_policy::model_of(&config).map_err(|e| anyhow::anyhow!("plugin `{}`: {e}", job.plugin))?;
    let record = job.record;
    let (model, report) = evolve(Run {
        hyper: job.hyper,
        started_from: format!("the model in use, {}", start.digest()),
        hidden: start.hidden,
        start,
        place: Box::new(|m| with_model(job.active, job.plugin, m)),
        draw: Box::new(move |set, count, seed| match set {
            Set::Holdout => Ok(Vec::new()),
            _ => record.episodes(count, job.hyper.scale, seed),
        }),
        families: vec!["recorded"],
        with_traces: false,
        holdout: Vec::new(),
        progress: false,
    })?;
    let gains = (report.start_gain, report.kept_gain);
    let better = report.kept_generation > 0 && gains.1 - gains.0 > min_gain;
    let candidate = better.then(|| with_model(job.active, job.plugin, &model)).transpose()?;
    Ok(Tuned { candidate, model, report, gains })
}

/// `doc` with plugin `plugin`'s model set to `model` and its digest.
pub fn with_model(doc: &PolicyDocument, plugin: &str, model: &Model) -> Result<PolicyDocument> {
    let mut doc = doc.clone();
    let entry = doc
        .plugins
        .iter_mut()
        .find(|e| e.name == plugin)
        .with_context(|| format!("policy {} has no plugin `{plugin}`", doc.name))?;
    let mut config = match &entry.config {
        serde_json::Value::Object(o) => o.clone(),
        _ => serde_json::Map::new(),
    };
    config.insert("model".into(), serde_json::to_value(model)?);
    config.insert("digest".into(), model.digest().into());
    entry.config = serde_json::Value::Object(config);
    Ok(doc)
}

fn noise(rng: &mut ChaCha8Rng) -> f64 {
    StandardNormal.sample(rng)
}

/// Evolution strategies from `run.start`; the generation with the best
/// validation gain is kept.
fn evolve(run: Run<'_>) -> Result<(Model, TrainReport)> {
    let Run { hyper: h, start: initial, started_from, place, draw, families, with_traces, holdout, hidden, progress } =
        run;
    let started = Instant::now();
    let mut rng = ChaCha8Rng::seed_from_u64(h.seed);
    let fgd_doc = published(crate::sim::policy_document("fgd", 42)?);
    let default_doc = published(crate::sim::policy_document("default", 42)?);
    let validation = draw(Set::Validation, h.validation, h.seed.wrapping_add(1))?;
    let holdout_eps = draw(Set::Holdout, h.validation, h.seed.wrapping_add(2))?;
    let val_fgd = play(std::slice::from_ref(&fgd_doc), &validation)?.remove(0);
    let mut played = validation.len();

    let device = candle_core::Device::Cpu;
    let theta = candle_core::Var::from_vec(initial.params(), initial.params().len(), &device)?;
    let mut opt = {
        use candle_nn::Optimizer as _;
        candle_nn::AdamW::new(
            vec![theta.clone()],
            candle_nn::ParamsAdamW { lr: h.lr, weight_decay: 0.0, ..Default::default() },
        )?
    };
    let bar = progress_bar(progress, h.generations);
    let params_now = |theta: &candle_core::Var| -> Result<Vec<f64>> { Ok(theta.as_tensor().to_vec1::<f64>()?) };
    let start_gain = {
        let v = play(&[published(place(&initial)?)], &validation)?.remove(0);
        played += validation.len();
        objective(&v, &val_fgd, h.aim)
    };
    let mut kept = (0usize, initial.clone(), start_gain);
    let mut generations = Vec::with_capacity(h.generations);
    for g in 1..=h.generations {
        let eps = draw(Set::Train, h.episodes, h.seed.wrapping_add(1000 + g as u64))?;
        let centre = params_now(&theta)?;
        let dim = centre.len();
        let eps_noise: Vec<Vec<f64>> = (0..h.pairs).map(|_| (0..dim).map(|_| noise(&mut rng)).collect()).collect();
        let mut docs = vec![fgd_doc.clone(), published(place(&initial.with_params(&centre))?)];
        for e in &eps_noise {
            for sign in [1.0, -1.0] {
                let p: Vec<f64> = centre.iter().zip(e).map(|(c, n)| c + sign * h.sigma * n).collect();
                docs.push(published(place(&initial.with_params(&p))?));
            }
        }
        let results = play(&docs, &eps)?;
        played += docs.len() * eps.len();
        let fgd = &results[0];
        let fitness: Vec<f64> = results[2..].iter().map(|u| objective(u, fgd, h.aim)).collect();
        let ranks = centred_ranks(&fitness);
        // ES gradient of the expected rank-shaped return.
        let mut grad = vec![0.0; dim];
        for (j, e) in eps_noise.iter().enumerate() {
            let w = ranks[2 * j] - ranks[2 * j + 1];
            for (gi, n) in grad.iter_mut().zip(e) {
                *gi += w * n / (2.0 * h.pairs as f64 * h.sigma);
            }
        }
        // AdamW ascends the surrogate θ·g: its gradient is g.
        let g_t = candle_core::Tensor::from_vec(grad, dim, &device)?;
        let loss = (theta.as_tensor() * &g_t)?.sum_all()?.neg()?;
        {
            use candle_nn::Optimizer as _;
            opt.backward_step(&loss)?;
        }
        let model = initial.with_params(&params_now(&theta)?);
        let v = play(&[published(place(&model)?)], &validation)?.remove(0);
        played += validation.len();
        let validation_gain = gain(&v, &val_fgd);
        let validation_objective = objective(&v, &val_fgd, h.aim);
        if validation_objective > kept.2 {
            kept = (g, model, validation_objective);
        }
        let rec = Generation {
            generation: g,
            train_gain: gain(&results[1], fgd),
            best_gain: fitness.iter().copied().fold(f64::MIN, f64::max),
            validation_gain,
        };
        bar.set_message(format!("validation gain {:+.2}%", 100.0 * rec.validation_gain));
        bar.inc(1);
        generations.push(rec);
    }
    bar.finish_and_clear();
    let (kept_generation, model, kept_gain) = kept;
    let mut comparisons = Vec::new();
    let trained = if families == ["recorded"] { "validation (recorded)" } else { "validation (trained families)" };
    for (set, eps) in [(trained, &validation), ("held out", &holdout_eps)] {
        if eps.is_empty() {
            continue;
        }
        let docs = [fgd_doc.clone(), default_doc.clone(), published(place(&initial)?), published(place(&model)?)];
        let r = play(&docs, eps)?;
        played += docs.len() * eps.len();
        comparisons.push(Comparison {
            set: set.to_string(),
            fgd: evaluation(&r[0], &r[0]),
            default: evaluation(&r[1], &r[0]),
            initial: evaluation(&r[2], &r[0]),
            learned: evaluation(&r[3], &r[0]),
        });
    }
    let report = TrainReport {
        families,
        holdout,
        started_from,
        options: OptionsRecord { hyper: h, with_traces, hidden },
        generations,
        kept_generation,
        start_gain,
        kept_gain,
        comparisons,
        digest: model.digest(),
        params: model.params().len(),
        episodes_played: played,
        wall_s: started.elapsed().as_secs_f64(),
    };
    Ok((model, report))
}

fn progress_bar(progress: bool, generations: usize) -> indicatif::ProgressBar {
    if !progress {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(generations as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("training {bar:30} {pos}/{len} generations, {elapsed} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// `learned.json`, `card.md`, `curve.svg` and `train.json` in `out`.
fn write_outputs(out: &Path, model: &Model, report: &TrainReport) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let write = |name: &str, bytes: &[u8]| {
        let p = out.join(name);
        std::fs::write(&p, bytes).with_context(|| format!("cannot write {}", p.display()))
    };
    write("learned.json", format!("{}\n", model.to_json()).as_bytes())?;
    // The record without wall time, so equal runs give equal files.
    let mut record = serde_json::to_value(report)?;
    if let Some(o) = record.as_object_mut() {
        o.remove("wall_s");
    }
    write("train.json", format!("{}\n", serde_json::to_string_pretty(&record)?).as_bytes())?;
    write("card.md", report::card(report).as_bytes())?;
    report::curve_svg(&out.join("curve.svg"), report)
}

impl TrainReport {
    /// The summary table.
    pub fn to_table(&self) -> String {
        report::table(self)
    }
}

#[cfg(test)]
mod tests {
    use super::centred_ranks;

    #[test]
    fn centred_ranks_span_minus_a_half_to_a_half_and_share_ties() {
        assert_eq!(centred_ranks(&[3.0, 1.0, 2.0]), [0.5, -0.5, 0.0]);
        assert_eq!(centred_ranks(&[1.0, 1.0, 5.0]), [-0.25, -0.25, 0.5]);
        assert_eq!(centred_ranks(&[7.0]), [0.0]);
    }
}
