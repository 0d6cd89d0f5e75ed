//! The API calls the backend writes with: `pods/binding` and
//! `pods/eviction`, each as the API documents its body, and what their
//! errors mean for Tessera.

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod as KPod};
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions, Status};
use kube::api::PostParams;
use kube::{Api, Client};
use tessera_core::cluster::GpuSet;

use crate::convert;

/// `POST pods/{name}/binding`, the chosen GPU indices as the Binding's
/// annotations (which the API server sets on the pod).
pub async fn bind(
    client: Client,
    ns: &str,
    name: &str,
    uid: &str,
    node: &str,
    gpus: GpuSet,
) -> Result<(), kube::Error> {
    let api: Api<KPod> = Api::namespaced(client, ns);
    let annotations = (!gpus.is_empty())
        .then(|| [(convert::GPU_INDEX_ANNOTATION.to_string(), convert::format_gpu_index(gpus))].into());
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(ns.to_string()),
            uid: Some(uid.to_string()),
            annotations,
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..ObjectReference::default()
        },
    };
    api.create_subresource::<Binding, serde_json::Value>("binding", name, &PostParams::default(), &binding)
        .await
        .map(|_| ())
}

/// The Eviction `POST pods/{name}/eviction` takes: a `policy/v1`
/// `Eviction` whose delete options hold a precondition on the pod's uid,
/// so that a pod recreated under the same name is never the one evicted.
/// (kube-rs' `Api::evict` sends `{"delete_options": …}` with no
/// `apiVersion` or `kind`, which a real server reads as no options.)
pub fn eviction(ns: &str, name: &str, uid: &str) -> Eviction {
    Eviction {
        metadata: ObjectMeta { name: Some(name.to_string()), namespace: Some(ns.to_string()), ..ObjectMeta::default() },
        delete_options: Some(DeleteOptions {
            preconditions: Some(Preconditions { uid: Some(uid.to_string()), resource_version: None }),
            ..DeleteOptions::default()
        }),
    }
}

/// `POST pods/{name}/eviction` with [`eviction`]'s body.
pub async fn evict(client: Client, ns: &str, name: &str, uid: &str) -> Result<(), kube::Error> {
    let api: Api<KPod> = Api::namespaced(client, ns);
    api.create_subresource::<Eviction, Status>("eviction", name, &PostParams::default(), &eviction(ns, name, uid))
        .await
        .map(|_| ())
}

/// Where pod `ns/name` (this `uid`, not one recreated under its name)
/// is bound, and on which GPUs if its annotation says: asked after a bind
/// was refused with 409, when someone else decided first.
pub async fn bound_to(
    client: Client,
    ns: &str,
    name: &str,
    uid: &str,
) -> Result<Option<(String, Option<GpuSet>)>, kube::Error> {
    let api: Api<KPod> = Api::namespaced(client, ns);
    let Some(p) = api.get_opt(name).await? else { return Ok(None) };
    let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty());
    if p.metadata.uid.as_deref() != Some(uid) || p.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    // A malformed index is the pod's own problem: the model chooses.
    Ok(node.map(|n| (n, convert::gpu_index(&p).ok().flatten())))
}

/// How long the loop waits for one of these calls (or one batch of
/// binds): past it, the call counts as failed and the watch tells what
/// became of it.
pub const CALL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// A call that failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The API server answered with an error (or could not be reached).
    #[error("{}", describe(.0))]
    Api(kube::Error),
    /// No answer within the deadline (or the runtime is going away).
    #[error("no answer within {0:?}")]
    NoAnswer(std::time::Duration),
}

impl CallError {
    /// The HTTP status the API server answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api(kube::Error::Api(s)) => Some(s.code),
            _ => None,
        }
    }

    /// How long the API server asked not to try again
    /// (`details.retryAfterSeconds`, which it sends with `Retry-After`: a
    /// disruption budget's 429 says 10 s).
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Api(kube::Error::Api(s)) => s
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|&s| s > 0)
                .map(|s| std::time::Duration::from_secs(u64::from(s))),
            _ => None,
        }
    }
}

/// Runs `f` on `rt` from the loop's thread, within [`CALL_DEADLINE`].
pub fn run<T: Send + 'static>(
    rt: &tokio::runtime::Handle,
    f: impl std::future::Future<Output = Result<T, kube::Error>> + Send + 'static,
) -> Result<T, CallError> {
    crate::wait::within(rt, CALL_DEADLINE, f).ok_or(CallError::NoAnswer(CALL_DEADLINE))?.map_err(CallError::Api)
}

/// Binds in flight at once in `KubeBackend::bind_all`.
pub const BIND_CONCURRENCY: usize = 32;

/// An API error, with what it means for Tessera.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 429 => format!("refused by a disruption budget (429): {}", s.message),
        kube::Error::Api(s) if s.code == 409 => format!("conflict (409): {}", s.message),
        kube::Error::Api(s) if s.code == 404 => format!("gone (404): {}", s.message),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eviction_body_is_a_policy_v1_eviction_with_a_uid_precondition() {
        let body = serde_json::to_value(eviction("ml", "web-0", "u-1")).unwrap();
        assert_eq!(body["apiVersion"], "policy/v1", "{body}");
        assert_eq!(body["kind"], "Eviction", "{body}");
        assert_eq!(body["metadata"]["name"], "web-0");
        assert_eq!(body["deleteOptions"]["preconditions"]["uid"], "u-1", "{body}");
        assert!(body.get("delete_options").is_none(), "{body}");
    }
}
