//! The loop's side of the scheduler extender: filter, score and bind from
//! the model and the active policy, between two passes.

use tessera_core::cluster::{FilterReason, check, choose_gpus};
use tessera_core::model::{NodeId, Pod};

use tessera_core::driver::Model;

use super::service::Service;
use crate::extend::{ExtenderAnswer, ExtenderCall, MAX_SCORE, NodeVerdict};

impl Service {
    pub(super) fn extend(&mut self, model: &mut Model, call: ExtenderCall) -> ExtenderAnswer {
        match call {
            ExtenderCall::Filter { pod, nodes } => {
                ExtenderAnswer::Filtered(self.extender_filter(model, &pod, &nodes).0)
            }
            ExtenderCall::Prioritize { pod, nodes } => {
                let (verdicts, scores) = self.extender_filter(model, &pod, &nodes);
                let scored = verdicts.into_iter().map(|v| (v.node.clone(), scores(&v.node))).collect();
                ExtenderAnswer::Scored(scored)
            }
            ExtenderCall::Bind { namespace, name, uid, node, pod } => {
                ExtenderAnswer::Bound(self.extender_bind(model, &namespace, &name, &uid, &node, pod.as_ref()))
            }
            ExtenderCall::Pods { uids } => ExtenderAnswer::Pods(
                uids.iter().map(|u| self.backend.extender().and_then(|x| x.pod_by_uid(u))).collect(),
            ),
        }
    }

    /// Verdicts per node, and the normalised score of a node (0 for a
    /// node that did not pass).
    fn extender_filter(
        &mut self,
        model: &mut Model,
        pod: &Pod,
        nodes: &[String],
    ) -> (Vec<NodeVerdict>, impl Fn(&str) -> i64 + use<>) {
        model.sync(&mut self.placer);
        let cluster = model.cluster();
        let mut verdicts = Vec::with_capacity(nodes.len());
        let mut ids: Vec<(NodeId, usize)> = Vec::new();
        for (i, name) in nodes.iter().enumerate() {
            let fail = |failure: String, unresolvable| NodeVerdict {
                node: name.clone(),
                failure: Some(failure),
                unresolvable,
            };
            let Some(id) = model.node_id(name) else {
                verdicts.push(fail("SCHED-NODE-UNKNOWN: Tessera does not know this node".into(), true));
                continue;
            };
            match check(&cluster.nodes()[id as usize], pod) {
                Ok(()) => {
                    ids.push((id, i));
                    verdicts.push(NodeVerdict { node: name.clone(), failure: None, unresolvable: false });
                }
                Err(reason) => {
                    let unresolvable = matches!(
                        reason,
                        FilterReason::NodeNotReady | FilterReason::ModelMismatch | FilterReason::NodeConstraint
                    );
                    verdicts.push(fail(reason.code().to_string(), unresolvable));
                }
            }
        }
        let candidates: Vec<NodeId> = ids.iter().map(|&(id, _)| id).collect();
        let decision = self.placer.policy.decide(pod, &candidates);
        for r in &decision.rejections {
            if let Some(&(_, i)) = ids.iter().find(|&&(id, _)| id == r.node) {
                verdicts[i].failure = Some(format!("{}: {}", r.plugin, r.reason));
                verdicts[i].unresolvable = true;
            }
        }
        let (lo, hi) =
            decision.totals.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &t| (a.min(t), b.max(t)));
        let mut scores = std::collections::HashMap::new();
        for (&id, &total) in decision.feasible.iter().zip(&decision.totals) {
            let s = if hi > lo { ((total - lo) / (hi - lo) * MAX_SCORE as f64).round() as i64 } else { MAX_SCORE };
            scores.insert(cluster.nodes()[id as usize].name.clone(), s);
        }
        (verdicts, move |name: &str| scores.get(name).copied().unwrap_or(0))
    }

    fn extender_bind(
        &mut self,
        model: &Model,
        ns: &str,
        name: &str,
        uid: &str,
        node: &str,
        pod: Option<&Pod>,
    ) -> Result<(), String> {
        if !self.backend.active() {
            return Err("this replica does not lead; the leader binds".into());
        }
        let id = model.node_id(node).ok_or_else(|| format!("node {node} is not known"))?;
        let n = &model.cluster().nodes()[id as usize];
        let gpus = match pod {
            Some(p) if p.gpu_count > 0 => choose_gpus(n, p, None)
                .ok_or_else(|| format!("node {node} has no GPUs free for {ns}/{name} in Tessera's model"))?,
            _ => tessera_core::cluster::GpuSet::default(),
        };
        let Some(x) = self.backend.extender() else {
            return Err(format!("the {} backend binds only the pods it schedules", self.backend.name()));
        };
        x.bind_named(ns, name, uid, node, gpus).map_err(|r| r.reason)
    }
}
