//! The placer the loop calls: the active policy, recording each decision
//! for the explain log and traces, and, during a rollout, the candidate
//! policy deciding beside it — in shadow for every pod without acting, in
//! canary acting for a share of pods.

use std::time::{Duration, Instant, SystemTime};

use tessera_core::driver::Model;
use tessera_core::framework::{Choice, Placer};
use tessera_core::model::{Node, NodeId, Pod};
use tessera_core::telemetry::{Detection, DetectionFrame};
use tessera_policy::PolicyDocument;
use tessera_wasm::{Decision, Policy};

use crate::rollout::{Compared as ComparedView, Stage};
use crate::state::Shared;

/// One placement decision as the acting policy made it, with when it ran.
pub(super) struct Recorded {
    /// The pod decided (its name: how its attempt finds it).
    pub pod: String,
    pub wall: SystemTime,
    pub decision: Decision,
    /// When the loop told the placer about the bound node (the bind).
    pub bound_after: Option<Duration>,
    pub started: Instant,
    /// The rollout's candidate made it (canary).
    pub by_candidate: bool,
}

/// A policy on its way in.
pub(crate) struct Candidate {
    pub policy: Policy,
    pub doc: PolicyDocument,
    pub stage: Stage,
}

/// The two policies' choices for one pod.
pub(super) struct Compared {
    pub pod: String,
    pub active: Option<NodeId>,
    pub candidate: Option<NodeId>,
    /// The candidate's choice was the one carried out (canary).
    pub candidate_acted: bool,
}

/// The acting placer.
pub(super) struct Recorder {
    pub policy: Policy,
    pub candidate: Option<Candidate>,
    pub recorded: Vec<Recorded>,
    pub compared: Vec<Compared>,
    pub awaiting_bind: bool,
}

impl Recorder {
    pub fn new(policy: Policy) -> Self {
        Self { policy, candidate: None, recorded: Vec::new(), compared: Vec::new(), awaiting_bind: false }
    }

    /// The pass's shadow and canary comparisons into the rollout view (and
    /// its metrics).
    pub fn fold(&mut self, model: &Model, shared: &Shared) {
        let compared = std::mem::take(&mut self.compared);
        if compared.is_empty() {
            return;
        }
        let nodes = model.cluster().nodes();
        let name = |n: Option<NodeId>| n.and_then(|n| nodes.get(n as usize)).map(|n| n.name.clone());
        let stage = self.candidate.as_ref().map_or("shadow", |c| c.stage.name());
        let mut v = shared.rollout.write().unwrap_or_else(|p| p.into_inner());
        for c in compared {
            let agreed = v.compare(ComparedView {
                pod: c.pod,
                active: name(c.active),
                candidate: name(c.candidate),
                candidate_acted: c.candidate_acted,
            });
            shared
                .metrics
                .rollout_decisions
                .get_or_create(&vec![("stage".into(), stage.into()), ("agreed".into(), agreed.to_string())])
                .inc();
        }
    }

    /// `name: plugin@version, …` of a policy.
    pub fn label(name: &str, policy: &Policy) -> String {
        let versions: Vec<String> = policy
            .scorers()
            .iter()
            .chain(policy.detectors())
            .map(|m| format!("{}@{}", m.name, m.slot.current().version()))
            .collect();
        format!("{name}: {}", versions.join(", "))
    }
}

impl Placer for Recorder {
    fn nodes_changed(&mut self, nodes: &[&Node]) {
        if std::mem::take(&mut self.awaiting_bind)
            && let Some(r) = self.recorded.last_mut()
        {
            r.bound_after = Some(r.started.elapsed());
        }
        Placer::nodes_changed(&mut self.policy, nodes);
        if let Some(c) = &mut self.candidate {
            Placer::nodes_changed(&mut c.policy, nodes);
        }
    }

    fn prime(&mut self) {
        Placer::prime(&mut self.policy);
        if let Some(c) = &mut self.candidate {
            Placer::prime(&mut c.policy);
        }
    }

    fn zone_carbon(&mut self, zone: &str, g_per_kwh: u32) {
        self.policy.set_zone_carbon(zone, g_per_kwh);
        if let Some(c) = &mut self.candidate {
            c.policy.set_zone_carbon(zone, g_per_kwh);
        }
    }

    fn set_weights(&mut self, weights: &[f64]) {
        Placer::set_weights(&mut self.policy, weights);
    }

    fn detect(&mut self, frame: &DetectionFrame) -> Vec<Detection> {
        // Detection stays with the active policy.
        Placer::detect(&mut self.policy, frame)
    }

    fn place(&mut self, pod: &Pod, candidates: &[NodeId]) -> Choice {
        let (wall, started) = (SystemTime::now(), Instant::now());
        let active = self.policy.decide(pod, candidates);
        let mut acting = active;
        let mut by_candidate = false;
        if let Some(c) = &self.candidate {
            let theirs = c.policy.decide(pod, candidates);
            let candidate_acted = c.stage.acts_for(&pod.name);
            self.compared.push(Compared {
                pod: pod.name.clone(),
                active: acting.chosen,
                candidate: theirs.chosen,
                candidate_acted,
            });
            if candidate_acted {
                acting = theirs;
                by_candidate = true;
            }
        }
        let ch = acting.choice();
        self.recorded.push(Recorded {
            pod: pod.name.clone(),
            wall,
            decision: acting,
            bound_after: None,
            started,
            by_candidate,
        });
        self.awaiting_bind = ch.node.is_some();
        ch
    }
}
