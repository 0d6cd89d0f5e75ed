//! Rescheduling moves on Kubernetes, on the in-process API server with a
//! stand-in ReplicaSet controller (it recreates an evicted pod, under a new
//! name and uid, as the real one does) and a stand-in kubelet (it reports
//! bound pods Ready). A move is an eviction through the Eviction API; the
//! replacement the controller creates is steered onto the room Tessera
//! held for it; the step is done once the replacement is Ready. Every step
//! is journaled in a ConfigMap first, and a new leader resumes a plan the
//! previous one left in the middle.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tessera_movement::journal::{Entry, Journal};
use tessera_server::record::{MoveState, PlanState};

use super::apiserver::ApiServer;
use super::service::replica;
use super::{node, until};
use crate::serve::Running;

const RS_UID: &str = "rs-web-0001";

/// A pod of ReplicaSet `web` (half a GPU, scheduled by Tessera), on GPU 0
/// of `node` if given, Ready there.
fn web(name: &str, node: Option<&str>) -> Value {
    let mut p = super::pod("ml", name, "tessera", node, 1, "web");
    p["spec"]["containers"][0]["resources"]["limits"] = json!({});
    p["metadata"]["annotations"] = json!({"tessera.io/gpu-milli": "500"});
    p["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": RS_UID, "controller": true
    }]);
    if node.is_some() {
        p["metadata"]["annotations"]["tessera.io/gpu-index"] = json!("0");
        p["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
    }
    p
}

/// Stand-ins for the ReplicaSet controller (keeps `replicas` pods of
/// `web`, creating `web-r<n>` for each one gone) and the kubelet (a bound
/// pod becomes Ready after a moment), until the returned task is aborted.
fn controllers(srv: &ApiServer, replicas: usize) -> tokio::task::JoinHandle<()> {
    paused_controllers(srv, replicas, Arc::new(AtomicBool::new(true)))
}

/// The same, the ReplicaSet controller recreating pods only while
/// `recreate` holds.
fn paused_controllers(srv: &ApiServer, replicas: usize, recreate: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    let srv = srv.clone();
    tokio::spawn(async move {
        let mut made = 0;
        loop {
            let pods = srv.list("pods");
            let owned = pods.iter().filter(|p| p["metadata"]["ownerReferences"][0]["uid"] == RS_UID).count();
            let want = if recreate.load(Ordering::SeqCst) { replicas } else { 0 };
            for _ in owned..want {
                made += 1;
                srv.put(web(&format!("web-r{made}"), None));
            }
            for mut p in pods {
                let bound = p["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty());
                if bound && p["status"]["conditions"].as_array().is_none_or(|c| c.is_empty()) {
                    p["status"]["phase"] = json!("Running");
                    p["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
                    srv.put(p);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// A test policy: the shipped default, its moves in one batch without a
/// pause, a replacement given 30 s to become Ready.
fn policy(dir: &std::path::Path) -> String {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/policies/default.yaml")).unwrap();
    let start = text.find("movement:").unwrap();
    let text = format!(
        "{}movement:\n  batch_size: 4\n  pause_duration_s: 0\n  concurrency_limit: 4\n  cooldown_period_s: 600\n  rollback: {{ error_rate: 0.01, latency_p99_ms: 500, ready_timeout_s: 30 }}\n",
        &text[..start]
    );
    let path = dir.join("moves.yaml");
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// gpu-0 and gpu-1 each run a web pod on half of one GPU: neither can
/// take a 2-GPU pod, which the workload asks for (the training job on
/// gpu-2); one move that puts both web pods on one GPU frees a node.
async fn two_half_used_nodes() -> ApiServer {
    let srv = ApiServer::start().await;
    for (i, zone) in ["zone-a", "zone-a", "zone-b"].iter().enumerate() {
        srv.put(node(&format!("gpu-{i}"), 2, zone));
    }
    srv.put(web("web-0", Some("gpu-0")));
    srv.put(web("web-1", Some("gpu-1")));
    srv.put(super::pod("ml", "train-0", "default-scheduler", Some("gpu-2"), 2, "train"));
    srv
}

/// A replica that plans every 2 s and may move half the pods, with the
/// test policy written in `dir`.
fn mover(identity: &str, dir: &std::path::Path) -> tessera::serve::ServiceConfig {
    let mut cfg = replica(identity);
    cfg.serve.policy = policy(dir);
    cfg.serve.engine.max_migrations_pct = 50.0;
    cfg.serve.engine.reschedule_every_s = 2;
    cfg
}

fn nodes_of(srv: &ApiServer) -> BTreeMap<String, Vec<String>> {
    let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in srv.list("pods") {
        if let Some(n) = p["spec"]["nodeName"].as_str() {
            by.entry(n.to_string()).or_default().push(p["metadata"]["name"].as_str().unwrap().to_string());
        }
    }
    by
}

fn journal(srv: &ApiServer) -> Vec<Entry> {
    let cm = srv.get("configmaps", "tessera-system", "tessera-movement-journal").expect("the journal exists");
    let data: BTreeMap<String, String> = serde_json::from_value(cm["data"].clone()).unwrap_or_default();
    data.values().map(|v| serde_json::from_str(v).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_moves_pods_by_eviction_and_steers_their_replacements_onto_the_held_room() {
    let srv = two_half_used_nodes().await;
    let rs = controllers(&srv, 2);

    let dir = tempfile::tempdir().unwrap();
    let cfg = mover("replica-a", dir.path());
    let (server, listener) = tessera::serve::start_kube(cfg, srv.config()).await.expect("starts on Kubernetes");
    let a = Running::serve(server, listener).await;
    srv.put(super::pod("ml", "train-1", "tessera", None, 2, "train"));

    let done = || {
        a.shared
            .plans
            .read()
            .unwrap()
            .newest_first()
            .any(|p| p.state == PlanState::Executed && p.moves.iter().any(|m| m.state == MoveState::Done))
    };
    let t0 = std::time::Instant::now();
    while !done() {
        let plans: Vec<_> = a.shared.plans.read().unwrap().newest_first().take(3).cloned().collect();
        assert!(t0.elapsed() < Duration::from_secs(60), "no plan moved pods in 60 s: {plans:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let plan = a.shared.plans.read().unwrap().newest_first().find(|p| p.state == PlanState::Executed).cloned().unwrap();
    assert_eq!(plan.moves.len(), 1, "{plan:#?}");
    let mv = &plan.moves[0];
    assert_eq!(mv.state, MoveState::Done, "{plan:#?}");
    assert_eq!(srv.counters().evictions, 1, "one eviction");
    // The evicted pod's replacement was bound beside the other web pod,
    // and the job that needs a whole node took the node the move emptied.
    until("train-1 to be bound", Duration::from_secs(30), || srv.counters().bindings.contains_key("ml/train-1")).await;
    let by = nodes_of(&srv);
    assert_eq!(by[&mv.from], ["train-1"], "{by:?}");
    assert_eq!(by[&mv.to].len(), 2, "{by:?}");
    assert!(by[&mv.to].contains(&"web-r1".to_string()), "{by:?}");
    let r1 = srv.get("pods", "ml", "web-r1").unwrap();
    assert_eq!(r1["metadata"]["annotations"]["tessera.io/gpu-index"], "0", "on the GPU it shares: {r1}");
    assert!(srv.counters().bindings.values().all(|&n| n == 1), "nothing bound twice");
    // The journal holds the plan to its end.
    let entries = journal(&srv);
    assert!(matches!(entries.first(), Some(Entry::Plan { .. })), "{entries:?}");
    assert!(entries.iter().any(|e| matches!(e, Entry::Nodes { .. })));
    assert_eq!(entries.iter().filter(|e| matches!(e, Entry::Replaced { .. })).count(), 1, "{entries:?}");
    assert!(matches!(entries.last(), Some(Entry::Finished { .. })), "{entries:?}");
    rs.abort();
    a.stop().await;
    srv.assert_sound();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_resumes_the_plan_its_predecessor_left_in_the_journal() {
    let srv = ApiServer::start().await;
    for (i, zone) in ["zone-a", "zone-a"].iter().enumerate() {
        srv.put(node(&format!("gpu-{i}"), 8, zone));
    }
    for i in 0..3 {
        srv.put(web(&format!("web-{i}"), Some("gpu-0")));
    }
    // The previous leader evicted web-3 from gpu-1 to move it to gpu-0 and
    // died: its replacement waits, unbound.
    let gone: k8s_openapi::api::core::v1::Pod = serde_json::from_value({
        let mut p = web("web-3", Some("gpu-1"));
        p["metadata"]["uid"] = json!("uid-web-3");
        p
    })
    .unwrap();
    let spec = tessera_kube::convert::pod(&gone, &Default::default()).unwrap();
    let pod = tessera_kube::track::pod_id("uid-web-3");
    // Its model numbered the nodes otherwise: 7 is gpu-1, 9 is gpu-0.
    let mv = tessera_movement::PodMove {
        pod,
        spec,
        from: tessera_core::cluster::Placement { node: 7, gpus: tessera_core::cluster::GpuSet(1) },
        to: 9,
        gpu_hint: None,
    };
    let plan = tessera_movement::MovePlan { id: 41, moves: vec![mv.clone()] };
    let dag = tessera_movement::dag::Dag {
        steps: vec![tessera_movement::dag::Step { move_index: 0, mv, deps: vec![], hop: false }],
        dropped: vec![],
    };
    {
        let client = kube::Client::try_from(srv.config()).unwrap();
        let rt = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            use tessera_movement::exec::StepState;
            let mut j = tessera_kube::journal::ConfigMapJournal::open(
                client,
                "tessera-system",
                "tessera-movement-journal",
                "replica-old",
                rt,
            )
            .unwrap();
            j.append(&Entry::Plan { plan, dag }).unwrap();
            j.append(&Entry::Nodes { names: [(7, "gpu-1".into()), (9, "gpu-0".into())].into() }).unwrap();
            j.append(&Entry::Batch { number: 1, steps: vec![0] }).unwrap();
            for state in [StepState::Reserving, StepState::Reserved { at: 1 }, StepState::Evicting, StepState::Evicted]
            {
                j.append(&Entry::Step { step: 0, state, at: 1 }).unwrap();
            }
        })
        .await
        .unwrap();
    }
    srv.put(web("web-r1", None));
    let rs = controllers(&srv, 4);

    let mut cfg = replica("replica-b");
    cfg.serve.engine.max_migrations_pct = 0.0;
    let (server, listener) = tessera::serve::start_kube(cfg, srv.config()).await.expect("starts on Kubernetes");
    let b = Running::serve(server, listener).await;
    until("the resumed plan to finish", Duration::from_secs(30), || {
        matches!(journal(&srv).last(), Some(Entry::Finished { .. }))
    })
    .await;
    let by = nodes_of(&srv);
    assert_eq!(by.get("gpu-0").map(Vec::len), Some(4), "the replacement went where the plan moved web-3: {by:?}");
    assert!(by["gpu-0"].contains(&"web-r1".to_string()), "{by:?}");
    assert!(!by.contains_key("gpu-1"), "{by:?}");
    let entries = journal(&srv);
    assert!(
        entries.iter().any(|e| matches!(e, Entry::Replaced { pod: p, .. } if *p == pod)),
        "the replacement is journaled: {entries:?}"
    );
    assert!(
        entries.iter().any(|e| matches!(e, Entry::Step { state: tessera_movement::exec::StepState::Done, .. })),
        "{entries:?}"
    );
    // The record concludes just after the journal's last entry.
    let concluded =
        || b.shared.plans.read().unwrap().newest_first().any(|p| p.id == 41 && p.state != PlanState::Executing);
    until("the resumed plan's record to conclude", Duration::from_secs(10), concluded).await;
    let plan = b.shared.plans.read().unwrap().newest_first().find(|p| p.id == 41).cloned().expect("the plan is shown");
    assert_eq!(plan.trigger, "resumed from the movement journal");
    assert_eq!(
        (plan.moves[0].from.as_str(), plan.moves[0].to.as_str(), plan.moves[0].state.as_str()),
        ("gpu-1", "gpu-0", "done")
    );
    assert_eq!(srv.counters().evictions, 0, "nothing evicted again");
    // The previous leader, were it still about, is fenced off.
    assert_eq!(
        srv.get("configmaps", "tessera-system", "tessera-movement-journal").unwrap()["metadata"]["annotations"]["tessera.io/journal-writer"],
        "replica-b"
    );
    rs.abort();
    b.stop().await;
    srv.assert_sound();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_in_the_middle_of_a_move_hands_the_plan_to_the_next() {
    let srv = two_half_used_nodes().await;
    // The ReplicaSet controller is slow: nothing is recreated until the
    // leader is gone.
    let recreate = Arc::new(AtomicBool::new(false));
    let rs = paused_controllers(&srv, 2, recreate.clone());
    let dir = tempfile::tempdir().unwrap();
    let start = |identity: &'static str| tessera::serve::start_kube(mover(identity, dir.path()), srv.config());
    let (server, listener) = start("replica-a").await.unwrap();
    let a = Running::serve(server, listener).await;
    until("replica-a to lead", Duration::from_secs(20), || a.shared.status.read().unwrap().active).await;
    let (server, listener) = start("replica-b").await.unwrap();
    let b = Running::serve(server, listener).await;

    until("replica-a to evict a pod", Duration::from_secs(30), || srv.counters().evictions == 1).await;
    // The journal's writes follow the eviction within the step.
    let started = || {
        journal(&srv)
            .iter()
            .any(|e| matches!(e, Entry::Step { state: tessera_movement::exec::StepState::Started { .. }, .. }))
    };
    until("the journal to show the move started", Duration::from_secs(10), started).await;
    assert_eq!(srv.counters().evictions, 1, "{:?}", journal(&srv));
    // Cut off, replica-a steps down; replica-b takes the lease and the plan.
    srv.partition("replica-a");
    until("replica-b to lead", Duration::from_secs(20), || b.shared.status.read().unwrap().active).await;
    assert!(!a.shared.status.read().unwrap().active);
    // replica-a shows the plan it handed over, its move under way, and
    // counts no failure for it.
    let handed = a.shared.plans.read().unwrap().newest_first().find(|p| p.state == PlanState::Stopped).cloned();
    let handed = handed.expect("replica-a stopped its plan");
    assert!(handed.reason.as_deref().is_some_and(|r| r.contains("stopped leading")), "{handed:#?}");
    assert_eq!(handed.moves[0].state, MoveState::Started, "{handed:#?}");
    let metrics = a.shared.metrics.encode();
    let failures: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("tessera_migration_failures_total") && l.split_whitespace().nth(1) != Some("0"))
        .collect();
    assert!(failures.is_empty(), "no move counted as failed: {failures:?}");
    recreate.store(true, Ordering::SeqCst);
    until("the plan to finish", Duration::from_secs(30), || {
        matches!(journal(&srv).last(), Some(Entry::Finished { .. }))
    })
    .await;

    let entries = journal(&srv);
    assert!(
        entries.iter().any(|e| matches!(e, Entry::Step { state: tessera_movement::exec::StepState::Done, .. })),
        "{entries:?}"
    );
    let cm = srv.get("configmaps", "tessera-system", "tessera-movement-journal").unwrap();
    assert_eq!(cm["metadata"]["annotations"]["tessera.io/journal-writer"], "replica-b");
    let plan = b.shared.plans.read().unwrap().newest_first().find(|p| p.trigger.starts_with("resumed")).cloned();
    let plan = plan.expect("replica-b shows the plan it resumed");
    let mv = &plan.moves[0];
    assert_eq!(mv.state, MoveState::Done, "{plan:#?}");
    let by = nodes_of(&srv);
    assert_eq!(by[&mv.to].len(), 2, "the replacement went where replica-a meant it to: {by:?}");
    assert_eq!(srv.counters().evictions, 1, "nothing evicted twice");
    assert!(srv.counters().bindings.values().all(|&n| n == 1), "nothing bound twice");
    rs.abort();
    b.stop().await;
    a.stop().await;
    srv.assert_sound();
}
