use super::*;
use serde_json::json;

fn knode(v: serde_json::Value) -> KNode {
    serde_json::from_value(v).unwrap()
}

fn kpod(v: serde_json::Value) -> KPod {
    serde_json::from_value(v).unwrap()
}

/// A GPU node as the API server returns it (trimmed), with GPU feature
/// discovery's labels.
fn h100_node() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": "gpu-node-7",
            "labels": {
                "topology.kubernetes.io/zone": "us-east1-b",
                "nvidia.com/gpu.product": "H100",
                "nvidia.com/gpu.memory": "81559"
            },
            "annotations": {"tessera.io/gpu-health": "healthy,healthy,failed,degraded"}
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "208", "memory": "2113449912Ki", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "207500m", "memory": "2059955096Ki", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True"}
            ],
            "addresses": [{"type": "Hostname", "address": "gpu-node-7"}, {"type": "InternalIP", "address": "10.0.3.7"}]
        }
    })
}

#[test]
fn quantities_parse_as_the_api_server_writes_them() {
    for (q, v) in [
        ("500m", 0.5),
        ("2", 2.0),
        ("1.5Gi", 1.5 * 1024.0 * 1024.0 * 1024.0),
        ("129M", 129e6),
        ("1e3", 1000.0),
        ("2059955096Ki", 2059955096.0 * 1024.0),
        ("100k", 1e5),
    ] {
        assert_eq!(parse_quantity(q), Some(v), "{q}");
    }
    for bad in ["", "abc", "1Zi", "-1", "1.2.3"] {
        assert_eq!(parse_quantity(bad), None, "{bad}");
    }
}

#[test]
fn a_gpu_node_becomes_a_model_node() {
    let n = node(&knode(h100_node()), &ModelNames::default()).unwrap();
    assert_eq!((n.name.as_str(), n.zone.as_str(), n.gpu_model.as_str()), ("gpu-node-7", "us-east1-b", "H100"));
    assert_eq!(n.capacity, Resources { cpu_milli: 207_500, memory_mib: 2_011_675 });
    assert_eq!(n.free, n.capacity);
    assert_eq!(n.gpus.len(), 8);
    assert!(n.gpus.iter().all(|g| g.memory_mib == 81_559 && g.free_milli == 1000));
    assert_eq!(n.gpus[2].health, GpuHealth::Failed);
    assert_eq!(n.gpus[3].health, GpuHealth::Degraded);
    assert!(n.ready);
    assert_eq!(node_address(&knode(h100_node())).as_deref(), Some("10.0.3.7"));

    let mut cordoned = h100_node();
    cordoned["spec"]["unschedulable"] = json!(true);
    assert!(!node(&knode(cordoned), &ModelNames::default()).unwrap().ready);
    let mut not_ready = h100_node();
    not_ready["status"]["conditions"][1]["status"] = json!("Unknown");
    assert!(!node(&knode(not_ready), &ModelNames::default()).unwrap().ready);
    let mut bad = h100_node();
    bad["metadata"]["annotations"]["tessera.io/gpu-health"] = json!("healthy,sick");
    let e = node(&knode(bad), &ModelNames::default()).unwrap_err().to_string();
    assert!(e.contains("gpu-node-7") && e.contains("sick"), "{e}");
    let cpu_only = json!({"metadata": {"name": "cpu-1"}, "status": {"allocatable": {"cpu": "4", "memory": "16Gi"}}});
    let n = node(&knode(cpu_only), &ModelNames::default()).unwrap();
    assert_eq!((n.gpus.len(), n.gpu_model.as_str(), n.ready), (0, "", false));
}

#[test]
fn a_nodes_gpu_topology_comes_from_its_annotation_and_steers_a_multi_gpu_pod() {
    let mut n = h100_node();
    n["metadata"]["annotations"] =
        json!({"tessera.io/gpu-topology": "0/0/0,0/0/0,0/1/0,0/1/0,1/2/1,1/2/1,1/3/1,1/3/1"});
    let mut model = node(&knode(n.clone()), &ModelNames::default()).unwrap();
    assert_eq!(model.gpus[5].link, tessera_core::topology::GpuLink { island: 1, pcie: 2, numa: 1 });
    // GPUs 0 and 1 taken: a 4-GPU pod gets island 1 whole, not 2-5.
    model.gpus[0].free_milli = 0;
    model.gpus[1].free_milli = 0;
    let pod = tessera_core::model::Pod { gpu_count: 4, gpu_milli: 1000, ..tessera_core::model::Pod::default() };
    let set = tessera_core::cluster::choose_gpus(&model, &pod, None).unwrap();
    assert_eq!(set.indices().collect::<Vec<_>>(), [4, 5, 6, 7]);
    n["metadata"]["annotations"]["tessera.io/gpu-topology"] = json!("0/0/0,0/0/0");
    let e = node(&knode(n), &ModelNames::default()).unwrap_err().to_string();
    assert!(e.contains("gpu-node-7") && e.contains("tessera.io/gpu-topology: 2 entries for 8 GPUs"), "{e}");
}

fn training_pod() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "trainer-0", "namespace": "ml",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "trainer", "uid": "u1", "controller": true}]
        },
        "spec": {
            "schedulerName": "tessera",
            "priority": 1000,
            "nodeSelector": {"nvidia.com/gpu.product": "H100"},
            "initContainers": [{"name": "fetch", "resources": {"requests": {"cpu": "8", "memory": "1Gi"}}}],
            "containers": [
                {"name": "main", "resources": {"requests": {"cpu": "3", "memory": "32Gi"}, "limits": {"nvidia.com/gpu": "4"}}},
                {"name": "sidecar", "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}}
            ],
            "overhead": {"cpu": "100m"}
        }
    })
}

#[test]
fn pod_requests_follow_the_kubernetes_rules() {
    let p = pod(&kpod(training_pod()), &ModelNames::default()).unwrap();
    assert_eq!(p.name, "ml/trainer-0");
    assert_eq!(p.workload, "ml/trainer");
    // Containers sum to 3.5 CPUs; the init container's 8 is larger; plus
    // the overhead. Memory: 32 GiB + 256 MiB > 1 GiB.
    assert_eq!(p.requests, Resources { cpu_milli: 8_100, memory_mib: 32 * 1024 + 256 });
    assert_eq!((p.gpu_count, p.gpu_milli), (4, 1000));
    assert_eq!(p.allowed_models, ["H100"]);
    assert_eq!((p.priority, p.tier), (1000, Tier::Soft));
    assert_eq!(p.run_limit_s, None, "it declares no limit");
}

#[test]
fn a_pods_active_deadline_is_the_limit_it_declares() {
    let mut v = training_pod();
    v["spec"]["activeDeadlineSeconds"] = json!(7200);
    assert_eq!(pod(&kpod(v.clone()), &ModelNames::default()).unwrap().run_limit_s, Some(7200));
    for bad in [0, -5] {
        v["spec"]["activeDeadlineSeconds"] = json!(bad);
        let e = pod(&kpod(v.clone()), &ModelNames::default()).unwrap_err().to_string();
        assert!(e.contains("ml/trainer-0") && e.contains(&format!("activeDeadlineSeconds = {bad}")), "{e}");
    }
}

#[test]
fn gpu_shares_tiers_and_indices_come_from_annotations() {
    let mut v = json!({
        "metadata": {"name": "infer", "namespace": "web", "annotations": {
            "alibabacloud.com/gpu-milli": "250", "tessera.io/tier": "opportunistic",
            "tessera.io/gpu-models": "A10, T4", "tessera.io/gpu-index": "3"
        }},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}
    });
    let p = pod(&kpod(v.clone()), &ModelNames::default()).unwrap();
    assert_eq!((p.gpu_count, p.gpu_milli, p.tier), (1, 250, Tier::Opportunistic));
    assert_eq!(p.allowed_models, ["A10", "T4"]);
    assert_eq!(gpu_index(&kpod(v.clone())).unwrap(), Some(GpuSet(0b1000)));
    assert_eq!(format_gpu_index(GpuSet(0b1001)), "0,3");

    for (key, value, needle) in [
        ("tessera.io/gpu-milli", "1200", "not in 1..=1000"),
        ("tessera.io/gpu-milli", "half", "not a whole number"),
        ("tessera.io/tier", "gold", "gold"),
        ("tessera.io/gpu-index", "0,x", "not a list of GPU indices"),
        // Not "any model": a list with nothing in it is a mistake.
        ("tessera.io/gpu-models", ",,", "an empty model name"),
        ("tessera.io/gpu-models", "A100,,H100", "an empty model name"),
        ("tessera.io/gpu-models", "", "an empty model name"),
    ] {
        v["metadata"]["annotations"][key] = json!(value);
        let p = kpod(v.clone());
        let e = pod(&p, &ModelNames::default()).err().or_else(|| gpu_index(&p).err()).expect(key).to_string();
        assert!(e.contains("web/infer") && e.contains(needle), "{key}: {e}");
        v["metadata"]["annotations"].as_object_mut().unwrap().remove(key);
    }
    let mut both = training_pod();
    both["metadata"]["annotations"] = json!({"tessera.io/gpu-milli": "500"});
    let e = pod(&kpod(both), &ModelNames::default()).unwrap_err().to_string();
    assert!(e.contains("at once"), "{e}");
}

#[test]
fn taints_node_selectors_and_tolerations_keep_pods_where_kubernetes_would() {
    let mut n = h100_node();
    n["spec"]["taints"].as_array_mut().unwrap().extend([
        json!({"key": "spot", "effect": "PreferNoSchedule"}),
        json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}),
    ]);
    let node = node(&knode(n), &ModelNames::default()).unwrap();
    assert_eq!(
        node.taints,
        [Taint { key: "nvidia.com/gpu".into(), value: "present".into(), effect: "NoSchedule".into() }],
        "a preference is not a rule; cordoning is readiness"
    );
    assert_eq!(node.labels["nvidia.com/gpu.product"], "H100");
    // Without a toleration the GPU taint keeps the pod off.
    let plain = pod(&kpod(training_pod()), &ModelNames::default()).unwrap();
    assert_eq!(plain.node_selector["nvidia.com/gpu.product"], "H100");
    assert!(!node.admits(&plain));
    assert_eq!(tessera_core::cluster::check(&node, &plain), Err(tessera_core::cluster::FilterReason::NodeConstraint));
    // What the ExtendedResourceToleration admission plugin adds.
    let mut p = training_pod();
    p["spec"]["tolerations"] = json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]);
    let tolerant = pod(&kpod(p.clone()), &ModelNames::default()).unwrap();
    assert!(node.admits(&tolerant));
    // A selector the node's labels do not satisfy.
    p["spec"]["nodeSelector"] = json!({"nvidia.com/gpu.product": "A100"});
    assert!(!node.admits(&pod(&kpod(p.clone()), &ModelNames::default()).unwrap()));
    // Equal needs the value; an empty key with Exists tolerates everything.
    p["spec"]["nodeSelector"] = json!({});
    p["spec"]["tolerations"] = json!([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}]);
    assert!(!node.admits(&pod(&kpod(p.clone()), &ModelNames::default()).unwrap()));
    p["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    assert!(node.admits(&pod(&kpod(p.clone()), &ModelNames::default()).unwrap()));
    // Required node affinity: one term whose expressions all hold.
    let term = |exprs: serde_json::Value| json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}});
    p["spec"]["affinity"] = term(json!([
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["H100", "H200"]},
        {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]}
    ]));
    let a = pod(&kpod(p.clone()), &ModelNames::default()).unwrap();
    assert_eq!(a.node_affinity[0].len(), 2);
    assert!(node.admits(&a));
    p["spec"]["affinity"] =
        term(json!([{"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["us-east1-b"]}]));
    assert!(!node.admits(&pod(&kpod(p.clone()), &ModelNames::default()).unwrap()));
    p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-7"]}]}
    ]}}});
    assert!(node.admits(&pod(&kpod(p.clone()), &ModelNames::default()).unwrap()), "matchFields on the node's name");
    p["spec"]["affinity"] = term(json!([{"key": "x", "operator": "Near", "values": ["y"]}]));
    let e = pod(&kpod(p), &ModelNames::default()).unwrap_err();
    assert!(e.to_string().contains("ml/trainer-0") && e.to_string().contains("Near"), "{e}");
}

/// GPU feature discovery labels the product as the driver reports it; a
/// pod names models as people do. The two meet: the product becomes the
/// model name, by the configured alias first, and a pod's node selector on
/// the product is named alike.
#[test]
fn gpu_feature_discovery_products_meet_the_models_pods_name() {
    let mut n = h100_node();
    n["metadata"]["labels"]["nvidia.com/gpu.product"] = json!("NVIDIA-H100-80GB-HBM3");
    let gfd = node(&knode(n.clone()), &ModelNames::default()).unwrap();
    assert_eq!(gfd.gpu_model, "H100");
    let mut p = training_pod();
    p["metadata"]["annotations"] = json!({"tessera.io/gpu-models": "A100, H100"});
    p["spec"]["nodeSelector"] = json!({});
    p["spec"]["tolerations"] = json!([{"key": "nvidia.com/gpu", "operator": "Exists"}]);
    let want = pod(&kpod(p.clone()), &ModelNames::default()).unwrap();
    assert!(gfd.admits(&want), "{:?} on {}", want.allowed_models, gfd.gpu_model);
    p["metadata"]["annotations"] = json!({});
    p["spec"]["nodeSelector"] = json!({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"});
    assert_eq!(pod(&kpod(p), &ModelNames::default()).unwrap().allowed_models, ["H100"]);
    // An alias wins over the rule; the tessera.io/gpu-model label over both.
    let names = ModelNames::new([("NVIDIA-H100-80GB-HBM3".to_string(), "H100-SXM".to_string())].into());
    assert_eq!(node(&knode(n.clone()), &names).unwrap().gpu_model, "H100-SXM");
    n["metadata"]["labels"]["tessera.io/gpu-model"] = json!("H100-80GB");
    assert_eq!(node(&knode(n), &names).unwrap().gpu_model, "H100-80GB");
}
