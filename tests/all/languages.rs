//! Policies in Python and JavaScript: the ports of `binpack` and
//! `overload` in `plugins/python` and `plugins/js`, built by
//! `tessera::guest::build` with componentize-py and componentize-js (the
//! pinned versions `.ci/run` installs), load through the same runtime,
//! decide exactly like the Rust plugins, run in the simulator beside Rust
//! plugins, and are contained when hostile.
//!
//! Without the toolchains these tests say so and pass, unless `CI` is set
//! (`.ci/run` sets it): there they fail.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use tessera::guest::{self, Tools};
use tessera_core::{GpuHealth, Node, Pod, Resources, Tier};
use tessera_plugins::{BINPACK, OVERLOAD};
use tessera_wasm::{CallFault, PluginSpec, PluginVersion, WorldKind, wit};

/// SplitMix64: the test's own seeded stream.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.range(0, xs.len() as u64 - 1) as usize]
    }
}

use crate::{load, member, policy, repo, runtime};

/// Where built guests are kept between runs, by the digest of what went in.
fn guest_cache() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo().join("target"), PathBuf::from);
    target.join("guests")
}

/// The component built from `plugins/{lang}/{name}` (built once per
/// digest of its sources, the SDK and the contract), or `None` when the
/// toolchain is missing outside CI.
fn built(lang: &str, name: &str) -> Option<Vec<u8>> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _one_build_at_a_time = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = repo().join("plugins").join(lang).join(name);
    let mut inputs = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for f in files.iter().filter(|f| f.is_file()) {
        inputs.extend(f.file_name().unwrap().as_encoded_bytes());
        inputs.extend(std::fs::read(f).unwrap());
    }
    inputs.extend(guest::PYTHON_SDK.as_bytes());
    inputs.extend(guest::JS_SDK.as_bytes());
    for (_, text) in tessera_wasm::ContractVersion::CURRENT.wit_files() {
        inputs.extend(text.as_bytes());
    }
    let out = guest_cache().join(format!("{lang}-{name}-{}.wasm", &tessera_wasm::sha256_hex(&inputs)[..16]));
    if let Ok(bytes) = std::fs::read(&out) {
        return Some(bytes);
    }
    std::fs::create_dir_all(guest_cache()).unwrap();
    let tmp = out.with_extension("partial");
    match guest::build(&dir, Some(&tmp), &Tools::from_env()) {
        Ok(_) => {
            std::fs::rename(&tmp, &out).unwrap();
            Some(std::fs::read(&out).unwrap())
        }
        Err(e @ guest::BuildError::ToolMissing { .. }) if std::env::var_os("CI").is_none() => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("building plugins/{lang}/{name}: {e}"),
    }
}

/// Each guest once per test process.
fn guest(lang: &'static str, name: &'static str) -> Option<&'static [u8]> {
    type Built = Mutex<Vec<((&'static str, &'static str), Option<&'static [u8]>)>>;
    static BUILT: OnceLock<Built> = OnceLock::new();
    let built_ = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    if let Some((_, b)) = built_.lock().unwrap().iter().find(|(k, _)| *k == (lang, name)) {
        return *b;
    }
    let bytes: Option<&'static [u8]> = built(lang, name).map(|b| &*Vec::leak(b));
    built_.lock().unwrap().push(((lang, name), bytes));
    bytes
}

fn load_bytes(bytes: &[u8], name: &str, config: &str) -> Arc<PluginVersion> {
    let rt = runtime();
    let mut spec = PluginSpec::new(name);
    spec.limits.deadline_ms = tessera_policy::Bounded(2000);
    spec.config_json = config.into();
    rt.load(&spec, bytes).unwrap_or_else(|e| panic!("load {name}: {e}")).0
}

/// A varied cluster: CPU-only and GPU nodes of several sizes, GPUs partly
/// taken, some failed, some nodes with no memory or CPU reported.
fn varied_cluster(n: u32, seed: u64) -> Vec<Node> {
    let mut rng = Rng(seed);
    (0..n)
        .map(|i| {
            let gpus = rng.pick(&[0, 1, 2, 4, 8, 8]);
            let cpu = rng.pick(&[0, 16_000, 32_000, 64_000, 96_000]);
            let mem = rng.pick(&[0, 65_536, 262_144, 786_432]);
            let mut node = Node::new(i, format!("n{i}"), Resources { cpu_milli: cpu, memory_mib: mem }, gpus, "V100");
            node.free.cpu_milli = rng.range(0, cpu);
            node.free.memory_mib = rng.range(0, mem);
            for g in &mut node.gpus {
                let any = rng.range(0, 1000) as u32;
                g.free_milli = rng.pick(&[0, 1000, 1000, 500, 250, any]);
                if rng.range(0, 11) == 0 {
                    g.health = GpuHealth::Failed;
                }
            }
            node
        })
        .collect()
}

fn varied_pods(n: usize, seed: u64) -> Vec<Pod> {
    let mut rng = Rng(seed);
    (0..n)
        .map(|i| {
            let gpus = rng.pick(&[0, 1, 1, 2, 4, 8]);
            let share = rng.pick(&[1000, 500, 250, 100]);
            Pod {
                name: format!("p{i}"),
                requests: Resources { cpu_milli: rng.range(0, 48_000), memory_mib: rng.range(0, 200_000) },
                gpu_count: gpus,
                gpu_milli: if gpus == 1 { share } else { 1000 },
                tier: Tier::Soft,
                ..Pod::default()
            }
        })
        .collect()
}

/// The same scores for every node and pod, with the default weights and
/// with others, as the Rust plugin's.
fn scores_like_rust(lang: &'static str) {
    let Some(bytes) = guest(lang, "binpack") else { return };
    let rt = runtime();
    let nodes = varied_cluster(300, 7);
    let ids: Vec<u32> = (0..300).collect();
    for config in ["null", r#"{"cpu_weight": 2, "memory_weight": 0, "gpu_weight": 7}"#, r#"{"gpu_weight": 0}"#] {
        let rust = policy(vec![member(load(&rt, BINPACK, "binpack", config), 1.0)], &nodes);
        let other = policy(vec![member(load_bytes(bytes, "binpack", config), 1.0)], &nodes);
        for pod in varied_pods(60, 11) {
            let (a, b) = (rust.decide(&pod, &ids), other.decide(&pod, &ids));
            assert!(a.errors.is_empty() && b.errors.is_empty(), "{:?} {:?}", a.errors, b.errors);
            assert_eq!(a.outcomes[0].scores, b.outcomes[0].scores, "{lang} {config} {}", pod.name);
            assert_eq!((a.chosen, a.gpu_hint), (b.chosen, b.gpu_hint), "{lang} {config} {}", pod.name);
        }
    }
}

#[test]
fn python_binpack_scores_exactly_like_rust() {
    scores_like_rust("python");
}

#[test]
fn js_binpack_scores_exactly_like_rust() {
    scores_like_rust("js");
}

/// The same findings, frame after frame, as the Rust detector's.
fn finds_like_rust(lang: &'static str) {
    let Some(bytes) = guest(lang, "overload") else { return };
    let rt = runtime();
    let config = r#"{"gpu_intervals": 3, "memory_intervals": 2, "memory_free_permille": 150}"#;
    let rust = load(&rt, OVERLOAD, "overload", config);
    let other = load_bytes(bytes, "overload", config);
    assert_eq!(other.kind(), WorldKind::Detector);
    let mut rng = Rng(5);
    let mut found = 0;
    for seq in 0..40 {
        // Nodes in shuffled order, hot and cold runs.
        let mut keyed: Vec<(u64, u32)> = (0..25).map(|n| (rng.next(), n)).collect();
        keyed.sort_unstable();
        let nodes: Vec<u32> = keyed.into_iter().map(|(_, n)| n).collect();
        let frame = wit::TelemetryFrame {
            seq,
            gpu_util_permille: nodes
                .iter()
                .map(|&n| rng.range(if n % 3 == 0 { 880 } else { 0 }, 1000) as u16)
                .collect(),
            memory_free_permille: nodes
                .iter()
                .map(|&n| rng.range(0, if n % 4 == 0 { 199 } else { 1000 }) as u16)
                .collect(),
            cpu_util_permille: vec![100; nodes.len()],
            stranded_gpu_milli: vec![0; nodes.len()],
            nodes,
        };
        rust.observe(&frame).unwrap();
        other.observe(&frame).unwrap();
        let (a, b) = (rust.detect().unwrap(), other.detect().unwrap());
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{lang} frame {seq}");
        found += a.len();
    }
    assert!(found > 20, "the frames exercise the detector: {found} findings");
    // A malformed frame is the guest's error, as in Rust.
    let bad = wit::TelemetryFrame {
        seq: 99,
        nodes: vec![1, 2],
        gpu_util_permille: vec![1],
        memory_free_permille: vec![1, 2],
        cpu_util_permille: vec![1, 2],
        stranded_gpu_milli: vec![1, 2],
    };
    let e = other.observe(&bad).unwrap_err();
    assert!(!e.is_fault() && e.to_string().contains("columns differ in length"), "{e}");
}

#[test]
fn python_overload_finds_exactly_like_rust() {
    finds_like_rust("python");
}

#[test]
fn js_overload_finds_exactly_like_rust() {
    finds_like_rust("js");
}

/// An unknown configuration field is refused at load, naming it.
#[test]
fn guests_refuse_unknown_configuration_naming_the_field() {
    for lang in ["python", "js"] {
        let Some(bytes) = guest(lang, "binpack") else { continue };
        let mut spec = PluginSpec::new("binpack");
        spec.config_json = r#"{"cpu_wieght": 1}"#.into();
        let Err(e) = runtime().load(&spec, bytes) else { panic!("{lang}: an unknown field was accepted") };
        let e = e.to_string();
        assert!(e.contains("unknown field `cpu_wieght`"), "{lang}: {e}");
    }
}

fn write_policy(dir: &Path, name: &str, scorer: &str, detector: &str) -> PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    let text = format!(
        "name: {name}\nseed: 9\nplugins:\n  - name: binpack\n    source: {scorer}\n  - name: topology-spread\n    \
         source: builtin:topology-spread\n  - name: overload\n    source: {detector}\n    role: detector\n    config: \
         {{ gpu_util_permille: 700, gpu_intervals: 2 }}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// `tessera sim --online` with the Python or JavaScript plugins beside a
/// Rust one: the same report, decision for decision, as with the Rust
/// twins.
#[test]
fn guests_run_in_the_simulator_beside_rust_plugins_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run = |policy: &Path| {
        let opts = tessera::sim::SimOptions::builtin(40, 3, policy.display().to_string(), 1.0);
        let out = tessera::online::run(&opts, 200).unwrap();
        serde_json::to_value(&out.file.report).unwrap()
    };
    let rust = run(&write_policy(dir.path(), "rust", "builtin:binpack", "builtin:overload"));
    for lang in ["python", "js"] {
        let (Some(b), Some(o)) = (guest(lang, "binpack"), guest(lang, "overload")) else { continue };
        let (bp, ov) =
            (dir.path().join(format!("{lang}-binpack.wasm")), dir.path().join(format!("{lang}-overload.wasm")));
        std::fs::write(&bp, b).unwrap();
        std::fs::write(&ov, o).unwrap();
        // Paths relative to the policy document, as `source:` wants them.
        let other =
            run(&write_policy(dir.path(), lang, &format!("{lang}-binpack.wasm"), &format!("{lang}-overload.wasm")));
        assert_eq!(rust, other, "{lang}");
    }
}

/// A Python or JavaScript plugin that loops, allocates without bound,
/// raises, or answers the wrong number of scores is stopped like a Rust
/// one: an error naming the plugin and the cause, binpack beside it still
/// deciding.
#[test]
fn hostile_guests_are_contained_like_rust_ones() {
    for lang in ["python", "js"] {
        let Some(bytes) = guest(lang, "hostile") else { continue };
        let nodes = crate::cluster(8);
        let ids: Vec<u32> = (0..8).collect();
        let pod = Pod {
            gpu_count: 1,
            gpu_milli: 1000,
            requests: Resources { cpu_milli: 1000, memory_mib: 512 },
            ..Pod::default()
        };
        for (mode, expect) in [
            ("loop", "PLUGIN-TIMEOUT"),
            ("alloc", "PLUGIN-MEMORY"),
            ("raise", "hostile on purpose"),
            ("short", "PLUGIN-WRONG-LENGTH"),
        ] {
            let rt = runtime();
            let mut spec = PluginSpec::new("hostile");
            spec.config_json = format!(r#"{{"mode": "{mode}"}}"#);
            spec.limits.deadline_ms = tessera_policy::Bounded(if mode == "loop" { 200 } else { 2000 });
            let (hostile, _) = rt.load(&spec, bytes).unwrap_or_else(|e| panic!("{lang} {mode}: {e}"));
            let p = policy(vec![member(load(&rt, BINPACK, "binpack", "null"), 1.0), member(hostile, 5.0)], &nodes);
            let t = std::time::Instant::now();
            let d = p.decide(&pod, &ids);
            assert_eq!(d.errors.len(), 1, "{lang} {mode}: {:?}", d.errors);
            let e = d.errors[0].to_string();
            assert!(e.starts_with("plugin hostile@0.1.0: ") && e.contains(expect), "{lang} {mode}: {e}");
            assert_eq!(d.chosen, Some(7), "{lang} {mode}: binpack still decides");
            assert!(t.elapsed() < std::time::Duration::from_secs(10), "{lang} {mode}: {:?}", t.elapsed());
            match mode {
                "loop" => assert!(matches!(d.errors[0].kind, CallFault::Timeout { .. }), "{e}"),
                "alloc" => assert!(matches!(d.errors[0].kind, CallFault::MemoryExceeded { .. }), "{e}"),
                "short" => assert_eq!(
                    d.errors[0].kind,
                    CallFault::WrongLength { what: "scores", expected: 8, got: 7 },
                    "{lang}"
                ),
                _ => assert!(matches!(d.errors[0].kind, CallFault::Guest(_)), "{e}"),
            }
        }
    }
}
