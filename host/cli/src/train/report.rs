//! What `tessera train` prints and writes beside the model: the summary
//! table, the model card and the training curves.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use super::{Comparison, Evaluation, TrainReport};
use crate::plot::{Curve, Frame, lines_svg};

fn row(out: &mut String, name: &str, e: &Evaluation) {
    let _ = writeln!(
        out,
        "| {name} | {:.3}% | {:.3} | {} of {} |",
        e.unallocated_pct, e.ratio_to_fgd, e.worse_than_fgd, e.episodes
    );
}

fn comparison(out: &mut String, c: &Comparison, started_from: &str) {
    let _ = writeln!(out, "\n**{}**\n", c.set);
    let _ = writeln!(out, "| policy | unallocated at 130% | ÷ FGD (mean) | worse than FGD |");
    let _ = writeln!(out, "| --- | ---: | ---: | ---: |");
    row(out, "FGD", &c.fgd);
    row(out, "default (hand-written)", &c.default);
    row(out, &format!("initial model ({started_from})"), &c.initial);
    row(out, "learned", &c.learned);
}

/// The summary printed after training.
pub fn table(r: &TrainReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "generation  train gain  best perturbation  validation gain   (gain: 1 − ours ÷ FGD)");
    for g in &r.generations {
        let _ = writeln!(
            out,
            "{:>10}  {:>+9.2}%  {:>+16.2}%  {:>+14.2}%",
            g.generation,
            100.0 * g.train_gain,
            100.0 * g.best_gain,
            100.0 * g.validation_gain
        );
    }
    for c in &r.comparisons {
        comparison(&mut out, c, &r.started_from);
    }
    let _ = writeln!(
        out,
        "\nkept generation {} ({}), {} weights, {} episodes in {:.1} s",
        r.kept_generation, r.digest, r.params, r.episodes_played, r.wall_s
    );
    out
}

/// The model card.
pub fn card(r: &TrainReport) -> String {
    let (o, h) = (&r.options, &r.options.hyper);
    let mut out = String::new();
    let _ = writeln!(out, "# Model card: `learned`\n");
    let _ = writeln!(
        out,
        "Written by `tessera train` (the command below reproduces it byte for byte). \
         A placement scorer for GPU clusters: it ranks the candidate nodes the host's filter \
         left for one pod; the component `builtin:learned` embeds these weights.\n"
    );
    let _ = writeln!(out, "## Reproduce\n");
    let mut cmd = format!(
        "tessera train --traces ../shared/traces/openb --families {} --generations {} --pairs {} --episodes {} --validation {} --scale {} --sigma {} --lr {} --hidden {} --seed {}",
        r.families.join(","),
        h.generations,
        h.pairs,
        h.episodes,
        h.validation,
        h.scale,
        h.sigma,
        h.lr,
        o.hidden,
        h.seed
    );
    if let Some(aim) = h.aim {
        cmd.push_str(&format!(" --aim {aim}"));
    }
    if o.with_traces {
        cmd.push_str(" --with-traces");
    }
    if !r.holdout.is_empty() {
        let _ = write!(cmd, " --holdout {}", r.holdout.join(","));
    }
    let _ = writeln!(out, "```\n{cmd} --out DIR\n```\n");
    let _ = writeln!(out, "## Data\n");
    let _ = writeln!(
        out,
        "Generated members of the openb workload families ({}; held out: {}), \
         each drawn with a level uniform in the family's range and a seed of its own \
         from `openb_pod_list_default.csv` (`tessera_trace::family`), on {}% of the \
         openb GPU cluster's nodes with {}% of the member's pods (sampled), arrivals \
         inflated to 130% of GPU capacity as the published protocol does. Every \
         generation draws {} fresh episodes; the model is checked after every step \
         on {} fixed validation episodes of the same families, and the generation \
         with the best validation gain is kept.{} No trace row is stored in the model.\n",
        r.families.join(", "),
        if r.holdout.is_empty() { "none".to_string() } else { r.holdout.join(", ") },
        h.scale * 100.0,
        h.scale * 100.0,
        h.episodes,
        h.validation,
        if o.with_traces {
            " Among them in turn, the directory's own pod lists (`openb_pod_list_*.csv`), \
             sampled the same way: the shared workloads the published figures are on are \
             then trained on, and only the generated members are a test of generalisation."
        } else {
            ""
        }
    );
    let _ = writeln!(out, "## Features and model\n");
    let _ = writeln!(
        out,
        "Per candidate: {}. Per pod: {}. A linear term per pod kind over the candidate \
         features{}; {} weights. Training starts from `default`'s rules written as the \
         linear term.\n",
        tessera_learned_policy::features::CANDIDATE.join(", "),
        tessera_learned_policy::features::POD.join(", "),
        if o.hidden == 0 {
            " (no hidden layer)".to_string()
        } else {
            format!(" plus {} hidden units (softsign) over all of them", o.hidden)
        },
        r.params
    );
    let _ = writeln!(out, "## Training\n");
    let _ = writeln!(
        out,
        "Evolution strategies: {} ± pairs per generation, σ = {}, AdamW (candle) at \
         lr = {}, {} generations, seed {}; the return of an episode is `1 − ours ÷ FGD` \
         in unallocated GPUs at 130% arrived demand{}, ranked across the population. \
         {} episodes played. Kept: generation {} (`{}`).\n",
        h.pairs,
        h.sigma,
        h.lr,
        h.generations,
        h.seed,
        h.aim.map(|a| format!(", capped at {:.2} (aim: {a} of FGD)", 1.0 - a)).unwrap_or_default(),
        r.episodes_played,
        r.kept_generation,
        r.digest
    );
    let _ = writeln!(out, "![training curves](curve.svg)\n");
    let _ = writeln!(out, "## Figures (training scale)\n");
    for c in &r.comparisons {
        comparison(&mut out, c, &r.started_from);
    }
    let _ = writeln!(
        out,
        "\nAt full scale on the published protocol: `tessera bench quality --policy learned` \
         (docs/BENCHMARKS.md §2).\n"
    );
    let _ = writeln!(out, "## Limits\n");
    let _ = writeln!(
        out,
        "Trained on placement alone (no departures, no rescheduling) against the \
         workload's own shape distribution, which the host gives the plugin; on a cluster \
         or workload unlike openb's, check it with `tessera bench quality` before use."
    );
    out
}

/// Gains per generation as SVG.
pub fn curve_svg(path: &Path, r: &TrainReport) -> Result<()> {
    let gains = |label: &str, colour: usize, gain: fn(&super::Generation) -> f64| Curve {
        label: label.to_string(),
        points: r.generations.iter().map(|g| (g.generation as f64, 100.0 * gain(g))).collect(),
        colour,
        dashed: false,
    };
    let curves = [
        gains("model on the generation's episodes", 0, |g| g.train_gain),
        gains("best perturbation", 1, |g| g.best_gain),
        gains("model on the validation episodes", 2, |g| g.validation_gain),
    ];
    let ys = curves.iter().flat_map(|c| c.points.iter().map(|p| p.1));
    let (lo, hi) = ys.fold((0.0f64, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let pad = ((hi - lo) * 0.1).max(0.5);
    let frame = Frame {
        title: ("tessera train: gain over FGD (1 − ours ÷ FGD, unallocated GPUs at 130%)", 20),
        size: (960, 540),
        x: 0.0..(r.generations.len().max(1) as f64 + 1.0),
        y: (lo - pad)..(hi + pad),
        x_desc: "generation",
        y_desc: "gain over FGD (%)",
    };
    lines_svg(path, &frame, &curves)
}
