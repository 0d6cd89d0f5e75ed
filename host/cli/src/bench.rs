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
}

/// The figures printed by `plugin bench`.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    /// Plugin.
    pub plugin: String,
    /// Nodes scored per call.
    pub nodes: u32,
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
}

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
            let mut node = Node::new(i, format!("node-{i:05}"), cap, 8, "A100");
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
        gpu_count: 1,
        gpu_milli: 500,
        ..Pod::default()
    };
    let iters = (5_000_000 / opts.nodes).clamp(5, 100_000);
    let iters_small = 5_000;

    // Load timings, with a throwaway cache directory.
    let cache_dir = std::env::temp_dir().join(format!("tessera-bench-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache_dir);
    let cached_rt = Runtime::new(RuntimeConfig { cache_dir: Some(cache_dir.clone()), ..RuntimeConfig::default() })?;
    let mut spec = PluginSpec::new(&opts.plugin);
    spec.config_json = opts.config_json.clone();
    let t = Instant::now();
    cached_rt.load(&spec, artifact.bytes)?;
    let cold_load_ms = t.elapsed().as_secs_f64() * 1e3;
    let hits: Vec<f64> = (0..9)
        .map(|_| {
            let t = Instant::now();
            let loaded = cached_rt.load(&spec, artifact.bytes);
            debug_assert!(loaded.as_ref().is_ok_and(|(_, r)| r.cache == tessera_wasm::CacheOutcome::Hit));
            loaded.map(|_| t.elapsed().as_secs_f64() * 1e6)
        })
        .collect::<Result<_, _>>()?;
    let cache_hit_load_us = median(hits);
    let _ = std::fs::remove_dir_all(&cache_dir);

    // Wasm scoring.
    let rt = Runtime::new(RuntimeConfig::default())?;
    let (version, _) = rt.load(&spec, artifact.bytes)?;
    let feed = RwLock::new(NodeFeed::new());
    feed.write().unwrap().upsert_all(&nodes);
    let wit_pod = to_wit_pod(&pod);
    // Faults are counted and reported, never fatal: a busy machine or a
    // misbehaving plugin is a finding, not a crash.
    let (calls, faults, timeouts) = (Cell::new(0u64), Cell::new(0u64), Cell::new(0u64));
    let first_fault = RefCell::new(None::<String>);
    let score = |c: &[u32]| {
        calls.set(calls.get() + 1);
        if let Err(e) = version.score(&feed, &wit_pod, c) {
            faults.set(faults.get() + 1);
            timeouts.set(timeouts.get() + u64::from(matches!(e.kind, tessera_wasm::CallFault::Timeout { .. })));
            first_fault.borrow_mut().get_or_insert_with(|| e.to_string());
        }
    };
    let t = Instant::now();
    if let Err(e) = version.prime(&feed) {
        // Counted like any other call's fault; the first score retries it.
        calls.set(calls.get() + 1);
        faults.set(faults.get() + 1);
        timeouts.set(timeouts.get() + u64::from(matches!(e.kind, tessera_wasm::CallFault::Timeout { .. })));
        first_fault.borrow_mut().get_or_insert_with(|| e.to_string());
    }
    let first_sync_ms = t.elapsed().as_secs_f64() * 1e3;
    score(&ids);

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

    // Repetitions interleave the four measurements, so a burst of noise
    // from a neighbour on this shared machine hits all of them alike.
    let mut samples: [Vec<f64>; 4] = Default::default();
    for _ in 0..opts.reps {
        samples[0].push(time_calls(iters, || score(&ids)));
        samples[1].push(time_calls(iters_small, || score(&ids[..SMALL as usize])));
        samples[2].push(time_calls(iters, || nscore(&ids)));
        samples[3].push(time_calls(iters_small, || nscore(&ids[..SMALL as usize])));
    }
    let [wasm_full, wasm_small, native_full, native_small] = samples.map(median);
    if faults.get() == calls.get() {
        // Nothing was measured: that is an error, not a figure.
        bail!("every Wasm call faulted: {}", first_fault.borrow().clone().unwrap_or_default());
    }

    let span = f64::from(opts.nodes - SMALL);
    let wasm_ns_per_node = ((wasm_full - wasm_small) / span).max(0.0);
    let native_ns_per_node = ((native_full - native_small) / span).max(f64::MIN_POSITIVE);
    Ok(BenchResult {
        plugin: opts.plugin.clone(),
        nodes: opts.nodes,
        wasm_ns_per_call: wasm_full,
        wasm_ns_per_node,
        wasm_fixed_ns_per_call: (wasm_small - wasm_ns_per_node * f64::from(SMALL)).max(0.0),
        native_ns_per_node,
        ratio: wasm_ns_per_node / native_ns_per_node,
        cold_load_ms,
        cache_hit_load_us,
        first_sync_ms,
        wasm_calls: calls.get(),
        wasm_faults: faults.get(),
        wasm_timeouts: timeouts.get(),
        host_starved_calls: version.starved_calls(),
        native_errors: native_errors.get(),
    })
}

impl BenchResult {
    /// Human-readable table.
    pub fn to_table(&self) -> String {
        let rows = [
            ("plugin", self.plugin.clone()),
            ("nodes per call", self.nodes.to_string()),
            ("wasm ns per call", format!("{:.0}", self.wasm_ns_per_call)),
            ("wasm fixed ns per call", format!("{:.0}", self.wasm_fixed_ns_per_call)),
            ("wasm ns per node", format!("{:.2}", self.wasm_ns_per_node)),
            ("native ns per node", format!("{:.2}", self.native_ns_per_node)),
            ("wasm / native", format!("{:.2}", self.ratio)),
            ("cold load (compile) ms", format!("{:.1}", self.cold_load_ms)),
            ("cache-hit load µs", format!("{:.0}", self.cache_hit_load_us)),
            ("first sync ms", format!("{:.1}", self.first_sync_ms)),
            ("wasm calls", self.wasm_calls.to_string()),
            ("wasm faults", self.wasm_faults.to_string()),
            ("wasm timeouts", self.wasm_timeouts.to_string()),
            ("host-starved calls", self.host_starved_calls.to_string()),
            ("native errors", self.native_errors.to_string()),
        ];
        rows.iter().map(|(k, v)| format!("{k:<24} {v:>12}\n")).collect()
    }
}
