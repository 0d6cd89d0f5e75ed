//! The engine, the linker, the epoch ticker and plugin loading.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tessera_policy::{Grants, Limits, Role};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::bindings::{scorer, v0_1};
use crate::cache::{ArtifactCache, CacheOutcome, content_key, sha256_hex};
use crate::check;
use crate::contract::Pre;
use crate::error::{LoadError, WorldKind};
use crate::host::HostState;
use crate::plugin::PluginVersion;

/// Whether `bytes` begin as WebAssembly does (`\0asm`): what the runtime,
/// the service's upload and `plugin push` check before anything else.
pub fn is_wasm(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\0asm")
}

/// Settings of the runtime (engine-wide).
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where precompiled components are cached; `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
    /// Granularity of call deadlines.
    pub epoch_tick: Duration,
    /// Enables fuel metering (~20% slower calls); needed for `limits.fuel`
    /// in the service (a replay budget meters fuel anyway).
    pub fuel: bool,
    /// How a call's time is bounded: the plugin's own CPU time (the
    /// service) or fuel alone (what must replay). See [`crate::budget`].
    pub budget: crate::budget::CallBudget,
    /// Most live instances across all plugins (pooling allocator slots).
    pub max_instances: u32,
    /// Largest memory cap any plugin may be given, MiB.
    pub max_memory_mib: u32,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cache_dir: None,
            epoch_tick: Duration::from_millis(1),
            fuel: false,
            budget: crate::budget::CallBudget::SERVICE,
            max_instances: 256,
            max_memory_mib: 1024,
        }
    }
}

/// What to load and how to run it.
#[derive(Debug, Clone)]
pub struct PluginSpec {
    /// Name (from the policy).
    pub name: String,
    /// Required world, if any.
    pub role: Option<Role>,
    /// Optional digest pin (hex SHA-256 of the bytes).
    pub sha256: Option<String>,
    /// Limits.
    pub limits: Limits,
    /// Grants.
    pub grants: Grants,
    /// Configuration passed to `configure`, as JSON.
    pub config_json: String,
    /// Seed of the random streams.
    pub seed: u64,
}

impl PluginSpec {
    /// A spec with default limits and grants and no configuration.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            role: None,
            sha256: None,
            limits: Limits::default(),
            grants: Grants::default(),
            config_json: "null".into(),
            seed: 0,
        }
    }
}

/// Timings and facts of one load, for `plugin check` and benchmarks.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// Content key of the component (hex XXH3-128 of its bytes).
    pub key: String,
    /// What the cache did.
    pub cache: CacheOutcome,
    /// Time to obtain the compiled component (compile or cache hit).
    pub compile: Duration,
    /// Time to link and pre-instantiate.
    pub link: Duration,
    /// Time for the check: instantiate, configure and canned calls.
    pub check: Duration,
    /// Exported interface names.
    pub exports: Vec<String>,
    /// Imported interface names.
    pub imports: Vec<String>,
    /// The contract version the component was built against.
    pub contract: crate::contract::ContractVersion,
}

/// Stops the epoch ticker thread when dropped.
struct Ticker {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The plugin runtime: one engine, one linker, one deadline ticker.
pub struct Runtime {
    engine: Engine,
    linker: Linker<HostState>,
    cache: Option<ArtifactCache>,
    config: RuntimeConfig,
    _ticker: Ticker,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Runtime {
    /// Builds the engine (component model, pooling allocator, epoch
    /// interruption, optional fuel), the linker and the ticker.
    pub fn new(config: RuntimeConfig) -> Result<Self, LoadError> {
        let rt = |e: &dyn std::fmt::Display| LoadError::Runtime(e.to_string());
        let mut c = Config::new();
        c.wasm_component_model(true);
        c.epoch_interruption(true);
        c.consume_fuel(config.fuel || config.budget.meters_fuel());
        // `TESSERA_PERFMAP=1` writes /tmp/perf-PID.map so `perf report` names
        // the functions of compiled plugins.
        if std::env::var_os("TESSERA_PERFMAP").is_some_and(|v| v == "1") {
            c.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let mut pool = PoolingAllocationConfig::default();
        let n = config.max_instances.max(1);
        pool.total_component_instances(n)
            .total_core_instances(n * 8)
            .total_memories(n * 2)
            .total_tables(n * 4)
            .max_memory_size((config.max_memory_mib as usize) << 20);
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&c).map_err(|e| rt(&e))?;

        let mut linker = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| rt(&e))?;
        // Every contract version's `host` and `types`: a component built
        // against any of them links.
        scorer::Scorer::add_to_linker::<_, wasmtime::component::HasSelf<_>>(&mut linker, |s| s).map_err(|e| rt(&e))?;
        v0_1::scorer::Scorer::add_to_linker::<_, wasmtime::component::HasSelf<_>>(&mut linker, |s| s)
            .map_err(|e| rt(&e))?;

        let cache = match &config.cache_dir {
            Some(dir) => Some(
                ArtifactCache::new(dir, &engine)
                    .map_err(|e| LoadError::Runtime(format!("cache directory {}: {e}", dir.display())))?,
            ),
            None => None,
        };

        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let weak = engine.weak();
        let tick = config.epoch_tick.max(Duration::from_micros(100));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("tessera-epoch".into())
            .spawn(move || {
                while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    match weak.upgrade() {
                        Some(e) => e.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|e| rt(&e))?;
        Ok(Self { engine, linker, cache, config, _ticker: Ticker { stop, handle: Some(handle) } })
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The settings.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// The precompiled-artifact cache, if enabled.
    pub fn cache(&self) -> Option<&ArtifactCache> {
        self.cache.as_ref()
    }

    /// Compiles (or loads from the cache), links, instantiates and checks a
    /// plugin with canned calls. A plugin that fails any step is not loaded.
    pub fn load(&self, spec: &PluginSpec, wasm: &[u8]) -> Result<(Arc<PluginVersion>, LoadReport), LoadError> {
        let plugin = spec.name.clone();
        if spec.limits.memory_mib.0 > u64::from(self.config.max_memory_mib) {
            return Err(LoadError::Limits {
                plugin,
                reason: format!(
                    "memory_mib {} exceeds the runtime's maximum of {} MiB",
                    spec.limits.memory_mib.0, self.config.max_memory_mib
                ),
            });
        }
        if spec.limits.fuel.is_some() && !self.config.fuel {
            return Err(LoadError::Limits {
                plugin,
                reason: "limits.fuel is set but this runtime does not meter fuel (in the service, set \
                         `fuel_metering: true` in its configuration)"
                    .into(),
            });
        }
        // Bytes from a file or a request: checked here, before any parser
        // sees them, so an error never echoes what they hold (wasmtime's
        // would show the first bytes of, say, /etc/passwd).
        let cap = tessera_input::Limit::COMPONENT.max_bytes;
        if wasm.len() as u64 > cap {
            return Err(LoadError::Compile {
                plugin,
                reason: format!("{} bytes; a component may be at most {}", wasm.len(), tessera_input::file::Size(cap)),
            });
        }
        if !is_wasm(wasm) {
            return Err(LoadError::Compile {
                plugin,
                reason: "not WebAssembly (no \\0asm magic): build the plugin for wasm32-wasip2".into(),
            });
        }
        let t0 = Instant::now();
        // SHA-256 only to check a pin (it costs ~0.15 ms per 200 KB); the
        // cache is keyed by the much cheaper XXH3-128 of the bytes.
        if let Some(expected) = &spec.sha256 {
            let actual = sha256_hex(wasm);
            if *expected != actual {
                return Err(LoadError::DigestMismatch { plugin, expected: expected.clone(), actual });
            }
        }
        let key = content_key(wasm);
        let compile_err = |e: wasmtime::Error| LoadError::Compile { plugin: plugin.clone(), reason: format!("{e:#}") };
        let (component, cache) = match &self.cache {
            Some(cache) => cache.load_or_compile(&self.engine, &key, wasm).map_err(compile_err)?,
            None => (Component::new(&self.engine, wasm).map_err(compile_err)?, CacheOutcome::Disabled),
        };
        let compile = t0.elapsed();

        let t1 = Instant::now();
        let ty = component.component_type();
        let exports: Vec<String> = ty.exports(&self.engine).map(|(n, _)| n.to_string()).collect();
        let imports: Vec<String> = ty.imports(&self.engine).map(|(n, _)| n.to_string()).collect();
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::Link { plugin: plugin.clone(), reason: format!("{e:#}") })?;
        let Some(pre) = Pre::find(instance_pre) else {
            return Err(LoadError::WrongWorld { plugin, exports });
        };
        let (kind, contract) = (pre.kind(), pre.contract());
        let expected = match spec.role {
            Some(Role::Scorer) => Some(WorldKind::Scorer),
            Some(Role::Detector) => Some(WorldKind::Detector),
            None => None,
        };
        if let Some(expected) = expected
            && expected != kind
        {
            return Err(LoadError::RoleMismatch { plugin, expected, found: kind });
        }
        let link = t1.elapsed();

        let t2 = Instant::now();
        let mut version = PluginVersion::new(
            &spec.name,
            key.clone(),
            kind,
            pre,
            self.engine.clone(),
            self.config.epoch_tick.as_millis().max(1) as u64,
            self.config.fuel || self.config.budget.meters_fuel(),
            self.config.budget,
            spec.limits,
            spec.grants,
            spec.config_json.clone(),
            spec.seed,
        );
        version.fetch_info().map_err(|e| LoadError::Check { plugin: plugin.clone(), error: Box::new(e) })?;
        check::canned(&version).map_err(|e| LoadError::Check { plugin: plugin.clone(), error: Box::new(e) })?;
        let check = t2.elapsed();
        let report = LoadReport { key, cache, compile, link, check, exports, imports, contract };
        Ok((Arc::new(version), report))
    }
}
