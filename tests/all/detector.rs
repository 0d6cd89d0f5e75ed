//! The detector world end to end: a window of telemetry frames in,
//! findings out, through the real `overload` component.

use tessera_plugins::OVERLOAD;
use tessera_wasm::{WorldKind, wit};

use crate::{load, runtime};

fn frame(seq: u64, util: [u16; 3]) -> wit::TelemetryFrame {
    wit::TelemetryFrame {
        seq,
        nodes: vec![10, 11, 12],
        gpu_util_permille: util.to_vec(),
        memory_free_permille: vec![500, 500, 40],
        cpu_util_permille: vec![100; 3],
        stranded_gpu_milli: vec![0; 3],
    }
}

#[test]
fn overload_detector_reports_sustained_overload_and_memory_pressure() {
    let rt = runtime();
    let v = load(&rt, OVERLOAD, "overload", r#"{"gpu_intervals": 5, "memory_intervals": 3}"#);
    assert_eq!(v.kind(), WorldKind::Detector);
    for seq in 0..4 {
        v.observe(&frame(seq, [950, 980, 100])).unwrap();
    }
    let kinds = |f: &[wit::Finding]| f.iter().map(|f| (f.node, format!("{:?}", f.kind))).collect::<Vec<_>>();
    // After 4 intervals: only memory pressure on node 12 (3 intervals).
    assert_eq!(kinds(&v.detect().unwrap()), [(12, "FindingKind::MemoryPressure".to_string())]);
    v.observe(&frame(4, [950, 500, 100])).unwrap();
    let f = v.detect().unwrap();
    assert_eq!(kinds(&f), [(10, "FindingKind::Overload".to_string()), (12, "FindingKind::MemoryPressure".to_string())]);
    assert!(f[0].message.contains("5 consecutive intervals"), "{}", f[0].message);
}

#[test]
fn malformed_frames_are_guest_errors() {
    let rt = runtime();
    let v = load(&rt, OVERLOAD, "overload", "null");
    let mut bad = frame(0, [1, 2, 3]);
    bad.cpu_util_permille.pop();
    let e = v.observe(&bad).unwrap_err();
    assert!(!e.is_fault());
    assert!(e.to_string().contains("columns differ in length"), "{e}");
}

/// The `rebalance` component finds fragmentation hot spots and idle nodes
/// (the defragmentation and consolidation strategies' inputs).
#[test]
fn rebalance_detector_reports_fragmentation_and_low_load() {
    let rt = runtime();
    let v = load(
        &rt,
        tessera_plugins::REBALANCE,
        "rebalance",
        r#"{"fragmentation_intervals": 2, "low_load_intervals": 2}"#,
    );
    assert_eq!(v.kind(), WorldKind::Detector);
    let f = |seq| wit::TelemetryFrame {
        seq,
        nodes: vec![1, 2, 3],
        gpu_util_permille: vec![600, 30, 600],
        memory_free_permille: vec![500; 3],
        cpu_util_permille: vec![400, 50, 400],
        stranded_gpu_milli: vec![800, 0, 100],
    };
    v.observe(&f(0)).unwrap();
    assert!(v.detect().unwrap().is_empty(), "one interval is not enough");
    v.observe(&f(1)).unwrap();
    let found: Vec<(u32, String)> = v.detect().unwrap().iter().map(|f| (f.node, format!("{:?}", f.kind))).collect();
    assert_eq!(found, [(1, "FindingKind::Fragmentation".to_string()), (2, "FindingKind::LowLoad".to_string())]);
}

/// A detector minting a new finding kind per node per round, with 4 KiB
/// messages, through the whole online loop: the report keeps at most its
/// first few kinds and an `other` bucket, and stays small.
#[test]
fn a_detector_minting_kinds_leaves_reports_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("minting.yaml");
    std::fs::write(
        &policy,
        "name: minting\nplugins:\n  - name: binpack\n    source: builtin:binpack\n  - name: minting\n    source: builtin:hostile-detector\n    role: detector\n",
    )
    .unwrap();
    let opts = tessera::sim::SimOptions::builtin(40, 3, policy.display().to_string(), 1.0);
    let out = tessera::online::run(&opts, 300).unwrap();
    let kinds = &out.file.report.anomalies;
    let own = kinds.keys().filter(|k| k.starts_with('k')).count();
    assert_eq!(own, tessera_core::telemetry::MAX_OWN_KINDS, "{kinds:?}");
    assert!(kinds.get("other").is_some_and(|&n| n > 1000), "the rest are counted as other: {kinds:?}");
    let json = serde_json::to_string(&out.file).unwrap();
    assert!(json.len() < 100_000, "{} bytes", json.len());
    // And the run replays exactly.
    let again = serde_json::to_string(&tessera::online::run(&opts, 300).unwrap().file).unwrap();
    assert_eq!(json, again);
}
