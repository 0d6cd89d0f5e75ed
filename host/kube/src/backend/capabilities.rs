//! What only the Kubernetes backend does beyond [`Backend`]: its
//! capabilities (live moves: who may be evicted, readiness, the journal in
//! a ConfigMap; the scheduler extender's binds) and the reconciliation of a
//! bind that lost a race.
//!
//! [`Backend`]: tessera_server::backend::Backend

use tessera_core::cluster::GpuSet;
use tessera_core::model::Pod;
use tessera_core::sched::PodId;
use tessera_server::backend::{ClusterEvent, ExtenderBackend, LiveBackend, Refusal};

use super::KubeBackend;
use super::tasks::blocking_budget;
use crate::calls;

impl KubeBackend {
    /// A bind refused with 409: someone else bound the pod first (another
    /// scheduler, or a replica that still thinks it leads). The pod leaves
    /// the queue and the model takes it where the API says it runs, with
    /// its GPUs, before the next pass places anything; the watch, which
    /// may already have shown the pod on that node, is not taken as
    /// evidence of the bind that failed.
    pub(super) fn adopt_bound_elsewhere(&mut self, id: PodId, p: &crate::track::PodRef) {
        let (c, ns, name, uid) = (self.client.clone(), p.namespace.clone(), p.name.clone(), p.uid.clone());
        match calls::run(&self.rt, async move { calls::bound_to(c, &ns, &name, &uid).await }) {
            Ok(Some((node, gpus))) => {
                tracing::info!(pod = %format!("{}/{}", p.namespace, p.name), %node, "bound by someone else first; adopted where it runs");
                if let Some(r) = self.live.index.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&id) {
                    r.node = Some(node.clone());
                    r.gpus = gpus;
                }
                self.requeued.push(ClusterEvent::Deleted { id });
                self.requeued.push(ClusterEvent::Running { id, pod: p.pod.clone(), node, gpus });
            }
            // Not bound after all, or gone: the queue and the watch decide.
            Ok(None) => {}
            Err(e) => tracing::warn!("pod {}/{}: cannot read it after a 409: {e}", p.namespace, p.name),
        }
    }

    /// Why running pod `id` may not be moved live, if it may not.
    fn why_not_movable(&self, id: PodId) -> Result<(), String> {
        if !self.leadership.is_leader() {
            return Err("this replica does not lead".into());
        }
        // Asked of every running pod before each plan: read in place.
        let index = self.live.index.lock().unwrap_or_else(|p| p.into_inner());
        let p = index.get(&id).ok_or("unknown pod")?;
        let key = || format!("{}/{}", p.namespace, p.name);
        if p.terminating {
            return Err(format!("pod {} is being deleted already", key()));
        }
        match &p.owner {
            Some((kind, _)) if kind == "ReplicaSet" || kind == "StatefulSet" => {}
            Some((kind, name)) => {
                return Err(format!(
                    "pod {} belongs to {kind} {name}, which does not recreate an evicted pod as it was; not moved",
                    key()
                ));
            }
            None => return Err(format!("pod {} has no controller to recreate it; not moved", key())),
        }
        if !p.ours {
            return Err(format!("pod {} names another scheduler, which would place its replacement; not moved", key()));
        }
        if let Some(b) = blocking_budget(&self.live.budgets, &p.namespace, &p.labels) {
            return Err(format!("the disruption budget {b} allows no disruption of pod {} now", key()));
        }
        Ok(())
    }
}

impl ExtenderBackend for KubeBackend {
    fn bind_named(&self, ns: &str, name: &str, uid: &str, node: &str, gpus: GpuSet) -> Result<(), Refusal> {
        if !self.leadership.is_leader() {
            return Err(Refusal::new("this replica does not lead"));
        }
        self.post_binding(ns, name, uid, node, gpus).map_err(|e| Refusal::new(e.to_string()))
    }

    fn pod_by_uid(&self, uid: &str) -> Option<Pod> {
        let index = self.live.index.lock().unwrap_or_else(|p| p.into_inner());
        index.values().find(|r| r.uid == uid).map(|r| r.pod.clone())
    }
}

impl LiveBackend for KubeBackend {
    fn movable(&self, id: PodId) -> Result<(), Refusal> {
        self.why_not_movable(id).map_err(Refusal::new)
    }

    fn ready(&self, id: PodId) -> bool {
        self.live.index.lock().unwrap_or_else(|p| p.into_inner()).get(&id).is_some_and(|p| p.ready)
    }

    fn journal(&self) -> Result<Box<dyn tessera_movement::journal::Journal + Send>, Refusal> {
        let (ns, name) = &self.journal_at;
        let j = crate::journal::ConfigMapJournal::open(self.client.clone(), ns, name, &self.identity, self.rt.clone())
            .map_err(|e| Refusal::new(format!("ConfigMap {ns}/{name}: {e}")))?;
        Ok(Box::new(j))
    }
}
