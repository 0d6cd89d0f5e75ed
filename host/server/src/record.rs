//! What the service remembers of its decisions and plans, for the explain
//! and attribution API: bounded logs, oldest dropped first, indexed by pod
//! name and plan id.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What became of a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Bound on a node.
    Bound,
    /// Bound after preempting other pods.
    Preempted,
    /// Fits nowhere now; parked with a reason code.
    Unschedulable,
}

impl Outcome {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Bound => "bound",
            Outcome::Preempted => "preempted",
            Outcome::Unschedulable => "unschedulable",
        }
    }
}

/// One plugin's part in a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PluginPart {
    /// Plugin name in the policy.
    pub plugin: String,
    /// Version that answered.
    pub version: String,
    /// Weight of its normalised score.
    pub weight: f64,
    /// Its raw score for the chosen node.
    pub winner_score: Option<i64>,
    /// Its scoring call, microseconds.
    pub latency_us: u64,
    /// Why it abstained: the fault or guest error's stable code
    /// (`PLUGIN-TIMEOUT`, …).
    pub error_code: Option<String>,
    /// And its message.
    pub error: Option<String>,
}

/// A candidate node with its scores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Candidate {
    /// Node name.
    pub node: String,
    /// Weighted, normalised total.
    pub total: f64,
    /// Raw score of each plugin that answered, in the order of `plugins`.
    pub scores: Vec<i64>,
}

/// Nodes a plugin's filter rejected for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PluginRejections {
    /// Plugin.
    pub plugin: String,
    /// Reason code.
    pub reason: String,
    /// Nodes rejected.
    pub nodes: u32,
}

/// The explanation of one placement decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DecisionRecord {
    /// Pod name.
    pub pod: String,
    /// Workload the pod belongs to.
    pub workload: String,
    /// Wall-clock time of the decision, Unix milliseconds.
    pub at_unix_ms: u64,
    /// Simulated (backend) time, seconds.
    pub backend_time_s: u64,
    /// Policy and its plugin versions (`name: plugin@version, …`).
    pub policy: String,
    /// What became of it.
    pub outcome: Outcome,
    /// Chosen node.
    pub node: Option<String>,
    /// GPUs bound on it.
    pub gpus: Vec<u8>,
    /// Reason code when not bound (`SCHED-GPU-INSUFFICIENT`, …).
    pub reason: Option<String>,
    /// Nodes that passed the host's hard filter.
    pub candidates: usize,
    /// Of those, nodes that passed every plugin filter.
    pub feasible: usize,
    /// Nodes the host's hard filter rejected, by reason code.
    pub host_filter: BTreeMap<String, u32>,
    /// Nodes the plugins' filters rejected, by plugin and reason.
    pub plugin_filter: Vec<PluginRejections>,
    /// Each scorer's part.
    pub plugins: Vec<PluginPart>,
    /// The winner's weighted total.
    pub winner_total: Option<f64>,
    /// The best other candidates (at most `otel.top_k`), best first.
    pub runners_up: Vec<Candidate>,
    /// Pods evicted to make room (preemption).
    pub victims: Vec<String>,
    /// Wall time of the decision (filter, scoring, select, bind), µs.
    pub latency_us: u64,
    /// Trace of the decision (`tessera.schedule.pod`), 32 hex digits.
    pub trace_id: String,
    /// Its root span, 16 hex digits.
    pub span_id: String,
    /// Whether the trace was sampled (exported).
    pub sampled: bool,
}

/// What would have to move for a waiting pod to fit: the planner's
/// room-making search (`tessera_core::room`) on the cluster as it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RoomAnswer {
    /// The pod.
    pub pod: String,
    /// It is waiting (otherwise nothing was searched).
    pub waiting: bool,
    /// The reason code of its last failure.
    pub reason: Option<String>,
    /// The node room would be made on; none: moving at most `max_moves`
    /// pods (never hard-tier ones) makes room nowhere.
    pub node: Option<String>,
    /// The moves, in order.
    pub moves: Vec<RoomMove>,
    /// Most pods the search moves.
    pub max_moves: usize,
}

/// One move of a [`RoomAnswer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RoomMove {
    /// The pod moved.
    pub pod: String,
    /// From.
    pub from: String,
    /// To.
    pub to: String,
    /// Its GPUs there.
    pub gpus: Vec<u8>,
}

/// What became of a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MoveState {
    /// Planned, not yet handed to the executor (or not ordered).
    Planned,
    /// Waiting its turn in the executor.
    Pending,
    /// Room held on the target.
    Reserved,
    /// Evicted from its source.
    Evicted,
    /// Started on the target, not yet ready.
    Started,
    /// Running on its target.
    Done,
    /// It failed; the pod stayed or was put back.
    Failed,
    /// Done, then moved back by a rollback.
    RolledBack,
    /// Never attempted (cooldown, caps, budgets, no safe order).
    Dropped,
    /// Both the start and the restore failed; it is put back later.
    Restoring,
}

impl MoveState {
    /// Every state.
    pub const ALL: [MoveState; 10] = [
        MoveState::Planned,
        MoveState::Pending,
        MoveState::Reserved,
        MoveState::Evicted,
        MoveState::Started,
        MoveState::Done,
        MoveState::Failed,
        MoveState::RolledBack,
        MoveState::Dropped,
        MoveState::Restoring,
    ];

    /// What a step of the executor means for its move, and why it failed.
    pub fn of(step: &tessera_movement::exec::StepState) -> (Self, Option<String>) {
        use tessera_movement::exec::StepState as S;
        match step {
            S::Done => (MoveState::Done, None),
            S::Failed { reason } => (MoveState::Failed, Some(reason.clone())),
            S::RolledBack { reason } => (MoveState::RolledBack, Some(reason.clone())),
            S::Dropped { reason } => (MoveState::Dropped, Some(reason.clone())),
            S::Restoring { reason, .. } => (MoveState::Restoring, Some(reason.clone())),
            // Under way (a live plan handed to another leader stops here).
            S::Pending => (MoveState::Pending, None),
            S::Reserving | S::Reserved { .. } => (MoveState::Reserved, None),
            S::Evicting | S::Evicted => (MoveState::Evicted, None),
            S::Starting | S::Started { .. } => (MoveState::Started, None),
        }
    }

    /// Its name in the API and traces.
    pub fn as_str(self) -> &'static str {
        match self {
            MoveState::Planned => "planned",
            MoveState::Pending => "pending",
            MoveState::Reserved => "reserved",
            MoveState::Evicted => "evicted",
            MoveState::Started => "started",
            MoveState::Done => "done",
            MoveState::Failed => "failed",
            MoveState::RolledBack => "rolled_back",
            MoveState::Dropped => "dropped",
            MoveState::Restoring => "restoring",
        }
    }

    /// The migration-failure code a move that ended so is counted under
    /// (`MOVE-FAILED`, …); none for a move done or not over.
    pub fn failure_code(self) -> Option<&'static str> {
        match self {
            MoveState::Failed => Some("MOVE-FAILED"),
            MoveState::RolledBack => Some("MOVE-ROLLED-BACK"),
            MoveState::Dropped => Some("MOVE-DROPPED"),
            MoveState::Restoring => Some("MOVE-RESTORING"),
            MoveState::Planned
            | MoveState::Pending
            | MoveState::Reserved
            | MoveState::Evicted
            | MoveState::Started
            | MoveState::Done => None,
        }
    }
}

/// Where a cycle's plan stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanState {
    /// Nothing worth moving.
    Empty,
    /// Planned, not yet executed.
    Planned,
    /// Executing live, across passes.
    Executing,
    /// Executed to the end.
    Executed,
    /// Stopped early (a health gate, a change of leader, the journal):
    /// see `reason`.
    Stopped,
    /// The executor or the journal refused it: see `reason`.
    Refused,
}

/// One move of a plan and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MoveRecord {
    /// Pod name.
    pub pod: String,
    /// Source node.
    pub from: String,
    /// Target node.
    pub to: String,
    /// Strategy that proposed it.
    pub strategy: String,
    /// Its cost by the cost model.
    pub cost: f64,
    /// What became of it.
    pub state: MoveState,
    /// Why it failed, rolled back or was dropped.
    pub reason: Option<String>,
    /// The moves (indices into the plan's) it waits for: they free the
    /// room it needs, or are an earlier hop of the same pod (the Movement
    /// Manager's DAG).
    #[serde(default)]
    pub after: Vec<usize>,
}

/// One rescheduling cycle's plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanRecord {
    /// Plan id (1, 2, …).
    pub id: u64,
    /// Wall-clock time of the cycle, Unix milliseconds.
    pub at_unix_ms: u64,
    /// Backend time, seconds.
    pub backend_time_s: u64,
    /// `periodic` or `anomalies` (with the kinds found).
    pub trigger: String,
    /// Anomalies the detectors reported this cycle.
    pub anomalies: u32,
    /// How the planner found it (`greedy`, `milp`, …).
    pub solver: String,
    /// The planner's time limit cut it short.
    pub timed_out: bool,
    /// Planning wall time, milliseconds.
    pub plan_ms: f64,
    /// Fragmented GPU capacity before the plan (milli-GPUs the target
    /// workload cannot use), and after.
    pub fragmentation_before: f64,
    /// After.
    pub fragmentation_after: f64,
    /// Whole free GPUs before and after.
    pub whole_free_before: u64,
    /// After.
    pub whole_free_after: u64,
    /// Gain by the cost model.
    pub gain: f64,
    /// Cost of the moves.
    pub cost: f64,
    /// Where it stands.
    pub state: PlanState,
    /// Why it stopped or was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The moves.
    pub moves: Vec<MoveRecord>,
    /// Trace of the cycle (`tessera.resched.cycle`).
    pub trace_id: String,
}

/// The last `cap` decisions, by pod (a pod decided again replaces its
/// entry in the index; the log keeps both).
#[derive(Debug)]
pub struct DecisionLog {
    cap: usize,
    seq0: u64,
    entries: VecDeque<DecisionRecord>,
    by_pod: HashMap<String, u64>,
}

impl DecisionLog {
    /// An empty log keeping at most `cap` decisions.
    pub fn new(cap: usize) -> Self {
        Self { cap: cap.max(1), seq0: 0, entries: VecDeque::new(), by_pod: HashMap::new() }
    }

    /// Appends a decision, dropping the oldest past the cap.
    pub fn push(&mut self, d: DecisionRecord) {
        if self.entries.len() == self.cap
            && let Some(old) = self.entries.pop_front()
        {
            if self.by_pod.get(&old.pod) == Some(&self.seq0) {
                self.by_pod.remove(&old.pod);
            }
            self.seq0 += 1;
        }
        let seq = self.seq0 + self.entries.len() as u64;
        self.by_pod.insert(d.pod.clone(), seq);
        self.entries.push_back(d);
    }

    /// The latest decision about `pod`.
    pub fn get(&self, pod: &str) -> Option<&DecisionRecord> {
        let seq = *self.by_pod.get(pod)?;
        self.entries.get((seq - self.seq0) as usize)
    }

    /// Decisions made in `[from, to]` (Unix ms), oldest first.
    pub fn window(&self, from: u64, to: u64) -> impl Iterator<Item = &DecisionRecord> {
        // Wall times only grow: binary search the start.
        let start = self.entries.partition_point(|d| d.at_unix_ms < from);
        self.entries.range(start..).take_while(move |d| d.at_unix_ms <= to)
    }

    /// Decisions held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Decisions recorded since the start (held or not).
    pub fn total(&self) -> u64 {
        self.seq0 + self.entries.len() as u64
    }

    /// Every decision held, newest first.
    pub fn newest_first(&self) -> impl Iterator<Item = &DecisionRecord> {
        self.entries.iter().rev()
    }

    /// The oldest decision held.
    pub fn oldest(&self) -> Option<&DecisionRecord> {
        self.entries.front()
    }

    /// Most decisions held.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The most recent decision.
    pub fn last(&self) -> Option<&DecisionRecord> {
        self.entries.back()
    }
}

/// The last `cap` plans, by id.
#[derive(Debug)]
pub struct PlanLog {
    cap: usize,
    entries: VecDeque<PlanRecord>,
}

impl PlanLog {
    /// An empty log keeping at most `cap` plans.
    pub fn new(cap: usize) -> Self {
        Self { cap: cap.max(1), entries: VecDeque::new() }
    }

    /// Appends or replaces (same id) a plan.
    pub fn upsert(&mut self, p: PlanRecord) {
        if let Some(slot) = self.entries.iter_mut().rev().find(|e| e.id == p.id) {
            *slot = p;
            return;
        }
        if self.entries.len() == self.cap {
            self.entries.pop_front();
        }
        self.entries.push_back(p);
    }

    /// A plan by id.
    pub fn get(&self, id: u64) -> Option<&PlanRecord> {
        self.entries.iter().rev().find(|e| e.id == id)
    }

    /// Every plan held, newest first.
    pub fn newest_first(&self) -> impl Iterator<Item = &PlanRecord> {
        self.entries.iter().rev()
    }

    /// Plans made in `[from, to]` (Unix ms).
    pub fn window(&self, from: u64, to: u64) -> impl Iterator<Item = &PlanRecord> {
        self.entries.iter().filter(move |p| (from..=to).contains(&p.at_unix_ms))
    }
}

/// A bound decision about `pod` at `at` with nothing else to tell, for
/// tests to adjust.
#[cfg(test)]
pub(crate) fn sample_decision(pod: &str, at: u64) -> DecisionRecord {
    DecisionRecord {
        pod: pod.into(),
        workload: String::new(),
        at_unix_ms: at,
        backend_time_s: 0,
        policy: "p".into(),
        outcome: Outcome::Bound,
        node: Some("n".into()),
        gpus: vec![],
        reason: None,
        candidates: 1,
        feasible: 1,
        host_filter: BTreeMap::new(),
        plugin_filter: vec![],
        plugins: vec![],
        winner_total: None,
        runners_up: vec![],
        victims: vec![],
        latency_us: 1,
        trace_id: String::new(),
        span_id: String::new(),
        sampled: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(pod: &str, at: u64) -> DecisionRecord {
        sample_decision(pod, at)
    }

    #[test]
    fn the_log_is_bounded_and_indexed_by_pod() {
        let mut log = DecisionLog::new(3);
        for (i, pod) in ["a", "b", "a", "c", "d"].iter().enumerate() {
            log.push(rec(pod, i as u64 * 10));
        }
        assert_eq!(log.len(), 3);
        // "b" fell off; "a" is its second decision (t = 20), kept.
        assert!(log.get("b").is_none());
        assert_eq!(log.get("a").unwrap().at_unix_ms, 20);
        assert_eq!(log.get("d").unwrap().at_unix_ms, 40);
        let w: Vec<u64> = log.window(25, 40).map(|d| d.at_unix_ms).collect();
        assert_eq!(w, vec![30, 40]);
        // One more push drops the second "a" too.
        log.push(rec("e", 50));
        assert!(log.get("a").is_none());
    }
}
