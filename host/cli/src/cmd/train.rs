//! `tessera train`.

use std::path::PathBuf;

use tessera_trace::family::Family;

/// Train the `learned` placement policy in the simulator.
#[derive(clap::Args)]
pub struct TrainArgs {
    /// A directory laid out like shared/traces/openb (the default pod
    /// list the families derive from, the GPU node list, gpuspec10's
    /// models).
    #[arg(long)]
    traces: PathBuf,
    /// Families to train on: cpu, gpushare, gpuspec, multigpu.
    #[arg(long, value_delimiter = ',', default_value = "cpu,gpushare,gpuspec,multigpu", value_parser = family)]
    families: Vec<Family>,
    /// Families held out (cross-validation): reported on, never trained on.
    #[arg(long, value_delimiter = ',', value_parser = family)]
    holdout: Vec<Family>,
    /// Generations of evolution strategies.
    #[arg(long, default_value_t = 30, value_parser = super::count::<usize>(1, super::MAX_REPS * 10))]
    generations: usize,
    /// ± perturbation pairs per generation.
    #[arg(long, default_value_t = 8, value_parser = super::count::<usize>(1, super::MAX_REPS))]
    pairs: usize,
    /// Episodes per generation.
    #[arg(long, default_value_t = 12, value_parser = super::count::<usize>(1, super::MAX_REPS))]
    episodes: usize,
    /// Fixed validation (and held-out) episodes.
    #[arg(long, default_value_t = 12, value_parser = super::count::<usize>(1, super::MAX_REPS))]
    validation: usize,
    /// Share of the cluster's nodes and of each member's pods an episode uses.
    #[arg(long, default_value_t = 0.25)]
    scale: f64,
    /// Perturbation scale. Small because the initial model writes
    /// `default`'s lexicographic rules as weights three orders of
    /// magnitude apart (a tie-break at 0.01, a sharing rule at 0.001):
    /// at 0.05 one step drowns them (validation fell 41%); 0.001 kept the
    /// best validation in a sweep of 0.0003, 0.001, 0.005 and 0.05.
    #[arg(long, default_value_t = 0.001)]
    sigma: f64,
    /// Learning rate (AdamW), about half of sigma.
    #[arg(long, default_value_t = 0.0005)]
    lr: f64,
    /// Also train on the directory's own pod lists (`openb_pod_list_*.csv`),
    /// in turn with the families' members: the shared workloads are then
    /// training data, and only generated members test generalisation.
    #[arg(long)]
    with_traces: bool,
    /// The ratio to FGD to aim at: an episode's gain past `1 − aim` earns
    /// nothing more, so training works on the episodes that miss it (the
    /// issue's target is 0.9); without it, the mean gain.
    #[arg(long)]
    aim: Option<f64>,
    /// Hidden units (softsign) beside the linear term. None by default:
    /// with 8, at full scale and on seeds 42 and 43, the shared workloads
    /// came out the same (mean ratio to FGD 0.847 and 0.841 against the
    /// linear model's 0.845 and 0.848) and generated members no better
    /// (0.871/0.874 against 0.863/0.875), and one generated member went
    /// above FGD that the linear model kept under it (docs/BENCHMARKS.md §2).
    #[arg(long, default_value_t = 0, value_parser = super::count::<usize>(0, 1024))]
    hidden: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Where to write learned.json, card.md, curve.svg and train.json.
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    #[arg(long, value_enum, default_value = "table")]
    format: tessera::report::Format,
}

fn family(s: &str) -> Result<Family, String> {
    Family::ALL.into_iter().find(|f| f.name() == s).ok_or_else(|| {
        let names: Vec<&str> = Family::ALL.iter().map(|f| f.name()).collect();
        format!("unknown family `{s}` (one of {})", names.join(", "))
    })
}

/// Runs it.
pub fn run(a: TrainArgs) -> anyhow::Result<std::process::ExitCode> {
    let families = if a.holdout.is_empty() {
        a.families
    } else {
        // Held-out families are left out of the default list.
        a.families.into_iter().filter(|f| !a.holdout.contains(f)).collect()
    };
    let (_, report) = tessera::train::run(&tessera::train::TrainOptions {
        traces: a.traces,
        families,
        holdout: a.holdout,
        with_traces: a.with_traces,
        hyper: tessera::train::Hyper {
            generations: a.generations,
            pairs: a.pairs,
            episodes: a.episodes,
            validation: a.validation,
            scale: a.scale,
            sigma: a.sigma,
            lr: a.lr,
            aim: a.aim,
            seed: a.seed,
        },
        hidden: a.hidden,
        out: a.out,
        progress: !a.quiet,
    })?;
    tessera::report::emit(&report, a.format)?;
    Ok(std::process::ExitCode::SUCCESS)
}
