//! The `TesseraQueue` custom resource (cluster-scoped): one queue of the
//! loop's tree, with its parent, weight, guarantee and limit. Pods choose
//! one with the label `tessera.io/queue`. While any exists, the queues are
//! exactly these objects (and the implicit `default` leaf), replacing the
//! policy's `queues:` section; with none left, the policy's own again.
//! The controller checks the whole tree on every change: a tree refused
//! (an unknown parent, a guarantee over its limit or over its parent's)
//! changes nothing, and every object's `Accepted` condition says why. The
//! leader writes each queue's status every few seconds: pods pending and
//! running, and per resource what it uses, borrows and would get as its
//! fair share.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client, CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tessera_core::quota::{QueueSpec, QueuesConfig, Quota};
use tessera_server::QueueHandle;

use crate::convert::parse_quantity;
use crate::leader::Leadership;

/// A queue of the scheduler's tree.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "tessera.io",
    version = "v1alpha1",
    kind = "TesseraQueue",
    status = "TesseraQueueStatus",
    shortname = "tq",
    printcolumn = r#"{"name":"Parent","type":"string","jsonPath":".spec.parent"}"#,
    printcolumn = r#"{"name":"Pending","type":"integer","jsonPath":".status.pending"}"#,
    printcolumn = r#"{"name":"Running","type":"integer","jsonPath":".status.running"}"#,
    printcolumn = r#"{"name":"GPUs","type":"string","jsonPath":".status.used.gpus"}"#,
    printcolumn = r#"{"name":"Fair share","type":"string","jsonPath":".status.fairShare.gpus"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TesseraQueueSpec {
    /// The parent queue's name; none: a child of the root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Its share of what is left once guarantees are met (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// What it is entitled to whenever it asks (idle, others borrow it).
    #[serde(default)]
    pub guarantee: QueueQuota,
    /// What it may never exceed, borrowing included.
    #[serde(default)]
    pub limit: QueueQuota,
}

/// Amounts of resources, as Kubernetes writes them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueQuota {
    /// CPU, a quantity (`64`, `500m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Memory, a quantity (`512Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// GPUs of any model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// GPUs of one model, by the model's name (`H100`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpus_by_model: BTreeMap<String, u32>,
}

/// What the scheduler says of a queue.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TesseraQueueStatus {
    /// `Accepted`: whether the tree it belongs to is in use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<QueueCondition>,
    /// Pods waiting in it (or under it).
    #[serde(default)]
    pub pending: u64,
    /// Pods running from it (or under it).
    #[serde(default)]
    pub running: u64,
    /// What it uses, by resource (`gpus`, `gpus/H100`, `cpu_milli`, `memory_mib`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub used: BTreeMap<String, String>,
    /// What it uses past its guarantee.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub borrowed: BTreeMap<String, String>,
    /// Its fair share now (guarantee, then the rest by weight).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fair_share: BTreeMap<String, String>,
}

/// A condition of a queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueCondition {
    /// `Accepted`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True` or `False`.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    /// For a person.
    pub message: String,
}

/// The queues `objects` declare, as the loop takes them; `Err`: the
/// object and field at fault.
pub fn queues(objects: &[TesseraQueue]) -> Result<QueuesConfig, String> {
    let mut list = Vec::with_capacity(objects.len());
    for q in objects {
        let name = q.name_any();
        let quota = |what: &str, x: &QueueQuota| -> Result<Quota, String> {
            let amount = |field: &str, v: &Option<String>, scale: f64| -> Result<Option<u64>, String> {
                v.as_deref()
                    .map(|s| {
                        parse_quantity(s)
                            .filter(|n| n.is_finite() && *n >= 0.0)
                            .map(|n| (n * scale).round() as u64)
                            .ok_or_else(|| {
                                format!("TesseraQueue {name}: spec.{what}.{field} = {s:?} is not a quantity")
                            })
                    })
                    .transpose()
            };
            Ok(Quota {
                cpu_milli: amount("cpu", &x.cpu, 1000.0)?,
                memory_mib: amount("memory", &x.memory, 1.0 / (1024.0 * 1024.0))?,
                gpus: x.gpus,
                gpus_by_model: x.gpus_by_model.clone(),
            })
        };
        list.push(QueueSpec {
            name: name.clone(),
            parent: q.spec.parent.clone(),
            weight: q.spec.weight.unwrap_or(1.0),
            guarantee: quota("guarantee", &q.spec.guarantee)?,
            limit: quota("limit", &q.spec.limit)?,
        });
    }
    list.sort_by(|a, b| a.name.cmp(&b.name));
    let cfg = QueuesConfig { list, ..QueuesConfig::default() };
    tessera_core::quota::QueueTree::new(&cfg).map_err(|e| {
        // `list[i]` is the i-th queue by name.
        let (i, rest) = e.field.strip_prefix("list[").and_then(|r| r.split_once(']')).unwrap_or(("", &e.field));
        match i.parse::<usize>().ok().and_then(|i| cfg.list.get(i)) {
            Some(q) => format!("TesseraQueue {}: spec{}: {}", q.name, rest, e.reason),
            None => format!("queues: {}: {}", e.field, e.reason),
        }
    })?;
    Ok(cfg)
}

/// How often the leader writes the queues' status.
pub const STATUS_EVERY: Duration = Duration::from_secs(5);

/// The controller.
pub struct QueueController {
    client: Client,
    queues: QueueHandle,
    leadership: Leadership,
    /// The objects, by name.
    objects: BTreeMap<String, TesseraQueue>,
    /// The tree's verdict last written to every object.
    accepted: Option<Result<(), String>>,
}

impl QueueController {
    /// A controller setting the loop's queues through `queues`.
    pub fn new(client: Client, queues: QueueHandle, leadership: Leadership) -> Self {
        Self { client, queues, leadership, objects: BTreeMap::new(), accepted: None }
    }

    /// Watches the queues until the stream ends.
    pub async fn run(mut self) {
        use kube::runtime::WatchStreamExt;
        let api: Api<TesseraQueue> = Api::all(self.client.clone());
        let mut stream = watcher(api.clone(), watcher::Config::default()).default_backoff().boxed();
        let mut tick = tokio::time::interval(STATUS_EVERY);
        let mut said = false;
        loop {
            tokio::select! {
                ev = stream.next() => match ev {
                    None => return,
                    Some(Ok(ev)) => {
                        let changed = match ev {
                            watcher::Event::Init => {
                                self.objects.clear();
                                false
                            }
                            watcher::Event::InitApply(q) => {
                                self.objects.insert(q.name_any(), q);
                                false
                            }
                            watcher::Event::InitDone => true,
                            watcher::Event::Apply(q) => {
                                let old = self.objects.insert(q.name_any(), q.clone());
                                old.is_none_or(|o| o.spec != q.spec)
                            }
                            watcher::Event::Delete(q) => self.objects.remove(&q.name_any()).is_some(),
                        };
                        if changed {
                            self.apply(&api).await;
                        }
                    }
                    Some(Err(e)) if !said => {
                        tracing::warn!("TesseraQueue watch: {e}; the policy's queues stay in use");
                        said = true;
                    }
                    Some(Err(e)) => tracing::debug!("TesseraQueue watch: {e}"),
                },
                _ = tick.tick() => self.write_status(&api).await,
            }
        }
    }

    /// Hands the objects' tree to the loop, or says why not.
    async fn apply(&mut self, api: &Api<TesseraQueue>) {
        let objects: Vec<TesseraQueue> = self.objects.values().cloned().collect();
        let verdict = if objects.is_empty() {
            self.queues.set(None).await.map_err(|e| e.to_string()).and_then(|r| r.map_err(|e| e.to_string()))
        } else {
            match queues(&objects) {
                Ok(cfg) => self
                    .queues
                    .set(Some(cfg))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string())),
                Err(e) => Err(e),
            }
        };
        if let Err(e) = &verdict {
            tracing::warn!("TesseraQueues refused, the queues in use stay: {e}");
        }
        self.accepted = Some(verdict);
        self.write_status(api).await;
    }

    /// The leader writes each object's condition and, if its tree is in
    /// use, its use and fair share.
    async fn write_status(&mut self, api: &Api<TesseraQueue>) {
        if !self.leadership.is_leader() || self.objects.is_empty() {
            return;
        }
        let Some(verdict) = self.accepted.clone() else { return };
        let status = match &verdict {
            Ok(()) => self.queues.status().await.unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let by_name: BTreeMap<&str, &tessera_core::sched::QueueStatus> =
            status.iter().map(|q| (q.name.as_str(), q)).collect();
        for (name, obj) in &self.objects {
            let condition = match &verdict {
                Ok(()) => QueueCondition {
                    type_: "Accepted".into(),
                    status: "True".into(),
                    reason: "InUse".into(),
                    message: "the scheduler's queues are these objects".into(),
                },
                Err(e) => QueueCondition {
                    type_: "Accepted".into(),
                    status: "False".into(),
                    reason: "Invalid".into(),
                    message: e.clone(),
                },
            };
            let mut st = TesseraQueueStatus { conditions: vec![condition], ..TesseraQueueStatus::default() };
            if let Some(q) = by_name.get(name.as_str()) {
                st.pending = q.pending;
                st.running = q.running;
                st.used = shown(&q.used);
                st.borrowed = shown(&q.borrowed);
                st.fair_share = shown(&q.fair_share);
            }
            if obj.status.as_ref() == Some(&st) {
                continue;
            }
            let patch = serde_json::json!({"status": st});
            if let Err(e) = api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                tracing::warn!("TesseraQueue {name}: cannot write its status: {e}");
            }
        }
    }
}

/// Amounts in each resource's unit, as the status shows them.
fn shown(a: &tessera_core::quota::Amounts) -> BTreeMap<String, String> {
    a.0.iter().map(|(d, v)| (d.name(), d.show(*v))).collect()
}

/// The CustomResourceDefinition, as YAML (a document of `crd.yaml`).
pub fn crd_body() -> String {
    use kube::CustomResourceExt;
    serde_yaml_ng::to_string(&TesseraQueue::crd()).expect("a CRD serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(name: &str, parent: Option<&str>, guarantee: QueueQuota, limit: QueueQuota) -> TesseraQueue {
        TesseraQueue::new(name, TesseraQueueSpec { parent: parent.map(Into::into), weight: None, guarantee, limit })
    }

    #[test]
    fn objects_become_the_tree_with_kubernetes_quantities() {
        let g =
            QueueQuota { cpu: Some("16".into()), memory: Some("64Gi".into()), gpus: Some(8), ..QueueQuota::default() };
        let cfg = queues(&[
            q("team-b", Some("org"), QueueQuota::default(), QueueQuota::default()),
            q("org", None, g.clone(), g),
        ])
        .unwrap();
        assert_eq!(cfg.list.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(), ["org", "team-b"], "by name");
        assert_eq!(cfg.list[0].guarantee.cpu_milli, Some(16_000));
        assert_eq!(cfg.list[0].guarantee.memory_mib, Some(65_536));
        assert_eq!(cfg.list[1].parent.as_deref(), Some("org"));
    }

    #[test]
    fn a_refused_tree_names_the_object_and_field() {
        let e = queues(&[q("a", Some("nope"), QueueQuota::default(), QueueQuota::default())]).unwrap_err();
        assert_eq!(e, "TesseraQueue a: spec.parent: queue `a`: no queue `nope`");
        let big = QueueQuota { gpus: Some(8), ..QueueQuota::default() };
        let small = QueueQuota { gpus: Some(4), ..QueueQuota::default() };
        let e = queues(&[q("a", None, big, small)]).unwrap_err();
        assert_eq!(e, "TesseraQueue a: spec.guarantee.gpus: queue `a`: guarantee 8 is above its limit 4");
        let bad = QueueQuota { cpu: Some("lots".into()), ..QueueQuota::default() };
        let e = queues(&[q("a", None, bad, QueueQuota::default())]).unwrap_err();
        assert_eq!(e, "TesseraQueue a: spec.guarantee.cpu = \"lots\" is not a quantity");
    }
}
