//! Chaos campaigns scheduled by `tessera serve` itself: on its cron
//! expression, or on demand, the service proves the rollout's candidate
//! against the active policy on a twin of its live cluster and records the
//! verdict for that candidate; a BLOCK stops the promotion, a PROMOTE lets
//! it through. Real campaigns on the real twin, over real HTTP.

use std::path::Path;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tessera_server::config::ChaosConfig;

use super::{Running, TOKEN, config};

const PACKER: &str = "name: packer\nplugins:\n  - name: binpack\n    source: builtin:binpack\n";

/// A small campaign (one scenario, one seed) with `gates`.
fn campaign(dir: &Path, name: &str, gates: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    let text = format!(
        "name: {name}
cluster: {{builtin: {{nodes: 20}}}}
workload: {{builtin: {{pods: 150, load: 0.8}}}}
candidate: binpack
baseline: default
seeds: [7]
telemetry_interval_s: 300
scenarios:
  - name: node-crash
    faults:
      - {{kind: node-crash, start: {{at: 3600}}, duration_s: 1800, target: {{percent: 10}}}}
gates:
{gates}"
    );
    std::fs::write(&path, text).unwrap();
    path
}

async fn call(r: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let r = r.send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap())
}

/// Six-field cron expression that fires once, `secs` from now (UTC).
fn once_in(secs: i64) -> String {
    let t = jiff::Timestamp::now().checked_add(jiff::SignedDuration::from_secs(secs)).unwrap();
    let z = t.to_zoned(jiff::tz::TimeZone::UTC);
    format!("{} {} {} {} {} *", z.second(), z.minute(), z.hour(), z.day(), z.month())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cron_schedule_proves_the_candidate_on_the_live_cluster_and_lets_it_through() {
    let dir = tempfile::tempdir().unwrap();
    let file = campaign(dir.path(), "nightly", "  pending_p99_s: {max_increase_pct: 1000, slack: 100000}\n");
    let mut cfg = config(None);
    cfg.chaos = Some(ChaosConfig { schedule: once_in(6), campaign: file, live_cluster: true });
    let svc = Running::start(cfg).await;
    let http = reqwest::Client::new();
    let post = |path: &str| http.post(svc.url(path)).bearer_auth(TOKEN);

    let (s, v) = call(post("/v1/rollout/candidate").header("content-type", "application/yaml").body(PACKER)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, c) = call(http.get(svc.url("/v1/chaos"))).await;
    assert!(c["next_run_unix_ms"].as_u64().is_some(), "{c}");
    assert!(c["runs"].as_array().unwrap().is_empty(), "nothing ran before the schedule fired: {c}");

    svc.wait("the scheduled campaign's verdict", Duration::from_secs(240), |s| {
        s.rollout.read().unwrap().verdict.is_some()
    })
    .await;
    let (_, c) = call(http.get(svc.url("/v1/chaos"))).await;
    let run = &c["runs"][0];
    assert_eq!(run["trigger"], "schedule", "{c}");
    assert_eq!((run["campaign"].as_str(), run["verdict"].as_str()), (Some("nightly"), Some("PROMOTE")), "{c}");
    assert_eq!((run["candidate"].as_str(), run["baseline"].as_str()), (Some("packer"), Some("default")), "{c}");
    assert_eq!(run["live_cluster"], true);
    assert_eq!(run["recorded_for_candidate"], true);
    assert!(run["gates"].as_array().is_some_and(|g| g.iter().any(|g| g["name"] == "pending_p99_s")), "{run}");
    let (_, r) = call(http.get(svc.url("/v1/rollout"))).await;
    assert_eq!(
        (r["verdict"]["verdict"].as_str(), r["verdict"]["for_candidate"].as_str()),
        (Some("PROMOTE"), Some("packer"))
    );

    // With the verdict the service recorded itself, the canary promotes.
    let (s, _) = call(post("/v1/rollout/stage?stage=canary&share=0.3")).await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = call(post("/v1/rollout/promote")).await;
    assert_eq!((s, v["active"].as_str()), (StatusCode::OK, Some("packer")), "{v}");
    let metrics = http.get(svc.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tessera_chaos_campaigns_total{verdict=\"PROMOTE\"} 1"), "{metrics}");
    assert!(metrics.contains("tessera_chaos_campaign_duration_seconds_count 1"), "{metrics}");
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_verdict_from_a_run_on_demand_stops_the_promotion() {
    let dir = tempfile::tempdir().unwrap();
    // No policy allocates more than all the GPUs: the gate always fails.
    let file = campaign(dir.path(), "strict", "  gpu_allocation_pct: {min: 101}\n");
    let mut cfg = config(None);
    cfg.chaos = Some(ChaosConfig { schedule: "0 3 1 1 *".into(), campaign: file, live_cluster: true });
    let svc = Running::start(cfg).await;
    let http = reqwest::Client::new();
    let post = |path: &str| http.post(svc.url(path)).bearer_auth(TOKEN);

    let (s, _) = call(http.post(svc.url("/v1/chaos/run"))).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // Without a candidate: the campaign's own policies, nothing recorded.
    let (s, v) = call(post("/v1/chaos/run")).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let done = |n: usize| {
        move |s: &tessera_server::Shared| {
            let c = s.chaos.read().unwrap();
            c.runs.len() == n && !c.running && c.runs.back().is_some_and(|r| r.verdict.is_some())
        }
    };
    svc.wait("the first run", Duration::from_secs(240), done(1)).await;
    {
        let c = svc.shared.chaos.read().unwrap().clone();
        let r = &c.runs[0];
        assert_eq!((r.candidate.as_str(), r.verdict.as_deref()), ("(the campaign's)", Some("BLOCK")), "{r:?}");
        assert!(!r.recorded_for_candidate);
        assert_eq!(r.failing, ["gpu_allocation_pct"]);
        assert!(svc.shared.rollout.read().unwrap().verdict.is_none());
    }

    // With a candidate in canary: the BLOCK is its verdict, and it stops
    // the promotion naming the gate.
    let (s, _) = call(post("/v1/rollout/candidate").header("content-type", "application/yaml").body(PACKER)).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = call(post("/v1/rollout/stage?stage=canary&share=0.5")).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = call(post("/v1/chaos/run")).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    svc.wait("the second run", Duration::from_secs(240), done(2)).await;
    let (_, r) = call(http.get(svc.url("/v1/rollout"))).await;
    assert_eq!(
        (r["verdict"]["verdict"].as_str(), r["verdict"]["for_candidate"].as_str()),
        (Some("BLOCK"), Some("packer"))
    );
    let (s, e) = call(post("/v1/rollout/promote")).await;
    assert_eq!((s, e["code"].as_str()), (StatusCode::CONFLICT, Some("ROLLOUT-BLOCKED")), "{e}");
    assert!(e["message"].as_str().unwrap().contains("gpu_allocation_pct"), "{e}");
    let metrics = http.get(svc.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tessera_chaos_campaigns_total{verdict=\"BLOCK\"} 2"), "{metrics}");
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_campaign_stops_the_start_and_no_schedule_means_no_runs() {
    let mut cfg = config(None);
    cfg.chaos = Some(ChaosConfig {
        schedule: "0 3 * * *".into(),
        campaign: "no/such/campaign.yaml".into(),
        live_cluster: true,
    });
    let cfg = tessera::serve::ServiceConfig { serve: cfg, ..Default::default() };
    let e = tessera::serve::start(cfg).await.err().expect("a missing campaign is refused at start").to_string();
    assert!(e.contains("chaos.campaign") && e.contains("no/such/campaign.yaml"), "{e}");

    let svc = Running::start(config(None)).await;
    let http = reqwest::Client::new();
    let (s, e) = call(http.post(svc.url("/v1/chaos/run")).bearer_auth(TOKEN)).await;
    assert_eq!((s, e["code"].as_str()), (StatusCode::CONFLICT, Some("CHAOS-NOT-SCHEDULED")));
    let (_, c) = call(http.get(svc.url("/v1/chaos"))).await;
    assert_eq!((&c["schedule"], &c["next_run_unix_ms"]), (&Value::Null, &Value::Null), "{c}");
    svc.stop().await;
}
