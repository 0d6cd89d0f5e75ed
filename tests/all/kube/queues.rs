//! Queues on Kubernetes as `TesseraQueue` objects: pods choose one by the
//! label `tessera.io/queue`, a queue's limit holds its pods with room
//! free, the leader writes each queue's use and fair share in its status,
//! and a tree the scheduler refuses changes nothing and says why on every
//! object. Against the in-process API server with the shipped CRDs and
//! RBAC.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::apiserver::ApiServer;
use super::{node, pod, until};

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
    let svc = super::service::solo(&srv).await;

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

/// The same on a real cluster (`KUBECONFIG`; `deploy/kubernetes/crd.yaml`
/// applied): a queue is accepted and its pod bound and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn needs_cluster_a_tessera_queue_is_accepted_and_counts_its_pod() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DeleteParams, PostParams};
    use tessera_kube::queues::TesseraQueue;
    let (client, svc) = super::service::on_real_cluster().await;
    let queues: Api<TesseraQueue> = Api::all(client.clone());
    let q: TesseraQueue = serde_json::from_value(queue("tessera-e2e", json!({"limit": {"cpu": "1"}}))).unwrap();
    queues.create(&PostParams::default(), &q).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let p = super::service::real_pod(in_queue("tessera-e2e-q", "tessera-e2e", 0));
    pods.create(&PostParams::default(), &p).await.unwrap();
    let t0 = Instant::now();
    loop {
        let bound = pods.get("tessera-e2e-q").await.unwrap().spec.and_then(|s| s.node_name).is_some();
        let st = queues.get("tessera-e2e").await.unwrap().status;
        if bound
            && st.as_ref().is_some_and(|s| s.running == 1 && s.conditions.first().is_some_and(|c| c.status == "True"))
        {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "not bound and counted within a minute: {st:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    pods.delete("tessera-e2e-q", &DeleteParams::default()).await.unwrap();
    queues.delete("tessera-e2e", &DeleteParams::default()).await.unwrap();
    svc.stop().await;
}
