//! Scheduler-extender endpoints, for clusters that keep kube-scheduler:
//! `POST /extender/{filter,prioritize,bind,preempt}` with the JSON types
//! of `k8s.io/kube-scheduler/extender/v1` (Go field names, as
//! kube-scheduler sends them; the lower-case names of older releases are
//! accepted too). Answers come from the service's loop (its model of the
//! cluster and its Wasm policy), so `nodeCacheCapable: true` is the
//! intended setting; with full node objects the names are used all the
//! same. A sample `KubeSchedulerConfiguration` is in `deploy/`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use k8s_openapi::api::core::v1::{Node as KNode, Pod as KPod};
use serde::{Deserialize, Serialize};
use tessera_core::model::Pod;
use tessera_server::control::ExtenderHandle;
use tessera_server::extend::{ExtenderAnswer, ExtenderCall};

use crate::convert;
use crate::models::ModelNames;

/// A list of API objects (`NodeList`), as far as the extender reads it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ObjectList<T> {
    /// `NodeList`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `v1`.
    #[serde(default, rename = "apiVersion", skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// The objects.
    #[serde(default)]
    pub items: Vec<T>,
}

/// `ExtenderArgs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    #[serde(rename = "Pod", alias = "pod")]
    pub pod: Option<KPod>,
    /// Candidate nodes (`nodeCacheCapable: false`).
    #[serde(rename = "Nodes", alias = "nodes", default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<ObjectList<KNode>>,
    /// Candidate node names (`nodeCacheCapable: true`).
    #[serde(rename = "NodeNames", alias = "nodenames", default, skip_serializing_if = "Option::is_none")]
    pub node_names: Option<Vec<String>>,
}

/// `ExtenderFilterResult`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExtenderFilterResult {
    /// Nodes that passed (when full nodes were sent).
    #[serde(rename = "Nodes")]
    pub nodes: Option<ObjectList<KNode>>,
    /// Names of the nodes that passed (when names were sent).
    #[serde(rename = "NodeNames")]
    pub node_names: Option<Vec<String>>,
    /// Nodes that failed, with why; preemption may help.
    #[serde(rename = "FailedNodes", default)]
    pub failed_nodes: BTreeMap<String, String>,
    /// Nodes that failed where preemption would not help.
    #[serde(rename = "FailedAndUnresolvableNodes", default)]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// Why the call failed as a whole.
    #[serde(rename = "Error", default)]
    pub error: String,
}

/// `HostPriority`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPriority {
    /// Node name.
    #[serde(rename = "Host")]
    pub host: String,
    /// 0..=10.
    #[serde(rename = "Score")]
    pub score: i64,
}

/// `ExtenderBindingArgs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExtenderBindingArgs {
    /// Pod name.
    #[serde(rename = "PodName", alias = "podName")]
    pub pod_name: String,
    /// Pod namespace.
    #[serde(rename = "PodNamespace", alias = "podNamespace")]
    pub pod_namespace: String,
    /// Pod UID.
    #[serde(rename = "PodUID", alias = "podUID")]
    pub pod_uid: String,
    /// The node kube-scheduler chose.
    #[serde(rename = "Node", alias = "node")]
    pub node: String,
}

/// `ExtenderBindingResult`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExtenderBindingResult {
    /// Why binding failed (empty: bound).
    #[serde(rename = "Error", default)]
    pub error: String,
}

/// `MetaPod`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaPod {
    /// The pod's UID.
    #[serde(rename = "UID")]
    pub uid: String,
}

/// `MetaVictims`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MetaVictims {
    /// Pods to preempt.
    #[serde(rename = "Pods", default)]
    pub pods: Vec<MetaPod>,
    /// Disruption budgets they would violate.
    #[serde(rename = "NumPDBViolations", default)]
    pub num_pdb_violations: i64,
}

/// `Victims`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Victims {
    /// Pods to preempt.
    #[serde(rename = "Pods", default)]
    pub pods: Vec<KPod>,
    /// Disruption budgets they would violate.
    #[serde(rename = "NumPDBViolations", default)]
    pub num_pdb_violations: i64,
}

/// `ExtenderPreemptionArgs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExtenderPreemptionArgs {
    /// The preemptor.
    #[serde(rename = "Pod")]
    pub pod: Option<KPod>,
    /// Victims per node, as full pods.
    #[serde(rename = "NodeNameToVictims", default)]
    pub node_name_to_victims: Option<BTreeMap<String, Victims>>,
    /// Victims per node, as UIDs (`nodeCacheCapable: true`).
    #[serde(rename = "NodeNameToMetaVictims", default)]
    pub node_name_to_meta_victims: Option<BTreeMap<String, MetaVictims>>,
}

/// `ExtenderPreemptionResult`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExtenderPreemptionResult {
    /// The nodes where Tessera accepts the preemption, with its victims.
    #[serde(rename = "NodeNameToMetaVictims")]
    pub node_name_to_meta_victims: BTreeMap<String, MetaVictims>,
}

/// Pods seen by filter and prioritize calls, by UID, for the bind that
/// follows (its arguments name the pod only).
#[derive(Debug, Default)]
struct Seen {
    pods: BTreeMap<String, Pod>,
    order: std::collections::VecDeque<String>,
}

const SEEN: usize = 4096;

#[derive(Clone)]
struct Ext {
    handle: ExtenderHandle,
    seen: Arc<Mutex<Seen>>,
    names: Arc<ModelNames>,
}

/// The extender's routes, answering through `handle`; pods' GPU models
/// named by `names` (the backend's).
pub fn routes(handle: ExtenderHandle, names: ModelNames) -> axum::Router {
    axum::Router::new()
        .route("/extender/filter", post(filter))
        .route("/extender/prioritize", post(prioritize))
        .route("/extender/bind", post(bind))
        .route("/extender/preempt", post(preempt))
        .with_state(Ext { handle, seen: Arc::default(), names: Arc::new(names) })
}

fn bad_request(message: String) -> Response {
    (StatusCode::BAD_REQUEST, Json(ExtenderFilterResult { error: message, ..Default::default() })).into_response()
}

fn parse<T: serde::de::DeserializeOwned>(body: &Bytes, what: &str) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("not {what}: {e}"))
}

impl Ext {
    /// The pod of the call, converted, and the candidate names.
    fn args(&self, a: &ExtenderArgs) -> Result<(Pod, Vec<String>), String> {
        let kpod = a.pod.as_ref().ok_or("no Pod in the arguments")?;
        let pod = convert::pod(kpod, &self.names).map_err(|e| e.to_string())?;
        if let Some(uid) = &kpod.metadata.uid {
            let mut s = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if s.pods.insert(uid.clone(), pod.clone()).is_none() {
                s.order.push_back(uid.clone());
                if s.order.len() > SEEN
                    && let Some(old) = s.order.pop_front()
                {
                    s.pods.remove(&old);
                }
            }
        }
        let names = match (&a.node_names, &a.nodes) {
            (Some(names), _) => names.clone(),
            (None, Some(list)) => list.items.iter().filter_map(|n| n.metadata.name.clone()).collect(),
            (None, None) => return Err("neither Nodes nor NodeNames in the arguments".into()),
        };
        Ok((pod, names))
    }
}

async fn filter(State(x): State<Ext>, body: Bytes) -> Response {
    let a: ExtenderArgs = match parse(&body, "ExtenderArgs") {
        Ok(a) => a,
        Err(e) => return bad_request(e),
    };
    let failed = |error: String| Json(ExtenderFilterResult { error, ..Default::default() }).into_response();
    let (pod, names) = match x.args(&a) {
        Ok(v) => v,
        Err(e) => return failed(e.to_string()),
    };
    let verdicts = match x.handle.call(ExtenderCall::Filter { pod, nodes: names }).await {
        Ok(ExtenderAnswer::Filtered(v)) => v,
        Ok(_) => return failed("unexpected answer".into()),
        Err(e) => return failed(e.to_string()),
    };
    let mut out = ExtenderFilterResult::default();
    let passed: Vec<String> = verdicts.iter().filter(|v| v.failure.is_none()).map(|v| v.node.clone()).collect();
    for v in verdicts {
        if let Some(f) = v.failure {
            if v.unresolvable {
                out.failed_and_unresolvable_nodes.insert(v.node, f);
            } else {
                out.failed_nodes.insert(v.node, f);
            }
        }
    }
    match (a.node_names, a.nodes) {
        (Some(_), _) | (None, None) => out.node_names = Some(passed),
        (None, Some(list)) => {
            let items = list
                .items
                .into_iter()
                .filter(|n| n.metadata.name.as_ref().is_some_and(|name| passed.contains(name)))
                .collect();
            out.nodes = Some(ObjectList { kind: list.kind, api_version: list.api_version, items });
        }
    }
    Json(out).into_response()
}

async fn prioritize(State(x): State<Ext>, body: Bytes) -> Response {
    let a: ExtenderArgs = match parse(&body, "ExtenderArgs") {
        Ok(a) => a,
        Err(e) => return bad_request(e),
    };
    // kube-scheduler reads a list; an error is an HTTP failure here.
    let fail = |status: StatusCode, e: String| (status, e).into_response();
    let (pod, names) = match x.args(&a) {
        Ok(v) => v,
        Err(e) => return fail(StatusCode::BAD_REQUEST, e),
    };
    match x.handle.call(ExtenderCall::Prioritize { pod, nodes: names }).await {
        Ok(ExtenderAnswer::Scored(s)) => {
            Json(s.into_iter().map(|(host, score)| HostPriority { host, score }).collect::<Vec<_>>()).into_response()
        }
        Ok(_) => fail(StatusCode::INTERNAL_SERVER_ERROR, "unexpected answer".into()),
        Err(e) => fail(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

async fn bind(State(x): State<Ext>, body: Bytes) -> Response {
    let a: ExtenderBindingArgs = match parse(&body, "ExtenderBindingArgs") {
        Ok(a) => a,
        Err(e) => return bad_request(e),
    };
    let pod = x.seen.lock().unwrap_or_else(|p| p.into_inner()).pods.get(&a.pod_uid).cloned();
    let call = ExtenderCall::Bind { namespace: a.pod_namespace, name: a.pod_name, uid: a.pod_uid, node: a.node, pod };
    let error = match x.handle.call(call).await {
        Ok(ExtenderAnswer::Bound(Ok(()))) => String::new(),
        Ok(ExtenderAnswer::Bound(Err(e))) => e,
        Err(e) => e.to_string(),
        Ok(_) => "unexpected answer".into(),
    };
    Json(ExtenderBindingResult { error }).into_response()
}

/// Whether `preemptor` may take the place of `victim` by Tessera's tiers:
/// a hard-tier pod is never preempted; otherwise a lower tier, or the same
/// tier at a lower priority.
pub fn may_preempt(preemptor: &Pod, victim: &Pod) -> bool {
    use tessera_core::model::Tier;
    if victim.tier == Tier::Hard {
        return false;
    }
    victim.tier.rank() < preemptor.tier.rank()
        || (victim.tier == preemptor.tier && victim.priority < preemptor.priority)
}

async fn preempt(State(x): State<Ext>, body: Bytes) -> Response {
    let a: ExtenderPreemptionArgs = match parse(&body, "ExtenderPreemptionArgs") {
        Ok(a) => a,
        Err(e) => return bad_request(e),
    };
    let Some(preemptor) = a.pod.as_ref().and_then(|p| convert::pod(p, &x.names).ok()) else {
        return bad_request("no valid Pod in the arguments".into());
    };
    let mut out = ExtenderPreemptionResult::default();
    for (node, v) in a.node_name_to_victims.unwrap_or_default() {
        let ok = v.pods.iter().all(|p| convert::pod(p, &x.names).is_ok_and(|victim| may_preempt(&preemptor, &victim)));
        if ok {
            let pods = v.pods.iter().filter_map(|p| p.metadata.uid.clone()).map(|uid| MetaPod { uid }).collect();
            out.node_name_to_meta_victims.insert(node, MetaVictims { pods, num_pdb_violations: v.num_pdb_violations });
        }
    }
    let meta = a.node_name_to_meta_victims.unwrap_or_default();
    if !meta.is_empty() {
        let uids: Vec<String> = meta.values().flat_map(|v| v.pods.iter().map(|p| p.uid.clone())).collect();
        let pods = match x.handle.call(ExtenderCall::Pods { uids: uids.clone() }).await {
            Ok(ExtenderAnswer::Pods(p)) => p,
            _ => vec![None; uids.len()],
        };
        let known: BTreeMap<String, Option<Pod>> = uids.into_iter().zip(pods).collect();
        for (node, v) in meta {
            // A victim Tessera does not know is left to kube-scheduler's
            // judgement; one it knows must be preemptable by its tiers.
            let ok = v.pods.iter().all(|m| {
                known.get(&m.uid).and_then(Option::as_ref).is_none_or(|victim| may_preempt(&preemptor, victim))
            });
            if ok {
                out.node_name_to_meta_victims.insert(node, v);
            }
        }
    }
    Json(out).into_response()
}
