//! `tessera plugin …`: inspect, check and benchmark policy plugins.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use tessera::report::{Format, Report, emit};
use tessera::{bench, check, distribute, guest, scaffold};
use tessera_wasm::{ContractVersion, Runtime, RuntimeConfig};

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
        #[arg(long, default_value_t = 10_000, value_parser = super::count::<u32>(1, super::MAX_NODES))]
        nodes: u32,
        /// Built-in plugin to measure.
        #[arg(long, default_value = "binpack")]
        plugin: String,
        /// Plugin configuration as JSON.
        #[arg(long, default_value = "null")]
        config: String,
        /// Repetitions (the median is reported).
        #[arg(long, default_value_t = 7, value_parser = super::count::<u32>(1, super::MAX_REPS))]
        reps: u32,
        /// GPUs the scored pod asks for (0 to 8).
        #[arg(long, default_value_t = bench::BenchOptions::POD_GPUS)]
        pod_gpus: u32,
        /// Milli-GPUs of each GPU the pod asks for (1 to 1000: whole).
        #[arg(long, default_value_t = bench::BenchOptions::POD_GPU_MILLI)]
        pod_gpu_milli: u32,
        /// Another build of the same plugin to measure beside it, as
        /// LABEL=FILE (e.g. python=binpack.wasm); repeatable.
        #[arg(long = "component", value_name = "LABEL=FILE")]
        components: Vec<String>,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// List the plugins built into this binary.
    List,
    /// Start a plugin project in Rust, Python or JavaScript: the contract's
    /// WIT, the SDK, a sample policy, a native test, a README.
    New {
        /// The plugin's name: 1-63 of [a-z0-9-].
        name: String,
        #[arg(long, value_enum, default_value = "rust")]
        lang: guest::Lang,
        #[arg(long, value_enum, default_value = "scorer")]
        kind: guest::Kind,
        /// Contract version to build against.
        #[arg(long, default_value = ContractVersion::CURRENT.as_str())]
        contract: String,
        /// Where (default ./NAME); must not exist or be empty.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Build a plugin project (its tessera-plugin.yaml says how) into a
    /// component.
    Build {
        /// The project.
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// The component to write (default DIR/NAME.wasm).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Push a component to an OCI registry; prints the reference pinned by
    /// digest, for a policy's `source:` or a TesseraPolicy. Credentials,
    /// when the registry wants them: TESSERA_OCI_USERNAME and
    /// TESSERA_OCI_PASSWORD.
    Push {
        /// The component (`.wasm`).
        file: PathBuf,
        /// `oci://REGISTRY/REPOSITORY:TAG`.
        reference: String,
    },
    /// Pull a component from an OCI registry; prints its digest.
    Pull {
        /// `oci://REGISTRY/REPOSITORY[:TAG|@sha256:DIGEST]`.
        reference: String,
        /// Where to write it.
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Write the contract's WIT package, for any other toolchain.
    Wit {
        /// Directory to write it to.
        dir: PathBuf,
        /// Contract version.
        #[arg(long, default_value = ContractVersion::CURRENT.as_str())]
        contract: String,
    },
}

fn contract(v: &str) -> Result<ContractVersion> {
    guest::contract_version(v).map_err(|e| anyhow::anyhow!("contract {e}"))
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
        PluginCmd::Bench { nodes, plugin, config, reps, pod_gpus, pod_gpu_milli, components, format } => {
            let components = components
                .iter()
                .map(|c| {
                    let (label, file) =
                        c.split_once('=').ok_or_else(|| anyhow::anyhow!("--component {c:?}: expected LABEL=FILE"))?;
                    let bytes = tessera_input::file::read(std::path::Path::new(file), tessera_input::Limit::COMPONENT)
                        .map_err(|e| anyhow::anyhow!("--component {label}: {e}"))?;
                    Ok((label.to_string(), bytes))
                })
                .collect::<Result<Vec<_>>>()?;
            let opts = bench::BenchOptions {
                nodes,
                plugin,
                config_json: config,
                reps: reps.max(1),
                components,
                pod_gpus,
                pod_gpu_milli,
            };
            emit(&bench::run(&opts)?, format)?;
            Ok(ExitCode::SUCCESS)
        }
        PluginCmd::New { name, lang, kind, contract: v, dir } => {
            let o = scaffold::NewOptions { name, lang, kind, contract: contract(&v)?, dir };
            let dir = scaffold::new_project(&o)?;
            println!(
                "wrote {} ({} {}, tessera:policy@{v}); its README says how to build and test",
                dir.display(),
                lang.name(),
                kind.world()
            );
            Ok(ExitCode::SUCCESS)
        }
        PluginCmd::Build { dir, out } => {
            let (m, out) = guest::build(&dir, out.as_deref(), &guest::Tools::from_env())?;
            let bytes = std::fs::read(&out)?;
            println!(
                "{}  sha256:{}  {} bytes  ({} {})",
                out.display(),
                tessera_wasm::sha256_hex(&bytes),
                bytes.len(),
                m.lang.name(),
                m.kind.world()
            );
            Ok(ExitCode::SUCCESS)
        }
        PluginCmd::Push { file, reference } => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let pinned = rt.block_on(distribute::push_file(&file, &reference, distribute::credentials_from_env()))?;
            println!("{pinned}");
            Ok(ExitCode::SUCCESS)
        }
        PluginCmd::Pull { reference, out } => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let digest = rt.block_on(distribute::pull_file(&reference, &out))?;
            println!("{}  {digest}", out.display());
            Ok(ExitCode::SUCCESS)
        }
        PluginCmd::Wit { dir, contract: v } => {
            guest::write_wit(&dir, contract(&v)?)?;
            println!("wrote tessera:policy@{v} to {}", dir.display());
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
