//! The scheduler-extender endpoints with requests in the extender API's
//! JSON (`k8s.io/kube-scheduler/extender/v1`, as kube-scheduler sends
//! them: `fixtures/extender/*.json`), answered by `tessera serve` on
//! Kubernetes from its model of the cluster (the in-process API server)
//! and its Wasm policy, over real HTTP.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::apiserver::ApiServer;
use super::{node, pod};
use crate::serve::Running;

fn fixture(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("all/kube/fixtures/extender").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

async fn post(svc: &Running, verb: &str, body: &Value) -> (StatusCode, Value) {
    let r = reqwest::Client::new().post(svc.url(&format!("/extender/{verb}"))).json(body).send().await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_prioritize_bind_and_preempt_answer_in_the_extender_api_format() {
    let srv = ApiServer::start().await;
    srv.put(node("gpu-0", 8, "zone-a"));
    srv.put(node("gpu-1", 2, "zone-a"));
    srv.put(node("gpu-2", 8, "zone-b"));
    let mut cpu = node("cpu-0", 0, "zone-b");
    cpu["status"]["allocatable"].as_object_mut().unwrap().remove("nvidia.com/gpu");
    srv.put(cpu);
    let mut cordoned = node("gpu-cordoned", 8, "zone-b");
    cordoned["spec"] = json!({"unschedulable": true});
    srv.put(cordoned);
    // gpu-1 is full (a hard-tier pod kube-scheduler placed); gpu-2 half used.
    let mut holder = pod("ml", "holder", "default-scheduler", Some("gpu-1"), 2, "db");
    holder["metadata"]["uid"] = json!("5b1c2f7e-0c1a-4c9e-9f0a-3d2e1b0a9c09");
    holder["metadata"]["annotations"] = json!({"tessera.io/tier": "hard"});
    srv.put(holder);
    srv.put(pod("web", "busy", "default-scheduler", Some("gpu-2"), 4, "web"));
    // The pod kube-scheduler will ask about and bind through Tessera.
    let mut trainer = pod("ml", "trainer-0", "default-scheduler", None, 4, "trainer");
    trainer["metadata"]["uid"] = json!("5b1c2f7e-0c1a-4c9e-9f0a-3d2e1b0a9c01");
    srv.put(trainer);

    let mut cfg = super::service::replica("extender");
    cfg.kube.leader_election = false;
    let (server, listener) = tessera::serve::start_kube(cfg, srv.config()).await.unwrap();
    let svc = Running::serve(server, listener).await;
    svc.wait("the running pods in the model", Duration::from_secs(20), |s| s.status.read().unwrap().pods_running == 2)
        .await;

    // Filter, with names (nodeCacheCapable: true).
    let (s, r) = post(&svc, "filter", &fixture("filter-args.json")).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["NodeNames"], json!(["gpu-0"]), "{r}");
    assert_eq!(r["Nodes"], Value::Null);
    assert_eq!(r["FailedNodes"], json!({"gpu-1": "SCHED-GPU-INSUFFICIENT", "cpu-0": "SCHED-GPU-INSUFFICIENT"}), "{r}");
    assert_eq!(r["FailedAndUnresolvableNodes"]["gpu-cordoned"], "SCHED-NODE-NOT-READY", "{r}");
    assert!(r["FailedAndUnresolvableNodes"]["gpu-unknown"].as_str().unwrap().contains("does not know"), "{r}");
    assert_eq!(r["Error"], "");

    // Filter, with full node objects (nodeCacheCapable: false): the nodes
    // that pass come back whole.
    let mut with_nodes = fixture("filter-args.json");
    let objects: Vec<Value> = ["gpu-0", "gpu-1"].iter().map(|n| srv.get("nodes", "", n).unwrap()).collect();
    with_nodes["Nodes"] = json!({"apiVersion": "v1", "kind": "NodeList", "items": objects});
    with_nodes["NodeNames"] = Value::Null;
    let (_, r) = post(&svc, "filter", &with_nodes).await;
    assert_eq!(r["Nodes"]["items"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["Nodes"]["items"][0]["metadata"]["name"], "gpu-0");
    assert_eq!(r["NodeNames"], Value::Null);

    // Prioritize: 0..=10 per node asked; a node that cannot take it, 0.
    let (s, r) = post(&svc, "prioritize", &fixture("prioritize-args.json")).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let list = r.as_array().unwrap();
    assert_eq!(list.iter().map(|h| h["Host"].as_str().unwrap()).collect::<Vec<_>>(), ["gpu-0", "gpu-2", "cpu-0"]);
    assert!(list.iter().all(|h| (0..=10).contains(&h["Score"].as_i64().unwrap())), "{r}");
    assert_eq!(list[2]["Score"], 0);
    assert!(list[..2].iter().any(|h| h["Score"] == 10), "the best node gets the top score: {r}");

    // Bind: the GPUs Tessera's model chooses are written, then bound.
    let (s, r) = post(&svc, "bind", &fixture("bind-args.json")).await;
    assert_eq!((s, &r["Error"]), (StatusCode::OK, &json!("")), "{r}");
    let p = srv.get("pods", "ml", "trainer-0").unwrap();
    assert_eq!(p["spec"]["nodeName"], "gpu-0");
    assert_eq!(p["metadata"]["annotations"]["tessera.io/gpu-index"].as_str().unwrap().split(',').count(), 4);
    let mut elsewhere = fixture("bind-args.json");
    elsewhere["Node"] = json!("gpu-unknown");
    let (_, r) = post(&svc, "bind", &elsewhere).await;
    assert!(r["Error"].as_str().unwrap().contains("gpu-unknown"), "{r}");

    // Preempt: a hard-tier victim is never given up; an opportunistic one is.
    let (s, r) = post(&svc, "preempt", &fixture("preempt-args.json")).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(
        r["NodeNameToMetaVictims"],
        json!({"gpu-1": {"Pods": [{"UID": "5b1c2f7e-0c1a-4c9e-9f0a-3d2e1b0a9c07"}], "NumPDBViolations": 0}}),
        "{r}"
    );
    // By UID (nodeCacheCapable): the victim Tessera knows is hard tier.
    let (_, r) = post(&svc, "preempt", &fixture("preempt-meta-args.json")).await;
    let kept: Vec<&String> = r["NodeNameToMetaVictims"].as_object().unwrap().keys().collect();
    assert_eq!(kept, ["gpu-2"], "{r}");

    // Malformed arguments are refused naming the type.
    let (s, r) = post(&svc, "filter", &json!({"Pod": 3})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(r["Error"].as_str().unwrap().contains("not ExtenderArgs"), "{r}");
    svc.stop().await;
    srv.assert_sound();
}
