//! `tessera chaos verify` on the shipped example campaigns, as a user runs
//! them from the repository root: the sound candidate is promoted, the bad
//! one blocked by the gates that caught it, and no fault loses a pod.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn verify(campaign: &str, format: &str) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .current_dir(root())
        .args(["chaos", "verify", "--campaign", campaign, "--format", format])
        .output()
        .expect("run tessera");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// Every run accounts for every pod; faults did strike.
fn no_pod_lost(report: &Value) {
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 6 * 5 * 2, "6 scenarios × 5 seeds × 2 policies");
    for r in runs {
        let o = &r["outcome"];
        assert_eq!(o["lost"], 0, "{r}");
        let total: u64 = ["completed", "abandoned", "running", "waiting"].iter().map(|k| o[k].as_u64().unwrap()).sum();
        assert_eq!(total, o["submitted"].as_u64().unwrap(), "{r}");
    }
    let displaced: u64 = runs.iter().map(|r| r["outcome"]["displaced"].as_u64().unwrap()).sum();
    assert!(displaced > 500, "crashes, partitions and XIDs took pods off their nodes: {displaced}");
}

#[test]
fn the_sound_candidate_is_promoted() {
    let (code, out, err) = verify("chaos/campaigns/sound-candidate.yaml", "json");
    assert_eq!(code, Some(0), "{out}\n{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["verdict"], "PROMOTE");
    assert!(r["gates"].as_array().unwrap().iter().all(|g| g["pass"] == true), "{}", r["gates"]);
    assert!(r["wall_s"].as_f64().unwrap() > 0.0);
    no_pod_lost(&r);
    // The load spike is predictive: each of its runs carries its forecast,
    // and the spike began ahead of the predicted peak.
    for run in r["runs"].as_array().unwrap().iter().filter(|x| x["scenario"] == "load-spike") {
        let f = &run["forecasts"][0];
        assert!(f["model"].as_str().is_some_and(|m| !m.is_empty()), "{run}");
        assert!(f["mape_pct"].as_f64().unwrap().is_finite(), "{f}");
        let i = f["intensity"].as_f64().unwrap();
        assert!((0.05..=1.0).contains(&i), "{f}");
        let fault = &run["outcome"]["faults"][0];
        assert_eq!(fault["kind"], "load-spike");
        let predicted = f["predicted_peak_at_s"].as_u64().unwrap();
        assert!(fault["start"].as_u64().unwrap() <= predicted + 7200, "{fault} vs {f}");
        assert!(fault["extra_arrivals"].as_u64().unwrap() > 0, "{fault}");
    }
}

#[test]
fn the_bad_candidate_is_blocked_by_the_gates_that_caught_it() {
    let (code, out, err) = verify("chaos/campaigns/bad-candidate.yaml", "json");
    assert_eq!(code, Some(2), "BLOCK exits 2: {err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["verdict"], "BLOCK");
    let failing: Vec<&str> = r["failing"].as_array().unwrap().iter().map(|g| g.as_str().unwrap()).collect();
    assert!(failing.contains(&"sla_violations"), "ignoring GPU health shows as SLA violations: {failing:?}");
    let sla = r["gates"].as_array().unwrap().iter().find(|g| g["name"] == "sla_violations").unwrap();
    assert_eq!(sla["scenario"], "gpu-degradation", "{sla}");
    assert!(sla["candidate"].as_f64().unwrap() > sla["threshold"].as_f64().unwrap(), "{sla}");
    assert_eq!(r["gates"][0]["name"], "pods_lost");
    assert_eq!(r["gates"][0]["pass"], true, "a blocked candidate still loses no pod");
    no_pod_lost(&r);
}

#[test]
fn a_bad_campaign_file_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("chaos/campaigns/sound-candidate.yaml")).unwrap();
    let bad = dir.path().join("typo.yaml");
    std::fs::write(&bad, text.replace("telemetry_interval_s:", "telemetry_intervals:")).unwrap();
    let (code, _, err) = verify(bad.to_str().unwrap(), "markdown");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("typo.yaml") && err.contains("telemetry_intervals"), "{err}");
    let zone = dir.path().join("zone.yaml");
    std::fs::write(
        &zone,
        text.replace("{zone: zone-b}", "{zone: atlantis}")
            .replace("policies/", &format!("{}/chaos/campaigns/policies/", root().display())),
    )
    .unwrap();
    let (code, _, err) = verify(zone.to_str().unwrap(), "markdown");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("atlantis") && err.contains("zone-a, zone-b, zone-c"), "{err}");
}

#[test]
fn export_writes_chaos_mesh_workflows_for_the_faults_it_has() {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .current_dir(root())
        .args(["chaos", "export", "--campaign", "chaos/campaigns/sound-candidate.yaml", "--schedule", "0 3 * * 1"])
        .output()
        .expect("run tessera");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("skipped gpu-xid: gpu-failure (Chaos Mesh has no GPU faults)"), "{stderr}");
    let docs: Vec<Value> = stdout.split("---\n").skip(1).map(|d| serde_yaml_ng::from_str(d).unwrap()).collect();
    let names: Vec<&str> = docs.iter().map(|d| d["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["sound-candidate-node-crash", "sound-candidate-zone-partition", "sound-candidate-telemetry-loss"],
        "scenarios with a Chaos Mesh equivalent"
    );
    assert!(docs.iter().all(|d| d["kind"] == "Schedule" && d["spec"]["type"] == "Workflow"));
}
