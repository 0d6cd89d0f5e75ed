//! The `TesseraPolicy` custom resource: a policy document and the plugin
//! components it loads (by OCI reference, URL or ConfigMap, each pinned
//! by its SHA-256). Its CustomResourceDefinition (`deploy/kubernetes/
//! crd.yaml`) is generated from these types (`tessera crd`), so the two
//! cannot drift. A change reaches the running policy through the rollout
//! path: the new policy becomes the candidate (shadow), or replaces the
//! active one at once when `rollout: immediate`.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A policy for Tessera, and where its components come from.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "tessera.io",
    version = "v1alpha1",
    kind = "TesseraPolicy",
    namespaced,
    status = "TesseraPolicyStatus",
    shortname = "tpol",
    printcolumn = r#"{"name":"Rollout","type":"string","jsonPath":".spec.rollout"}"#,
    printcolumn = r#"{"name":"Applied","type":"string","jsonPath":".status.conditions[?(@.type==\"Applied\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TesseraPolicySpec {
    /// The policy document, as a policy file writes it (YAML): name,
    /// plugins, scheduling, rescheduling, movement. `tessera policy check`
    /// validates it the same way.
    pub document: String,
    /// Components that replace the source of the document's plugins of
    /// the same name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<Component>,
    /// How a change applies.
    #[serde(default)]
    pub rollout: RolloutMode,
}

/// How a changed policy reaches the running one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RolloutMode {
    /// It becomes the rollout candidate: shadow, then canary and a chaos
    /// verdict before promotion.
    #[default]
    Candidate,
    /// It replaces the active policy at once (its plugins load first).
    Immediate,
}

/// One plugin component, pinned by digest, from exactly one of `oci`,
/// `url` and `configMap`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Component {
    /// The plugin in the document it is for.
    pub plugin: String,
    /// An OCI artifact (`registry/repository@sha256:…` or `:tag`) whose
    /// layer is the component (`application/wasm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<String>,
    /// An `http(s)://` URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A key of a ConfigMap in the policy's namespace (`binaryData`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapKey>,
    /// SHA-256 of the component's bytes, 64 hex digits; the bytes fetched
    /// must match.
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub sha256: String,
}

/// Where a component comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComponentSource<'a> {
    /// An OCI reference.
    Oci(&'a str),
    /// A URL.
    Url(&'a str),
    /// A ConfigMap key.
    ConfigMap(&'a ConfigMapKey),
}

impl Component {
    /// Its one source, or why it has not exactly one.
    pub fn source(&self) -> Result<ComponentSource<'_>, String> {
        match (&self.oci, &self.url, &self.config_map) {
            (Some(o), None, None) => Ok(ComponentSource::Oci(o)),
            (None, Some(u), None) => Ok(ComponentSource::Url(u)),
            (None, None, Some(c)) => Ok(ComponentSource::ConfigMap(c)),
            _ => Err(format!("component for plugin {}: set exactly one of oci, url, configMap", self.plugin)),
        }
    }
}

/// A ConfigMap key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigMapKey {
    /// ConfigMap name.
    pub name: String,
    /// Key under `binaryData`.
    pub key: String,
}

/// What Tessera made of the policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TesseraPolicyStatus {
    /// The generation last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Applied`: True once loaded (as candidate or active), False with
    /// the reason otherwise.
    #[serde(default)]
    pub conditions: Vec<PolicyCondition>,
}

/// A status condition (the shape of `metav1.Condition`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyCondition {
    /// `Applied`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True` or `False`.
    pub status: String,
    /// A CamelCase reason.
    pub reason: String,
    /// For a person.
    pub message: String,
    /// When the status last changed (RFC 3339).
    pub last_transition_time: String,
    /// The generation it describes.
    #[serde(default)]
    pub observed_generation: i64,
}

/// Tessera's CustomResourceDefinitions, as YAML: `TesseraPolicy`, then
/// `TesseraQueue` (`crate::queues`).
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    let crd = TesseraPolicy::crd();
    let body = serde_yaml_ng::to_string(&crd).expect("a CRD serialises");
    let queues = crate::queues::crd_body();
    format!(
        "# Generated from host/kube/src/crd.rs and queues.rs by `tessera crd`; do not edit.\n# A test checks it is current.\n{body}---\n{queues}"
    )
}
