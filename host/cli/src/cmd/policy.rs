//! `tessera policy check`: validate a policy document and load (and
//! check) every plugin it names.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Subcommand;
use tessera::load;
use tessera_policy::PolicyDocument;
use tessera_wasm::{Runtime, RuntimeConfig};

#[derive(Subcommand)]
pub enum PolicyCmd {
    /// Validate a policy document and load (and check) all its plugins.
    Check {
        /// The policy document (YAML).
        file: PathBuf,
    },
}

/// Runs it.
pub fn run(cmd: PolicyCmd) -> Result<ExitCode> {
    let PolicyCmd::Check { file } = cmd;
    let mut doc = PolicyDocument::load(&file)?;
    doc.resolve_paths(&file)?;
    // Fuel metered, so a document with `limits.fuel` checks (replays meter
    // fuel always; the service when `fuel_metering` is set).
    let rt = Runtime::new(RuntimeConfig { fuel: true, ..RuntimeConfig::default() })?;
    let policy = load::load_policy(&rt, &doc).with_context(|| format!("policy {}", file.display()))?;
    println!("policy {} is valid", policy.name());
    for m in policy.scorers().iter().chain(policy.detectors()) {
        let v = m.slot.current();
        println!(
            "  {:<12} {:<8} {} {:<8} weight {:<5} deadline {} ms, memory {} MiB",
            m.name,
            v.kind().to_string(),
            v.info().name,
            v.version(),
            m.weight,
            v.limits().deadline_ms.0,
            v.limits().memory_mib.0,
        );
    }
    Ok(ExitCode::SUCCESS)
}
