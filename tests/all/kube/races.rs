//! What only a real API server shared with other schedulers shows: a bind
//! that loses a race. The kubelet stand-in refuses any pod whose GPUs are
//! taken, so a GPU given twice fails the test.

use std::time::{Duration, Instant};

use super::apiserver::ApiServer;
use super::service::replica;
use super::{node, pod, until};
use crate::serve::Running;

/// Another scheduler binds the pod first, to the very node Tessera chose;
/// Tessera's bind gets 409. The pod is taken where it runs (not queued
/// again, not retried), its GPU counted used: the next pod waits instead
/// of being given that GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bind_that_loses_a_race_to_the_same_node_books_no_gpu_twice() {
    let srv = ApiServer::start().await;
    srv.put(node("gpu-0", 1, "zone-a"));
    srv.race_binding("ml", "job-0", "gpu-0");
    let svc = super::service::solo(&srv).await;

    srv.put(pod("ml", "job-0", "tessera", None, 1, "train"));
    until("the lost race", Duration::from_secs(20), || srv.counters().binding_conflicts == 1).await;
    svc.wait("job-0 running in the model", Duration::from_secs(10), |s| s.status.read().unwrap().pods_running == 1)
        .await;
    // The GPU is job-0's: job-1 waits.
    srv.put(pod("ml", "job-1", "tessera", None, 1, "train"));
    svc.wait("job-1 waiting", Duration::from_secs(10), |s| s.status.read().unwrap().pods_waiting == 1).await;
    // A few seconds of passes (the old backoff retried at 1, 3 and 7 s).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let c = srv.counters();
    assert_eq!(c.binding_conflicts, 1, "the pod someone else bound is not bound again");
    assert!(!c.bindings.contains_key("ml/job-1"), "job-1 was given the taken GPU: {c:?}");
    assert_eq!(srv.get("pods", "ml", "job-1").unwrap()["spec"]["nodeName"], serde_json::Value::Null);
    let status = svc.shared.status.read().unwrap().clone();
    assert_eq!((status.pods_running, status.pods_waiting), (1, 1), "{status:?}");
    svc.stop().await;
    srv.assert_sound();
}

/// A low-priority pod holding `gpu-0`'s only GPU (bound by another
/// scheduler), and the service.
async fn one_gpu_taken(srv: &ApiServer) -> Running {
    srv.put(node("gpu-0", 1, "zone-a"));
    let mut low = pod("ml", "low", "default-scheduler", Some("gpu-0"), 1, "batch");
    low["metadata"]["annotations"] = serde_json::json!({"tessera.io/tier": "opportunistic"});
    srv.put(low);
    let svc = super::service::solo(srv).await;
    svc.wait("the running pod in the model", Duration::from_secs(20), |s| s.status.read().unwrap().pods_running == 1)
        .await;
    svc
}

fn urgent() -> serde_json::Value {
    let mut p = pod("ml", "urgent", "tessera", None, 1, "train");
    p["spec"]["priority"] = serde_json::json!(1000);
    p
}

/// A preemptor is bound only once its victim is gone from the node: the
/// evicted pod terminates for 2 s holding its GPU, and the kubelet
/// refuses a pod given a GPU still held (it used to be bound 10 ms after
/// the eviction, refused, and lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemptor_is_bound_only_once_its_victim_is_gone() {
    let srv = ApiServer::start().await;
    srv.set_termination_grace(Duration::from_secs(2));
    let svc = one_gpu_taken(&srv).await;
    srv.put(urgent());
    until("the eviction", Duration::from_secs(20), || srv.counters().evictions == 1).await;
    let evicted = Instant::now();
    // Terminating: still there, still holding the GPU; urgent not bound.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(srv.get("pods", "ml", "low").is_some(), "the victim terminates for 2 s");
    assert!(!srv.counters().bindings.contains_key("ml/urgent"), "bound while the victim still held the GPU");
    until("urgent bound", Duration::from_secs(20), || srv.counters().bindings.contains_key("ml/urgent")).await;
    assert!(evicted.elapsed() >= Duration::from_millis(1900), "bound {:?} after the eviction", evicted.elapsed());
    assert!(srv.get("pods", "ml", "low").is_none());
    assert_eq!(srv.get("pods", "ml", "urgent").unwrap()["status"]["phase"], "Running");
    svc.stop().await;
    srv.assert_sound();
}

/// A preemption a disruption budget forbids waits; once the budget is
/// relaxed, the preemptor tries again at once (nothing else about the
/// cluster changed), not when a new leader happens to come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemption_a_budget_forbade_is_tried_again_when_the_budget_is_relaxed() {
    let srv = ApiServer::start().await;
    srv.put(super::budget("ml", "batch", "batch", 0));
    let svc = one_gpu_taken(&srv).await;
    srv.put(urgent());
    svc.wait("urgent to wait", Duration::from_secs(20), |s| s.status.read().unwrap().pods_waiting == 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(srv.get("pods", "ml", "low").is_some(), "the budget protects it");
    assert!(!srv.counters().bindings.contains_key("ml/urgent"));
    srv.put(super::budget("ml", "batch", "batch", 1));
    let relaxed = Instant::now();
    until("urgent bound", Duration::from_secs(20), || srv.counters().bindings.contains_key("ml/urgent")).await;
    assert!(relaxed.elapsed() < Duration::from_secs(8), "retried {:?} after the budget changed", relaxed.elapsed());
    svc.stop().await;
    srv.assert_sound();
}

/// The API server's 429 says when to try again (`Retry-After`); the
/// preemption is not tried again before then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_eviction_is_not_tried_again_before_the_server_said() {
    let srv = ApiServer::start().await;
    srv.set_retry_after(4);
    let svc = one_gpu_taken(&srv).await;
    // The budget's "no" has not reached Tessera's watch: the eviction is
    // sent and refused with 429, Retry-After: 4.
    srv.put_unseen(super::budget("ml", "batch", "batch", 0));
    srv.put(urgent());
    until("the refusal", Duration::from_secs(20), || srv.counters().evictions_refused >= 1).await;
    // The budget allows it again, unseen too: only the retry can tell.
    srv.put_unseen(super::budget("ml", "batch", "batch", 1));
    until("the second try", Duration::from_secs(30), || srv.counters().eviction_attempts.len() >= 2).await;
    let tries = srv.counters().eviction_attempts;
    let gap = tries[1].1 - tries[0].1;
    assert!(gap >= Duration::from_secs(4), "tried again after {gap:?}, before the server's 4 s");
    until("urgent bound", Duration::from_secs(20), || srv.counters().bindings.contains_key("ml/urgent")).await;
    svc.stop().await;
    srv.assert_sound();
}

/// The leader evicts a victim and stops before the victim is gone; the
/// next leader, whose model has the victim still terminating on its node,
/// binds the preemptor only once it is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_the_preemptor_still_waits_for_its_victim() {
    let srv = ApiServer::start().await;
    srv.set_termination_grace(Duration::from_secs(3));
    srv.put(node("gpu-0", 1, "zone-a"));
    let mut low = pod("ml", "low", "default-scheduler", Some("gpu-0"), 1, "batch");
    low["metadata"]["annotations"] = serde_json::json!({"tessera.io/tier": "opportunistic"});
    srv.put(low);
    let config = srv.config();
    let start = |id: &'static str| {
        let config = config.clone();
        async move {
            let (server, listener) = tessera::serve::start_kube(replica(id), config).await.unwrap();
            Running::serve(server, listener).await
        }
    };
    let a = start("replica-a").await;
    let holder = || {
        srv.get("leases", "tessera-system", "tessera-scheduler")
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(String::from))
    };
    until("replica-a to lead", Duration::from_secs(20), || holder().as_deref() == Some("replica-a")).await;
    let b = start("replica-b").await;
    srv.put(urgent());
    until("the eviction", Duration::from_secs(20), || srv.counters().evictions == 1).await;
    a.stop().await;
    until("replica-b to lead", Duration::from_secs(20), || holder().as_deref() == Some("replica-b")).await;
    until("urgent bound", Duration::from_secs(30), || srv.counters().bindings.contains_key("ml/urgent")).await;
    assert!(srv.get("pods", "ml", "low").is_none(), "bound only once the victim was gone");
    b.stop().await;
    srv.assert_sound();
}
