//! `tessera serve` on Kubernetes, two replicas on the in-process API
//! server: the leader of the Lease binds every pending pod naming Tessera,
//! the standby decides nothing; when the leader is cut off it stops acting
//! once it cannot renew, the standby takes the expired lease and binds the
//! rest, and no pod is ever bound twice; a leader that stops hands the
//! lease over at once.

use std::time::{Duration, Instant};

use tessera::serve::ServiceConfig;
use tessera_server::config::BackendKind;

use super::apiserver::ApiServer;
use super::{kube_config, node, pod, until};
use crate::serve::{Running, config};

pub fn replica(identity: &str) -> ServiceConfig {
    let mut serve = config(None);
    serve.backend = BackendKind::Kubernetes;
    serve.engine.max_migrations_pct = 0.0;
    ServiceConfig { serve, kube: kube_config(identity, true) }
}

/// One replica without an election on `srv`: it leads at once.
pub async fn solo(srv: &ApiServer) -> Running {
    let mut cfg = replica("solo");
    cfg.kube.leader_election = false;
    let (server, listener) = tessera::serve::start_kube(cfg, srv.config()).await.unwrap();
    Running::serve(server, listener).await
}

async fn start(srv: &ApiServer, identity: &str) -> Running {
    let (server, listener) =
        tessera::serve::start_kube(replica(identity), srv.config()).await.expect("tessera serve starts on Kubernetes");
    Running::serve(server, listener).await
}

fn holder(srv: &ApiServer) -> Option<String> {
    srv.get("leases", "tessera-system", "tessera-scheduler")
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(String::from))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_binds_the_standby_follows_and_takes_over_without_a_double_bind() {
    let srv = ApiServer::start().await;
    for i in 0..4 {
        srv.put(node(&format!("gpu-{i}"), 8, if i % 2 == 0 { "zone-a" } else { "zone-b" }));
    }
    let a = start(&srv, "replica-a").await;
    until("replica-a to lead", Duration::from_secs(20), || holder(&srv).as_deref() == Some("replica-a")).await;
    let b = start(&srv, "replica-b").await;

    for i in 0..12 {
        srv.put(pod("ml", &format!("job-{i}"), "tessera", None, 1 + i % 2, "train"));
    }
    until("12 bindings", Duration::from_secs(30), || srv.counters().bindings.len() == 12).await;
    assert!(a.shared.status.read().unwrap().active);
    assert!(!b.shared.status.read().unwrap().active, "one leader");
    assert_eq!(b.shared.metrics.decisions_total(), 0, "the standby decides nothing");
    assert!(a.shared.metrics.encode().contains("\ntessera_leader 1\n"));
    assert!(b.shared.metrics.encode().contains("\ntessera_leader 0\n"), "an alert can tell when no one leads");
    // The standby's model follows the cluster all the same.
    until("the standby to see 12 pods running", Duration::from_secs(10), || {
        b.shared.status.read().unwrap().pods_running == 12
    })
    .await;
    for p in srv.list("pods") {
        let node = p["spec"]["nodeName"].as_str().unwrap();
        assert!(node.starts_with("gpu-"), "{p}");
        let gpus = p["metadata"]["annotations"]["tessera.io/gpu-index"].as_str().unwrap();
        let want = p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"].as_str().unwrap();
        assert_eq!(gpus.split(',').count().to_string(), want, "{p}");
    }

    // The leader is cut off from the API server (its lease writes fail):
    // past its renew deadline it stops acting; the standby waits for the
    // lease to expire, takes it and binds what arrives.
    srv.partition("replica-a");
    until("replica-a to step down", Duration::from_secs(10), || !a.shared.status.read().unwrap().active).await;
    for i in 12..20 {
        srv.put(pod("ml", &format!("job-{i}"), "tessera", None, 1, "train"));
    }
    until("replica-b to lead", Duration::from_secs(20), || holder(&srv).as_deref() == Some("replica-b")).await;
    until("20 bindings", Duration::from_secs(30), || srv.counters().bindings.len() == 20).await;
    let c = srv.counters();
    assert!(c.bindings.values().all(|&n| n == 1), "a pod bound twice: {:?}", c.bindings);
    assert_eq!(c.binding_conflicts, 0);
    let lease = srv.get("leases", "tessera-system", "tessera-scheduler").unwrap();
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease}");
    assert!(b.shared.status.read().unwrap().active);
    assert!(!a.shared.status.read().unwrap().active, "one leader");
    // Each bind is told as kube-scheduler tells it: one `Scheduled` event
    // per pod, from whichever replica bound it.
    until("20 Scheduled events", Duration::from_secs(10), || {
        srv.list("events").iter().filter(|e| e["reason"] == "Scheduled").count() == 20
    })
    .await;
    for e in srv.list("events").iter().filter(|e| e["reason"] == "Scheduled") {
        let (pod, node) = (e["involvedObject"]["name"].as_str().unwrap(), e["message"].as_str().unwrap());
        let bound = srv.get("pods", "ml", pod).unwrap()["spec"]["nodeName"].as_str().unwrap().to_string();
        assert_eq!(node, format!("Successfully assigned ml/{pod} to {bound}"), "{e}");
        assert_eq!((e["type"].as_str(), e["count"].as_i64()), (Some("Normal"), Some(1)), "{e}");
    }
    // Every request said who sent it.
    let agents = srv.counters().user_agents;
    assert!(agents.iter().all(|a| a.starts_with("tessera/")), "{agents:?}");
    a.stop().await;
    b.stop().await;
    srv.assert_sound();
}

/// Tessera serving the cluster `KUBECONFIG` names (one replica, no
/// election, the `default` namespace), and a client of that cluster.
pub async fn on_real_cluster() -> (kube::Client, Running) {
    let config = kube::Config::infer().await.expect("KUBECONFIG names a reachable cluster");
    let client = kube::Client::try_from(config.clone()).unwrap();
    let mut cfg = replica("tessera-test");
    cfg.kube.leader_election = false;
    cfg.kube.namespace = Some("default".into());
    let (server, listener) = tessera::serve::start_kube(cfg, config).await.unwrap();
    (client, Running::serve(server, listener).await)
}

/// A test pod (`pod`'s JSON) as a real cluster takes it: in `default`, no
/// resources asked (no GPU nodes needed), no status.
pub fn real_pod(mut v: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
    v["metadata"]["namespace"] = serde_json::json!("default");
    let mut p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(v).unwrap();
    p.spec.as_mut().unwrap().containers[0].resources = None;
    p.status = None;
    p
}

/// The same scenario's first half against a real cluster: Tessera binds a
/// pod that names it. Needs `KUBECONFIG`, GPU nodes are not required (the
/// pod asks for none). With `needs_cluster_eviction_honours_a_disruption_budget`
/// it is the in-process scenario's binding and eviction on a real cluster;
/// dropped watches and failover need control of the API server, which only
/// the in-process one gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn needs_cluster_binds_a_pod_on_a_real_cluster() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DeleteParams, PostParams};
    let (client, svc) = on_real_cluster().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let p = real_pod(pod("default", "tessera-e2e", "tessera", None, 0, "e2e"));
    pods.create(&PostParams::default(), &p).await.unwrap();
    let t0 = Instant::now();
    loop {
        let got = pods.get("tessera-e2e").await.unwrap();
        if got.spec.and_then(|s| s.node_name).is_some() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "not bound within a minute");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    pods.delete("tessera-e2e", &DeleteParams::default()).await.unwrap();
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_waits_says_why_on_its_condition_and_in_an_event() {
    let srv = ApiServer::start().await;
    srv.put(node("gpu-0", 8, "zone-a"));
    srv.put(pod("ml", "huge", "tessera", None, 16, "train"));
    let mut bad = pod("ml", "bad", "tessera", None, 0, "train");
    bad["metadata"]["annotations"] = serde_json::json!({"tessera.io/gpu-milli": "2000"});
    srv.put(bad);
    let svc = solo(&srv).await;
    let condition = |name: &str| {
        srv.get("pods", "ml", name)
            .and_then(|p| p["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "PodScheduled").cloned())
    };
    until("both conditions", Duration::from_secs(20), || condition("huge").is_some() && condition("bad").is_some())
        .await;
    let c = condition("huge").unwrap();
    assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("False"), Some("Unschedulable")), "{c}");
    assert!(c["message"].as_str().unwrap().contains("SCHED-GPU-INSUFFICIENT"), "{c}");
    let c = condition("bad").unwrap();
    assert_eq!(c["reason"], "SchedulerError", "{c}");
    assert!(c["message"].as_str().unwrap().contains("2000"), "{c}");
    until("the events", Duration::from_secs(10), || srv.list("events").len() >= 2).await;
    let events = srv.list("events");
    for name in ["huge", "bad"] {
        let e = events.iter().find(|e| e["involvedObject"]["name"] == name).unwrap();
        assert_eq!((e["reason"].as_str(), e["type"].as_str()), (Some("FailedScheduling"), Some("Warning")), "{e}");
        assert_eq!(e["source"]["component"], "tessera");
    }
    // Once per pod and reason, not every pass.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(srv.list("events").len(), 2);
    svc.stop().await;
    // Another replica (a new leader) says the same: the Events count up,
    // as client-go's recorder aggregates; no new objects.
    let mut cfg = replica("solo-2");
    cfg.kube.leader_election = false;
    let (server, listener) = tessera::serve::start_kube(cfg, srv.config()).await.unwrap();
    let svc = Running::serve(server, listener).await;
    until("the events counted twice", Duration::from_secs(20), || srv.list("events").iter().all(|e| e["count"] == 2))
        .await;
    assert_eq!(srv.list("events").len(), 2);
    assert!(srv.list("events").iter().all(|e| e["reportingInstance"] == "solo-2"));
    svc.stop().await;
    srv.assert_sound();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_stops_hands_the_lease_over_at_once() {
    let srv = ApiServer::start().await;
    srv.put(node("gpu-0", 8, "zone-a"));
    // A long lease: a standby waiting for it to expire would wait 30 s.
    let long = |identity: &str| {
        let mut cfg = replica(identity);
        cfg.kube.lease_duration_s = 30;
        cfg.kube.renew_deadline_s = 20;
        cfg.kube.retry_period_s = 10;
        cfg
    };
    let (server, listener) = tessera::serve::start_kube(long("replica-a"), srv.config()).await.unwrap();
    let a = Running::serve(server, listener).await;
    until("replica-a to lead", Duration::from_secs(20), || holder(&srv).as_deref() == Some("replica-a")).await;
    let (server, listener) = tessera::serve::start_kube(long("replica-b"), srv.config()).await.unwrap();
    let b = Running::serve(server, listener).await;
    // Stopping releases the lease; the standby's reflector sees it free
    // and takes it well before the 10 s retry period or the 30 s lease.
    a.stop().await;
    let stopped = Instant::now();
    until("replica-b to lead", Duration::from_secs(8), || holder(&srv).as_deref() == Some("replica-b")).await;
    assert!(stopped.elapsed() < Duration::from_secs(8));
    srv.put(pod("ml", "after", "tessera", None, 1, "train"));
    until("the pod bound by replica-b", Duration::from_secs(20), || srv.counters().bindings.len() == 1).await;
    b.stop().await;
    srv.assert_sound();
}
