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

#[test]
fn shards_merged_give_the_verdict_of_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let campaign = dir.path().join("small.yaml");
    std::fs::write(
        &campaign,
        "name: small\ncluster: {builtin: {nodes: 30}}\nworkload: {builtin: {pods: 300, load: 0.9}}\n\
         candidate: binpack\nbaseline: default\nseeds: [1, 2, 3]\nscenarios:\n\
         \x20 - name: crash\n    faults: [{kind: node-crash, start: {at: 3600}, duration_s: 3600, target: {count: 3}}]\n\
         \x20 - name: control\ngates:\n  pending_p99_s: {max_increase_pct: 25, slack: 300}\n",
    )
    .unwrap();
    let c = campaign.to_str().unwrap();
    let (_, whole, err) = verify(c, "json");
    let whole: Value = serde_json::from_str(&whole).unwrap_or_else(|e| panic!("{e}: {err}"));
    let mut files = Vec::new();
    for k in 0..4 {
        let out = dir.path().join(format!("shard-{k}.json"));
        let r = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["chaos", "run", "--campaign", c, "--shard", &format!("{k}/4"), "--out", out.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        files.push(out.to_str().unwrap().to_string());
    }
    let merge = |files: &[String]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["chaos", "merge", "--campaign", c, "--format", "json"])
            .args(files)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, merged, err) = merge(&files);
    assert!(code == Some(0) || code == Some(2), "{err}");
    let merged: Value = serde_json::from_str(&merged).unwrap();
    assert_eq!(merged["verdict"], whole["verdict"]);
    assert_eq!(merged["gates"], whole["gates"], "a twin run is deterministic: shards change nothing");
    let (code, _, err) = merge(&files[..3]);
    assert_eq!(code, Some(1));
    assert!(err.contains("expected 1"), "names the missing run: {err}");
    let bad = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["chaos", "run", "--campaign", c, "--shard", "4/4", "--out", "x"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("below the count"));
}

#[test]
fn the_shipped_chaos_jobs_shard_as_many_ways_as_they_run() {
    let text = std::fs::read_to_string(root().join("deploy/chaos/campaign-job.yaml")).unwrap();
    let docs: Vec<Value> = text.split("\n---\n").map(|d| serde_yaml_ng::from_str(d).unwrap()).collect();
    let shards = &docs[0];
    assert_eq!((shards["kind"].as_str(), shards["spec"]["completionMode"].as_str()), (Some("Job"), Some("Indexed")));
    let n = shards["spec"]["completions"].as_u64().unwrap();
    let args = shards["spec"]["template"]["spec"]["containers"][0]["args"][0].as_str().unwrap();
    assert!(args.contains(&format!("--shard \"${{JOB_COMPLETION_INDEX}}/{n}\"")), "{args}");
    let merge = docs[1]["spec"]["template"]["spec"]["containers"][0]["args"][0].as_str().unwrap();
    assert!(merge.contains("tessera chaos merge") && merge.contains("/runs/shard-*.json"), "{merge}");
    let cron: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(root().join("deploy/chaos/cronjob.yaml")).unwrap()).unwrap();
    assert_eq!(cron["kind"], "CronJob");
    let cmd = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"][0].as_str().unwrap();
    assert!(cmd.contains("tessera chaos verify --campaign"), "{cmd}");
}

#[test]
fn actuator_errors_fail_rescheduling_moves_without_losing_pods() {
    let dir = tempfile::tempdir().unwrap();
    let campaign = dir.path().join("act.yaml");
    std::fs::write(
        &campaign,
        "name: act\ncluster: {builtin: {nodes: 60}}\nworkload: {builtin: {pods: 1500, load: 1.0}}\n\
         candidate: default\nbaseline: default\nseeds: [1]\nmax_migrations_pct: 5\nscenarios:\n  - name: control\n\
         \x20 - name: actuator\n    faults: [{kind: actuator-errors, start: {at: 0}, duration_s: 1000000, intensity: 0.6}]\n",
    )
    .unwrap();
    let (_, out, err) = verify(campaign.to_str().unwrap(), "json");
    let r: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {err}"));
    let get = |scenario: &str, key: &str| {
        r["runs"].as_array().unwrap().iter().find(|x| x["scenario"] == scenario).unwrap()["outcome"][key]
            .as_u64()
            .unwrap()
    };
    assert!(get("control", "migrations") > 0, "the twin reschedules: {r}");
    assert!(get("actuator", "migrations_failed") > 10 * get("control", "migrations_failed").max(1), "{r}");
    assert!(get("actuator", "migrations") < get("control", "migrations"), "{r}");
    assert!(r["runs"].as_array().unwrap().iter().all(|x| x["outcome"]["lost"] == 0), "{r}");
}
