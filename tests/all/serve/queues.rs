//! Queues in the service: a policy posted with a `queues:` section holds
//! its queue to its limit, says why a pod waits, and reports each queue's
//! use, guarantee and fair share on `/metrics`, and the fairness the
//! gate remembers.

use std::time::Duration;

use reqwest::StatusCode;

use super::{Running, TOKEN, config};

const POLICY: &str = r#"
name: queued
plugins:
  - name: binpack
    source: builtin:binpack
queues:
  default_queue: batch
  fair_share_gate: true
  usage_half_life_s: 3600
  fairness_target: 0.9
  list:
    - name: batch
      guarantee: { gpus: 2 }
      limit: { gpus: 6 }
    - name: prod
      weight: 2
"#;

/// The value of the series `name{labels}` in OpenMetrics `text`.
fn series(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name_and_labels)?.trim().split(' ').next()?.parse().ok())
}

/// Posts [`POLICY`] and checks it was accepted.
async fn post_policy(svc: &Running, http: &reqwest::Client) {
    let r = http
        .post(svc.url("/v1/policies"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/yaml")
        .body(POLICY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posted_queue_is_held_to_its_limit_and_reported() {
    let svc = Running::start(config(None)).await;
    let http = reqwest::Client::new();
    post_policy(&svc, &http).await;
    svc.wait("a pod held by its queue's limit", Duration::from_secs(60), |s| {
        s.decisions.read().unwrap().newest_first().any(|d| d.reason.as_deref() == Some("SCHED-QUEUE-LIMIT"))
    })
    .await;
    let text = http.get(svc.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let used = series(&text, r#"tessera_queue_used{queue="batch",resource="gpus"}"#).expect("batch's GPUs");
    assert!(used <= 6.0, "never past its limit: {used}\n{text}");
    assert!(used > 0.0, "{text}");
    assert_eq!(series(&text, r#"tessera_queue_guarantee{queue="batch",resource="gpus"}"#), Some(2.0), "{text}");
    let borrowed = series(&text, r#"tessera_queue_borrowed{queue="batch",resource="gpus"}"#).unwrap();
    assert_eq!(borrowed, (used - 2.0).max(0.0), "{text}");
    assert!(series(&text, r#"tessera_queue_pending{queue="batch"}"#).unwrap() > 0.0, "{text}");
    assert!(series(&text, r#"tessera_queue_fair_share{queue="batch",resource="gpus"}"#).is_some(), "{text}");
    assert_eq!(series(&text, r#"tessera_queue_running{queue="prod"}"#), Some(0.0), "no pod names prod");
    // One queue with demand: nothing to be unfair between.
    assert_eq!(series(&text, "tessera_queue_fairness"), Some(1.0), "{text}");
    let held = series(&text, r#"tessera_scheduling_failures_total{code="SCHED-QUEUE-LIMIT"}"#).unwrap_or(0.0);
    assert!(held > 0.0, "{text}");
    svc.stop().await;
}

/// Queues set from outside the policy (the Kubernetes `TesseraQueue`
/// objects, through `QueueHandle`) run with the policy's queue settings:
/// with the posted policy's remembered use, the fairness the gate
/// remembers is still reported for the objects' queues; with the
/// objects gone, the policy's own queues are back. Either way the queues
/// replaced lose their series (they were reported with their last values
/// for as long as the service ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_set_from_outside_keep_the_policys_queue_settings() {
    let cfg = tessera::serve::ServiceConfig { serve: config(None), ..Default::default() };
    let (server, listener) = tessera::serve::start(cfg).await.expect("tessera serve starts");
    let handle = server.queues();
    let svc = Running::serve(server, listener).await;
    let http = reqwest::Client::new();
    post_policy(&svc, &http).await;
    let objects = tessera_core::quota::QueuesConfig {
        list: vec![tessera_core::quota::QueueSpec {
            name: "team-a".into(),
            parent: None,
            weight: 1.0,
            guarantee: tessera_core::quota::Quota { gpus: Some(4), ..Default::default() },
            limit: Default::default(),
        }],
        ..Default::default()
    };
    handle.set(Some(objects)).await.unwrap().expect("the objects' queues are accepted");
    // The gauges follow at the loop's next step.
    let metrics_once = |want: &'static str| {
        let (http, url) = (http.clone(), svc.url("/metrics"));
        async move {
            let t0 = std::time::Instant::now();
            loop {
                let text = http.get(&url).send().await.unwrap().text().await.unwrap();
                if text.contains(want) || t0.elapsed() > Duration::from_secs(30) {
                    return text;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let text = metrics_once(r#"tessera_queue_guarantee{queue="team-a""#).await;
    assert_eq!(series(&text, r#"tessera_queue_guarantee{queue="team-a",resource="gpus"}"#), Some(4.0), "{text}");
    assert!(series(&text, r#"tessera_queue_guarantee{queue="batch",resource="gpus"}"#).is_none(), "{text}");
    assert!(series(&text, "tessera_queue_fairness").is_some(), "the policy's usage_half_life_s applies: {text}");
    let status = handle.status().await.unwrap();
    assert!(status.iter().any(|q| q.name == "team-a"), "{status:?}");
    handle.set(None).await.unwrap().unwrap();
    let text = metrics_once(r#"tessera_queue_guarantee{queue="batch""#).await;
    assert_eq!(series(&text, r#"tessera_queue_guarantee{queue="batch",resource="gpus"}"#), Some(2.0), "{text}");
    // A queue that is gone is not reported with its last values.
    assert!(series(&text, r#"tessera_queue_guarantee{queue="team-a",resource="gpus"}"#).is_none(), "{text}");
    assert!(series(&text, r#"tessera_queue_pending{queue="team-a"}"#).is_none(), "{text}");
    svc.stop().await;
}
