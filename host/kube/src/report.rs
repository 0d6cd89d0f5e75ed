//! Telling the cluster why a pod waits, as kube-scheduler does: the pod's
//! `PodScheduled` condition turns `False` with reason `Unschedulable`
//! (what cluster autoscalers look for before adding a node) or
//! `SchedulerError` (a pod Tessera cannot read), and a `FailedScheduling`
//! warning event names the reason code; a bound pod gets a `Scheduled`
//! event. Sent in the background, once per pod and reason; an Event that
//! exists already (another replica said it) is counted up, not repeated.

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
    let what = Happened {
        namespace: w.namespace,
        name: w.name,
        uid: w.uid,
        type_: "Warning",
        reason: "FailedScheduling",
        message: w.message,
        reporter: w.reporter,
    };
    event(client, what).await;
}

/// Something that happened to a pod, as an Event says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Happened {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod UID, when known.
    pub uid: Option<String>,
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// `Scheduled`, `FailedScheduling`.
    pub reason: &'static str,
    /// For a person.
    pub message: String,
    /// The replica reporting.
    pub reporter: String,
}

/// The Event's name for `h`: the same for the same pod and reason on
/// every replica, so that a repeat counts up on one object (as the
/// event recorders of client-go aggregate) instead of adding another.
pub fn event_name(h: &Happened) -> String {
    let x = crate::track::fnv1a(h.uid.as_deref().unwrap_or(&h.name).bytes().chain(*b"/").chain(h.reason.bytes()));
    format!("{}.{x:016x}", h.name)
}

/// Records `h`: creates its Event, or, when it exists (this replica or
/// another said it before), counts it once more with the latest message
/// and time. Failures are logged, never fatal.
pub async fn event(client: Client, h: Happened) {
    let now = k8s_openapi::jiff::Timestamp::now();
    let events: Api<Event> = Api::namespaced(client, &h.namespace);
    let name = event_name(&h);
    let event = Event {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(h.namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(h.name.clone()),
            namespace: Some(h.namespace.clone()),
            uid: h.uid.clone(),
            ..ObjectReference::default()
        },
        reason: Some(h.reason.into()),
        message: Some(h.message.clone()),
        type_: Some(h.type_.into()),
        source: Some(EventSource { component: Some(COMPONENT.into()), ..EventSource::default() }),
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(h.reporter.clone()),
        action: Some(if h.reason == "Scheduled" { "Binding" } else { "Scheduling" }.into()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        count: Some(1),
        ..Event::default()
    };
    let failed = match events.create(&PostParams::default(), &event).await {
        Err(kube::Error::Api(s)) if s.code == 409 => match events.get(&name).await {
            Ok(old) => {
                let patch = serde_json::json!({
                    "count": old.count.unwrap_or(1) + 1,
                    "lastTimestamp": now.to_string(),
                    "message": h.message,
                    "reportingInstance": h.reporter,
                });
                events.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.err()
            }
            Err(e) => Some(e),
        },
        other => other.err(),
    };
    if let Some(e) = failed {
        tracing::debug!("pod {}/{}: cannot record a {} event: {e}", h.namespace, h.name, h.reason);
    }
}
