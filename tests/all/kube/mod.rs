//! The Kubernetes backend against an API server speaking the real wire
//! protocol, in process on loopback ([`apiserver`]): list and watch with
//! resourceVersion and bookmarks, binding, eviction with 429 from a
//! disruption budget, Lease updates with 409 conflicts, dropped watches
//! and 410 Gone. The same scenario runs against a real cluster when
//! `KUBECONFIG` names one (`cargo test -- --ignored needs_cluster`).

pub mod apiserver;
mod backend;
mod deploy;
mod extender;
mod gangs;
mod journal;
mod moves;
mod policies;
mod queues;
mod races;
mod service;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tessera_kube::KubeBackendConfig;

/// Polls `f` every 50 ms until it holds; panics naming `what` after
/// `timeout`.
pub async fn until(what: &str, timeout: Duration, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A ready node with `gpus` H100s in `zone`.
pub fn node(name: &str, gpus: u32, zone: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "topology.kubernetes.io/zone": zone, "nvidia.com/gpu.product": "H100", "kubernetes.io/hostname": name
        }},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": gpus.to_string(), "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]
        }
    })
}

/// A pod asking `scheduler` for `gpus` whole GPUs, bound to `node` if given.
pub fn pod(ns: &str, name: &str, scheduler: &str, node: Option<&str>, gpus: u32, app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {
            "schedulerName": scheduler,
            "nodeName": node,
            "containers": [{"name": "main", "image": "registry.invalid/app:1", "resources": {
                "requests": {"cpu": "2", "memory": "8Gi"},
                "limits": {"nvidia.com/gpu": gpus.to_string()}
            }}]
        },
        "status": {"phase": if node.is_some() { "Running" } else { "Pending" }}
    })
}

/// A disruption budget over `app` allowing `allowed` disruptions.
pub fn budget(ns: &str, name: &str, app: &str, allowed: i64) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
    })
}

/// The backend's settings for a test: a fast election, no agents.
pub fn kube_config(identity: &str, leader_election: bool) -> KubeBackendConfig {
    KubeBackendConfig {
        leader_election,
        identity: Some(identity.into()),
        lease_duration_s: 3,
        renew_deadline_s: 2,
        retry_period_s: 1,
        agent_port: None,
        sync_timeout_s: 20,
        ..KubeBackendConfig::default()
    }
}
