//! Telling the cluster why a pod waits, as kube-scheduler does: the pod's
//! `PodScheduled` condition turns `False` with reason `Unschedulable`
//! (what cluster autoscalers look for before adding a node) or
//! `SchedulerError` (a pod Tessera cannot read), and a `FailedScheduling`
//! warning event names the reason code. Sent in the background, once per
//! pod and reason.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod as KPod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

/// Component name on events.
pub const COMPONENT: &str = "tessera";

/// A pod that waits, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID, when known.
    pub uid: Option<String>,
    /// `Unschedulable` or `SchedulerError`.
    pub reason: &'static str,
    /// For a person.
    pub message: String,
    /// The replica reporting (the event's reporting instance).
    pub reporter: String,
}

/// Writes the condition and the event; failures are logged, never fatal.
pub async fn waiting(client: Client, w: Waiting) {
    let now = k8s_openapi::jiff::Timestamp::now();
    let pods: Api<KPod> = Api::namespaced(client.clone(), &w.namespace);
    let condition = serde_json::json!({"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": w.reason, "message": w.message,
        "lastTransitionTime": now.to_string(),
    }]}});
    if let Err(e) = pods.patch_status(&w.name, &PatchParams::default(), &Patch::Strategic(&condition)).await {
        tracing::debug!("pod {}/{}: cannot set PodScheduled: {e}", w.namespace, w.name);
    }
    let events: Api<Event> = Api::namespaced(client, &w.namespace);
    let event = Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", w.name, now.as_nanosecond())),
            namespace: Some(w.namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(w.name.clone()),
            namespace: Some(w.namespace.clone()),
            uid: w.uid.clone(),
            ..ObjectReference::default()
        },
        reason: Some("FailedScheduling".into()),
        message: Some(w.message.clone()),
        type_: Some("Warning".into()),
        source: Some(EventSource { component: Some(COMPONENT.into()), ..EventSource::default() }),
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(w.reporter.clone()),
        action: Some("Scheduling".into()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        count: Some(1),
        ..Event::default()
    };
    if let Err(e) = events.create(&PostParams::default(), &event).await {
        tracing::debug!("pod {}/{}: cannot record an event: {e}", w.namespace, w.name);
    }
}
