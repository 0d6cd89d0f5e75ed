//! Gangs on Kubernetes from scheduler-plugins' `PodGroup`, as Kubeflow's
//! training operators and JobSet create them: members wait for their
//! group, a group is bound all or nothing, and a group that cannot fit
//! holds no GPU. Against the in-process API server with the shipped
//! PodGroup CRD and RBAC; the kubelet stand-in refuses a GPU given twice.

use std::time::{Duration, Instant};

use serde_json::json;

use super::apiserver::ApiServer;
use super::{node, pod, until};

fn member(name: &str, group: &str, gpus: u32) -> serde_json::Value {
    let mut p = pod("ml", name, "tessera", None, gpus, "train");
    p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = json!(group);
    p
}

fn pod_group(name: &str, min_member: u32) -> serde_json::Value {
    json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 60, "minResources": {"nvidia.com/gpu": "16"}}
    })
}

fn bound(srv: &ApiServer, prefix: &str) -> usize {
    srv.counters().bindings.keys().filter(|k| k.starts_with(&format!("ml/{prefix}"))).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_group_is_bound_all_or_nothing_and_its_members_wait_for_it() {
    let srv = ApiServer::start().await;
    srv.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}));
    for i in 0..3 {
        srv.put(node(&format!("gpu-{i}"), 8, "zone-a"));
    }
    let svc = super::service::solo(&srv).await;

    // Members before their group: they wait, whatever room there is.
    srv.put(member("job-0", "job", 8));
    srv.put(member("job-1", "job", 8));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(bound(&srv, "job-"), 0, "no member of a group not yet created is bound");
    srv.put(pod_group("job", 2));
    until("both members of job bound", Duration::from_secs(30), || bound(&srv, "job-") == 2).await;
    let nodes: std::collections::BTreeSet<String> = (0..2)
        .map(|i| srv.get("pods", "ml", &format!("job-{i}")).unwrap()["spec"]["nodeName"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(nodes.len(), 2, "one 8-GPU member per node: {nodes:?}");

    // A group of three 8-GPU members with one node free: nothing of it is
    // bound, and the free node stays free for a pod that fits.
    srv.put(pod_group("big", 3));
    for i in 0..3 {
        srv.put(member(&format!("big-{i}"), "big", 8));
    }
    svc.wait("big's members to be decided", Duration::from_secs(30), |s| {
        s.decisions.read().unwrap().newest_first().filter(|d| d.pod.starts_with("ml/big-")).count() >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(bound(&srv, "big-"), 0, "a partial gang holds nothing");
    let reasons: Vec<Option<String>> = svc
        .shared
        .decisions
        .read()
        .unwrap()
        .newest_first()
        .filter(|d| d.pod.starts_with("ml/big-"))
        .map(|d| d.reason.clone())
        .collect();
    assert!(reasons.iter().all(|r| r.as_deref() == Some("SCHED-GANG-UNSCHEDULABLE")), "{reasons:?}");
    srv.put(pod("ml", "solo", "tessera", None, 8, "infer"));
    until("the pod that fits", Duration::from_secs(30), || srv.counters().bindings.contains_key("ml/solo")).await;

    // When job finishes, big still needs three nodes: two free is not
    // enough; the third frees and big runs whole.
    for i in 0..2 {
        srv.delete("pods", "ml", &format!("job-{i}"));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(bound(&srv, "big-"), 0, "two of three nodes is not the gang");
    srv.delete("pods", "ml", "solo");
    until("big bound whole", Duration::from_secs(30), || bound(&srv, "big-") == 3).await;
    svc.stop().await;
    srv.assert_sound();
}

/// The same on a real cluster (`KUBECONFIG`; the PodGroup CRD installed,
/// scheduler-plugins' or `deploy/kubernetes/podgroup-crd.yaml`): two
/// CPU-only members of a group of two are both bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn needs_cluster_binds_a_pod_group_on_a_real_cluster() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DeleteParams, PostParams};
    use tessera_kube::podgroup::PodGroup;
    let (client, svc) = super::service::on_real_cluster().await;
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), "default");
    let mut g: PodGroup = serde_json::from_value(pod_group("tessera-e2e", 2)).unwrap();
    g.metadata.namespace = Some("default".into());
    groups.create(&PostParams::default(), &g).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    for i in 0..2 {
        let p = super::service::real_pod(member(&format!("tessera-e2e-{i}"), "tessera-e2e", 0));
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let t0 = Instant::now();
    loop {
        let mut n = 0;
        for i in 0..2 {
            n += usize::from(
                pods.get(&format!("tessera-e2e-{i}")).await.unwrap().spec.and_then(|s| s.node_name).is_some(),
            );
        }
        if n == 2 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "not bound within a minute");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for i in 0..2 {
        pods.delete(&format!("tessera-e2e-{i}"), &DeleteParams::default()).await.unwrap();
    }
    groups.delete("tessera-e2e", &DeleteParams::default()).await.unwrap();
    svc.stop().await;
}
