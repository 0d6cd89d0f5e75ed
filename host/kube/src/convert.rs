//! Kubernetes objects → Tessera's model: nodes (allocatable CPU, memory
//! and GPUs, GPU model and memory, zone, readiness, GPU health) and pods
//! (effective requests, whole GPUs or a share of one, allowed models,
//! priority, tier, owner). The conventions are listed in the README.

use k8s_openapi::api::core::v1::{Container, Node as KNode, Pod as KPod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tessera_core::cluster::GpuSet;

use crate::models::ModelNames;
use tessera_core::model::{
    GPU_MILLI, Gpu, GpuHealth, LabelOp, LabelRequirement, Node, Pod, Resources, Taint, Tier, Toleration,
    device_memory_mib,
};

/// Whole GPUs as an extended resource (NVIDIA's device plugin).
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// Zone label.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// GPU model label of NVIDIA's GPU feature discovery.
pub const GFD_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
/// GPU memory label of GPU feature discovery, MiB.
pub const GFD_MEMORY_LABEL: &str = "nvidia.com/gpu.memory";
/// Overrides the GPU model (label on nodes, nodeSelector key on pods).
pub const MODEL_LABEL: &str = "tessera.io/gpu-model";
/// Per-GPU health on a node, comma-separated by index
/// (`healthy,failed,degraded,…`), as the node agent publishes it.
pub const HEALTH_ANNOTATION: &str = "tessera.io/gpu-health";
/// How a node's GPUs are connected, one `island/pcie/numa` per GPU
/// index (`tessera_core::topology::format`), as the node agent publishes
/// it from NVML or an operator writes it.
pub const TOPOLOGY_ANNOTATION: &str = "tessera.io/gpu-topology";
/// Share of one GPU a pod needs, milli (1..=1000).
pub const SHARE_ANNOTATION: &str = "tessera.io/gpu-milli";
/// GPUs of that share (default 1; more than 1 needs whole GPUs).
pub const SHARE_COUNT_ANNOTATION: &str = "tessera.io/gpu-count";
/// The same two, as the openb traces' GPU-sharing scheduler names them.
pub const ALIBABA_SHARE_ANNOTATION: &str = "alibabacloud.com/gpu-milli";
/// See [`ALIBABA_SHARE_ANNOTATION`].
pub const ALIBABA_COUNT_ANNOTATION: &str = "alibabacloud.com/gpu-count";
/// GPU models a pod accepts, comma-separated.
pub const MODELS_ANNOTATION: &str = "tessera.io/gpu-models";
/// `hard`, `soft` or `opportunistic`.
pub const TIER_ANNOTATION: &str = "tessera.io/tier";
/// The GPU indices Tessera chose for a pod (`0,3`), written before it is
/// bound; a GPU-sharing device plugin reads it.
pub const GPU_INDEX_ANNOTATION: &str = "tessera.io/gpu-index";

/// Pod label naming the leaf queue it waits in (the policy's `queues:`);
/// none: the default queue.
pub const QUEUE_LABEL: &str = "tessera.io/queue";

/// An object Tessera cannot take as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {name}: {message}")]
pub struct ConvertError {
    /// `node` or `pod`.
    pub kind: &'static str,
    /// `namespace/name` or `name`.
    pub name: String,
    /// What is wrong.
    pub message: String,
}

/// Parses a Kubernetes quantity (`500m`, `2`, `1.5Gi`, `129M`, `1e3`).
pub fn parse_quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q.find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E').unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    // `1e3` is an exponent; `1E` alone would be exa, which no request uses.
    let (num, suffix) = if suffix.is_empty() && num.ends_with(['e', 'E']) { (q, "") } else { (num, suffix) };
    let value: f64 = num.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0f64.powi(3),
        "Ti" => 1024.0f64.powi(4),
        "Pi" => 1024.0f64.powi(5),
        _ => return None,
    };
    (value.is_finite() && value >= 0.0).then_some(value * scale)
}

fn quantity(map: Option<&std::collections::BTreeMap<String, Quantity>>, key: &str) -> Option<f64> {
    map.and_then(|m| m.get(key)).and_then(|q| parse_quantity(&q.0))
}

fn cpu_milli(v: f64) -> u64 {
    (v * 1000.0).ceil() as u64
}

fn mib(v: f64) -> u64 {
    (v / (1024.0 * 1024.0)).ceil() as u64
}

/// A node as Tessera models it (id 0: the cluster assigns ids); its GPU
/// model from the `tessera.io/gpu-model` label as written, else GPU feature
/// discovery's product named by `names`.
pub fn node(n: &KNode, names: &ModelNames) -> Result<Node, ConvertError> {
    let name = n.metadata.name.clone().unwrap_or_default();
    let bad = |message: String| ConvertError { kind: "node", name: name.clone(), message };
    let status = n.status.as_ref();
    let alloc = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
    let labels = n.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).filter(|v| !v.is_empty()).cloned();
    let gpus = quantity(alloc, GPU_RESOURCE).unwrap_or(0.0);
    if gpus.fract() != 0.0 || gpus > 32.0 {
        return Err(bad(format!("{GPU_RESOURCE} = {gpus}: whole GPUs, at most 32 per node")));
    }
    let model = label(MODEL_LABEL).or_else(|| label(GFD_PRODUCT_LABEL).map(|p| names.name(&p))).unwrap_or_default();
    let memory_mib = match label(GFD_MEMORY_LABEL) {
        Some(m) => m.parse().map_err(|_| bad(format!("{GFD_MEMORY_LABEL} = {m:?} is not MiB")))?,
        None => device_memory_mib(&model),
    };
    let capacity = Resources {
        cpu_milli: quantity(alloc, "cpu").map_or(0, cpu_milli),
        memory_mib: quantity(alloc, "memory").map_or(0, mib),
    };
    let mut node = Node::new(0, name.clone(), capacity, gpus as usize, &model);
    for g in &mut node.gpus {
        *g = Gpu { memory_mib, ..Gpu::default() };
    }
    if let Some(h) = n.metadata.annotations.as_ref().and_then(|a| a.get(HEALTH_ANNOTATION)) {
        for (i, word) in h.split(',').map(str::trim).enumerate() {
            let health = match word {
                "healthy" => GpuHealth::Healthy,
                "degraded" => GpuHealth::Degraded,
                "failed" => GpuHealth::Failed,
                other => return Err(bad(format!("{HEALTH_ANNOTATION}: GPU {i} is {other:?}"))),
            };
            if let Some(g) = node.gpus.get_mut(i) {
                g.health = health;
            }
        }
    }
    if let Some(t) = n.metadata.annotations.as_ref().and_then(|a| a.get(TOPOLOGY_ANNOTATION)) {
        let links = tessera_core::topology::parse(t, node.gpus.len())
            .map_err(|e| bad(format!("{TOPOLOGY_ANNOTATION}: {e}")))?;
        for (g, l) in node.gpus.iter_mut().zip(links) {
            g.link = l;
        }
    }
    node.zone = label(ZONE_LABEL).or_else(|| label("failure-domain.beta.kubernetes.io/zone")).unwrap_or_default();
    let condition_ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let cordoned = n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
    node.ready = condition_ready && !cordoned;
    node.labels = n.metadata.labels.clone().unwrap_or_default();
    node.labels.insert(NAME_FIELD.into(), name.clone());
    node.taints = n
        .spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        // Cordoning is readiness already; a preference is not a rule.
        .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
        .filter(|t| t.key != "node.kubernetes.io/unschedulable")
        .map(|t| Taint { key: t.key.clone(), value: t.value.clone().unwrap_or_default(), effect: t.effect.clone() })
        .collect();
    Ok(node)
}

/// The node's internal address (where its agent listens).
pub fn node_address(n: &KNode) -> Option<String> {
    let addrs = n.status.as_ref()?.addresses.as_ref()?;
    addrs.iter().find(|a| a.type_ == "InternalIP").or_else(|| addrs.first()).map(|a| a.address.clone())
}

/// A container's requests, limits standing in for missing requests (as
/// the API server defaults them).
fn requests(c: &Container) -> (u64, u64, f64) {
    let r = c.resources.as_ref();
    let get = |key: &str| {
        quantity(r.and_then(|r| r.requests.as_ref()), key).or_else(|| quantity(r.and_then(|r| r.limits.as_ref()), key))
    };
    (get("cpu").map_or(0, cpu_milli), get("memory").map_or(0, mib), get(GPU_RESOURCE).unwrap_or(0.0))
}

/// The pod's `namespace/name`.
pub fn pod_key(p: &KPod) -> String {
    format!("{}/{}", p.metadata.namespace.as_deref().unwrap_or("default"), p.metadata.name.as_deref().unwrap_or(""))
}

/// A pod as Tessera models it: effective requests (the larger of the
/// containers' sum and the largest init container, plus overhead); the
/// models it accepts as `tessera.io/gpu-models` names them (every entry a
/// name), else its node selector's (a GPU feature discovery product named
/// by `names`).
pub fn pod(p: &KPod, names: &ModelNames) -> Result<Pod, ConvertError> {
    let key = pod_key(p);
    let bad = |message: String| ConvertError { kind: "pod", name: key.clone(), message };
    let spec = p.spec.as_ref().ok_or_else(|| bad("no spec".into()))?;
    let (mut cpu, mut mem, mut gpus) = (0u64, 0u64, 0.0f64);
    for c in &spec.containers {
        let (c, m, g) = requests(c);
        cpu += c;
        mem += m;
        gpus += g;
    }
    for c in spec.init_containers.iter().flatten() {
        let (c, m, g) = requests(c);
        cpu = cpu.max(c);
        mem = mem.max(m);
        gpus = gpus.max(g);
    }
    if let Some(o) = &spec.overhead {
        cpu += quantity(Some(o), "cpu").map_or(0, cpu_milli);
        mem += quantity(Some(o), "memory").map_or(0, mib);
    }
    if gpus.fract() != 0.0 || gpus > 32.0 {
        return Err(bad(format!("{GPU_RESOURCE} = {gpus}: whole GPUs, at most 32")));
    }
    let annotations = p.metadata.annotations.as_ref();
    let ann = |k: &str| annotations.and_then(|a| a.get(k)).map(|v| v.trim().to_string());
    let number = |k: &str| -> Result<Option<u32>, ConvertError> {
        ann(k).map(|v| v.parse::<u32>().map_err(|_| bad(format!("{k} = {v:?} is not a whole number")))).transpose()
    };
    let share = number(SHARE_ANNOTATION)?.or(number(ALIBABA_SHARE_ANNOTATION)?);
    let (gpu_count, gpu_milli) = match share {
        Some(_) if gpus > 0.0 => {
            return Err(bad(format!("asks for {GPU_RESOURCE} and a GPU share ({SHARE_ANNOTATION}) at once")));
        }
        Some(m) if m == 0 || m > GPU_MILLI => return Err(bad(format!("GPU share {m} is not in 1..=1000"))),
        Some(m) => {
            let count = number(SHARE_COUNT_ANNOTATION)?.or(number(ALIBABA_COUNT_ANNOTATION)?).unwrap_or(1);
            if count == 0 || count > 32 || (count > 1 && m < GPU_MILLI) {
                return Err(bad(format!("{count} GPUs of share {m}: a share is of one GPU")));
            }
            (count, m)
        }
        None => (gpus as u32, if gpus > 0.0 { GPU_MILLI } else { 0 }),
    };
    let mut allowed_models: Vec<String> = Vec::new();
    if let Some(v) = ann(MODELS_ANNOTATION) {
        for m in v.split(',').map(str::trim) {
            if m.is_empty() {
                return Err(bad(format!(
                    "{MODELS_ANNOTATION} = {v:?}: an empty model name (a comma-separated list of models)"
                )));
            }
            allowed_models.push(m.to_string());
        }
    }
    if allowed_models.is_empty()
        && let Some(sel) = &spec.node_selector
    {
        if let Some(m) = sel.get(MODEL_LABEL) {
            allowed_models.push(m.clone());
        } else if let Some(product) = sel.get(GFD_PRODUCT_LABEL) {
            allowed_models.push(names.name(product));
        }
    }
    let tier = match ann(TIER_ANNOTATION).as_deref() {
        None | Some("soft") => Tier::Soft,
        Some("hard") => Tier::Hard,
        Some("opportunistic") => Tier::Opportunistic,
        Some(other) => return Err(bad(format!("{TIER_ANNOTATION} = {other:?} (hard, soft, opportunistic)"))),
    };
    let workload = controller(p)
        .map(|o| format!("{}/{}", p.metadata.namespace.as_deref().unwrap_or("default"), o.name))
        .unwrap_or_default();
    let node_affinity = required_affinity(spec).map_err(bad)?;
    // Counted by the kubelet from the pod's start, a little after its
    // bind: the loop, counting from the bind, sees it end a little early.
    let run_limit_s = match spec.active_deadline_seconds {
        Some(s) if s <= 0 => return Err(bad(format!("activeDeadlineSeconds = {s}: must be positive"))),
        s => s.map(|s| s as u64),
    };
    Ok(Pod {
        name: key.clone(),
        namespace: p.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        workload,
        requests: Resources { cpu_milli: cpu, memory_mib: mem },
        gpu_count,
        gpu_milli,
        allowed_models,
        priority: spec.priority.unwrap_or(0),
        tier,
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        tolerations: spec
            .tolerations
            .iter()
            .flatten()
            .map(|t| Toleration {
                key: t.key.clone().unwrap_or_default(),
                exists: t.operator.as_deref() == Some("Exists"),
                value: t.value.clone().unwrap_or_default(),
                effect: t.effect.clone().unwrap_or_default(),
            })
            .collect(),
        node_affinity,
        // The tracker sets it from the pod's PodGroup (`podgroup`).
        gang: None,
        queue: p.metadata.labels.as_ref().and_then(|l| l.get(QUEUE_LABEL)).map(|q| q.trim().to_string()),
        run_limit_s,
    })
}

/// The pod's controller (the owner that recreates it), if any.
pub fn controller(p: &KPod) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    p.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true))
}

/// The label a node's name is matched under (`matchFields` on
/// `metadata.name`).
pub const NAME_FIELD: &str = "metadata.name";

/// The pod's required node affinity: terms (any) of requirements (all).
fn required_affinity(spec: &k8s_openapi::api::core::v1::PodSpec) -> Result<Vec<Vec<LabelRequirement>>, String> {
    let Some(sel) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
    else {
        return Ok(Vec::new());
    };
    let requirement = |e: &k8s_openapi::api::core::v1::NodeSelectorRequirement| -> Result<LabelRequirement, String> {
        let values = e.values.clone().unwrap_or_default();
        let int = || {
            values.first().and_then(|v| v.parse::<i64>().ok()).ok_or_else(|| {
                format!("node affinity on {}: {} needs one integer value, not {values:?}", e.key, e.operator)
            })
        };
        let op = match e.operator.as_str() {
            "In" => LabelOp::In(values.clone()),
            "NotIn" => LabelOp::NotIn(values.clone()),
            "Exists" => LabelOp::Exists,
            "DoesNotExist" => LabelOp::DoesNotExist,
            "Gt" => LabelOp::Gt(int()?),
            "Lt" => LabelOp::Lt(int()?),
            other => return Err(format!("node affinity on {}: unknown operator {other:?}", e.key)),
        };
        Ok(LabelRequirement { key: e.key.clone(), op })
    };
    sel.node_selector_terms
        .iter()
        .map(|t| {
            let exprs = t.match_expressions.iter().flatten().map(requirement);
            let fields = t.match_fields.iter().flatten().map(|f| {
                if f.key == NAME_FIELD { requirement(f) } else { Err(format!("node affinity: no field {:?}", f.key)) }
            });
            exprs.chain(fields).collect()
        })
        .collect()
}

/// The GPUs the pod was given (its [`GPU_INDEX_ANNOTATION`]), if any.
pub fn gpu_index(p: &KPod) -> Result<Option<GpuSet>, ConvertError> {
    let Some(v) = p.metadata.annotations.as_ref().and_then(|a| a.get(GPU_INDEX_ANNOTATION)) else {
        return Ok(None);
    };
    let mut set = 0u32;
    for part in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match part.parse::<u32>() {
            Ok(i) if i < 32 => set |= 1 << i,
            _ => {
                return Err(ConvertError {
                    kind: "pod",
                    name: pod_key(p),
                    message: format!("{GPU_INDEX_ANNOTATION} = {v:?} is not a list of GPU indices"),
                });
            }
        }
    }
    Ok(Some(GpuSet(set)))
}

/// `0,3` for GPUs 0 and 3.
pub fn format_gpu_index(gpus: GpuSet) -> String {
    gpus.indices().map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests;
