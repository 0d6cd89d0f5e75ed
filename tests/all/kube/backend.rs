//! The backend through the loop's `Backend` trait, on the in-process API
//! server: adoption of running pods, queueing of Tessera's, binding
//! through `pods/binding` (with the GPU indices written first), eviction
//! refused by a disruption budget and then allowed, watches that resume
//! after a drop and re-list after 410 Gone.

use std::time::{Duration, Instant};

use tessera_core::cluster::{GpuSet, Placement};
use tessera_core::metrics::TargetWorkload;
use tessera_core::model::Pod;
use tessera_kube::KubeBackend;
use tessera_server::backend::{Backend, ClusterEvent};

use super::apiserver::ApiServer;
use super::{budget, kube_config, node, pod};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn workload(_: &[tessera_core::model::Node]) -> TargetWorkload {
    TargetWorkload::from_pods(&[Pod { gpu_count: 1, gpu_milli: 1000, ..Pod::default() }], 0.95)
}

/// Events until `done` holds of all of them so far (or 10 s).
fn events_until(b: &mut KubeBackend, done: impl Fn(&[ClusterEvent]) -> bool) -> Vec<ClusterEvent> {
    let t0 = Instant::now();
    let mut all = Vec::new();
    loop {
        all.extend(b.events(0).into_iter().map(|(_, e)| e));
        if done(&all) {
            return all;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out; events so far: {all:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn id_of(events: &[ClusterEvent], name: &str) -> u64 {
    events
        .iter()
        .find_map(|e| match e {
            ClusterEvent::Submitted { id, pod } | ClusterEvent::Running { id, pod, .. } if pod.name == name => {
                Some(*id)
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no event for {name}: {events:?}"))
}

#[test]
fn binds_adopts_and_evicts_through_the_api_respecting_disruption_budgets() {
    let rt = runtime();
    let srv = rt.block_on(ApiServer::start());
    srv.put(node("n1", 8, "zone-a"));
    srv.put(node("n2", 8, "zone-b"));
    srv.put(pod("ml", "web-0", "default-scheduler", Some("n1"), 2, "web"));
    srv.put(pod("ml", "train-0", "tessera", None, 1, "train"));
    srv.put(pod("ml", "other-0", "default-scheduler", None, 1, "other"));
    srv.put(budget("ml", "web", "web", 1));
    let mut b = rt.block_on(KubeBackend::connect(srv.config(), kube_config("solo", false), workload)).unwrap();
    assert!(b.active(), "without an election the replica acts");
    assert_eq!(b.nodes().iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["n1", "n2"]);
    assert_eq!(b.nodes()[1].zone, "zone-b");

    let ev = events_until(&mut b, |e| e.len() >= 2);
    assert_eq!(ev.len(), 2, "the pod kube-scheduler owns and has not bound is not Tessera's: {ev:?}");
    let web = id_of(&ev, "ml/web-0");
    assert!(ev.iter().any(|e| matches!(e, ClusterEvent::Running { node, .. } if node == "n1")), "{ev:?}");
    let train = id_of(&ev, "ml/train-0");

    // Bind: the GPU indices are written, then the binding is created.
    b.bind(train, Placement { node: 1, gpus: GpuSet(0b100) }).unwrap();
    let p = srv.get("pods", "ml", "train-0").unwrap();
    assert_eq!(p["spec"]["nodeName"], "n2");
    assert_eq!(p["metadata"]["annotations"]["tessera.io/gpu-index"], "2");
    assert_eq!(srv.counters().bindings["ml/train-0"], 1);
    // The watch shows the binding the loop made: nothing to announce.
    std::thread::sleep(Duration::from_millis(500));
    assert!(b.events(0).is_empty());
    let e = b.bind(train, Placement { node: 0, gpus: GpuSet(0b1) }).unwrap_err().to_string();
    assert!(e.contains("conflict (409)") && e.contains("already assigned"), "{e}");
    assert_eq!(srv.counters().binding_conflicts, 1);
    // A 409 means someone decided first: the loop, which takes a refused
    // bind as "still waiting", is told where the pod runs and on which
    // GPUs, as the API says.
    let ev: Vec<ClusterEvent> = b.events(0).into_iter().map(|(_, e)| e).collect();
    assert!(
        matches!(&ev[..], [ClusterEvent::Deleted { id }, ClusterEvent::Running { id: id2, node, gpus: Some(GpuSet(0b100)), .. }]
            if *id == train && *id2 == train && node == "n2"),
        "{ev:?}"
    );

    // Evict while the budget's change to "no disruption" has not reached
    // the watch: the API server refuses (429) and the client does not retry;
    // the pod stays and is announced again where it runs.
    srv.put_unseen(budget("ml", "web", "web", 0));
    let e = b.evict(web).unwrap_err().to_string();
    assert!(e.contains("429") && e.contains("disruption budget"), "{e}");
    assert_eq!(srv.counters().evictions_refused, 1, "sent once, not retried");
    let ev: Vec<ClusterEvent> = b.events(0).into_iter().map(|(_, e)| e).collect();
    assert!(
        matches!(&ev[..], [ClusterEvent::Deleted { id }, ClusterEvent::Running { id: id2, node, .. }] if *id == web && *id2 == web && node == "n1"),
        "{ev:?}"
    );
    assert!(srv.get("pods", "ml", "web-0").is_some());
    // Once the budget in view says no disruption, the eviction is not even
    // sent.
    srv.put(budget("ml", "web", "web", 0));
    let t0 = Instant::now();
    let mut seen = Vec::new();
    let e = loop {
        let e = b.evict(web).unwrap_err();
        seen.extend(b.events(0).into_iter().map(|(_, e)| e));
        if e.reason.contains("allows no disruption now") {
            break e.to_string();
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "the reflector never saw the budget");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(e.contains("disruption budget ml/web"), "{e}");
    // And the loop is told, so that preemption looks elsewhere.
    let protected = ClusterEvent::Protected { id: web, protected: true };
    if !seen.contains(&protected) {
        seen.extend(events_until(&mut b, |e| e.contains(&protected)));
    }
    assert!(!seen.contains(&ClusterEvent::Protected { id: web, protected: false }), "{seen:?}");
    let refused = srv.counters().evictions_refused;
    assert!(b.evict(web).is_err());
    assert_eq!(srv.counters().evictions_refused, refused, "the budget in view spared the API a refusal");
    b.events(0);
    // The budget allows one: evicted.
    srv.put(budget("ml", "web", "web", 1));
    let t0 = Instant::now();
    while b.evict(web).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(10), "the reflector never saw the budget change");
        std::thread::sleep(Duration::from_millis(20));
        b.events(0);
    }
    // Evicted, it terminates holding its GPUs until it is gone: the loop
    // lets it go at once (Leaving: not queued again, its room kept) and
    // hears Deleted only when it is gone.
    assert!(b.still_holds(web), "terminating: its room is held");
    assert!(srv.get("pods", "ml", "web-0").unwrap()["metadata"]["deletionTimestamp"].is_string());
    let ev = events_until(&mut b, |e| e.contains(&ClusterEvent::Deleted { id: web }));
    assert_eq!(ev.first(), Some(&ClusterEvent::Leaving { id: web }), "{ev:?}");
    assert!(!b.still_holds(web));
    assert!(srv.get("pods", "ml", "web-0").is_none());
    assert!(!ev.iter().any(|e| matches!(e, ClusterEvent::Submitted { .. })), "{ev:?}");
    assert_eq!(srv.counters().evictions, 1);
    rt.block_on(b.shutdown());
    srv.assert_sound();
}

#[test]
fn watches_resume_after_a_drop_and_relist_after_410_gone() {
    let rt = runtime();
    let srv = rt.block_on(ApiServer::start());
    srv.put(node("n1", 8, "zone-a"));
    srv.put(pod("ml", "a", "tessera", None, 1, "x"));
    srv.put(pod("ml", "b", "tessera", None, 1, "x"));
    let mut b = rt.block_on(KubeBackend::connect(srv.config(), kube_config("solo", false), workload)).unwrap();
    let ev = events_until(&mut b, |e| e.len() >= 2);
    let a = id_of(&ev, "ml/a");

    // A dropped watch resumes from its resourceVersion: nothing is lost.
    let t0 = Instant::now();
    while !srv.counters().watches.contains_key("pods") {
        assert!(t0.elapsed() < Duration::from_secs(10), "the pod watch never opened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let watches = srv.counters().watches["pods"];
    srv.drop_all_watches();
    std::thread::sleep(Duration::from_millis(300));
    srv.put(pod("ml", "c", "tessera", None, 1, "x"));
    srv.put(node("n2", 4, "zone-b"));
    let ev = events_until(&mut b, |e| e.len() >= 2);
    assert!(ev.iter().any(|e| matches!(e, ClusterEvent::Submitted { pod, .. } if pod.name == "ml/c")), "{ev:?}");
    assert!(ev.iter().any(|e| matches!(e, ClusterEvent::NodeUpsert { node } if node.name == "n2")), "{ev:?}");
    assert!(srv.counters().watches["pods"] > watches, "the watch was opened again");
    assert_eq!(srv.counters().gone, 0);

    // A pod deleted while the watch is down, history compacted: the
    // resumed watch gets 410 Gone, the watcher lists again, and the pod
    // the list no longer has is gone for the loop too.
    srv.delete_unseen("pods", "ml", "a");
    let ev = events_until(&mut b, |e| e.contains(&ClusterEvent::Deleted { id: a }));
    assert!(srv.counters().gone >= 1, "{:?}", srv.counters());
    assert!(!ev.iter().any(|e| matches!(e, ClusterEvent::Submitted { .. })), "the others are not queued twice: {ev:?}");
    rt.block_on(b.shutdown());
    srv.assert_sound();
}

#[test]
fn node_agents_are_scraped_for_telemetry_and_gpu_health() {
    use std::sync::Arc;
    use tessera_agent::gpu::{GpuSource, RecordedSource};
    use tessera_agent::serve::{Published, router, sample_and_publish};
    use tessera_core::model::GpuHealth;

    let rt = runtime();
    let srv = rt.block_on(ApiServer::start());
    // The node's InternalIP is 127.0.0.1: its agent is the one below.
    srv.put(node("gpu-node-1", 8, "zone-a"));
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/agent/tests/fixtures/nvml-h100x8.json");
    let source: Box<dyn GpuSource> = Box::new(RecordedSource::from_file(&fixture).unwrap());
    let host = tessera_agent::host::HostSource::new().first_interval(Duration::from_millis(20));
    let agent = tessera_agent::Agent::new("gpu-node-1", Ok(source), host, tessera_agent::health::Tracker::default());
    let published = Arc::new(Published::new());
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    let agent = rt.block_on(sample_and_publish(agent, &published));
    rt.spawn(axum::serve(listener, router(published.clone())).into_future());

    let mut cfg = kube_config("solo", false);
    cfg.agent_port = Some(port);
    cfg.agent_interval_s = 1;
    let mut b = rt.block_on(KubeBackend::connect(srv.config(), cfg, workload)).unwrap();
    let node = b.nodes()[0].clone();
    let t0 = Instant::now();
    // The recording's first sample: GPU 0 at 97%, GPU 5 hot (degraded).
    let sample = loop {
        let s = b.sample(&node, &[], 0);
        // Until the first scrape, the model's own (idle) values.
        if s.gpu_util_permille.first().is_some_and(|&u| u > 0) {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no agent sample scraped");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(sample.gpu_util_permille[0], 970);
    assert_eq!(sample.gpu_memory_used_mib[0], 73_216);
    let ev = events_until(&mut b, |e| !e.is_empty());
    assert!(
        matches!(&ev[..], [ClusterEvent::NodeUpsert { node }] if node.gpus[5].health == GpuHealth::Degraded),
        "{ev:?}"
    );
    // The interconnect NVML told the agent reaches the model with it.
    let ClusterEvent::NodeUpsert { node: seen } = &ev[0] else { unreachable!() };
    assert_eq!(
        tessera_core::topology::format(&seen.gpus.iter().map(|g| g.link).collect::<Vec<_>>()),
        "0/0/0,0/0/0,0/1/0,0/1/0,0/2/1,0/2/1,0/3/1,0/3/1"
    );
    // The second: GPU 3's uncorrected ECC errors fail it in the model.
    rt.block_on(sample_and_publish(agent, &published));
    let ev = events_until(&mut b, |e| {
        e.iter().any(|e| matches!(e, ClusterEvent::NodeUpsert { node } if node.gpus[3].health == GpuHealth::Failed))
    });
    assert!(!ev.is_empty());
    rt.block_on(b.shutdown());
    srv.assert_sound();
}

#[test]
fn a_pass_binds_together_and_each_result_comes_back_in_order() {
    let rt = runtime();
    let srv = rt.block_on(ApiServer::start());
    srv.put(node("n1", 16, "zone-a"));
    srv.put(node("n2", 16, "zone-b"));
    for i in 0..30 {
        srv.put(pod("ml", &format!("p{i}"), "tessera", None, 1, "x"));
    }
    let mut b = rt.block_on(KubeBackend::connect(srv.config(), kube_config("solo", false), workload)).unwrap();
    let ev = events_until(&mut b, |e| e.len() >= 30);
    let ids: Vec<u64> = (0..30).map(|i| id_of(&ev, &format!("ml/p{i}"))).collect();
    // Room for all (the kubelet refuses a GPU given twice). p7 is bound
    // behind Tessera's back first: its bind must fail alone.
    let mut p7 = srv.get("pods", "ml", "p7").unwrap();
    p7["spec"]["nodeName"] = serde_json::json!("n1");
    srv.put(p7);
    let binds: Vec<(u64, Placement)> = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| (id, Placement { node: (i % 2) as u32, gpus: GpuSet(1 << (i / 2)) }))
        .collect();
    let results = b.bind_all(&binds);
    assert_eq!(results.len(), 30);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r.is_ok(), i != 7, "p{i}: {r:?}");
    }
    assert!(results[7].as_ref().unwrap_err().reason.contains("already assigned"));
    for i in (0..30).filter(|&i| i != 7) {
        let p = srv.get("pods", "ml", &format!("p{i}")).unwrap();
        assert_eq!(p["spec"]["nodeName"], if i % 2 == 0 { "n1" } else { "n2" });
        assert_eq!(
            p["metadata"]["annotations"]["tessera.io/gpu-index"],
            (i / 2).to_string(),
            "one call: the Binding's annotations"
        );
    }
    assert_eq!(srv.counters().bindings.len(), 29);
    rt.block_on(b.shutdown());
    srv.assert_sound();
}

/// The eviction half of the scenario against a real cluster: a pod under
/// a disruption budget that allows nothing is not evicted (429), and is
/// once the budget is gone. Needs `KUBECONFIG` and a node that runs a
/// pause container; cleans up after itself.
#[test]
#[ignore = "needs cluster"]
fn needs_cluster_eviction_honours_a_disruption_budget() {
    use k8s_openapi::api::core::v1::Pod as KPod;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use kube::api::{Api, DeleteParams, PostParams};
    let rt = runtime();
    let config = rt.block_on(kube::Config::infer()).expect("KUBECONFIG names a reachable cluster");
    let client = rt.block_on(async { kube::Client::try_from(config.clone()).unwrap() });
    let pods: Api<KPod> = Api::namespaced(client.clone(), "default");
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client, "default");
    let mut p: KPod =
        serde_json::from_value(pod("default", "tessera-e2e-pdb", "default-scheduler", None, 0, "tessera-e2e-pdb"))
            .unwrap();
    let c = &mut p.spec.as_mut().unwrap().containers[0];
    c.resources = None;
    c.image = Some("registry.k8s.io/pause:3.10".into());
    p.status = None;
    rt.block_on(pods.create(&PostParams::default(), &p)).unwrap();
    let pdb: PodDisruptionBudget =
        serde_json::from_value(budget("default", "tessera-e2e-pdb", "tessera-e2e-pdb", 0)).unwrap();
    let pdb = PodDisruptionBudget { status: None, ..pdb };
    rt.block_on(budgets.create(&PostParams::default(), &pdb)).unwrap();
    let mut cfg = kube_config("tessera-e2e", false);
    cfg.namespace = Some("default".into());
    let mut b = rt.block_on(KubeBackend::connect(config, cfg, workload)).unwrap();
    let ev = events_until(&mut b, |e| {
        e.iter().any(|e| matches!(e, ClusterEvent::Running { pod, .. } if pod.name == "default/tessera-e2e-pdb"))
    });
    let id = id_of(&ev, "default/tessera-e2e-pdb");
    // The budget controller needs a moment to compute disruptionsAllowed.
    std::thread::sleep(Duration::from_secs(5));
    let e = b.evict(id).unwrap_err().to_string();
    assert!(e.contains("429") || e.contains("allows no disruption now"), "{e}");
    rt.block_on(budgets.delete("tessera-e2e-pdb", &DeleteParams::default())).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    b.evict(id).unwrap();
    rt.block_on(b.shutdown());
}

/// Stopping the backend from the loop's thread has a deadline that holds
/// whatever the async runtime is doing: here its only worker is stuck (a
/// busy machine, or a runtime going away), so no timer of its fires and
/// the elector cannot run. Stopping returns at its deadline all the same
/// (it used to wait for the worker: forever, if the runtime was shutting
/// down).
#[test]
fn stopping_returns_at_its_deadline_when_the_runtime_cannot_run() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let srv = rt.block_on(ApiServer::start());
    srv.put(node("n1", 8, "zone-a"));
    let mut b = rt.block_on(KubeBackend::connect(srv.config(), kube_config("stuck", true), workload)).unwrap();
    let t0 = Instant::now();
    while !b.active() {
        assert!(t0.elapsed() < Duration::from_secs(10), "never led");
        std::thread::sleep(Duration::from_millis(20));
    }
    rt.spawn(async { std::thread::sleep(Duration::from_secs(20)) });
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    Backend::shutdown(&mut b);
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(8), "stopping waited {took:?}");
    drop(b);
    rt.shutdown_background();
}
