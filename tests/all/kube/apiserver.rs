//! An API server in the test process that speaks the real Kubernetes wire
//! protocol over loopback HTTP: discovery, list and watch (with
//! resourceVersion, bookmarks, 410 Gone after compaction, timeouts), get,
//! create, replace with optimistic concurrency (409 on a stale
//! resourceVersion), JSON merge patch, delete, `pods/binding` (409 when
//! already bound) and `pods/eviction` (429 when a PodDisruptionBudget
//! allows no disruption). Enough of the API for kube-rs and kubectl, with
//! knobs to drop every watch and to compact history, and as strict as the
//! real one where Tessera's bugs hid: RBAC from the shipped manifest
//! (`rbac`), validation of every write (`schema`), a kubelet that refuses a
//! GPU given twice and lets evicted pods terminate holding theirs (`pods`).
//!
//! Every object is kept as JSON; the server is generic over resources.

#![allow(dead_code, clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

#[path = "apiserver/discovery.rs"]
mod discovery;
#[path = "apiserver/pods.rs"]
mod pods;
#[path = "apiserver/rbac.rs"]
pub mod rbac;
#[path = "apiserver/routes.rs"]
mod routes;
#[path = "apiserver/schema.rs"]
mod schema;
#[path = "apiserver/watching.rs"]
mod watching;

/// A resource the server serves.
#[derive(Debug, Clone)]
pub struct Kind {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

impl Kind {
    fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_string() } else { format!("{}/{}", self.group, self.version) }
    }
}

/// The resources served (the ones Tessera and its manifests use).
pub const KINDS: &[Kind] = &[
    Kind { group: "", version: "v1", plural: "nodes", kind: "Node", namespaced: false },
    Kind { group: "", version: "v1", plural: "pods", kind: "Pod", namespaced: true },
    Kind { group: "", version: "v1", plural: "namespaces", kind: "Namespace", namespaced: false },
    Kind { group: "", version: "v1", plural: "configmaps", kind: "ConfigMap", namespaced: true },
    Kind { group: "", version: "v1", plural: "services", kind: "Service", namespaced: true },
    Kind { group: "", version: "v1", plural: "serviceaccounts", kind: "ServiceAccount", namespaced: true },
    Kind { group: "", version: "v1", plural: "events", kind: "Event", namespaced: true },
    Kind { group: "apps", version: "v1", plural: "deployments", kind: "Deployment", namespaced: true },
    Kind { group: "apps", version: "v1", plural: "daemonsets", kind: "DaemonSet", namespaced: true },
    Kind { group: "batch", version: "v1", plural: "jobs", kind: "Job", namespaced: true },
    Kind { group: "batch", version: "v1", plural: "cronjobs", kind: "CronJob", namespaced: true },
    Kind {
        group: "policy",
        version: "v1",
        plural: "poddisruptionbudgets",
        kind: "PodDisruptionBudget",
        namespaced: true,
    },
    Kind { group: "coordination.k8s.io", version: "v1", plural: "leases", kind: "Lease", namespaced: true },
    Kind {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "clusterroles",
        kind: "ClusterRole",
        namespaced: false,
    },
    Kind {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "clusterrolebindings",
        kind: "ClusterRoleBinding",
        namespaced: false,
    },
    Kind { group: "rbac.authorization.k8s.io", version: "v1", plural: "roles", kind: "Role", namespaced: true },
    Kind {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "rolebindings",
        kind: "RoleBinding",
        namespaced: true,
    },
    Kind {
        group: "apiextensions.k8s.io",
        version: "v1",
        plural: "customresourcedefinitions",
        kind: "CustomResourceDefinition",
        namespaced: false,
    },
    Kind {
        group: "tessera.io",
        version: "v1alpha1",
        plural: "tesserapolicies",
        kind: "TesseraPolicy",
        namespaced: true,
    },
    Kind { group: "scheduling.x-k8s.io", version: "v1alpha1", plural: "podgroups", kind: "PodGroup", namespaced: true },
    Kind { group: "tessera.io", version: "v1alpha1", plural: "tesseraqueues", kind: "TesseraQueue", namespaced: false },
];

/// A change, as watches stream it.
#[derive(Debug, Clone)]
struct Change {
    rv: u64,
    plural: &'static str,
    namespace: String,
    kind: &'static str,
    object: Value,
}

/// What a test can look at.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    /// Successful bindings per pod (`ns/name`).
    pub bindings: BTreeMap<String, u32>,
    /// Bindings refused because the pod was bound.
    pub binding_conflicts: u32,
    /// Evictions carried out.
    pub evictions: u32,
    /// Evictions refused by a disruption budget (429).
    pub evictions_refused: u32,
    /// Every eviction asked for (`ns/name`), when.
    pub eviction_attempts: Vec<(String, std::time::Instant)>,
    /// Writes refused for a stale resourceVersion (409).
    pub conflicts: u32,
    /// Watches opened, per resource.
    pub watches: BTreeMap<String, u32>,
    /// Watches answered 410 Gone.
    pub gone: u32,
    /// Requests RBAC refused (403), in the API server's words.
    pub forbidden: Vec<String>,
    /// Pods the kubelet refused (their GPUs were taken), with why.
    pub kubelet_rejections: Vec<String>,
    /// Writes refused as invalid (422, 404 for a missing namespace or
    /// CRD), in the API server's words.
    pub invalid: Vec<String>,
    /// The `User-Agent`s requests came with (`-` for none).
    pub user_agents: std::collections::BTreeSet<String>,
}

struct Inner {
    rv: u64,
    objects: BTreeMap<(&'static str, String, String), Value>,
    history: Vec<Change>,
    /// Oldest resourceVersion a watch may resume from.
    compacted_to: u64,
    counters: Counters,
    uid: u64,
    /// Lease writes naming this holder fail with 503 (a partitioned
    /// replica).
    partitioned: Option<String>,
    /// Pods (`ns/name`) another scheduler binds, to the node given, just
    /// before the next binding of them arrives.
    races: HashMap<String, String>,
    /// How long an evicted pod terminates (holding its resources) before
    /// it is gone.
    termination_grace: std::time::Duration,
    /// The `Retry-After` of a disruption budget's 429, seconds.
    retry_after_s: u64,
}

/// The server's state.
#[derive(Clone)]
pub struct ApiServer {
    inner: Arc<Mutex<Inner>>,
    changes: broadcast::Sender<Change>,
    /// Bumped to end every open watch.
    drop_watches: Arc<watch::Sender<u64>>,
    pub addr: SocketAddr,
}

fn status(code: u16, reason: &str, message: impl Into<String>) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message.into(), "reason": reason, "code": code,
    });
    (StatusCode::from_u16(code).unwrap(), axum::Json(body)).into_response()
}

fn find_kind(group: &str, version: &str, plural: &str) -> Option<&'static Kind> {
    KINDS.iter().find(|k| k.group == group && k.version == version && k.plural == plural)
}

/// A parsed request path.
struct Target {
    kind: &'static Kind,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn parse(path: &str) -> Result<Target, Response> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(status(404, "NotFound", format!("no route {path}"))),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, r @ ..] if !r.is_empty() => (Some(ns.to_string()), r),
        r => (None, r),
    };
    let (plural, name, sub) = match rest {
        [p] => (*p, None, None),
        [p, n] => (*p, Some(n.to_string()), None),
        [p, n, s] => (*p, Some(n.to_string()), Some(s.to_string())),
        _ => return Err(status(404, "NotFound", format!("no route {path}"))),
    };
    let kind = find_kind(group, version, plural)
        .ok_or_else(|| status(404, "NotFound", format!("the server could not find the requested resource {path}")))?;
    Ok(Target { kind, namespace, name, sub })
}

fn merge_patch(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn labels_match(selector: &Value, labels: &Value) -> bool {
    let ml = selector.get("matchLabels").and_then(Value::as_object);
    let ok_labels = ml.is_none_or(|m| m.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let ok_expr = selector.get("matchExpressions").and_then(Value::as_array).is_none_or(|exprs| {
        exprs.iter().all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            let have = labels.get(key).and_then(Value::as_str);
            match e["operator"].as_str() {
                Some("In") => have.is_some_and(|h| values.contains(&h)),
                Some("NotIn") => have.is_none_or(|h| !values.contains(&h)),
                Some("Exists") => have.is_some(),
                Some("DoesNotExist") => have.is_none(),
                _ => false,
            }
        })
    });
    ok_labels && ok_expr
}

impl ApiServer {
    /// Starts on an ephemeral loopback port with the shipped CRDs and RBAC
    /// (`deploy/kubernetes/crd.yaml`, `podgroup-crd.yaml`, `rbac.yaml`) applied: Tessera's
    /// requests are the scheduler's service account's and are authorized
    /// by it.
    pub async fn start() -> Self {
        let srv = Self::start_empty().await;
        for file in ["crd.yaml", "podgroup-crd.yaml", "rbac.yaml"] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes");
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            for doc in serde_yaml_ng::Deserializer::from_str(&text) {
                let object: Value = serde::Deserialize::deserialize(doc).unwrap();
                if !object.is_null() {
                    srv.put(object);
                }
            }
        }
        srv
    }

    /// Starts with nothing in it (a fresh cluster: only an administrator
    /// may do anything).
    pub async fn start_empty() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (changes, _) = broadcast::channel(100_000);
        let server = Self {
            inner: Arc::new(Mutex::new(Inner {
                rv: 100,
                objects: BTreeMap::new(),
                history: Vec::new(),
                compacted_to: 0,
                counters: Counters::default(),
                uid: 0,
                partitioned: None,
                races: HashMap::new(),
                termination_grace: std::time::Duration::from_millis(300),
                retry_after_s: 10,
            })),
            changes,
            drop_watches: Arc::new(watch::channel(0).0),
            addr,
        };
        let app = axum::Router::new().fallback(routes::handle).with_state(server.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        server
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube-rs configuration for it, as the scheduler's service account.
    pub fn config(&self) -> kube::Config {
        self.config_with(rbac::SCHEDULER_TOKEN)
    }

    /// A kube-rs configuration for it, as a cluster administrator.
    pub fn admin_config(&self) -> kube::Config {
        self.config_with(rbac::ADMIN_TOKEN)
    }

    fn config_with(&self, token: &str) -> kube::Config {
        let mut config = kube::Config::new(self.url().parse().unwrap());
        config.auth_info = serde_json::from_value(json!({ "token": token })).unwrap();
        config
    }

    /// Says that RBAC refused nothing so far and the kubelet admitted
    /// every pod bound (no GPU was given twice).
    pub fn assert_sound(&self) {
        let c = self.counters();
        assert!(c.forbidden.is_empty(), "RBAC (deploy/kubernetes/rbac.yaml) refused: {:#?}", c.forbidden);
        assert!(c.kubelet_rejections.is_empty(), "the kubelet refused: {:#?}", c.kubelet_rejections);
        assert!(c.invalid.is_empty(), "writes refused as invalid: {:#?}", c.invalid);
    }

    /// Evicted pods terminate for `grace` (holding their GPUs) before they
    /// are gone.
    pub fn set_termination_grace(&self, grace: std::time::Duration) {
        self.inner.lock().unwrap().termination_grace = grace;
    }

    /// The `Retry-After` a disruption budget's 429 carries.
    pub fn set_retry_after(&self, seconds: u64) {
        self.inner.lock().unwrap().retry_after_s = seconds;
    }

    /// Another scheduler binds `ns/name` to `node` just before the next
    /// binding of that pod arrives (which then gets 409).
    pub fn race_binding(&self, ns: &str, name: &str, node: &str) {
        self.inner.lock().unwrap().races.insert(format!("{ns}/{name}"), node.to_string());
    }

    /// A kubeconfig file for kubectl.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster: {{server: {}}}\nusers:\n- name: t\n  user: {{token: {}}}\ncontexts:\n- name: t\n  context: {{cluster: t, user: t, namespace: default}}\ncurrent-context: t\n",
            self.url(),
            rbac::ADMIN_TOKEN
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// What happened so far.
    pub fn counters(&self) -> Counters {
        self.inner.lock().unwrap().counters.clone()
    }

    /// Cuts off `holder`: its Lease writes fail with 503 from now on.
    pub fn partition(&self, holder: &str) {
        self.inner.lock().unwrap().partitioned = Some(holder.to_string());
    }

    /// Ends every open watch (clients must re-watch).
    pub fn drop_all_watches(&self) {
        self.drop_watches.send_modify(|g| *g += 1);
    }

    /// Forgets history: a watch resuming from before now gets 410 Gone
    /// and must list again.
    pub fn compact(&self) {
        let mut s = self.inner.lock().unwrap();
        s.compacted_to = s.rv;
        s.history.clear();
    }

    /// Deletes an object while every watch is down and forgets history:
    /// a client learns of it only by listing again (after 410 Gone).
    pub fn delete_unseen(&self, plural: &str, namespace: &str, name: &str) {
        let mut s = self.inner.lock().unwrap();
        s.objects.retain(|(p, ns, n), _| !(*p == plural && ns == namespace && n == name));
        s.rv += 1;
        s.compacted_to = s.rv;
        s.history.clear();
        self.drop_all_watches();
    }

    /// Changes an object without telling any watch (a change still on its
    /// way to the clients).
    pub fn put_unseen(&self, object: Value) {
        let mut s = self.inner.lock().unwrap();
        let kind = KINDS.iter().find(|k| k.kind == object["kind"].as_str().unwrap_or("")).unwrap();
        let ns = object["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        s.rv += 1;
        s.objects.insert((kind.plural, ns, name), object);
    }

    /// An object, if it exists.
    pub fn get(&self, plural: &str, namespace: &str, name: &str) -> Option<Value> {
        let s = self.inner.lock().unwrap();
        s.objects.iter().find(|((p, ns, n), _)| *p == plural && ns == namespace && n == name).map(|(_, v)| v.clone())
    }

    /// Every object of a resource.
    pub fn list(&self, plural: &str) -> Vec<Value> {
        let s = self.inner.lock().unwrap();
        s.objects.iter().filter(|((p, _, _), _)| *p == plural).map(|(_, v)| v.clone()).collect()
    }

    /// Creates or replaces an object as a controller would (no checks).
    pub fn put(&self, object: Value) {
        let api_version = object["apiVersion"].as_str().unwrap_or("v1");
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = KINDS
            .iter()
            .find(|k| k.group == group && k.version == version && k.kind == object["kind"].as_str().unwrap_or(""))
            .unwrap_or_else(|| panic!("unknown kind in {object}"));
        let ns = if kind.namespaced {
            object["metadata"]["namespace"].as_str().unwrap_or("default").to_string()
        } else {
            String::new()
        };
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let mut s = self.inner.lock().unwrap();
        // The namespace exists (as the test's cluster would have it).
        if kind.namespaced && !s.objects.contains_key(&("namespaces", String::new(), ns.clone())) {
            let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            self.store(&mut s, find_kind("", "v1", "namespaces").unwrap(), "", &ns, namespace);
        }
        self.store(&mut s, kind, &ns, &name, object);
    }

    /// Deletes an object as a controller would.
    pub fn delete(&self, plural: &str, namespace: &str, name: &str) {
        let kind = KINDS.iter().find(|k| k.plural == plural).unwrap();
        let mut s = self.inner.lock().unwrap();
        self.remove(&mut s, kind, namespace, name);
    }

    fn store(&self, s: &mut Inner, kind: &'static Kind, ns: &str, name: &str, mut object: Value) -> Value {
        s.rv += 1;
        let rv = s.rv;
        let key = (kind.plural, ns.to_string(), name.to_string());
        let existed = s.objects.get(&key).cloned();
        object["apiVersion"] = json!(kind.api_version());
        object["kind"] = json!(kind.kind);
        // metadata.generation moves with the spec only (status writes keep it).
        let spec_changed = existed.as_ref().is_some_and(|old| old.get("spec") != object.get("spec"));
        let meta = &mut object["metadata"];
        meta["resourceVersion"] = json!(rv.to_string());
        meta["name"] = json!(name);
        if kind.namespaced {
            meta["namespace"] = json!(ns);
        }
        match &existed {
            Some(old) => {
                meta["uid"] = old["metadata"]["uid"].clone();
                meta["creationTimestamp"] = old["metadata"]["creationTimestamp"].clone();
                let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
                meta["generation"] = json!(if spec_changed { generation + 1 } else { generation });
            }
            None if meta["uid"].is_string() => {
                meta["creationTimestamp"] = json!("2026-12-01T00:00:00Z");
                meta["generation"] = json!(1);
            }
            None => {
                s.uid += 1;
                meta["generation"] = json!(1);
                meta["uid"] = json!(format!("00000000-0000-0000-0000-{:012}", s.uid));
                meta["creationTimestamp"] = json!("2026-12-01T00:00:00Z");
            }
        }
        let kind_word = if existed.is_some() { "MODIFIED" } else { "ADDED" };
        s.objects.insert(key, object.clone());
        let c = Change { rv, plural: kind.plural, namespace: ns.to_string(), kind: kind_word, object: object.clone() };
        s.history.push(c.clone());
        let _ = self.changes.send(c);
        object
    }

    fn remove(&self, s: &mut Inner, kind: &'static Kind, ns: &str, name: &str) -> Option<Value> {
        let mut object = s.objects.remove(&(kind.plural, ns.to_string(), name.to_string()))?;
        s.rv += 1;
        object["metadata"]["resourceVersion"] = json!(s.rv.to_string());
        let c = Change {
            rv: s.rv,
            plural: kind.plural,
            namespace: ns.to_string(),
            kind: "DELETED",
            object: object.clone(),
        };
        s.history.push(c.clone());
        let _ = self.changes.send(c);
        Some(object)
    }
}
