//! `tessera plugin bench`: the cost of scoring N nodes through a Wasm plugin
//! against the same logic compiled natively, measured in one run.
//!
//! Per-node cost is the *marginal* cost: the time of a call over N
//! candidates minus the time of a call over 16, divided by N − 16, so the
//! fixed cost of a call (entering the component, lowering the pod) is
//! reported separately and does not flatter or penalise either side.

use std::cell::{Cell, RefCell};
use std::sync::RwLock;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use tessera_core::{GpuHealth, Node, Pod, Resources};
use tessera_wasm::{NodeFeed, PluginSpec, Runtime, RuntimeConfig, to_wit_pod};

use crate::native;

const SMALL: u32 = 16;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Nodes (and candidates).
    pub nodes: u32,
    /// Built-in plugin name.
    pub plugin: String,
    /// Plugin configuration (JSON).
    pub config_json: String,
    /// Repetitions; the median is reported.
    pub reps: u32,
    /// Components of the same policy built elsewhere (another language),
    /// by label: measured alike, against the same native twin.
    pub components: Vec<(String, Vec<u8>)>,
    /// GPUs the scored pod asks for (0 to [`NODE_GPUS`]).
    pub pod_gpus: u32,
    /// Share of each GPU it asks for, milli-GPUs (1 to 1000; 1000: whole).
    pub pod_gpu_milli: u32,
}

impl BenchOptions {
    /// The default pod: one GPU shared at half.
    pub const POD_GPUS: u32 = 1;
    /// See [`Self::POD_GPUS`].
    pub const POD_GPU_MILLI: u32 = 500;
}

/// One Wasm build of the plugin, measured.
#[derive(Debug, Clone, Serialize)]
pub struct WasmFigures {
    /// `builtin` or the label given.
    pub label: String,
    /// Component size, bytes.
    pub bytes: usize,
    /// Wall time of one call over all nodes, ns.
    pub ns_per_call: f64,
    /// Marginal cost per node, ns.
    pub ns_per_node: f64,
    /// Fixed cost of a call (extrapolated to 0 nodes), ns.
    pub fixed_ns_per_call: f64,
    /// `ns_per_node / native_ns_per_node`.
    pub ratio: f64,
    /// First load: compile with Cranelift and store in the cache, ms.
    pub cold_load_ms: f64,
    /// Load with a precompiled-cache hit, µs.
    pub cache_hit_load_us: f64,
    /// A fresh instance's first mirror of every node, ms.
    pub first_sync_ms: f64,
    /// Largest linear memory of an instance (mirror of every node
    /// included), MiB: what `limits.memory_mib` must allow.
    pub peak_memory_mib: f64,
    /// Calls made, faulted, timed out.
    pub calls: u64,
    /// Of them, faults.
    pub faults: u64,
    /// Of the faults, timeouts.
    pub timeouts: u64,
}

/// The figures printed by `plugin bench`.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    /// Plugin.
    pub plugin: String,
    /// Nodes scored per call.
    pub nodes: u32,
    /// The pod scored: GPUs and milli-GPUs of each (`--pod-gpus`,
    /// `--pod-gpu-milli`).
    pub pod_gpus: u32,
    /// See `pod_gpus`.
    pub pod_gpu_milli: u32,
    /// Wall time of one Wasm call over all nodes, ns.
    pub wasm_ns_per_call: f64,
    /// Marginal Wasm cost per node, ns.
    pub wasm_ns_per_node: f64,
    /// Fixed Wasm cost of a call (extrapolated to 0 nodes), ns.
    pub wasm_fixed_ns_per_call: f64,
    /// Marginal native cost per node, ns.
    pub native_ns_per_node: f64,
    /// `wasm_ns_per_node / native_ns_per_node`.
    pub ratio: f64,
    /// Wasm cost per node when every node changed since the last call
    /// (the change fed to the plugin's mirror, the node scored afresh:
    /// no per-node memo applies), beyond a call over unchanged nodes, ns.
    pub wasm_ns_per_changed_node: f64,
    /// The same natively (the change applied to the native table), ns.
    pub native_ns_per_changed_node: f64,
    /// `wasm_ns_per_changed_node / native_ns_per_changed_node`.
    pub changed_ratio: f64,
    /// First load: compile with Cranelift and store in the cache, ms.
    pub cold_load_ms: f64,
    /// Load with a precompiled-cache hit (deserialize, link, check), µs.
    pub cache_hit_load_us: f64,
    /// A fresh instance's first mirror of every node (`apply`), ms of wall
    /// time; a sync may spend the deadline plus
    /// `tessera_wasm::SYNC_US_PER_DELTA` per node.
    pub first_sync_ms: f64,
    /// Wasm calls made.
    pub wasm_calls: u64,
    /// Of them, calls that faulted (counted, never fatal: a bench reports).
    pub wasm_faults: u64,
    /// Of the faults, timeouts (the plugin used its deadline of CPU).
    pub wasm_timeouts: u64,
    /// Calls the host starved (past the deadline on the wall clock, under
    /// it in CPU): host overload, not the plugin's fault.
    pub host_starved_calls: u64,
    /// Native calls that returned an error.
    pub native_errors: u64,
    /// Largest linear memory of an instance of the built-in plugin, MiB.
    pub wasm_peak_memory_mib: f64,
    /// The built-in component's size, bytes.
    pub wasm_bytes: usize,
    /// The other components (`--component LABEL=FILE`), measured alike.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<WasmFigures>,
}

/// GPUs of each node of [`synthetic_cluster`].
pub const NODE_GPUS: u32 = 8;

/// A synthetic cluster: 8-GPU nodes in 3 zones with varied allocation.
pub fn synthetic_cluster(n: u32) -> Vec<Node> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|i| {
            let cap = Resources { cpu_milli: 96_000, memory_mib: 786_432 };
            let mut node = Node::new(i, format!("node-{i:05}"), cap, NODE_GPUS as usize, "A100");
            node.zone = format!("zone-{}", i % 3);
            node.free.cpu_milli = next() % 96_001;
            node.free.memory_mib = next() % 786_433;
            for g in &mut node.gpus {
                g.free_milli = [0, 250, 500, 1000][(next() % 4) as usize];
                if next() % 97 == 0 {
                    g.health = GpuHealth::Degraded;
                }
            }
            node
        })
        .collect()
}

/// `nodes`, each a little changed (one millicore more or less free), so
/// a plugin's per-node memo cannot answer for it.
fn changed_cluster(nodes: &[Node]) -> Vec<Node> {
    let mut changed = nodes.to_vec();
    for n in &mut changed {
        n.free.cpu_milli = if n.free.cpu_milli > 0 { n.free.cpu_milli - 1 } else { 1 };
    }
    changed
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Mean ns per call of `f` over `iters` calls.
fn time_calls(iters: u32, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed().as_nanos() as f64 / f64::from(iters)
}

/// Runs the benchmark.
pub fn run(opts: &BenchOptions) -> Result<BenchResult> {
    if opts.nodes <= SMALL {
        bail!("--nodes must be larger than {SMALL}");
    }
    if opts.pod_gpus > NODE_GPUS {
        bail!("--pod-gpus must be 0..={NODE_GPUS} (the synthetic nodes have {NODE_GPUS} GPUs), not {}", opts.pod_gpus);
    }
    if !(1..=1000).contains(&opts.pod_gpu_milli) {
        bail!("--pod-gpu-milli must be 1..=1000, not {}", opts.pod_gpu_milli);
    }
    let artifact =
        tessera_plugins::by_name(&opts.plugin).with_context(|| format!("no built-in plugin `{}`", opts.plugin))?;
    let mut native = native::builtin(&opts.plugin, &opts.config_json)
        .with_context(|| format!("plugin `{}` has no native build to compare with", opts.plugin))?
        .map_err(anyhow::Error::msg)?;

    let nodes = synthetic_cluster(opts.nodes);
    let ids: Vec<u32> = nodes.iter().map(|n| n.id).collect();
    let pod = Pod {
        name: "bench".into(),
        requests: Resources { cpu_milli: 4_000, memory_mib: 16_384 },
        gpu_count: opts.pod_gpus,
        gpu_milli: if opts.pod_gpus == 0 { 0 } else { opts.pod_gpu_milli },
        ..Pod::default()
    };
    let iters = (5_000_000 / opts.nodes).clamp(5, 100_000);
    let iters_small = 5_000;

    // Limits wide enough that a slow or large build is measured, not
    // stopped: what it needs is what the table reports.
    let mut spec = PluginSpec::new(&opts.plugin);
    spec.config_json = opts.config_json.clone();
    spec.limits.deadline_ms = tessera_policy::Bounded(10_000);
    spec.limits.memory_mib = tessera_policy::Bounded(1024);
    let wit_pod = to_wit_pod(&pod);
    let feed = RwLock::new(NodeFeed::new());
    feed.write().unwrap().upsert_all(&nodes);
    let mut subjects = vec![Subject::load("builtin", artifact.bytes, &spec, &feed)?];
    for (label, bytes) in &opts.components {
        subjects.push(Subject::load(label, bytes, &spec, &feed).with_context(|| format!("component {label}"))?);
    }
    for s in &subjects {
        s.score(&feed, &wit_pod, &ids);
    }

    // Native scoring through the same SDK glue.
    native.apply(&nodes).map_err(anyhow::Error::msg)?;
    let sdk_pod = native::sdk_pod(&pod);
    let (mut values, mut hints) = (Vec::new(), Vec::new());
    let native_errors = Cell::new(0u64);
    let mut nscore = |c: &[u32]| {
        if native.score(&sdk_pod, c, &mut values, &mut hints).is_err() {
            native_errors.set(native_errors.get() + 1);
        }
        std::hint::black_box(&values);
    };

    // Repetitions interleave the measurements, so a burst of noise from a
    // neighbour on this shared machine hits all of them alike. The
    // built-in plugin runs a fixed number of calls; other components
    // (100 times slower, for an interpreter) as many as fit in a fraction
    // of a second.
    let mut native_samples: [Vec<f64>; 2] = Default::default();
    let mut wasm_samples: Vec<[Vec<f64>; 2]> = vec![Default::default(); subjects.len()];
    for _ in 0..opts.reps {
        for (s, samples) in subjects.iter().zip(&mut wasm_samples) {
            let (full, small) = if s.label == "builtin" {
                (
                    time_calls(iters, || s.score(&feed, &wit_pod, &ids)),
                    time_calls(iters_small, || s.score(&feed, &wit_pod, &ids[..SMALL as usize])),
                )
            } else {
                (
                    time_for(0.3, || s.score(&feed, &wit_pod, &ids)),
                    time_for(0.1, || s.score(&feed, &wit_pod, &ids[..SMALL as usize])),
                )
            };
            samples[0].push(full);
            samples[1].push(small);
        }
        native_samples[0].push(time_calls(iters, || nscore(&ids)));
        native_samples[1].push(time_calls(iters_small, || nscore(&ids[..SMALL as usize])));
    }
    // Every node changed before each call: the two clusters in turn, so
    // each call feeds and scores every node afresh.
    let changed = changed_cluster(&nodes);
    let calls_changed = (200_000 / opts.nodes).clamp(3, 1_000);
    let (mut wasm_changed, mut native_changed) = (Vec::new(), Vec::new());
    let mut turn = false;
    let mut next = || {
        turn = !turn;
        if turn { &changed } else { &nodes }
    };
    for _ in 0..opts.reps {
        wasm_changed.push(time_calls(calls_changed, || {
            feed.write().unwrap().upsert_all(next());
            subjects[0].score(&feed, &wit_pod, &ids);
        }));
        native_changed.push(time_calls(calls_changed, || {
            if native.apply(next()).is_err() {
                native_errors.set(native_errors.get() + 1);
            }
            if native.score(&sdk_pod, &ids, &mut values, &mut hints).is_err() {
                native_errors.set(native_errors.get() + 1);
            }
        }));
    }
    let [native_full, native_small] = native_samples.map(median);
    let per_changed = |changed: Vec<f64>, full: f64| ((median(changed) - full) / f64::from(opts.nodes)).max(0.0);
    let native_ns_per_changed_node = per_changed(native_changed, native_full).max(f64::MIN_POSITIVE);
    let span = f64::from(opts.nodes - SMALL);
    let native_ns_per_node = ((native_full - native_small) / span).max(f64::MIN_POSITIVE);
    let mut figures = Vec::new();
    for (s, samples) in subjects.iter().zip(wasm_samples) {
        if s.faults.get() == s.calls.get() {
            // Nothing was measured: that is an error, not a figure.
            bail!("{}: every Wasm call faulted: {}", s.label, s.first_fault.borrow().clone().unwrap_or_default());
        }
        let [full, small] = samples.map(median);
        let ns_per_node = ((full - small) / span).max(0.0);
        figures.push(WasmFigures {
            label: s.label.clone(),
            bytes: s.bytes,
            ns_per_call: full,
            ns_per_node,
            fixed_ns_per_call: (small - ns_per_node * f64::from(SMALL)).max(0.0),
            ratio: ns_per_node / native_ns_per_node,
            cold_load_ms: s.cold_load_ms,
            cache_hit_load_us: s.cache_hit_load_us,
            first_sync_ms: s.first_sync_ms,
            peak_memory_mib: s.version.peak_memory_bytes() as f64 / f64::from(1u32 << 20),
            calls: s.calls.get(),
            faults: s.faults.get(),
            timeouts: s.timeouts.get(),
        });
    }
    let builtin = figures.remove(0);
    let wasm_ns_per_changed_node = per_changed(wasm_changed, builtin.ns_per_call);
    Ok(BenchResult {
        plugin: opts.plugin.clone(),
        pod_gpus: opts.pod_gpus,
        pod_gpu_milli: pod.gpu_milli,
        nodes: opts.nodes,
        wasm_ns_per_call: builtin.ns_per_call,
        wasm_ns_per_node: builtin.ns_per_node,
        wasm_fixed_ns_per_call: builtin.fixed_ns_per_call,
        native_ns_per_node,
        ratio: builtin.ratio,
        wasm_ns_per_changed_node,
        native_ns_per_changed_node,
        changed_ratio: wasm_ns_per_changed_node / native_ns_per_changed_node,
        cold_load_ms: builtin.cold_load_ms,
        cache_hit_load_us: builtin.cache_hit_load_us,
        first_sync_ms: builtin.first_sync_ms,
        wasm_calls: builtin.calls,
        wasm_faults: builtin.faults,
        wasm_timeouts: builtin.timeouts,
        host_starved_calls: subjects[0].version.starved_calls(),
        native_errors: native_errors.get(),
        wasm_peak_memory_mib: builtin.peak_memory_mib,
        wasm_bytes: builtin.bytes,
        components: figures,
    })
}

/// Mean ns per call of `f`, called at least 3 times and until `secs`
/// have passed.
fn time_for(secs: f64, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    let mut n = 0u32;
    while n < 3 || t.elapsed().as_secs_f64() < secs {
        f();
        n += 1;
    }
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

/// One component under measurement, with its counts.
struct Subject {
    label: String,
    bytes: usize,
    version: std::sync::Arc<tessera_wasm::PluginVersion>,
    cold_load_ms: f64,
    cache_hit_load_us: f64,
    first_sync_ms: f64,
    calls: Cell<u64>,
    faults: Cell<u64>,
    timeouts: Cell<u64>,
    first_fault: RefCell<Option<String>>,
}

impl Subject {
    /// Loads `bytes`: cold and cache-hit timings with a throwaway cache,
    /// then the version scored, its first mirror sync timed.
    fn load(label: &str, bytes: &[u8], spec: &PluginSpec, feed: &RwLock<NodeFeed>) -> Result<Self> {
        let cache_dir = std::env::temp_dir().join(format!("tessera-bench-cache-{}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&cache_dir);
        let cached_rt = Runtime::new(RuntimeConfig { cache_dir: Some(cache_dir.clone()), ..RuntimeConfig::default() })?;
        let t = Instant::now();
        let (version, _) = cached_rt.load(spec, bytes)?;
        let cold_load_ms = t.elapsed().as_secs_f64() * 1e3;
        let hits: Vec<f64> = (0..9)
            .map(|_| {
                let t = Instant::now();
                let loaded = cached_rt.load(spec, bytes);
                debug_assert!(loaded.as_ref().is_ok_and(|(_, r)| r.cache == tessera_wasm::CacheOutcome::Hit));
                loaded.map(|_| t.elapsed().as_secs_f64() * 1e6)
            })
            .collect::<Result<_, _>>()?;
        let _ = std::fs::remove_dir_all(&cache_dir);
        let s = Self {
            label: label.to_string(),
            bytes: bytes.len(),
            version,
            cold_load_ms,
            cache_hit_load_us: median(hits),
            first_sync_ms: 0.0,
            calls: Cell::new(0),
            faults: Cell::new(0),
            timeouts: Cell::new(0),
            first_fault: RefCell::new(None),
        };
        let t = Instant::now();
        if let Err(e) = s.version.prime(feed) {
            // Counted like any other call's fault; the first score retries it.
            s.count(&e);
        }
        Ok(Self { first_sync_ms: t.elapsed().as_secs_f64() * 1e3, ..s })
    }

    /// Faults are counted and reported, never fatal: a busy machine or a
    /// misbehaving plugin is a finding, not a crash.
    fn count(&self, e: &tessera_wasm::CallError) {
        self.calls.set(self.calls.get() + 1);
        self.faults.set(self.faults.get() + 1);
        self.timeouts.set(self.timeouts.get() + u64::from(matches!(e.kind, tessera_wasm::CallFault::Timeout { .. })));
        self.first_fault.borrow_mut().get_or_insert_with(|| e.to_string());
    }

    fn score(&self, feed: &RwLock<NodeFeed>, pod: &tessera_wasm::wit::Pod, c: &[u32]) {
        match self.version.score(feed, pod, c) {
            Ok(_) => self.calls.set(self.calls.get() + 1),
            Err(e) => self.count(&e),
        }
    }
}

impl BenchResult {
    /// Human-readable table.
    pub fn to_table(&self) -> String {
        let rows = [
            ("plugin", self.plugin.clone()),
            ("nodes per call", self.nodes.to_string()),
            ("pod GPUs × milli", format!("{} × {}", self.pod_gpus, self.pod_gpu_milli)),
            ("wasm ns per call", format!("{:.0}", self.wasm_ns_per_call)),
            ("wasm fixed ns per call", format!("{:.0}", self.wasm_fixed_ns_per_call)),
            ("wasm ns per node", format!("{:.2}", self.wasm_ns_per_node)),
            ("native ns per node", format!("{:.2}", self.native_ns_per_node)),
            ("wasm / native", format!("{:.2}", self.ratio)),
            ("wasm ns per changed node", format!("{:.1}", self.wasm_ns_per_changed_node)),
            ("native ns per changed node", format!("{:.1}", self.native_ns_per_changed_node)),
            ("wasm / native, changed", format!("{:.2}", self.changed_ratio)),
            ("cold load (compile) ms", format!("{:.1}", self.cold_load_ms)),
            ("cache-hit load µs", format!("{:.0}", self.cache_hit_load_us)),
            ("first sync ms", format!("{:.1}", self.first_sync_ms)),
            ("wasm calls", self.wasm_calls.to_string()),
            ("wasm faults", self.wasm_faults.to_string()),
            ("wasm timeouts", self.wasm_timeouts.to_string()),
            ("host-starved calls", self.host_starved_calls.to_string()),
            ("native errors", self.native_errors.to_string()),
            ("wasm peak memory MiB", format!("{:.1}", self.wasm_peak_memory_mib)),
        ];
        let mut out: String = rows.iter().map(|(k, v)| format!("{k:<24} {v:>12}\n")).collect();
        if !self.components.is_empty() {
            out.push_str(&format!(
                "\n{:<10} {:>10} {:>10} {:>12} {:>8} {:>10} {:>10} {:>10} {:>8} {:>7}\n",
                "build", "MB", "ns/node", "fixed ns", "×native", "cold ms", "hit µs", "sync ms", "MiB", "faults"
            ));
            let builtin = WasmFigures {
                label: "builtin".into(),
                bytes: self.wasm_bytes,
                ns_per_call: self.wasm_ns_per_call,
                ns_per_node: self.wasm_ns_per_node,
                fixed_ns_per_call: self.wasm_fixed_ns_per_call,
                ratio: self.ratio,
                cold_load_ms: self.cold_load_ms,
                cache_hit_load_us: self.cache_hit_load_us,
                first_sync_ms: self.first_sync_ms,
                peak_memory_mib: self.wasm_peak_memory_mib,
                calls: self.wasm_calls,
                faults: self.wasm_faults,
                timeouts: self.wasm_timeouts,
            };
            for c in std::iter::once(&builtin).chain(&self.components) {
                out.push_str(&format!(
                    "{:<10} {:>10.1} {:>10.1} {:>12.0} {:>8.1} {:>10.1} {:>10.0} {:>10.1} {:>8.1} {:>7}\n",
                    c.label,
                    c.bytes as f64 / 1e6,
                    c.ns_per_node,
                    c.fixed_ns_per_call,
                    c.ratio,
                    c.cold_load_ms,
                    c.cache_hit_load_us,
                    c.first_sync_ms,
                    c.peak_memory_mib,
                    c.faults
                ));
            }
        }
        out
    }
}
