//! `tessera plugin …`: inspect, check and benchmark policy plugins.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use tessera::report::{Format, Report, emit};
use tessera::{bench, check};
use tessera_wasm::{Runtime, RuntimeConfig};

#[derive(Subcommand)]
pub enum PluginCmd {
    /// Load a component, report its world, exports and imports, and run the
    /// canned calls. Exits 0 only if it is loadable.
    Check {
        /// The component (`.wasm`).
        file: PathBuf,
        /// Plugin configuration as JSON.
        #[arg(long, default_value = "null")]
        config: String,
        /// Directory of the precompiled-component cache.
        #[arg(long, env = "TESSERA_CACHE_DIR")]
        cache_dir: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Score N nodes through the Wasm plugin and through the same logic
    /// compiled natively; print the per-node costs and their ratio.
    Bench {
        /// Nodes scored per call.
        #[arg(long, default_value_t = 10_000)]
        nodes: u32,
        /// Built-in plugin to measure.
        #[arg(long, default_value = "binpack")]
        plugin: String,
        /// Plugin configuration as JSON.
        #[arg(long, default_value = "null")]
        config: String,
        /// Repetitions (the median is reported).
        #[arg(long, default_value_t = 7)]
        reps: u32,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// List the plugins built into this binary.
    List,
}

/// Runs one.
pub fn run(cmd: PluginCmd) -> Result<ExitCode> {
    match cmd {
        PluginCmd::Check { file, config, cache_dir, format } => {
            let rt = Runtime::new(RuntimeConfig { cache_dir, ..RuntimeConfig::default() })?;
            let report = check::check_file(&rt, &file, &config);
            match format {
                Format::Table => print!("{}", report.table()),
                Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
            }
            Ok(if report.loadable { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        PluginCmd::Bench { nodes, plugin, config, reps, format } => {
            emit(&bench::run(&bench::BenchOptions { nodes, plugin, config_json: config, reps: reps.max(1) })?, format)?;
            Ok(ExitCode::SUCCESS)
        }
        PluginCmd::List => {
            for a in tessera_plugins::ALL {
                println!("{:<14} sha256:{}  {} bytes", a.name, tessera_wasm::sha256_hex(a.bytes), a.bytes.len());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
