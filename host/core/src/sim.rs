//! The embedded cluster simulator: discrete events on an injected clock,
//! deterministic for a given input and seed.
//!
//! Two protocols:
//! - [`Protocol::Submissions`] — the published FGD protocol: pods are
//!   submitted one at a time in a given order, never leave, and a pod that
//!   fits nowhere fails.
//! - [`Protocol::TimeReplay`] — pods arrive at their creation time and leave
//!   at their deletion time; a pod that fits nowhere waits (FIFO) and is
//!   retried whenever capacity is freed.
//!
//! Decisions come from a [`Placer`] (in production, a policy of Wasm
//! plugins); the simulator owns the hard filter, binding and metrics.

pub mod jobs;
pub mod online;

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, FilterReason, Placement};
use crate::framework::{Placer, Rescheduler, Why, bind_choice};
use crate::metrics::is_hot;
use crate::metrics::{FragmentationTracker, Reading, TargetWorkload};
use crate::model::{Arrival, GPU_MILLI, Node, NodeId, Pod, Tier};

/// How pods arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// One at a time in order, no departures.
    Submissions,
    /// By creation and deletion time.
    TimeReplay,
}

/// One bucket of the allocation curve.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Arrived GPU demand, % of capacity, rounded to an integer.
    pub arrived_pct: u32,
    /// Readings averaged into this bucket.
    pub samples: u32,
    /// Mean GPU allocation, %.
    pub allocation: f64,
    /// Mean fragmentation amount, %.
    pub fragmentation: f64,
    /// Mean fragmentation rate, %.
    pub fragmentation_rate: f64,
}

/// The result of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Pods submitted (including failed ones).
    pub submitted: u64,
    /// Pods placed.
    pub placed: u64,
    /// Pods that fit nowhere (submissions protocol).
    pub failed: u64,
    /// Pods still waiting at the end (time replay).
    pub pending: u64,
    /// Pods that left (time replay).
    pub departed: u64,
    /// Failures by reason code: for each failed pod, the most common
    /// rejection reason over all nodes.
    pub failures_by_reason: BTreeMap<String, u64>,
    /// Plugin errors and faults during the run.
    pub plugin_errors: u64,
    /// Decisions that ran past the policy's time budget.
    pub deadline_hits: u64,
    /// Running pods moved to make room (rescheduling).
    pub migrations: u64,
    /// Pods placed only thanks to those moves.
    pub rescued: u64,
    /// Global plans made (periodic or when a pod failed).
    #[serde(default)]
    pub reschedule_plans: u64,
    /// Migrations of those plans (part of `migrations`).
    #[serde(default)]
    pub planned_migrations: u64,
    /// Submission index of every pod that failed (submissions protocol).
    #[serde(skip)]
    pub failed_pods: Vec<usize>,
    /// Total GPUs in the cluster.
    pub total_gpus: u64,
    /// The allocation curve by arrived GPU demand.
    pub buckets: Vec<Bucket>,
    /// The reading after the last event.
    pub last: Reading,
    /// Per node: readings after which the node was a hotspot (GPU, CPU or
    /// memory allocated ≥ 90%).
    pub hotspot_counts: Vec<u32>,
}

impl RunReport {
    /// Mean allocation in the bucket of `pct` arrived demand, if reached.
    pub fn allocation_at(&self, pct: u32) -> Option<f64> {
        self.buckets.iter().find(|b| b.arrived_pct == pct).map(|b| b.allocation)
    }

    /// Unallocated GPUs (%) at `pct` arrived demand, or at the end where the
    /// run never reached it: the published protocol's figure at 130.
    pub fn unallocated_at(&self, pct: u32) -> f64 {
        100.0 - self.allocation_at(pct).unwrap_or(self.last.allocation)
    }
}

/// An event of a replay: a pod leaves or arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// Ordered first at equal times: capacity frees before pods arrive.
    Leave,
    Arrive,
}

/// Arrivals and departures by time (departures first at equal times,
/// then input order), as `(time, kind, arrival index)`.
pub(crate) fn timeline(arrivals: &[Arrival]) -> Vec<(u64, Kind, usize)> {
    let mut events = Vec::with_capacity(arrivals.len() * 2);
    for (i, a) in arrivals.iter().enumerate() {
        events.push((a.at, Kind::Arrive, i));
        if let Some(t) = a.leaves_at {
            events.push((t.max(a.at), Kind::Leave, i));
        }
    }
    events.sort();
    events
}

/// Most pods moved to make room for one pod.
pub const MAX_MOVES_PER_POD: usize = 6;

struct Curve {
    capacity_milli: u64,
    arrived_milli: u64,
    buckets: BTreeMap<u32, (u32, f64, f64, f64)>,
    hotspot_counts: Vec<u32>,
    hot: Vec<bool>,
}

impl Curve {
    fn new(nodes: &[Node]) -> Self {
        Self {
            capacity_milli: nodes.iter().map(|n| n.gpus.len() as u64 * u64::from(GPU_MILLI)).sum(),
            arrived_milli: 0,
            buckets: BTreeMap::new(),
            hotspot_counts: vec![0; nodes.len()],
            hot: nodes.iter().map(is_hot).collect(),
        }
    }

    fn arrive(&mut self, pod: &Pod) {
        self.arrived_milli += u64::from(pod.gpu_count) * u64::from(pod.gpu_milli.min(GPU_MILLI));
    }

    fn node_changed(&mut self, n: &Node) {
        self.hot[n.id as usize] = is_hot(n);
    }

    fn record(&mut self, r: Reading) {
        for (c, h) in self.hotspot_counts.iter_mut().zip(&self.hot) {
            *c += u32::from(*h);
        }
        if self.capacity_milli == 0 {
            return;
        }
        // Rounded half to even, as the published analysis (numpy) does:
        // the first submissions (0 to 0.5% arrived) fall in bucket 0, with a
        // mean allocation of ~0.25% there, and bucket 130 starts at 129.5%.
        let (num, den) = (100 * self.arrived_milli, self.capacity_milli);
        let (q, rem) = (num / den, num % den);
        let pct = (q + u64::from(2 * rem > den || (2 * rem == den && q % 2 == 1))) as u32;
        let e = self.buckets.entry(pct).or_insert((0, 0.0, 0.0, 0.0));
        e.0 += 1;
        e.1 += r.allocation;
        e.2 += r.fragmentation;
        e.3 += r.fragmentation_rate;
    }

    /// One bucket per percent up to the last one reached. A bucket no
    /// reading fell in takes the readings of its neighbours (±1), as the
    /// published analysis does; one with none there either is left out.
    fn buckets(&self) -> Vec<Bucket> {
        let Some(&last) = self.buckets.keys().next_back() else { return Vec::new() };
        (0..=last)
            .filter_map(|pct| {
                let own = self.buckets.get(&pct).map(|&v| vec![v]);
                let rows = own.unwrap_or_else(|| {
                    (pct.saturating_sub(1)..=pct + 1).filter_map(|b| self.buckets.get(&b).copied()).collect()
                });
                let (n, a, f, fr) =
                    rows.iter().fold((0, 0.0, 0.0, 0.0), |acc, r| (acc.0 + r.0, acc.1 + r.1, acc.2 + r.2, acc.3 + r.3));
                (n > 0).then(|| Bucket {
                    arrived_pct: pct,
                    samples: n,
                    allocation: a / f64::from(n),
                    fragmentation: f / f64::from(n),
                    fragmentation_rate: fr / f64::from(n),
                })
            })
            .collect()
    }
}

/// The simulator.
pub struct Simulator<'p, P: Placer> {
    cluster: Cluster,
    placer: &'p mut P,
    workload: TargetWorkload,
    tracker: FragmentationTracker,
    curve: Curve,
    report: RunReport,
    candidates: Vec<NodeId>,
    /// Rescheduling on failure: at most this share of placed pods migrated.
    migration_cap: Option<f64>,
    /// Pods running (submissions protocol).
    running: Vec<(Pod, Placement)>,
    /// Pod shapes no room could be made for since the cluster last changed
    /// (the same search would fail again).
    no_room: std::collections::HashSet<(u64, u64, u32, u32, Vec<String>, Tier)>,
    /// The global planner, its period in submissions (0: only when a pod
    /// fails) and the submission it last ran at.
    planner: Option<(&'p mut dyn Rescheduler, u64)>,
    last_plan: u64,
    /// The planner ran and found nothing since the cluster last changed.
    planner_idle: bool,
}

impl<'p, P: Placer> Simulator<'p, P> {
    /// A simulator over `nodes`, measuring fragmentation against `workload`.
    pub fn new(nodes: Vec<Node>, workload: TargetWorkload, placer: &'p mut P) -> Self {
        let cluster = Cluster::new(nodes);
        let tracker = FragmentationTracker::new(cluster.nodes(), &workload);
        let curve = Curve::new(cluster.nodes());
        placer.nodes_changed(&cluster.nodes().iter().collect::<Vec<_>>());
        placer.prime();
        let report = RunReport { total_gpus: cluster.total_gpus(), ..RunReport::default() };
        Self {
            cluster,
            placer,
            workload,
            tracker,
            curve,
            report,
            candidates: Vec::new(),
            migration_cap: None,
            running: Vec::new(),
            no_room: std::collections::HashSet::new(),
            planner: None,
            last_plan: 0,
            planner_idle: false,
        }
    }

    /// The cluster as it stands.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Tries to place one pod now; `Err` carries the main rejection reason.
    fn try_place(&mut self, pod: &Pod) -> Result<Placement, Why> {
        let mut rejected = [0u32; FilterReason::COUNT];
        self.cluster.feasible(pod, &mut self.candidates, &mut rejected);
        if self.candidates.is_empty() {
            return Err(Why::Filter(FilterReason::main(&rejected)));
        }
        let d = self.placer.place(pod, &self.candidates);
        self.report.plugin_errors += u64::from(d.plugin_errors);
        self.report.deadline_hits += u64::from(d.deadline_hit);
        let placement = bind_choice(&mut self.cluster, pod, &self.candidates, &d)?;
        self.node_changed(placement.node);
        Ok(placement)
    }

    fn node_changed(&mut self, node: NodeId) {
        self.no_room.clear();
        self.planner_idle = false;
        let n = self.cluster.node(node).expect("node exists");
        self.tracker.update(n, &self.workload);
        self.curve.node_changed(n);
        self.placer.nodes_changed(&[n]);
    }

    fn fail(&mut self, reason: Why) {
        self.report.failed += 1;
        *self.report.failures_by_reason.entry(reason.code().to_string()).or_insert(0) += 1;
    }

    /// Runs the submissions protocol over `pods` in order.
    pub fn run_submissions(self, pods: &[Pod]) -> RunReport {
        self.run_submissions_keep(pods).0
    }

    /// [`Simulator::run_submissions`], also returning the cluster as it
    /// stands at the end and the pods running on it.
    pub fn run_submissions_keep(mut self, pods: &[Pod]) -> (RunReport, Cluster, Vec<(Pod, Placement)>) {
        for (index, pod) in pods.iter().enumerate() {
            self.report.submitted += 1;
            self.curve.arrive(pod);
            self.replan_if_due();
            let placed = match self.try_place(pod) {
                // Room made by migration answers the host's filter only.
                Err(Why::Filter(_)) if self.reschedule_for(pod) => {
                    let p = self.try_place(pod);
                    self.report.rescued += u64::from(p.is_ok());
                    p
                }
                other => other,
            };
            match placed {
                Ok(at) => {
                    self.report.placed += 1;
                    self.running.push((pod.clone(), at));
                }
                Err(reason) => {
                    self.report.failed_pods.push(index);
                    self.fail(reason);
                }
            }
            self.curve.record(self.tracker.reading());
        }
        let cluster = std::mem::replace(&mut self.cluster, Cluster::new(Vec::new()));
        let running = std::mem::take(&mut self.running);
        (self.finish(), cluster, running)
    }

    /// Runs the time-replay protocol. Events at the same second are ordered
    /// departures first, then arrivals in input order.
    pub fn run_time_replay(mut self, arrivals: &[Arrival]) -> RunReport {
        let events = timeline(arrivals);
        let mut placed: Vec<Option<Placement>> = vec![None; arrivals.len()];
        let mut gone = vec![false; arrivals.len()];
        let mut pending: VecDeque<usize> = VecDeque::new();
        for (_, kind, i) in events {
            let pod = &arrivals[i].pod;
            match kind {
                Kind::Arrive => {
                    self.report.submitted += 1;
                    self.curve.arrive(pod);
                    match self.try_place(pod) {
                        Ok(p) => {
                            placed[i] = Some(p);
                            self.report.placed += 1;
                        }
                        Err(_) => pending.push_back(i),
                    }
                }
                Kind::Leave => {
                    gone[i] = true;
                    if let Some(p) = placed[i].take() {
                        self.cluster.unbind(&p, pod);
                        self.node_changed(p.node);
                        self.report.departed += 1;
                        // Freed capacity: retry the waiting pods in order.
                        let waiting = std::mem::take(&mut pending);
                        for j in waiting {
                            if gone[j] {
                                continue;
                            }
                            match self.try_place(&arrivals[j].pod) {
                                Ok(p) => {
                                    placed[j] = Some(p);
                                    self.report.placed += 1;
                                }
                                Err(_) => pending.push_back(j),
                            }
                        }
                    } else {
                        // Left while still waiting: it never ran.
                        pending.retain(|&j| j != i);
                    }
                }
            }
            self.curve.record(self.tracker.reading());
        }
        self.report.pending = pending.len() as u64;
        self.finish()
    }

    fn finish(mut self) -> RunReport {
        self.report.buckets = self.curve.buckets();
        self.report.last = self.tracker.reading();
        self.report.hotspot_counts = std::mem::take(&mut self.curve.hotspot_counts);
        self.report
    }
}

mod resched;
#[cfg(test)]
mod tests;
