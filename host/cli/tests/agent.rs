//! `tessera agent --once` as a user runs it: on this machine (no NVIDIA
//! driver) it says so once and reports CPU and memory; with a recorded NVML
//! fixture it reports the fixture's eight H100s.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn agent(extra: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .current_dir(root())
        .env_remove("NODE_NAME")
        .args(["agent", "--once", "--format", "json"])
        .args(extra)
        .output()
        .expect("run tessera");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// One JSON object on stdout, nothing else.
fn one_object(out: &str) -> Value {
    assert_eq!(out.lines().count(), 1, "{out}");
    let v: Value = serde_json::from_str(out).unwrap();
    assert!(v.is_object(), "{v}");
    assert!(v["cpu"]["cores"].as_u64().unwrap() > 0, "{v}");
    assert!(v["cpu"]["util_permille"].as_u64().unwrap() <= 1000, "{v}");
    assert!(v["memory"]["total_mib"].as_u64().unwrap() > 0, "{v}");
    assert!(v["memory"]["used_mib"].as_u64().unwrap() <= v["memory"]["total_mib"].as_u64().unwrap(), "{v}");
    assert!(!v["node"].as_str().unwrap().is_empty(), "{v}");
    v
}

#[test]
fn once_without_a_driver_reports_cpu_and_memory() {
    if Path::new("/proc/driver/nvidia/version").exists() {
        eprintln!("skipped: an NVIDIA driver is loaded here");
        return;
    }
    let (code, out, err) = agent(&[]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let v = one_object(&out);
    assert_eq!(v["gpus"].as_array().unwrap().len(), 0, "{v}");
    assert_eq!(v["nvml"]["available"], false, "{v}");
    assert!(v["nvml"]["message"].as_str().unwrap().starts_with("no NVIDIA driver (NVML: "), "{v}");
    assert_eq!(err.matches("no NVIDIA driver").count(), 1, "said once: {err}");
    assert!(err.starts_with("tessera agent: no NVIDIA driver (NVML: "), "{err}");
    assert!(err.trim_end().ends_with("; serving CPU and memory telemetry only"), "{err}");
}

#[test]
fn once_with_a_recorded_node_reports_its_gpus() {
    let (code, out, err) =
        agent(&["--nvml-fixture", "host/agent/tests/fixtures/nvml-h100x8.json", "--node-name", "h100-a"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(!err.contains("no NVIDIA driver"), "{err}");
    let v = one_object(&out);
    assert_eq!(v["node"], "h100-a");
    assert_eq!(v["nvml"]["available"], true);
    assert_eq!(v["nvml"]["driver_version"], "550.90.07");
    let gpus = v["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8, "{v}");
    assert!(gpus.iter().all(|g| g["name"] == "NVIDIA H100 80GB HBM3" && g["memory_total_mib"] == 81_559), "{v}");
    assert_eq!(gpus[5]["health"], "degraded", "the hot one");
    assert_eq!(gpus[0]["util_permille"], 970);
}

#[test]
fn once_as_text_and_bad_flags() {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .current_dir(root())
        .args(["agent", "--once", "--nvml-fixture", "host/agent/tests/fixtures/nvml-h100x8.json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("nvml       driver 550.90.07"), "{text}");
    assert!(text.lines().filter(|l| l.starts_with("gpu ")).count() == 8, "{text}");
    assert!(text.contains("degraded (87 °C ≥ 85 °C)"), "{text}");
    let bad = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .current_dir(root())
        .args(["agent", "--once", "--nvml-fixture", "no/such.json"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cannot read no/such.json"));
    let bad = Command::new(env!("CARGO_BIN_EXE_tessera")).args(["agent", "--interval-s", "0"]).output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--interval-s must be within 1..=86400"));
}
