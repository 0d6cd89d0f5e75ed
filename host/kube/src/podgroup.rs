//! Gangs on Kubernetes: the scheduler-plugins `PodGroup`
//! (`scheduling.x-k8s.io/v1alpha1`), as Kubeflow's training operators,
//! JobSet and Volcano-style tooling create it. A pod labelled
//! `scheduling.x-k8s.io/pod-group: NAME` is a member of the PodGroup `NAME`
//! in its namespace: a gang of `spec.minMember` placed all or nothing,
//! whose wait reads `SCHED-GANG-TIMEOUT` past
//! `spec.scheduleTimeoutSeconds`. A member whose PodGroup does not exist
//! yet waits for it (the coscheduling plugin's PreFilter refuses it
//! likewise) and is queued when it appears.
//!
//! The type is the subset of the upstream resource Tessera reads; other
//! fields are kept as they are (`x-kubernetes-preserve-unknown-fields`), so
//! `deploy/kubernetes/podgroup-crd.yaml` (generated from it by `tessera
//! crd`) can stand in where scheduler-plugins is not installed, and
//! scheduler-plugins' own CRD serves it where it is.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tessera_core::model::Gang;

use crate::convert::ConvertError;

/// The pod label naming a pod's PodGroup (in its namespace).
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// Most members a gang may need.
pub const MAX_MIN_MEMBER: i32 = 10_000;

/// A group of pods placed all or nothing.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "scheduling.x-k8s.io",
    version = "v1alpha1",
    kind = "PodGroup",
    namespaced,
    status = "PodGroupStatus",
    shortname = "pg",
    printcolumn = r#"{"name":"MinMember","type":"integer","jsonPath":".spec.minMember"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PodGroupSpec {
    /// Members that must be placed together (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<i32>,
    /// Seconds a gang may wait before its members' reason says it waited
    /// past its timeout (it keeps waiting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

/// What scheduler-plugins' controller writes of a group (Tessera reads
/// none of it; it is kept).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PodGroupStatus {
    /// `Pending`, `Running`, … as its controller says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

/// `ns/name` of a pod's PodGroup, if it names one.
pub fn group_of(p: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    let name = p.metadata.labels.as_ref()?.get(POD_GROUP_LABEL)?.trim();
    (!name.is_empty()).then(|| format!("{}/{name}", p.metadata.namespace.as_deref().unwrap_or("default")))
}

/// The gang a PodGroup declares; named `ns/name`, so gangs of two
/// namespaces never meet.
pub fn gang(pg: &PodGroup) -> Result<(String, Gang), ConvertError> {
    let key = format!(
        "{}/{}",
        pg.metadata.namespace.as_deref().unwrap_or("default"),
        pg.metadata.name.as_deref().unwrap_or_default()
    );
    let bad = |message: String| ConvertError { kind: "podgroup", name: key.clone(), message };
    let min = pg.spec.min_member.unwrap_or(1);
    if !(1..=MAX_MIN_MEMBER).contains(&min) {
        return Err(bad(format!("minMember = {min}: a gang needs 1..={MAX_MIN_MEMBER} members")));
    }
    let timeout = match pg.spec.schedule_timeout_seconds {
        None => None,
        Some(t) if t >= 0 => Some(t as u64),
        Some(t) => return Err(bad(format!("scheduleTimeoutSeconds = {t} is negative"))),
    };
    Ok((key.clone(), Gang { name: key, min_member: min as u32, timeout_s: timeout }))
}

/// The PodGroup CustomResourceDefinition, as YAML.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    let body = serde_yaml_ng::to_string(&PodGroup::crd()).expect("a CRD serialises");
    format!(
        "# Generated from host/kube/src/podgroup.rs by `tessera crd podgroup`; do not edit.\n\
         # The part of scheduler-plugins' PodGroup (scheduling.x-k8s.io/v1alpha1) Tessera reads, other\n\
         # fields kept: apply it only where scheduler-plugins' own CRD is not installed.\n{body}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(min: Option<i32>, timeout: Option<i32>) -> PodGroup {
        let mut g = PodGroup::new("job", PodGroupSpec { min_member: min, schedule_timeout_seconds: timeout });
        g.metadata.namespace = Some("ml".into());
        g
    }

    #[test]
    fn a_pod_group_is_a_gang_named_by_namespace() {
        let (key, g) = gang(&pg(Some(4), Some(60))).unwrap();
        assert_eq!(key, "ml/job");
        assert_eq!(g, Gang { name: "ml/job".into(), min_member: 4, timeout_s: Some(60) });
        assert_eq!(gang(&pg(None, None)).unwrap().1.min_member, 1, "minMember unset: 1");
        assert_eq!(
            gang(&pg(Some(0), None)).unwrap_err().to_string(),
            "podgroup ml/job: minMember = 0: a gang needs 1..=10000 members"
        );
        assert!(gang(&pg(Some(2), Some(-1))).unwrap_err().to_string().contains("negative"));
    }

    #[test]
    fn unknown_fields_of_the_upstream_resource_are_read_and_kept() {
        let v = serde_json::json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "job", "namespace": "ml"},
            "spec": {"minMember": 3, "minResources": {"nvidia.com/gpu": "24"}},
            "status": {"phase": "Running"}
        });
        let g: PodGroup = serde_json::from_value(v).unwrap();
        assert_eq!(g.spec.min_member, Some(3));
        assert_eq!(g.status.and_then(|s| s.phase).as_deref(), Some("Running"));
        let crd = crd_yaml();
        assert!(crd.contains("x-kubernetes-preserve-unknown-fields: true"), "{crd}");
        assert!(crd.contains("name: podgroups.scheduling.x-k8s.io"), "{crd}");
    }
}
