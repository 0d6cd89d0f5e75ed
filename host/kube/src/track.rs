//! Watch events → the loop's cluster events. Pure state machines over
//! kube-rs watcher events (no IO), so every transition is unit-tested:
//! pods naming Tessera queued, pods already on a node adopted, a pod
//! someone else bound re-adopted where it runs, terminal and deleted pods
//! gone (a terminating pod on a node stays until it is gone: its GPUs are
//! held until then); nodes joining, changing (only real changes pass) and leaving. A
//! re-list after a lost watch (`Init` … `InitDone`) turns everything not
//! seen again into a deletion, so no pod or node is left behind.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Node as KNode, Pod as KPod};
use kube::runtime::watcher::Event;
use tessera_core::model::Node;
use tessera_core::sched::PodId;
use tessera_server::backend::ClusterEvent;

use crate::convert::{self, ConvertError};
use crate::models::ModelNames;
use crate::podgroup::PodGroup;

/// A pod the loop knows, as the API names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (a pod recreated under the same name is another pod).
    pub uid: String,
    /// The pod as the loop models it.
    pub pod: tessera_core::model::Pod,
    /// The node it is bound to, once it is.
    pub node: Option<String>,
    /// Its GPUs there, when known.
    pub gpus: Option<tessera_core::cluster::GpuSet>,
    /// Its labels (which disruption budgets cover it).
    pub labels: std::collections::BTreeMap<String, String>,
    /// Its controller (kind, name): what recreates it when evicted.
    pub owner: Option<(String, String)>,
    /// Its `Ready` condition is true.
    pub ready: bool,
    /// It names Tessera as its scheduler.
    pub ours: bool,
    /// It is being deleted (it holds its room until it is gone).
    pub terminating: bool,
}

/// The loop's id of the pod with API uid `uid`: the same on every replica
/// (a new leader resumes a movement journal another one wrote). FNV-1a of
/// the uid, 62 bits (the loop keeps ids above for its own stand-ins).
pub fn pod_id(uid: &str) -> PodId {
    (fnv1a(uid.bytes()) & ID_MASK).max(1)
}

/// FNV-1a, 64 bits: a stable name from API fields, the same on every
/// replica and every run.
pub use tessera_core::hash::fnv1a;

const ID_MASK: PodId = (1 << 62) - 1;

fn is_ready(p: &KPod) -> bool {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Pods by the loop's id, shared with the backend's binds and evictions.
pub type PodIndex = Arc<Mutex<HashMap<PodId, PodRef>>>;

/// What a re-list (`Init` … `InitDone`) saw, by key: what it did not see
/// is gone.
#[derive(Debug, Default)]
struct Relist(Option<HashSet<String>>);

impl Relist {
    fn start(&mut self) {
        self.0 = Some(HashSet::new());
    }

    fn saw(&mut self, key: Option<&String>) {
        if let (Some(seen), Some(k)) = (&mut self.0, key) {
            seen.insert(k.clone());
        }
    }

    /// The known keys the re-list did not see (none outside a re-list).
    fn unseen<'a>(&mut self, known: impl Iterator<Item = &'a String>) -> Vec<String> {
        match self.0.take() {
            Some(seen) => known.filter(|k| !seen.contains(*k)).cloned().collect(),
            None => Vec::new(),
        }
    }
}

#[derive(Debug)]
struct Tracked {
    id: PodId,
    node: Option<String>,
}

/// Pods: watch events in, cluster events out.
#[derive(Debug)]
pub struct PodTracker {
    scheduler: String,
    by_uid: HashMap<String, Tracked>,
    relist: Relist,
    index: PodIndex,
    /// Pods this replica is binding (uid → node): their binding shows up
    /// as a change the loop already knows.
    binding: Arc<Mutex<HashMap<String, String>>>,
    /// Pods that could not be taken, with why (the backend reports them).
    pub rejected: Vec<ConvertError>,
    /// GPU model names (a pod's node selector on a GFD product).
    names: ModelNames,
    /// The gangs of the PodGroups seen, by `ns/name`.
    groups: HashMap<String, tessera_core::model::Gang>,
    /// Pods of ours whose PodGroup is not known yet, by group, then uid.
    awaiting: HashMap<String, HashMap<String, KPod>>,
    /// PodGroups seen again in a re-list.
    groups_relist: HashSet<String>,
}

impl PodTracker {
    /// A tracker for pods naming `scheduler`.
    pub fn new(scheduler: &str, index: PodIndex, binding: Arc<Mutex<HashMap<String, String>>>) -> Self {
        Self {
            scheduler: scheduler.to_string(),
            by_uid: HashMap::new(),
            relist: Relist::default(),
            index,
            binding,
            rejected: Vec::new(),
            names: ModelNames::default(),
            groups: HashMap::new(),
            awaiting: HashMap::new(),
            groups_relist: HashSet::new(),
        }
    }

    /// Folds one watch event on PodGroups; the cluster events it means
    /// (the members that waited for a group that now exists are queued).
    pub fn on_group(&mut self, ev: Event<PodGroup>) -> Vec<ClusterEvent> {
        let mut out = Vec::new();
        match ev {
            Event::Init => self.groups_relist.clear(),
            Event::InitApply(g) | Event::Apply(g) => match crate::podgroup::gang(&g) {
                Ok((key, gang)) => {
                    self.groups_relist.insert(key.clone());
                    self.groups.insert(key.clone(), gang);
                    for p in self.awaiting.remove(&key).into_iter().flat_map(HashMap::into_values) {
                        self.apply(&p, &mut out);
                    }
                }
                Err(e) => self.reject(e),
            },
            Event::InitDone => {
                let seen = std::mem::take(&mut self.groups_relist);
                self.groups.retain(|k, _| seen.contains(k));
            }
            Event::Delete(g) => {
                let key = format!(
                    "{}/{}",
                    g.metadata.namespace.as_deref().unwrap_or("default"),
                    g.metadata.name.as_deref().unwrap_or_default()
                );
                // Members already queued keep their gang.
                self.groups.remove(&key);
            }
        }
        out
    }

    /// Pods of ours waiting for their PodGroup to exist.
    pub fn awaiting_groups(&self) -> usize {
        self.awaiting.values().map(HashMap::len).sum()
    }

    /// `pod` with its gang, if its PodGroup is known; `None` if it names
    /// one not known yet (it is kept until the group appears).
    fn with_gang(&mut self, p: &KPod, mut pod: tessera_core::model::Pod) -> Option<tessera_core::model::Pod> {
        let Some(key) = crate::podgroup::group_of(p) else { return Some(pod) };
        match self.groups.get(&key) {
            Some(g) => {
                pod.gang = Some(g.clone());
                Some(pod)
            }
            None => {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                self.awaiting.entry(key.clone()).or_default().insert(uid, p.clone());
                self.reject(ConvertError {
                    kind: "pod",
                    name: convert::pod_key(p),
                    message: format!(
                        "its PodGroup {key} (label {}) does not exist yet; it waits for it",
                        crate::podgroup::POD_GROUP_LABEL
                    ),
                });
                None
            }
        }
    }

    fn stop_awaiting(&mut self, uid: &str) {
        self.awaiting.retain(|_, pods| {
            pods.remove(uid);
            !pods.is_empty()
        });
    }

    /// With GPU model names other than the rule alone.
    pub fn with_names(mut self, names: ModelNames) -> Self {
        self.names = names;
        self
    }

    /// How it names GPU models.
    pub fn names(&self) -> &ModelNames {
        &self.names
    }

    /// Folds one watch event; the cluster events it means, in order.
    pub fn on(&mut self, ev: Event<KPod>) -> Vec<ClusterEvent> {
        let mut out = Vec::new();
        match ev {
            Event::Init => {
                self.relist.start();
                // The re-list brings back whoever still waits.
                self.awaiting.clear();
            }
            Event::InitApply(p) => {
                self.relist.saw(p.metadata.uid.as_ref());
                self.apply(&p, &mut out);
            }
            Event::InitDone => {
                for uid in self.relist.unseen(self.by_uid.keys()) {
                    self.forget(&uid, &mut out);
                }
            }
            Event::Apply(p) => self.apply(&p, &mut out),
            Event::Delete(p) => {
                if let Some(uid) = &p.metadata.uid {
                    self.stop_awaiting(uid);
                    self.forget(uid, &mut out);
                }
            }
        }
        out
    }

    fn forget(&mut self, uid: &str, out: &mut Vec<ClusterEvent>) {
        if let Some(t) = self.by_uid.remove(uid) {
            self.index.lock().unwrap_or_else(|p| p.into_inner()).remove(&t.id);
            out.push(ClusterEvent::Deleted { id: t.id });
        }
    }

    fn track(
        &mut self,
        p: &KPod,
        uid: &str,
        pod: &tessera_core::model::Pod,
        node: Option<String>,
        gpus: Option<tessera_core::cluster::GpuSet>,
    ) -> PodId {
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        let mut id = pod_id(uid);
        while index.contains_key(&id) {
            id = ((id + 1) & ID_MASK).max(1);
        }
        self.by_uid.insert(uid.to_string(), Tracked { id, node: node.clone() });
        let r = PodRef {
            namespace: p.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            name: p.metadata.name.clone().unwrap_or_default(),
            uid: uid.to_string(),
            pod: pod.clone(),
            node,
            gpus,
            labels: p.metadata.labels.clone().unwrap_or_default(),
            owner: convert::controller(p).map(|o| (o.kind.clone(), o.name.clone())),
            ready: is_ready(p),
            ours: p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(self.scheduler.as_str()),
            terminating: p.metadata.deletion_timestamp.is_some(),
        };
        index.insert(id, r);
        id
    }

    fn apply(&mut self, p: &KPod, out: &mut Vec<ClusterEvent>) {
        let Some(uid) = p.metadata.uid.clone() else { return };
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        let spec = p.spec.as_ref();
        let node = spec.and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty());
        // A finished pod holds nothing; a terminating one still holds its
        // node's resources (the kubelet releases them when it is gone), so
        // it stays until then; one that never ran just leaves the queue.
        if matches!(phase, Some("Succeeded" | "Failed")) || (p.metadata.deletion_timestamp.is_some() && node.is_none())
        {
            self.stop_awaiting(&uid);
            self.forget(&uid, out);
            return;
        }

        let ours = spec.and_then(|s| s.scheduler_name.as_deref()) == Some(self.scheduler.as_str());
        let known_node = self.by_uid.get(&uid).map(|t| t.node.clone());
        if let Some(t) = self.by_uid.get(&uid)
            && let Some(r) = self.index.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&t.id)
        {
            r.ready = is_ready(p);
            if p.metadata.deletion_timestamp.is_some() && !std::mem::replace(&mut r.terminating, true) {
                // Going for good: the loop stops counting on it, its room
                // stays held until it is gone.
                out.push(ClusterEvent::Leaving { id: t.id });
            }
        }
        match (known_node, node) {
            // Already where the loop thinks it is, or still waiting.
            (Some(Some(_)), _) | (Some(None), None) => {}
            (Some(None), Some(node)) => {
                let by_us = self.binding.lock().unwrap_or_else(|p| p.into_inner()).remove(&uid);
                if by_us.as_deref() == Some(node.as_str()) {
                    if let Some(t) = self.by_uid.get_mut(&uid) {
                        if let Some(r) = self.index.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&t.id) {
                            r.node = Some(node.clone());
                        }
                        t.node = Some(node);
                    }
                } else {
                    // Someone else bound it: it leaves the queue and joins
                    // the model where it runs.
                    self.forget(&uid, out);
                    self.adopt(p, &uid, node, out);
                }
            }
            (None, Some(node)) => self.adopt(p, &uid, node, out),
            (None, None) if ours => match convert::pod(p, &self.names) {
                Ok(pod) => {
                    if let Some(pod) = self.with_gang(p, pod) {
                        let id = self.track(p, &uid, &pod, None, None);
                        out.push(ClusterEvent::Submitted { id, pod });
                    }
                }
                Err(e) => self.reject(e),
            },
            (None, None) => {}
        }
    }

    fn adopt(&mut self, p: &KPod, uid: &str, node: String, out: &mut Vec<ClusterEvent>) {
        self.stop_awaiting(uid);
        match convert::pod(p, &self.names).and_then(|pod| Ok((pod, convert::gpu_index(p)?))) {
            Ok((mut pod, gpus)) => {
                // A running member counts for its gang (and is evicted
                // with it) when its group is known.
                if let Some(g) = crate::podgroup::group_of(p).and_then(|k| self.groups.get(&k)) {
                    pod.gang = Some(g.clone());
                }
                let id = self.track(p, uid, &pod, Some(node.clone()), gpus);
                out.push(ClusterEvent::Running { id, pod, node, gpus });
            }
            Err(e) => self.reject(e),
        }
    }

    fn reject(&mut self, e: ConvertError) {
        if !self.rejected.iter().any(|r| r == &e) {
            self.rejected.push(e);
        }
    }
}

/// Nodes: watch events in, cluster events out (only when what the model
/// sees of a node changed; kubelet heartbeats pass silently).
#[derive(Debug, Default)]
pub struct NodeTracker {
    known: HashMap<String, Node>,
    /// Each node as the API shows it, before the agents' health.
    base: HashMap<String, Node>,
    /// GPU health the node agents report, by node (index order).
    agents: HashMap<String, Vec<tessera_core::model::GpuHealth>>,
    /// GPU links the node agents read from NVML, by node (index order).
    agent_links: HashMap<String, Vec<tessera_core::topology::GpuLink>>,
    relist: Relist,
    /// Nodes that could not be taken, with why.
    pub rejected: Vec<ConvertError>,
    /// GPU model names (GFD products).
    names: ModelNames,
}

impl NodeTracker {
    /// A tracker that already knows `nodes` (the first list).
    pub fn new(nodes: &[Node]) -> Self {
        let known: HashMap<String, Node> = nodes.iter().map(|n| (n.name.clone(), n.clone())).collect();
        Self { base: known.clone(), known, ..Self::default() }
    }

    /// With GPU model names other than the rule alone.
    pub fn with_names(mut self, names: ModelNames) -> Self {
        self.names = names;
        self
    }

    /// Folds one watch event.
    pub fn on(&mut self, ev: Event<KNode>) -> Vec<ClusterEvent> {
        let mut out = Vec::new();
        match ev {
            Event::Init => self.relist.start(),
            Event::InitApply(n) => {
                self.relist.saw(n.metadata.name.as_ref());
                self.apply(&n, &mut out);
            }
            Event::InitDone => {
                for name in self.relist.unseen(self.known.keys()) {
                    self.known.remove(&name);
                    self.base.remove(&name);
                    out.push(ClusterEvent::NodeRemoved { name });
                }
            }
            Event::Apply(n) => self.apply(&n, &mut out),
            Event::Delete(n) => {
                if let Some(name) = n.metadata.name
                    && self.known.remove(&name).is_some()
                {
                    self.base.remove(&name);
                    out.push(ClusterEvent::NodeRemoved { name });
                }
            }
        }
        out
    }

    /// The node agent on `name` reports its GPUs' health: a GPU is as
    /// unhealthy as the worse of the agent and the node's annotation say.
    pub fn agent_health(&mut self, name: &str, health: Vec<tessera_core::model::GpuHealth>) -> Vec<ClusterEvent> {
        if self.agents.get(name) == Some(&health) {
            return Vec::new();
        }
        self.agents.insert(name.to_string(), health);
        self.refresh(name)
    }

    /// Node `name` with what its agent said laid over it: an upsert if
    /// that changed what the loop knows.
    fn refresh(&mut self, name: &str) -> Vec<ClusterEvent> {
        let Some(mut node) = self.base.get(name).cloned() else { return Vec::new() };
        self.overlay(&mut node);
        if self.known.get(name) == Some(&node) {
            return Vec::new();
        }
        self.known.insert(name.to_string(), node.clone());
        vec![ClusterEvent::NodeUpsert { node }]
    }

    /// Folds one report of node `name`'s agent: its GPUs' health and,
    /// when NVML told, their links; at most one event.
    pub fn agent_report(
        &mut self,
        name: &str,
        health: Vec<tessera_core::model::GpuHealth>,
        links: Option<Vec<tessera_core::topology::GpuLink>>,
    ) -> Vec<ClusterEvent> {
        let mut out = self.agent_health(name, health);
        if let Some(l) = links {
            out.extend(self.agent_topology(name, l));
        }
        // The last upsert of the node is the node as it now is.
        if out.len() > 1 {
            out.drain(..out.len() - 1);
        }
        out
    }

    /// Folds the GPU links node `name`'s agent read from NVML: they apply
    /// where the node's own annotation says nothing and their count is its
    /// GPUs'.
    pub fn agent_topology(&mut self, name: &str, links: Vec<tessera_core::topology::GpuLink>) -> Vec<ClusterEvent> {
        let fits = self.base.get(name).is_none_or(|n| n.gpus.len() == links.len());
        if !fits || self.agent_links.get(name) == Some(&links) {
            return Vec::new();
        }
        self.agent_links.insert(name.to_string(), links);
        self.refresh(name)
    }

    fn overlay(&self, node: &mut Node) {
        if let Some(links) = self.agent_links.get(&node.name)
            && links.len() == node.gpus.len()
            && node.gpus.iter().all(|g| g.link == tessera_core::topology::GpuLink::default())
        {
            for (g, l) in node.gpus.iter_mut().zip(links) {
                g.link = *l;
            }
        }
        use tessera_core::model::GpuHealth;
        let rank = |h: GpuHealth| match h {
            GpuHealth::Healthy => 0,
            GpuHealth::Degraded => 1,
            GpuHealth::Failed => 2,
        };
        if let Some(h) = self.agents.get(&node.name) {
            for (g, &a) in node.gpus.iter_mut().zip(h) {
                if rank(a) > rank(g.health) {
                    g.health = a;
                }
            }
        }
    }

    fn apply(&mut self, n: &KNode, out: &mut Vec<ClusterEvent>) {
        match convert::node(n, &self.names) {
            Ok(mut node) => {
                self.base.insert(node.name.clone(), node.clone());
                self.overlay(&mut node);
                if self.known.get(&node.name) != Some(&node) {
                    self.known.insert(node.name.clone(), node.clone());
                    out.push(ClusterEvent::NodeUpsert { node });
                }
            }
            Err(e) => {
                if !self.rejected.contains(&e) {
                    self.rejected.push(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
