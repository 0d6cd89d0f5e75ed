//! The cluster model: nodes with individual GPUs, and pods.
//!
//! Units are integers: CPU in millicores, memory in MiB, GPU share in
//! thousandths of a GPU ("milli"), utilisation in tenths of a percent.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Dense node identifier, assigned by the cluster state and never reused
/// while the node exists.
pub type NodeId = u32;

/// Caller-assigned pod identity (the backend's, or an arrival's index).
pub type PodId = u64;

/// One whole GPU, in milli.
pub const GPU_MILLI: u32 = 1000;

/// CPU and memory quantities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resources {
    /// Millicores.
    pub cpu_milli: u64,
    /// MiB.
    pub memory_mib: u64,
}

impl Resources {
    /// Whether `other` fits in `self`.
    pub fn fits(&self, other: &Resources) -> bool {
        other.cpu_milli <= self.cpu_milli && other.memory_mib <= self.memory_mib
    }
}

/// Health of a GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuHealth {
    /// Fully usable.
    #[default]
    Healthy,
    /// Usable but slower or hotter.
    Degraded,
    /// Unusable.
    Failed,
}

/// Device memory of a GPU model, MiB, for the models whose size is public
/// (0 = unknown, e.g. openb's anonymised `G2`/`G3`).
pub fn device_memory_mib(model: &str) -> u32 {
    match model {
        "T4" | "P100" | "V100M16" => 16_384,
        "A10" => 24_576,
        "V100M32" => 32_768,
        "A100" => 40_960,
        "H100" | "A100-80GB" => 81_920,
        _ => 0,
    }
}

/// One GPU of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Gpu {
    /// Unallocated share, 0..=1000.
    pub free_milli: u32,
    /// Device memory in MiB.
    pub memory_mib: u32,
    /// Health.
    pub health: GpuHealth,
    /// Utilisation, tenths of a percent.
    pub util_permille: u16,
    /// Device memory in use, MiB, as telemetry reports it.
    #[serde(default)]
    pub memory_used_mib: u32,
    /// Where it sits in the node's interconnect (`crate::topology`);
    /// unset: the same island as every other GPU of the node.
    #[serde(default, skip_serializing_if = "is_default_link")]
    pub link: crate::topology::GpuLink,
}

fn is_default_link(l: &crate::topology::GpuLink) -> bool {
    *l == crate::topology::GpuLink::default()
}

impl Default for Gpu {
    fn default() -> Self {
        Self {
            free_milli: GPU_MILLI,
            memory_mib: 0,
            health: GpuHealth::Healthy,
            util_permille: 0,
            memory_used_mib: 0,
            link: crate::topology::GpuLink::default(),
        }
    }
}

/// A node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Dense id.
    pub id: NodeId,
    /// Name.
    pub name: String,
    /// Topology zone.
    pub zone: String,
    /// GPU model ("" if CPU-only).
    pub gpu_model: String,
    /// Allocatable capacity.
    pub capacity: Resources,
    /// Capacity not requested by bound pods.
    pub free: Resources,
    /// GPUs, by index.
    pub gpus: Vec<Gpu>,
    /// CPU utilisation, tenths of a percent.
    pub cpu_util_permille: u16,
    /// Memory utilisation, tenths of a percent.
    pub memory_util_permille: u16,
    /// Accepts pods.
    pub ready: bool,
    /// Bound pods per workload.
    pub workloads: BTreeMap<String, u32>,
    /// Bound GPU pods per request class ([`Pod::gpu_class`]).
    pub gpu_classes: BTreeMap<String, u32>,
    /// Labels (a pod's node selector matches them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Taints a pod must tolerate to be placed here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

/// A node taint that keeps off the pods that do not tolerate it
/// (Kubernetes `NoSchedule` and `NoExecute`; `PreferNoSchedule` is a
/// preference and not kept).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value ("" if none).
    #[serde(default)]
    pub value: String,
    /// `NoSchedule` or `NoExecute`.
    pub effect: String,
}

/// A pod's toleration of taints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Toleration {
    /// Key ("" with `exists`: every taint).
    #[serde(default)]
    pub key: String,
    /// `Exists` (any value) rather than `Equal`.
    #[serde(default)]
    pub exists: bool,
    /// Value, for `Equal`.
    #[serde(default)]
    pub value: String,
    /// Effect tolerated ("": every effect).
    #[serde(default)]
    pub effect: String,
}

impl Toleration {
    /// Whether it tolerates `t` (Kubernetes' rules).
    pub fn tolerates(&self, t: &Taint) -> bool {
        (self.effect.is_empty() || self.effect == t.effect)
            && (self.key.is_empty() && self.exists || self.key == t.key)
            && (self.exists || self.value == t.value)
    }
}

impl Node {
    /// A ready node with `gpus` idle GPUs of `model`.
    pub fn new(id: NodeId, name: impl Into<String>, capacity: Resources, gpus: usize, model: &str) -> Self {
        Self {
            id,
            name: name.into(),
            zone: String::new(),
            gpu_model: model.into(),
            capacity,
            free: capacity,
            gpus: vec![Gpu { memory_mib: device_memory_mib(model), ..Gpu::default() }; gpus],
            cpu_util_permille: 0,
            memory_util_permille: 0,
            ready: true,
            workloads: BTreeMap::new(),
            gpu_classes: BTreeMap::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
        }
    }

    /// Whether `pod` may be placed here by its node selector, required
    /// node affinity and tolerations (capacity aside).
    pub fn admits(&self, pod: &Pod) -> bool {
        pod.node_selector.iter().all(|(k, v)| self.labels.get(k) == Some(v))
            && (pod.node_affinity.is_empty()
                || pod.node_affinity.iter().any(|term| term.iter().all(|r| r.matches(&self.labels))))
            && self.taints.iter().all(|t| pod.tolerations.iter().any(|tol| tol.tolerates(t)))
    }

    /// Free share over usable GPUs.
    pub fn free_gpu_milli(&self) -> u32 {
        self.gpus.iter().filter(|g| g.health != GpuHealth::Failed).map(|g| g.free_milli).sum()
    }

    /// Usable GPUs that are entirely free.
    pub fn whole_free_gpus(&self) -> u32 {
        self.gpus.iter().filter(|g| g.health != GpuHealth::Failed && g.free_milli == GPU_MILLI).count() as u32
    }
}

/// Placement tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Constraints must hold exactly.
    Hard,
    /// Online service.
    #[default]
    Soft,
    /// Batch; may be preempted.
    Opportunistic,
}

impl Tier {
    /// The tiers, least important first (index = [`Tier::rank`]).
    pub const BY_RANK: [Tier; 3] = [Tier::Opportunistic, Tier::Soft, Tier::Hard];

    /// Its name, as the policy document and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Hard => "hard",
            Tier::Soft => "soft",
            Tier::Opportunistic => "opportunistic",
        }
    }

    /// Importance: opportunistic 0 < soft 1 < hard 2.
    pub fn rank(self) -> u8 {
        match self {
            Tier::Opportunistic => 0,
            Tier::Soft => 1,
            Tier::Hard => 2,
        }
    }
}

/// A pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Owning workload ("" if none).
    pub workload: String,
    /// CPU and memory requests.
    pub requests: Resources,
    /// GPUs requested.
    pub gpu_count: u32,
    /// Share of each GPU (1000 = whole GPUs).
    pub gpu_milli: u32,
    /// Allowed GPU models; empty = any.
    pub allowed_models: Vec<String>,
    /// Priority.
    pub priority: i32,
    /// Tier.
    pub tier: Tier,
    /// Labels a node must have (Kubernetes' `nodeSelector`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints it tolerates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Required node affinity: a node must match one of these terms (each
    /// term: all of its requirements). Empty: any node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_affinity: Vec<Vec<LabelRequirement>>,
    /// The gang it belongs to, if any: placed all or nothing with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<Gang>,
    /// The leaf queue it waits in (`tessera_core::quota`); none: the
    /// default queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The most seconds it runs once started, as its owner declares it
    /// (Kubernetes' `activeDeadlineSeconds`, Slurm's time limit): the loop
    /// lets it use nodes kept for a gang when it will have ended before
    /// they are all free (backfill). None: no bound is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_limit_s: Option<u64>,
}

/// A gang (a pod group: Kubernetes' `scheduling.x-k8s.io` `PodGroup`, a
/// training job's workers): its pods are placed all or nothing. A pass
/// holds room for members as it finds it and binds only once
/// `min_member` of them (running members included) fit; otherwise it
/// releases everything it held and the gang waits, so no partial gang
/// holds GPUs across passes and two gangs cannot deadlock. Members past
/// `min_member` are placed one at a time once the gang runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gang {
    /// The group's name, unique in the cluster (a caller qualifies a
    /// Kubernetes name with its namespace).
    pub name: String,
    /// Members that must run together, at least 1.
    pub min_member: u32,
    /// Seconds (the loop's clock) a gang may wait before its members'
    /// reason says `SCHED-GANG-TIMEOUT`; it keeps waiting all the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
}

/// One requirement on a node's labels (Kubernetes' `matchExpressions`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LabelRequirement {
    /// Label key.
    pub key: String,
    /// How the label must be.
    pub op: LabelOp,
}

/// Operators of a [`LabelRequirement`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LabelOp {
    /// The value is one of these.
    In(Vec<String>),
    /// The label is absent or its value is none of these.
    NotIn(Vec<String>),
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The value is an integer greater than this.
    Gt(i64),
    /// The value is an integer less than this.
    Lt(i64),
}

impl LabelRequirement {
    /// Whether `labels` satisfy it.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let v = labels.get(&self.key);
        let int = || v.and_then(|v| v.parse::<i64>().ok());
        match &self.op {
            LabelOp::In(vals) => v.is_some_and(|v| vals.contains(v)),
            LabelOp::NotIn(vals) => v.is_none_or(|v| !vals.contains(v)),
            LabelOp::Exists => v.is_some(),
            LabelOp::DoesNotExist => v.is_none(),
            LabelOp::Gt(n) => int().is_some_and(|x| x > *n),
            LabelOp::Lt(n) => int().is_some_and(|x| x < *n),
        }
    }
}

impl Pod {
    /// Whether it restricts its nodes by their labels (node selector or
    /// required node affinity).
    pub fn selects(&self) -> bool {
        !self.node_selector.is_empty() || !self.node_affinity.is_empty()
    }

    /// The GPU request class: `share-gpu` for part of one GPU, `N-gpu` for
    /// N whole GPUs, `None` for CPU-only pods.
    pub fn gpu_class(&self) -> Option<std::borrow::Cow<'static, str>> {
        // Binding and unbinding ask for it on every pod: no allocation for
        // the classes of up to 8 GPUs.
        const WHOLE: [&str; 8] = ["1-gpu", "2-gpu", "3-gpu", "4-gpu", "5-gpu", "6-gpu", "7-gpu", "8-gpu"];
        match (self.gpu_count, self.gpu_milli) {
            (0, _) => None,
            (1, m) if m < GPU_MILLI => Some("share-gpu".into()),
            (n, _) => Some(match WHOLE.get(n as usize - 1) {
                Some(&c) => c.into(),
                None => format!("{n}-gpu").into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toleration_matches_key_value_and_effect_as_kubernetes_does() {
        let taint = Taint { key: "gpu".into(), value: "a100".into(), effect: "NoExecute".into() };
        let tol = |key: &str, exists: bool, value: &str, effect: &str| Toleration {
            key: key.into(),
            exists,
            value: value.into(),
            effect: effect.into(),
        };
        assert!(tol("gpu", false, "a100", "NoExecute").tolerates(&taint));
        assert!(tol("gpu", false, "a100", "").tolerates(&taint), "no effect: every effect");
        assert!(!tol("gpu", false, "a100", "NoSchedule").tolerates(&taint), "another effect");
        assert!(!tol("gpu", false, "h100", "").tolerates(&taint), "Equal needs the value");
        assert!(tol("gpu", true, "", "").tolerates(&taint), "Exists: any value");
        assert!(!tol("other", true, "", "").tolerates(&taint));
        assert!(tol("", true, "", "").tolerates(&taint), "an empty key with Exists: every taint");
        assert!(!tol("", false, "", "").tolerates(&taint), "an empty key needs Exists");

        let mut node = Node::new(0, "n", Resources { cpu_milli: 8_000, memory_mib: 8_192 }, 1, "A100");
        let pod = Pod { gpu_count: 1, gpu_milli: GPU_MILLI, ..Pod::default() };
        assert!(node.admits(&pod), "no taints, no selector");
        node.taints.push(taint.clone());
        assert!(!node.admits(&pod));
        assert!(node.admits(&Pod { tolerations: vec![tol("gpu", true, "", "")], ..pod.clone() }));
        let picky = Pod {
            node_selector: [("pool".into(), "train".into())].into(),
            tolerations: vec![tol("", true, "", "")],
            ..pod
        };
        assert!(!node.admits(&picky));
        node.labels.insert("pool".into(), "train".into());
        assert!(node.admits(&picky));
    }

    #[test]
    fn required_node_affinity_needs_one_term_whose_requirements_all_hold() {
        let req = |key: &str, op: LabelOp| LabelRequirement { key: key.into(), op };
        let mut node = Node::new(0, "n", Resources { cpu_milli: 8_000, memory_mib: 8_192 }, 1, "A100");
        node.labels = [("gpu".into(), "a100".into()), ("mem-gb".into(), "80".into())].into();
        let with = |terms: Vec<Vec<LabelRequirement>>| Pod { node_affinity: terms, ..Pod::default() };
        assert!(node.admits(&with(vec![vec![req("gpu", LabelOp::In(vec!["h100".into(), "a100".into()]))]])));
        assert!(!node.admits(&with(vec![vec![req("gpu", LabelOp::NotIn(vec!["a100".into()]))]])));
        assert!(node.admits(&with(vec![vec![req("spot", LabelOp::NotIn(vec!["true".into()]))]])), "absent: not in");
        assert!(node.admits(&with(vec![vec![req("gpu", LabelOp::Exists), req("spot", LabelOp::DoesNotExist)]])));
        assert!(node.admits(&with(vec![vec![req("mem-gb", LabelOp::Gt(40)), req("mem-gb", LabelOp::Lt(100))]])));
        assert!(!node.admits(&with(vec![vec![req("gpu", LabelOp::Gt(1))]])), "not a number");
        // Terms are alternatives: one that holds is enough.
        let h100 = vec![req("gpu", LabelOp::In(vec!["h100".into()]))];
        assert!(!node.admits(&with(vec![h100.clone()])));
        assert!(node.admits(&with(vec![h100, vec![req("mem-gb", LabelOp::Exists)]])));
    }
}

/// A pod to submit at a time, and when it leaves (an online run, a
/// time replay, a twin's workload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// The pod.
    pub pod: Pod,
    /// Arrival time, seconds (time replay).
    pub at: u64,
    /// Departure time, if it leaves.
    pub leaves_at: Option<u64>,
}
