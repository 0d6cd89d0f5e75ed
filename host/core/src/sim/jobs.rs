//! Training jobs on the loop ([`crate::driver`]): each job is one pod per
//! node's worth of GPUs (a 32-GPU job on 8-GPU nodes is four 8-GPU pods),
//! and it makes progress only while all of them run. It runs for the
//! seconds its trace gives on the GPU model of its slowest member, then
//! every member leaves. A member evicted before then loses the job's run
//! since its last checkpoint (all of it, for a job that does not
//! checkpoint): it goes on from there once all members run again.
//!
//! Three ways to admit the same jobs ([`JobMode`]): gangs (Tessera), one
//! pod at a time with no gangs (what a scheduler without gangs does: a
//! partly placed job holds its GPUs and waits for the rest), and a strict
//! FIFO queue of gangs (a job is submitted only once the one before it
//! runs: no job overtakes another). What each costs is measured:
//! completion times, queue delay, useful GPU utilisation, GPU-seconds held
//! by jobs that were partly placed, and fairness across queues.
//!
//! Deterministic: times are the trace's, nothing reads a clock.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::cluster::Placement;
use crate::driver::{Driver, DriverConfig, LoopReport, Model, World};
use crate::framework::Placer;
use crate::metrics::{TargetWorkload, percentile};
use crate::model::{GPU_MILLI, Gang, Node, Pod, PodId, Resources, Tier};
use crate::sched::Event;
use crate::telemetry::{NodeSample, TelemetryModel};

/// One training job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Name (unique).
    pub name: String,
    /// Arrival, seconds.
    pub arrival_s: u64,
    /// GPUs it needs at once.
    pub gpus: u32,
    /// Seconds it runs on each GPU model it can use (a model it cannot
    /// use is absent).
    pub seconds_on: BTreeMap<String, u64>,
    /// Its queue (a team, a user).
    pub queue: String,
    /// Seconds of run between its checkpoints: an eviction loses only the
    /// run since the last one (restoring costs nothing more). Unset: it
    /// starts over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_s: Option<u64>,
    /// The most seconds its owner declares a run of it takes (each
    /// member's [`Pod::run_limit_s`]): at least its real run, or it would
    /// be cut short. Unset: it declares nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_s: Option<u64>,
}

/// How jobs are admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobMode {
    /// Each job a gang, placed all or nothing; the loop's queue orders
    /// them (a job that fits may pass one that does not).
    Gangs,
    /// Each pod on its own: a partly placed job holds what it got.
    OneAtATime,
    /// Gangs, admitted strictly in arrival order.
    Fifo,
}

impl JobMode {
    /// Every mode, as `bench jobs` runs them.
    pub const ALL: [JobMode; 3] = [JobMode::Gangs, JobMode::OneAtATime, JobMode::Fifo];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            JobMode::Gangs => "gangs",
            JobMode::OneAtATime => "one-at-a-time",
            JobMode::Fifo => "fifo",
        }
    }
}

/// A job's whole run, in parts per million (checkpointed progress).
const PPM: u64 = 1_000_000;

/// The pod requests of a job's member, per GPU.
pub const CPU_MILLI_PER_GPU: u64 = 4_000;
/// Memory per GPU, MiB.
pub const MEMORY_MIB_PER_GPU: u64 = 32_768;

/// The member pods of `job` on nodes of `gpus_per_node` GPUs: as few pods
/// as hold its GPUs, each at most a node's worth, a gang unless `mode` is
/// one at a time (or the job is one pod).
pub fn job_pods(job: &Job, gpus_per_node: u32, mode: JobMode) -> Vec<Pod> {
    let per = gpus_per_node.max(1);
    let n = job.gpus.div_ceil(per).max(1);
    let gang =
        (mode != JobMode::OneAtATime && n > 1).then(|| Gang { name: job.name.clone(), min_member: n, timeout_s: None });
    (0..n)
        .map(|k| {
            let gpus = (job.gpus - k * per).min(per);
            Pod {
                name: format!("{}-{k}", job.name),
                namespace: job.queue.clone(),
                workload: job.name.clone(),
                requests: Resources {
                    cpu_milli: CPU_MILLI_PER_GPU * u64::from(gpus),
                    memory_mib: MEMORY_MIB_PER_GPU * u64::from(gpus),
                },
                gpu_count: gpus,
                gpu_milli: GPU_MILLI,
                allowed_models: job.seconds_on.keys().cloned().collect(),
                tier: Tier::Opportunistic,
                gang: gang.clone(),
                run_limit_s: job.limit_s,
                ..Pod::default()
            }
        })
        .collect()
}

/// One job as it went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobOutcome {
    /// Name.
    pub name: String,
    /// Queue.
    pub queue: String,
    /// GPUs.
    pub gpus: u32,
    /// Arrival, s.
    pub arrival_s: u64,
    /// When all its members first ran at once, s.
    pub started_s: Option<u64>,
    /// When it finished, s.
    pub finished_s: Option<u64>,
    /// The seconds a whole run of it takes where it (last) ran.
    pub run_s: Option<u64>,
    /// Runs cut short by an eviction (lost, or kept up to the last
    /// checkpoint).
    pub restarts: u32,
}

/// What a run of jobs came to, in figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSummary {
    /// Jobs in the trace.
    pub jobs: u64,
    /// Jobs that finished.
    pub completed: u64,
    /// Job completion time (finish − arrival), median, s.
    pub jct_p50_s: u64,
    /// 99th percentile, s.
    pub jct_p99_s: u64,
    /// Queue delay (first start − arrival), median, s.
    pub queue_delay_p50_s: u64,
    /// GPU-seconds of jobs making progress over the cluster's GPU-seconds
    /// from the first arrival to the last finish.
    pub gpu_util: f64,
    /// Jain's index over queues of the mean of run time ÷ completion time
    /// of their jobs (1: every queue's jobs are slowed alike).
    pub jain_fairness: f64,
    /// Jain's index over queues of the GPU-seconds each held ÷ its
    /// equal-weight max-min fair share, while the GPUs asked for exceeded
    /// the cluster (1: each held its share; see `share`).
    #[serde(default)]
    pub jain_share: f64,
    /// Per queue, the GPU-seconds it held ÷ its fair share while
    /// contended (queues entitled to nothing are left out): what
    /// `jain_share` is the index of.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub queue_share: BTreeMap<String, f64>,
    /// Per queue, the mean of run time ÷ completion time of its finished
    /// jobs: what `jain_fairness` is the index of.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub queue_progress: BTreeMap<String, f64>,
    /// GPU-seconds held by members of jobs not all of whose members ran.
    pub partial_gang_gpu_s: u64,
    /// From the first arrival to the last finish, s.
    pub makespan_s: u64,
}

/// What a run of jobs came to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    /// How jobs were admitted.
    pub mode: JobMode,
    /// The figures.
    #[serde(flatten)]
    pub summary: JobSummary,
    /// Each job.
    pub outcomes: Vec<JobOutcome>,
    /// The loop's own report.
    pub run: LoopReport,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A job arrives (by index).
    Arrive(usize),
    /// Admit what FIFO now allows.
    Admit,
    /// A job's run ends (job, run generation).
    Finish(usize, u64),
}

#[derive(Debug, Clone, Default)]
struct State {
    members: Vec<(PodId, u32)>,
    running: BTreeSet<PodId>,
    /// The run under way: its start, the seconds it lasts and the seconds
    /// the whole job would take there.
    run: Option<(u64, u64, u64)>,
    /// Parts per million of the job kept in checkpoints.
    saved_ppm: u64,
    generation: u64,
    first_start: Option<u64>,
    finished: Option<u64>,
    restarts: u32,
}

/// The world of a job run.
struct Jobs<'a, P: Placer> {
    placer: &'a mut P,
    jobs: &'a [Job],
    mode: JobMode,
    gpus_per_node: u32,
    /// Whether pods wait in their job's queue (the loop has queues).
    queued: bool,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    states: Vec<State>,
    pod_job: BTreeMap<PodId, usize>,
    fifo: VecDeque<usize>,
    blocking: Option<usize>,
    telemetry: TelemetryModel,
    last_arrival: Option<u64>,
    // GPU-seconds, integrated from `since`.
    since: u64,
    useful_gpus: u64,
    partial_gpus: u64,
    useful_gpu_s: u64,
    partial_gpu_s: u64,
    /// Each job's queue, as an index into `shares`.
    queue_of: Vec<usize>,
    shares: share::Shares,
}

impl<P: Placer> Jobs<'_, P> {
    fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, ev)));
    }

    fn integrate(&mut self, t: u64) {
        let dt = t.saturating_sub(self.since);
        self.useful_gpu_s += self.useful_gpus * dt;
        self.partial_gpu_s += self.partial_gpus * dt;
        self.shares.pass(dt);
        self.since = self.since.max(t);
    }

    /// GPUs job `j` holds now, and whether it makes progress.
    fn holding(&self, j: usize) -> (u64, bool) {
        let s = &self.states[j];
        let gpus = s.members.iter().filter(|(id, _)| s.running.contains(id)).map(|&(_, g)| u64::from(g)).sum();
        (gpus, !s.running.is_empty() && s.running.len() == s.members.len())
    }

    /// Changes job `j`'s running members by `f`, keeping the sums right.
    fn change(&mut self, j: usize, f: impl FnOnce(&mut State)) {
        let (before, whole_before) = self.holding(j);
        f(&mut self.states[j]);
        let (after, whole_after) = self.holding(j);
        self.shares.hold(self.queue_of[j], before, after);
        for (gpus, whole, sign) in [(before, whole_before, false), (after, whole_after, true)] {
            let sum = if whole { &mut self.useful_gpus } else { &mut self.partial_gpus };
            *sum = if sign { *sum + gpus } else { *sum - gpus };
        }
    }

    fn submit(&mut self, j: usize, model: &mut Model, t: u64) {
        let job = &self.jobs[j];
        for (id, mut pod) in
            self.states[j].members.iter().map(|&(id, _)| id).zip(job_pods(job, self.gpus_per_node, self.mode))
        {
            if self.queued {
                pod.queue = Some(job.queue.clone());
            }
            model.submit(id, pod, t).expect("pod ids are unique");
        }
    }

    /// FIFO: submits the oldest waiting job once nothing admitted waits.
    fn admit(&mut self, model: &mut Model, t: u64) {
        if self.blocking.is_none()
            && let Some(j) = self.fifo.pop_front()
        {
            self.submit(j, model, t);
            self.blocking = Some(j);
        }
    }

    /// Job `j` runs whole now: its run starts (or it lost one).
    fn settle(&mut self, j: usize, model: &Model, t: u64) {
        let whole = self.holding(j).1;
        let s = &self.states[j];
        match (whole, s.run) {
            (true, None) => {
                // The slowest member's GPU model sets the pace.
                let whole = s
                    .members
                    .iter()
                    .filter_map(|&(id, _)| model.placement(id))
                    .map(|at| &model.cluster().nodes()[at.node as usize].gpu_model)
                    .map(|m| self.jobs[j].seconds_on.get(m).copied().unwrap_or(u64::MAX / 4))
                    .max()
                    .unwrap_or(0)
                    .max(1);
                // What checkpoints did not keep, rounded up.
                let left = u128::from(whole) * u128::from(PPM - s.saved_ppm.min(PPM));
                let secs = (left.div_ceil(u128::from(PPM)) as u64).max(1);
                let s = &mut self.states[j];
                s.generation += 1;
                s.run = Some((t, secs, whole));
                s.first_start.get_or_insert(t);
                let generation = s.generation;
                self.push(t.saturating_add(secs), Ev::Finish(j, generation));
                if self.blocking == Some(j) {
                    self.blocking = None;
                    self.push(t, Ev::Admit);
                }
            }
            (false, Some((start, _, whole))) => {
                let every = self.jobs[j].checkpoint_s.unwrap_or(0);
                let s = &mut self.states[j];
                if let Some(n) = t.saturating_sub(start).checked_div(every) {
                    let kept = n * every;
                    let ppm = u128::from(kept) * u128::from(PPM) / u128::from(whole.max(1));
                    s.saved_ppm = (s.saved_ppm + ppm as u64).min(PPM - 1);
                }
                s.generation += 1;
                s.run = None;
                s.restarts += 1;
            }
            _ => {}
        }
    }
}

impl<P: Placer> World for Jobs<'_, P> {
    fn placer(&mut self) -> &mut dyn Placer {
        self.placer
    }

    fn next_event(&mut self, until: u64) -> Option<u64> {
        self.events.peek().map(|Reverse((t, ..))| *t).filter(|&t| t <= until)
    }

    fn happen(&mut self, t: u64, model: &mut Model) {
        self.integrate(t);
        while let Some(&Reverse((at, _, ev))) = self.events.peek()
            && at <= t
        {
            self.events.pop();
            if let Ev::Arrive(j) = ev {
                self.shares.ask(self.queue_of[j], u64::from(self.jobs[j].gpus), true);
            }
            match ev {
                Ev::Arrive(j) => match self.mode {
                    JobMode::Fifo => {
                        self.fifo.push_back(j);
                        self.admit(model, t);
                    }
                    JobMode::Gangs | JobMode::OneAtATime => self.submit(j, model, t),
                },
                Ev::Admit => self.admit(model, t),
                Ev::Finish(j, generation)
                    if self.states[j].generation == generation && self.states[j].run.is_some() =>
                {
                    let ids: Vec<PodId> = self.states[j].members.iter().map(|&(id, _)| id).collect();
                    self.change(j, |s| s.running.clear());
                    for id in ids {
                        model.depart(id);
                    }
                    let s = &mut self.states[j];
                    s.finished = Some(t);
                    self.shares.ask(self.queue_of[j], u64::from(self.jobs[j].gpus), false);
                }
                Ev::Finish(..) => {}
            }
        }
    }

    fn sample(&mut self, node: &Node, pods: &[(&Pod, Placement)], t: u64) -> NodeSample {
        self.telemetry.sample(node, pods.iter().copied(), t)
    }

    fn zone_carbon(&mut self, zone: &str, t: u64) -> u32 {
        self.telemetry.carbon(zone, t)
    }

    fn after_pass(&mut self, model: &mut Model, t: u64, events: &[Event]) {
        self.integrate(t);
        let mut touched = BTreeSet::new();
        for ev in events {
            let (pod, victims): (PodId, &[PodId]) = match ev {
                Event::Bound { pod, .. } => (*pod, &[]),
                Event::Preempted { pod, victims, .. } => (*pod, victims),
                Event::Unschedulable { .. } => continue,
            };
            for &v in victims {
                if let Some(&j) = self.pod_job.get(&v) {
                    self.change(j, |s| {
                        s.running.remove(&v);
                    });
                    touched.insert(j);
                }
            }
            if let Some(&j) = self.pod_job.get(&pod) {
                self.change(j, |s| {
                    s.running.insert(pod);
                });
                touched.insert(j);
            }
        }
        for j in touched {
            self.settle(j, model, t);
        }
    }

    fn last_arrival(&self) -> Option<u64> {
        self.last_arrival
    }
}

/// Runs `jobs` on `nodes` (GPUs per node: the most any node has) through
/// the loop, admitted as `mode` says, decided by `placer`. When the loop
/// has queues (`cfg.queues`), each job's pods wait in the queue it names.
pub fn run_jobs(
    nodes: Vec<Node>,
    jobs: &[Job],
    placer: &mut impl Placer,
    mode: JobMode,
    cfg: &DriverConfig,
) -> JobReport {
    let gpus_per_node = nodes.iter().map(|n| n.gpus.len() as u32).max().unwrap_or(1).max(1);
    let capacity: u64 = nodes.iter().map(|n| n.gpus.len() as u64).sum();
    let mut states = Vec::with_capacity(jobs.len());
    let mut pod_job = BTreeMap::new();
    let mut next: PodId = 0;
    let mut sample_pods = Vec::new();
    for (j, job) in jobs.iter().enumerate() {
        let pods = job_pods(job, gpus_per_node, mode);
        let members = pods.iter().map(|p| {
            pod_job.insert(next, j);
            next += 1;
            (next - 1, p.gpu_count)
        });
        states.push(State { members: members.collect(), ..State::default() });
        sample_pods.extend(pods);
    }
    let first = jobs.iter().map(|j| j.arrival_s).min().unwrap_or(0);
    let names: BTreeSet<&str> = jobs.iter().map(|j| j.queue.as_str()).collect();
    let queue_of = jobs.iter().map(|j| names.iter().position(|&q| q == j.queue).unwrap_or(0)).collect();
    let mut world = Jobs {
        placer,
        jobs,
        mode,
        gpus_per_node,
        queued: !cfg.queues.is_trivial(),
        events: BinaryHeap::new(),
        seq: 0,
        states,
        pod_job,
        fifo: VecDeque::new(),
        blocking: None,
        telemetry: TelemetryModel::new(cfg.telemetry, cfg.seed),
        last_arrival: jobs.iter().map(|j| j.arrival_s).max(),
        since: first,
        useful_gpus: 0,
        partial_gpus: 0,
        useful_gpu_s: 0,
        partial_gpu_s: 0,
        queue_of,
        shares: share::Shares::new(names.len(), capacity),
    };
    // Arrivals in time order, ties by trace order (FIFO's order).
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&j| (jobs[j].arrival_s, j));
    for j in order {
        world.push(jobs[j].arrival_s, Ev::Arrive(j));
    }
    let workload = TargetWorkload::from_pods(&sample_pods, 0.95);
    let mut driver = Driver::new(nodes, workload, cfg.clone());
    driver.run_to_end(&mut world);
    let end = world.states.iter().filter_map(|s| s.finished).max().unwrap_or(first);
    world.integrate(end);
    let mut r = report(
        jobs,
        &world.states,
        mode,
        capacity,
        first,
        end,
        world.useful_gpu_s,
        world.partial_gpu_s,
        driver.report(),
    );
    r.summary.jain_share = world.shares.jain();
    r.summary.queue_share =
        names.iter().zip(world.shares.ratios()).filter_map(|(name, ratio)| Some((name.to_string(), ratio?))).collect();
    r
}

#[allow(clippy::too_many_arguments)]
fn report(
    jobs: &[Job],
    states: &[State],
    mode: JobMode,
    capacity: u64,
    first: u64,
    end: u64,
    useful_gpu_s: u64,
    partial_gpu_s: u64,
    run: LoopReport,
) -> JobReport {
    let outcomes: Vec<JobOutcome> = jobs
        .iter()
        .zip(states)
        .map(|(job, s)| JobOutcome {
            name: job.name.clone(),
            queue: job.queue.clone(),
            gpus: job.gpus,
            arrival_s: job.arrival_s,
            started_s: s.first_start,
            finished_s: s.finished,
            run_s: s.run.map(|(_, _, whole)| whole),
            restarts: s.restarts,
        })
        .collect();
    let done: Vec<&JobOutcome> = outcomes.iter().filter(|o| o.finished_s.is_some()).collect();
    let mut jct: Vec<u64> = done.iter().map(|o| o.finished_s.unwrap_or(0) - o.arrival_s).collect();
    jct.sort_unstable();
    let mut delay: Vec<u64> = outcomes.iter().filter_map(|o| Some(o.started_s? - o.arrival_s)).collect();
    delay.sort_unstable();
    // Per queue, the mean of run ÷ completion time (1 when a job never waits).
    let mut by_queue: BTreeMap<&str, (f64, u32)> = BTreeMap::new();
    for o in &done {
        let jct = (o.finished_s.unwrap_or(0) - o.arrival_s).max(1) as f64;
        let e = by_queue.entry(o.queue.as_str()).or_default();
        e.0 += o.run_s.unwrap_or(0) as f64 / jct;
        e.1 += 1;
    }
    let progress: BTreeMap<String, f64> =
        by_queue.iter().map(|(&q, &(sum, n))| (q.to_string(), sum / f64::from(n))).collect();
    let x: Vec<f64> = progress.values().copied().collect();
    let jain = share::jain(&x);
    let makespan = end.saturating_sub(first);
    let summary = JobSummary {
        jobs: jobs.len() as u64,
        completed: done.len() as u64,
        jct_p50_s: percentile(&jct, 0.5),
        jct_p99_s: percentile(&jct, 0.99),
        queue_delay_p50_s: percentile(&delay, 0.5),
        gpu_util: if makespan > 0 && capacity > 0 { useful_gpu_s as f64 / (capacity * makespan) as f64 } else { 0.0 },
        jain_fairness: jain,
        jain_share: 1.0,
        queue_share: BTreeMap::new(),
        queue_progress: progress,
        partial_gang_gpu_s: partial_gpu_s,
        makespan_s: makespan,
    };
    JobReport { mode, summary, outcomes, run }
}

pub mod share;
#[cfg(test)]
mod tests;
