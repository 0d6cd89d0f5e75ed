//! How every command prints what it found: a table for a person, or JSON
//! for a program (`--format table|json`), one trait for all of them.

use serde::Serialize;

/// A command's result.
pub trait Report: Serialize {
    /// The table a person reads.
    fn table(&self) -> String;
}

/// How a result is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table.
    Table,
    /// One JSON document.
    Json,
}

/// Prints `r` as `format` asks.
pub fn emit(r: &impl Report, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Table => print!("{}", r.table()),
        Format::Json => println!("{}", serde_json::to_string(r)?),
    }
    Ok(())
}

macro_rules! reports {
    ($($t:ty),* $(,)?) => {
        $(impl Report for $t {
            fn table(&self) -> String {
                self.to_table()
            }
        })*
    };
}

reports!(
    crate::train::TrainReport,
    crate::bench::BenchResult,
    crate::bench_api::LoadReport,
    crate::bench_serve::ServeBenchResult,
    crate::check::CheckReport,
    crate::fidelity::FidelityReport,
    crate::gang_bench::GangBench,
    crate::generate::Generated,
    crate::jobs::JobsBench,
    crate::plan::PlanOutcome,
    crate::quality::QualityReport,
    crate::throughput::ThroughputResult,
    tessera_resched::bench::RescheduleBench,
);
