//! Queues on Kubernetes as `TesseraQueue` objects: pods choose one by the
//! label `tessera.io/queue`, a queue's limit holds its pods with room
//! free, the leader writes each queue's use and fair share in its status,
//! and a tree the scheduler refuses changes nothing and says why on every
//! object. Against the in-process API server with the shipped CRDs and
//! RBAC.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::apiserver::ApiServer;
use super::service::replica;
use super::{node, pod};
use crate::serve::Running;

async fn until(what: &str, timeout: Duration, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn queue(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "tessera.io/v1alpha1", "kind": "TesseraQueue", "metadata": {"name": name}, "spec": spec})
}

fn in_queue(name: &str, queue: &str, gpus: u32) -> Value {
    let mut p = pod("ml", name, "tessera", None, gpus, "train");
    p["metadata"]["labels"]["tessera.io/queue"] = json!(queue);
    p
}

fn status(srv: &ApiServer, name: &str) -> Value {
    srv.get("tesseraqueues", "", name).map(|q| q["status"].clone()).unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tessera_queues_hold_their_pods_to_their_limits_and_report_their_use() {
    let srv = ApiServer::start().await;
    srv.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}));
    for i in 0..2 {
        srv.put(node(&format!("gpu-{i}"), 8, "zone-a"));
    }
    srv.put(queue("research", json!({"guarantee": {"gpus": 4}, "limit": {"gpus": 8, "cpu": "64"}})));
    srv.put(queue("prod", json!({"weight": 2, "guarantee": {"gpus": 8}})));
    let mut cfg = replica("solo");
    cfg.kube.leader_election = false;
    let (server, listener) = tessera::serve::start_kube(cfg, srv.config()).await.unwrap();
    let svc = Running::serve(server, listener).await;

    until("research accepted", Duration::from_secs(20), || {
        status(&srv, "research")["conditions"][0]["status"] == "True"
    })
    .await;
    for i in 0..3 {
        srv.put(in_queue(&format!("r-{i}"), "research", 4));
    }
    until("two of research's pods bound", Duration::from_secs(30), || {
        srv.counters().bindings.keys().filter(|k| k.starts_with("ml/r-")).count() == 2
    })
    .await;
    svc.wait("the third held by research's limit", Duration::from_secs(30), |s| {
        s.decisions.read().unwrap().newest_first().any(|d| d.reason.as_deref() == Some("SCHED-QUEUE-LIMIT"))
    })
    .await;
    until("research's status", Duration::from_secs(20), || {
        let st = status(&srv, "research");
        st["used"]["gpus"] == "8" && st["pending"] == 1 && st["running"] == 2
    })
    .await;
    let st = status(&srv, "research");
    assert_eq!(st["borrowed"]["gpus"], "4", "8 used on a guarantee of 4: {st}");
    assert!(st["fairShare"]["gpus"].is_string(), "{st}");
    assert_eq!(srv.counters().bindings.len(), 2, "room was free; the limit held it");

    // A pod of prod takes the room research may not.
    srv.put(in_queue("p-0", "prod", 8));
    until("prod's pod bound", Duration::from_secs(30), || srv.counters().bindings.contains_key("ml/p-0")).await;

    // A tree the scheduler refuses: nothing changes, every object says why.
    srv.put(queue("broken", json!({"parent": "nowhere"})));
    until("the refusal on research", Duration::from_secs(20), || {
        let c = &status(&srv, "research")["conditions"][0];
        c["status"] == "False" && c["message"].as_str().is_some_and(|m| m.contains("TesseraQueue broken: spec.parent"))
    })
    .await;
    srv.delete("pods", "ml", "p-0");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!srv.counters().bindings.contains_key("ml/r-2"), "research's limit still holds");
    srv.delete("tesseraqueues", "", "broken");
    until("accepted again", Duration::from_secs(20), || status(&srv, "research")["conditions"][0]["status"] == "True")
        .await;
    svc.stop().await;
    srv.assert_sound();
}
