//! `tessera bench gangs`: how long the loop takes to decide a gang (hold
//! room member by member, then bind all or release all) on a large,
//! fragmented synthetic cluster, through the Wasm policy, with one queue
//! and with queues (guarantees and DRF order), in one run.

use std::time::Instant;

use anyhow::{Result, bail};
use serde::Serialize;
use tessera_core::metrics::percentile;
use tessera_core::model::{GPU_MILLI, Gang, Node, Pod, Resources, Tier};
use tessera_core::quota::{QueueSpec, QueueTree, QueuesConfig, Quota};
use tessera_core::sched::{Event, SchedConfig, Scheduler};
use tessera_wasm::{Runtime, RuntimeConfig};

use crate::{bench, load, sim};

/// What to measure.
#[derive(Debug, Clone)]
pub struct GangOptions {
    /// Nodes (8 GPUs each, partly used).
    pub nodes: u32,
    /// Gangs decided, one per pass.
    pub gangs: usize,
    /// Members of each gang.
    pub members: u32,
    /// Whole GPUs of each member.
    pub member_gpus: u32,
    /// Share of the nodes (%) idle at the start (every GPU, CPU and byte
    /// free), drawn by the seed; the rest are fragmented.
    pub idle_pct: u32,
    /// Queues of the second run (gangs spread over them in turn).
    pub queues: u32,
    /// Policy: a shipped policy's name or a file.
    pub policy: String,
    /// Seed.
    pub seed: u64,
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct GangRun {
    /// `one queue` or `N queues`.
    pub queues: String,
    /// Gangs placed whole.
    pub admitted: u64,
    /// Gangs that could not be placed and released what they held.
    pub rolled_back: u64,
    /// Median time of one gang's decision (every member), ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
    /// Plugin errors and faults seen.
    pub plugin_errors: u64,
}

/// The bench's report.
#[derive(Debug, Clone, Serialize)]
pub struct GangBench {
    /// Nodes.
    pub nodes: u32,
    /// Gangs decided per run.
    pub gangs: usize,
    /// Members per gang.
    pub members: u32,
    /// GPUs per member.
    pub member_gpus: u32,
    /// Nodes idle at the start.
    pub idle_nodes: u32,
    /// One run per queue set-up.
    pub runs: Vec<GangRun>,
}

fn members(g: usize, opts: &GangOptions, queue: Option<String>) -> Vec<Pod> {
    let gang = Gang { name: format!("gang-{g}"), min_member: opts.members, timeout_s: None };
    (0..opts.members)
        .map(|m| Pod {
            name: format!("gang-{g}-{m}"),
            requests: Resources { cpu_milli: 2_000, memory_mib: 8_192 },
            gpu_count: opts.member_gpus,
            gpu_milli: GPU_MILLI,
            tier: Tier::Opportunistic,
            gang: Some(gang.clone()),
            queue: queue.clone(),
            ..Pod::default()
        })
        .collect()
}

/// The throughput bench's fragmented cluster with `idle_pct` % of its
/// nodes idle (a training cluster keeps whole nodes for its gangs; on the
/// fragmented ones alone no member of 8 GPUs would fit).
fn cluster(opts: &GangOptions) -> Vec<Node> {
    let mut nodes = bench::synthetic_cluster(opts.nodes);
    for n in &mut nodes {
        let draw = tessera_core::hash::draw(opts.seed.to_le_bytes().into_iter().chain(n.id.to_le_bytes()));
        if draw % 100 < u64::from(opts.idle_pct) {
            n.free = n.capacity;
            for g in &mut n.gpus {
                g.free_milli = GPU_MILLI;
            }
        }
    }
    nodes
}

fn is_idle(n: &Node) -> bool {
    n.free == n.capacity && n.gpus.iter().all(|g| g.free_milli == GPU_MILLI)
}

fn one_run(rt: &Runtime, opts: &GangOptions, nodes: Vec<Node>, queues: u32) -> Result<GangRun> {
    let doc = sim::policy_document(&opts.policy, opts.seed)?;
    let mut placer = load::load_policy(rt, &doc)?.without_timeout();
    let mut s = Scheduler::new(nodes, SchedConfig::default());
    if queues > 1 {
        let total = opts.nodes * 8;
        let list = (0..queues)
            .map(|q| QueueSpec {
                name: format!("q{q}"),
                parent: None,
                weight: 1.0,
                guarantee: Quota { gpus: Some(total / queues), ..Quota::default() },
                limit: Quota::default(),
            })
            .collect();
        s.set_queues(QueueTree::new(&QueuesConfig { list, ..QueuesConfig::default() })?);
    }
    // The placer mirrors the cluster before the first timed decision.
    s.schedule(&mut placer, 0);
    let (mut times, mut next) = (Vec::with_capacity(opts.gangs), 0u64);
    for g in 0..opts.gangs {
        let queue = (queues > 1).then(|| format!("q{}", g as u32 % queues));
        for p in members(g, opts, queue) {
            s.submit(next, p, g as u64)?;
            next += 1;
        }
        let t = Instant::now();
        let events = s.schedule(&mut placer, g as u64);
        times.push(t.elapsed().as_secs_f64() * 1e3);
        // What waits is taken away: each pass decides one new gang.
        for e in events {
            if let Event::Unschedulable { pod, .. } = e {
                s.remove(pod);
            }
        }
    }
    times.sort_by(f64::total_cmp);
    let st = s.stats();
    Ok(GangRun {
        queues: if queues > 1 { format!("{queues} queues") } else { "one queue".into() },
        admitted: st.gangs_admitted,
        rolled_back: st.gang_rollbacks,
        p50_ms: percentile(&times, 0.50),
        p99_ms: percentile(&times, 0.99),
        max_ms: times.last().copied().unwrap_or(0.0),
        plugin_errors: st.plugin_errors,
    })
}

/// Runs the bench: one queue, then `opts.queues` queues.
pub fn run(opts: &GangOptions) -> Result<GangBench> {
    if opts.nodes == 0
        || opts.gangs == 0
        || opts.members < 2
        || opts.member_gpus == 0
        || opts.member_gpus > 8
        || opts.idle_pct > 100
    {
        bail!("--nodes and --gangs must be positive, --members at least 2, --member-gpus 1..=8, --idle 0..=100");
    }
    let rt = Runtime::new(RuntimeConfig::default())?;
    let nodes = cluster(opts);
    let idle_nodes = nodes.iter().filter(|n| is_idle(n)).count() as u32;
    let runs = vec![one_run(&rt, opts, nodes.clone(), 1)?, one_run(&rt, opts, nodes, opts.queues.max(2))?];
    Ok(GangBench {
        nodes: opts.nodes,
        gangs: opts.gangs,
        members: opts.members,
        member_gpus: opts.member_gpus,
        idle_nodes,
        runs,
    })
}

impl GangBench {
    /// The table.
    pub fn to_table(&self) -> String {
        let mut out = format!(
            "{} nodes ({} idle), {} gangs of {} × {} GPUs, one pass each\n{:<12} {:>9} {:>11} {:>8} {:>8} {:>8} {:>7}\n",
            self.nodes,
            self.idle_nodes,
            self.gangs,
            self.members,
            self.member_gpus,
            "queues",
            "admitted",
            "rolled back",
            "p50 ms",
            "p99 ms",
            "max ms",
            "errors"
        );
        for r in &self.runs {
            out += &format!(
                "{:<12} {:>9} {:>11} {:>8.3} {:>8.3} {:>8.3} {:>7}\n",
                r.queues, r.admitted, r.rolled_back, r.p50_ms, r.p99_ms, r.max_ms, r.plugin_errors
            );
        }
        out
    }
}
