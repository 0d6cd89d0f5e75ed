//! `tessera plan`: what the rescheduler would do now, acting on nothing.

use std::process::ExitCode;

use anyhow::Result;
use tessera::report::{Format, emit};

use super::workload::WorkloadArgs;

/// `tessera plan`.
#[derive(clap::Args)]
pub struct PlanArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Most moves in the plan.
    #[arg(long, default_value_t = 100)]
    max_moves: usize,
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
}

/// Runs it.
pub fn run(a: PlanArgs) -> Result<ExitCode> {
    emit(&tessera::plan::run(&a.workload.options(), a.max_moves)?, a.format)?;
    Ok(ExitCode::SUCCESS)
}
