//! `tessera chaos …`: the command line of chaos verification.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Subcommand, ValueEnum};

#[derive(Subcommand)]
pub enum ChaosCmd {
    /// Run a campaign: every scenario × seed for the candidate and the
    /// baseline on the simulated twin, in parallel; print each gate
    /// (candidate, baseline, threshold, margin) and PROMOTE or BLOCK.
    /// Exit code 0 only for PROMOTE (2 for BLOCK, 1 for an error).
    Verify {
        /// The campaign file (YAML).
        #[arg(long)]
        campaign: PathBuf,
        #[arg(long, value_enum, default_value = "markdown")]
        format: ReportFormat,
    },
    /// Run one shard of a campaign (e.g. an indexed Kubernetes Job's
    /// completion index) and write its runs for `tessera chaos merge`.
    Run {
        /// The campaign file (YAML).
        #[arg(long)]
        campaign: PathBuf,
        /// `INDEX/COUNT`: this shard's scenario × seed pairs.
        #[arg(long)]
        shard: tessera::chaos::Shard,
        /// Where the runs go (JSON).
        #[arg(long)]
        out: PathBuf,
    },
    /// Judge the runs of every shard together: one verdict. Exit code 0
    /// only for PROMOTE (2 for BLOCK, 1 for an error or a missing run).
    Merge {
        /// The campaign file (YAML).
        #[arg(long)]
        campaign: PathBuf,
        /// The shards' run files.
        #[arg(required = true)]
        shards: Vec<PathBuf>,
        #[arg(long, value_enum, default_value = "markdown")]
        format: ReportFormat,
    },
    /// Write the campaign's faults as Chaos Mesh manifests (a Workflow per
    /// scenario, or a Schedule with --schedule) for the faults Chaos Mesh
    /// has; the others are listed as skipped.
    Export {
        /// The campaign file (YAML).
        #[arg(long)]
        campaign: PathBuf,
        /// Namespace of the experiments.
        #[arg(long, default_value = "chaos-mesh")]
        namespace: String,
        /// Namespaces whose pods they hit (repeatable).
        #[arg(long = "target-namespace", default_value = "default")]
        target_namespaces: Vec<String>,
        /// Cron expression: emit Schedules instead of Workflows.
        #[arg(long)]
        schedule: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ReportFormat {
    Json,
    Markdown,
    Html,
}

fn print_report(report: &tessera_chaos::Report, format: ReportFormat) -> Result<ExitCode> {
    match format {
        ReportFormat::Json => println!("{}", serde_json::to_string(report)?),
        ReportFormat::Markdown => print!("{}", report.to_markdown()),
        ReportFormat::Html => print!("{}", report.to_html()),
    }
    Ok(if report.verdict == tessera_chaos::Verdict::Promote { ExitCode::SUCCESS } else { ExitCode::from(2) })
}

/// Runs a `tessera chaos` command.
pub fn run(cmd: ChaosCmd) -> Result<ExitCode> {
    match cmd {
        ChaosCmd::Run { campaign, shard, out } => {
            let started = std::time::Instant::now();
            let (c, runs) = tessera::chaos::run(&campaign, Some(shard))?;
            let file = tessera::chaos::ShardRuns {
                campaign: c.name,
                shard: format!("{}/{}", shard.index, shard.count),
                runs,
                wall_s: started.elapsed().as_secs_f64(),
            };
            std::fs::write(&out, serde_json::to_string(&file)?)
                .with_context(|| format!("cannot write {}", out.display()))?;
            eprintln!("{} runs of shard {} written to {}", file.runs.len(), file.shard, out.display());
            Ok(ExitCode::SUCCESS)
        }
        ChaosCmd::Merge { campaign, shards, format } => {
            let report = tessera::chaos::merge(&campaign, &shards)?;
            print_report(&report, format)
        }
        ChaosCmd::Verify { campaign, format } => {
            let report = tessera::chaos::verify(&campaign)?;
            print_report(&report, format)
        }
        ChaosCmd::Export { campaign, namespace, target_namespaces, schedule } => {
            let opts = tessera_chaos::export::ExportOptions { namespace, target_namespaces, schedule };
            let e = tessera::chaos::export(&campaign, &opts)?;
            for k in &e.skipped {
                eprintln!("skipped {k}");
            }
            print!("{}", tessera_chaos::export::to_yaml(&e, &campaign.display().to_string()));
            Ok(ExitCode::SUCCESS)
        }
    }
}
