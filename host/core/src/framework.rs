//! The seams of the scheduling core, as kube-scheduler's `framework`
//! package is to its scheduler: what a placement policy answers
//! ([`Placer`], [`Choice`]), why a pod could not be placed ([`Why`]), how a
//! choice becomes a bind ([`bind_choice`]), and what a planner proposes
//! ([`Rescheduler`]). The scheduling loop, the simulator and the service
//! import these; this module imports none of them.

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, FilterReason, Placement, choose_gpus};
use crate::model::{Node, NodeId, Pod, PodId};
use crate::telemetry::{Detection, DetectionFrame};

/// Makes placement decisions.
pub trait Placer {
    /// Nodes changed (initially all of them; later the node of each bind
    /// or unbind).
    fn nodes_changed(&mut self, nodes: &[&Node]);

    /// Brings whatever the placer keeps per node up to date now rather
    /// than on the next decision (a service does this before it reports
    /// ready, so the first decision does not pay for mirroring the whole
    /// cluster).
    fn prime(&mut self) {}

    /// The carbon intensity of `zone`'s electricity is now `g_per_kwh`
    /// gCO₂/kWh.
    fn zone_carbon(&mut self, _zone: &str, _g_per_kwh: u32) {}

    /// Use these weights (one per scorer, in policy order) from now on;
    /// adaptive weights call this. A slice of the wrong length is ignored.
    fn set_weights(&mut self, _weights: &[f64]) {}

    /// One interval of telemetry for the policy's detectors (they keep
    /// their own windows); what they find now.
    fn detect(&mut self, _frame: &DetectionFrame) -> Vec<Detection> {
        Vec::new()
    }

    /// Chooses among `candidates` (feasible, in id order). Returns the node
    /// and optionally a preferred GPU for a sharing pod.
    fn place(&mut self, pod: &Pod, candidates: &[NodeId]) -> Choice;
}

/// A placer's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Choice {
    /// The chosen node, if any.
    pub node: Option<NodeId>,
    /// Preferred GPU index for a sharing pod.
    pub gpu_hint: Option<u8>,
    /// Plugin errors and faults seen while deciding.
    pub plugin_errors: u32,
    /// The decision ran out of time and used the scores gathered so far.
    pub deadline_hit: bool,
    /// No node chosen because a plugin's filter rejected every candidate:
    /// the most common reason code (e.g. `SCHED-ZONE-SPREAD`). The pod is
    /// then not placed: a plugin's hard rule holds like the host's.
    pub filtered: Option<String>,
}

/// Why a pod could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Why {
    /// The host's hard filter rejected every node, mostly for this reason.
    Filter(FilterReason),
    /// A plugin's filter rejected every node the host allowed, mostly with
    /// this reason code (e.g. `SCHED-ZONE-SPREAD`).
    Plugin(String),
    /// The pod waits with its gang.
    Gang(GangWait),
    /// The pod's queue holds it (`tessera_core::quota`).
    Queue(QueueWait),
}

impl Why {
    /// The stable reason code.
    pub fn code(&self) -> &str {
        match self {
            Why::Filter(r) => r.code(),
            Why::Plugin(code) => code,
            Why::Gang(w) => w.code(),
            Why::Queue(w) => w.code(),
        }
    }

    /// The queue wait behind this reason, a gang's blocker included.
    pub fn queue_wait(&self) -> Option<&QueueWait> {
        match self {
            Why::Queue(w) => Some(w),
            Why::Gang(w) => w.queue_wait(),
            _ => None,
        }
    }
}

/// Why a pod's queue holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueueWait {
    /// The pod names a queue that is not a leaf of the tree
    /// (`SCHED-QUEUE-UNKNOWN`).
    Unknown {
        /// The name it gave.
        queue: String,
    },
    /// Placing it would take `queue` (its own or an ancestor) past its
    /// limit of `resource` (`SCHED-QUEUE-LIMIT`).
    Limit {
        /// The queue whose limit holds it.
        queue: String,
        /// The resource (`gpus`, `gpus/V100`, `cpu_milli`, `memory_mib`).
        resource: String,
        /// The limit, in the resource's unit.
        limit: String,
        /// Used now.
        used: String,
    },
    /// `queue` (its own or an ancestor) already uses its fair share of
    /// GPUs or more while other queues' demand is unmet
    /// (`SCHED-QUEUE-FAIR-SHARE`; with `fair_share_gate`).
    FairShare {
        /// The queue at its share.
        queue: String,
        /// GPUs it uses.
        used: String,
        /// Its fair share of GPUs this pass.
        share: String,
    },
}

impl QueueWait {
    /// Every code a queue's wait has.
    pub const CODES: [&'static str; 3] = ["SCHED-QUEUE-UNKNOWN", "SCHED-QUEUE-LIMIT", "SCHED-QUEUE-FAIR-SHARE"];

    /// The stable reason code.
    pub fn code(&self) -> &'static str {
        match self {
            QueueWait::Unknown { .. } => Self::CODES[0],
            QueueWait::Limit { .. } => Self::CODES[1],
            QueueWait::FairShare { .. } => Self::CODES[2],
        }
    }

    /// Said in words, for events and explanations.
    pub fn describe(&self) -> String {
        match self {
            QueueWait::Unknown { queue } => format!("queue {queue} is not a leaf queue of the policy"),
            QueueWait::Limit { queue, resource, limit, used } => {
                format!("queue {queue} is at its limit of {resource} ({used} of {limit} used)")
            }
            QueueWait::FairShare { queue, used, share } => {
                format!("queue {queue} uses {used} GPUs, at or past its fair share of {share}, while others wait")
            }
        }
    }
}

/// Why a gang's members wait.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GangWait {
    /// Fewer members than `min_member` are known yet (`SCHED-GANG-INCOMPLETE`).
    Incomplete {
        /// The gang.
        gang: String,
        /// Members known (running, queued or parked).
        present: u32,
        /// Members it needs.
        min_member: u32,
    },
    /// Enough members, but only `fit` of the `needed` fitted together; all
    /// that was held for them was released (`SCHED-GANG-UNSCHEDULABLE`).
    Unschedulable {
        /// The gang.
        gang: String,
        /// Members that fitted.
        fit: u32,
        /// Members that had to (`min_member` less those running).
        needed: u32,
        /// Why the first member that did not fit did not.
        blocker: Box<Why>,
    },
    /// Still waiting, for `wait`'s reason, past the gang's timeout
    /// (`SCHED-GANG-TIMEOUT`).
    TimedOut {
        /// Seconds it has waited.
        waited_s: u64,
        /// Why it waits.
        wait: Box<GangWait>,
    },
}

impl GangWait {
    /// Every code a gang's wait has.
    pub const CODES: [&'static str; 3] = ["SCHED-GANG-INCOMPLETE", "SCHED-GANG-UNSCHEDULABLE", "SCHED-GANG-TIMEOUT"];

    /// The stable reason code.
    pub fn code(&self) -> &'static str {
        match self {
            GangWait::Incomplete { .. } => Self::CODES[0],
            GangWait::Unschedulable { .. } => Self::CODES[1],
            GangWait::TimedOut { .. } => Self::CODES[2],
        }
    }

    /// Said in words, for events and explanations.
    pub fn describe(&self) -> String {
        match self {
            GangWait::Incomplete { gang, present, min_member } => {
                format!("gang {gang}: {present} of {min_member} members known")
            }
            GangWait::Unschedulable { gang, fit, needed, blocker } => {
                format!("gang {gang}: {fit} of {needed} members fit together ({})", blocker.code())
            }
            GangWait::TimedOut { waited_s, wait } => {
                format!("{} (waiting {waited_s} s, past its timeout)", wait.describe())
            }
        }
    }

    /// The queue wait that stopped the gang, if one did.
    pub fn queue_wait(&self) -> Option<&QueueWait> {
        match self {
            GangWait::Incomplete { .. } => None,
            GangWait::Unschedulable { blocker, .. } => blocker.queue_wait(),
            GangWait::TimedOut { wait, .. } => wait.queue_wait(),
        }
    }

    /// Whether only another member's arrival can end the wait.
    pub fn needs_members(&self) -> bool {
        match self {
            GangWait::Incomplete { .. } => true,
            GangWait::Unschedulable { .. } => false,
            GangWait::TimedOut { wait, .. } => wait.needs_members(),
        }
    }

    /// Whether the gang is short of room: too few members fit, for the
    /// host's filter (past its timeout or not).
    pub fn short_of_room(&self) -> bool {
        match self {
            GangWait::Unschedulable { blocker, .. } => matches!(**blocker, Why::Filter(_)),
            GangWait::TimedOut { wait, .. } => wait.short_of_room(),
            GangWait::Incomplete { .. } => false,
        }
    }
}

/// Binds `pod` where the placer chose among `candidates` (those that passed
/// the host's filter, by id). A placer that chose nothing, or a node outside
/// the candidates, falls back to the first candidate: the hard filter stays
/// in charge. A plugin filter that rejected every candidate refuses the pod
/// with its code. The caller tells the placer about the node.
pub fn bind_choice(cluster: &mut Cluster, pod: &Pod, candidates: &[NodeId], choice: &Choice) -> Result<Placement, Why> {
    if choice.node.is_none()
        && let Some(code) = &choice.filtered
    {
        return Err(Why::Plugin(code.clone()));
    }
    let node = choice.node.filter(|n| candidates.binary_search(n).is_ok()).unwrap_or(candidates[0]);
    let gpus =
        choose_gpus(cluster.node(node).expect("candidate exists"), pod, choice.gpu_hint).expect("a candidate fits");
    Ok(cluster.bind(node, pod, gpus).expect("a candidate passes the hard filter"))
}

/// A global planner (e.g. the one of `tessera-resched`): it proposes moves
/// over the cluster as it stands; whoever calls it carries them out.
pub trait Rescheduler {
    /// Moves to make now, at most `max_moves`, in order: the index of a pod
    /// in `running` and where it goes. A move that does not fit when its
    /// turn comes is retried after the others; one that never fits is
    /// skipped.
    fn plan(&mut self, cluster: &Cluster, running: &[(Pod, Placement)], max_moves: usize) -> Vec<(usize, Placement)>;

    /// Moves answering what the detectors found (`anomalies`, at or above
    /// the threshold): by default a global plan; a planner may move pods
    /// only off the flagged nodes.
    fn plan_for(
        &mut self,
        cluster: &Cluster,
        running: &[(Pod, Placement)],
        max_moves: usize,
        anomalies: &[Detection],
    ) -> Vec<(usize, Placement)> {
        let _ = anomalies;
        self.plan(cluster, running, max_moves)
    }
}

/// Carries out `moves` in order with `apply` (true: done, or never to be
/// done); a move that does not fit yet, because it needs room a later move
/// frees, is tried again after the others, until a pass makes no progress.
pub fn apply_in_passes<K: Copy>(mut moves: Vec<(K, Placement)>, mut apply: impl FnMut(K, Placement) -> bool) {
    loop {
        let before = moves.len();
        moves.retain(|&(i, to)| !apply(i, to));
        if moves.is_empty() || moves.len() == before {
            return;
        }
    }
}

/// What asked for a rescheduling cycle of the online loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    /// A detection round found anomalies at or above the threshold.
    Anomalies,
    /// The rescheduling period came round.
    Periodic,
}

impl Trigger {
    /// Its name in traces, metrics and records.
    pub fn name(self) -> &'static str {
        match self {
            Trigger::Anomalies => "anomalies",
            Trigger::Periodic => "periodic",
        }
    }
}

/// One rescheduling cycle the online loop asks for.
#[derive(Debug, Clone, Copy)]
pub struct Cycle<'a> {
    /// Why now.
    pub trigger: Trigger,
    /// What the detectors found (empty for a periodic cycle): a planner
    /// moves pods off the flagged nodes only.
    pub anomalies: &'a [Detection],
    /// Most moves the cycle may make.
    pub max_moves: usize,
    /// The loop's time, seconds.
    pub at: u64,
}

/// Plans a rescheduling cycle and carries it out (the Policy Manager and
/// the Movement Manager behind one call), on simulated time.
pub trait Reschedule {
    /// Plans over `running` (the pods running now on `cluster`, whose ids
    /// are `ids`, in the same order) and executes the plan; the moves that
    /// ended done, as the index of a pod in `running` and where it runs
    /// now.
    fn reschedule(
        &mut self,
        cluster: &Cluster,
        running: &[(Pod, Placement)],
        ids: &[PodId],
        cycle: &Cycle<'_>,
    ) -> Vec<(usize, Placement)>;
}
