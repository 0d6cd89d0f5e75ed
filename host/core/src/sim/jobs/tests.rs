use super::*;
use crate::framework::Choice;
use crate::model::NodeId;

/// The lowest-id candidate.
struct First;

impl Placer for First {
    fn nodes_changed(&mut self, _nodes: &[&Node]) {}
    fn place(&mut self, _pod: &Pod, candidates: &[NodeId]) -> Choice {
        Choice { node: candidates.first().copied(), ..Choice::default() }
    }
}

fn nodes(models: &[&str]) -> Vec<Node> {
    models
        .iter()
        .enumerate()
        .map(|(i, m)| Node::new(i as u32, format!("n{i}"), Resources { cpu_milli: 96_000, memory_mib: 786_432 }, 8, m))
        .collect()
}

fn job(name: &str, arrival_s: u64, gpus: u32, secs: u64) -> Job {
    Job {
        name: name.into(),
        arrival_s,
        gpus,
        seconds_on: [("V100".to_string(), secs)].into(),
        queue: "q".into(),
        checkpoint_s: None,
        limit_s: None,
    }
}

fn outcome<'a>(r: &'a JobReport, name: &str) -> &'a JobOutcome {
    r.outcomes.iter().find(|o| o.name == name).unwrap()
}

#[test]
fn a_job_is_a_pod_per_node_and_a_gang_when_it_spans_nodes() {
    let pods = job_pods(&job("big", 0, 12, 1), 8, JobMode::Gangs);
    assert_eq!(pods.iter().map(|p| p.gpu_count).collect::<Vec<_>>(), [8, 4]);
    assert!(pods.iter().all(|p| p.gang.as_ref().is_some_and(|g| g.min_member == 2 && g.name == "big")));
    assert_eq!(job_pods(&job("big", 0, 12, 1), 8, JobMode::OneAtATime)[0].gang, None);
    let one = job_pods(&job("small", 0, 4, 1), 8, JobMode::Gangs);
    assert_eq!((one.len(), one[0].gang.is_none(), one[0].allowed_models.clone()), (1, true, vec!["V100".to_string()]));
}

/// X holds one of two nodes until 100; A (both nodes) arrives at 1, C
/// (one node) at 2. With gangs A waits holding nothing and C runs at once;
/// one at a time, A's first pod holds a node from 1 to 100 for nothing
/// and C waits behind it; FIFO, C waits for A to start.
#[test]
fn gangs_hold_nothing_while_they_wait_and_let_small_jobs_run() {
    let jobs = [job("x", 0, 8, 100), job("a", 1, 16, 100), job("c", 2, 8, 50)];
    let run = |mode| run_jobs(nodes(&["V100", "V100"]), &jobs, &mut First, mode, &DriverConfig::default());
    let gangs = run(JobMode::Gangs);
    assert_eq!(gangs.summary.completed, 3);
    assert_eq!(gangs.summary.partial_gang_gpu_s, 0);
    assert_eq!(
        ["x", "a", "c"].map(|n| (outcome(&gangs, n).started_s, outcome(&gangs, n).finished_s)),
        [(Some(0), Some(100)), (Some(100), Some(200)), (Some(2), Some(52))]
    );
    let single = run(JobMode::OneAtATime);
    assert_eq!(single.summary.completed, 3);
    assert_eq!(single.summary.partial_gang_gpu_s, 8 * 99, "a's first pod held 8 GPUs from 1 to 100");
    assert_eq!(outcome(&single, "c").finished_s, Some(250));
    let fifo = run(JobMode::Fifo);
    assert_eq!((fifo.summary.partial_gang_gpu_s, outcome(&fifo, "c").finished_s), (0, Some(250)));
    // Useful GPU-seconds over 200 s of 16 GPUs: x 800 + a 1600 + c 400.
    assert!((gangs.summary.gpu_util - 2800.0 / 3200.0).abs() < 1e-9, "{}", gangs.summary.gpu_util);
    assert!(gangs.summary.jct_p50_s <= single.summary.jct_p50_s && gangs.summary.jct_p50_s <= fifo.summary.jct_p50_s);
    assert_eq!(run(JobMode::Gangs), gangs, "deterministic");
}

#[test]
fn a_job_runs_at_the_pace_of_its_slowest_member() {
    let mut j = job("mixed", 0, 16, 100);
    j.seconds_on.insert("K80".into(), 300);
    let r = run_jobs(nodes(&["V100", "K80"]), &[j], &mut First, JobMode::Gangs, &DriverConfig::default());
    assert_eq!((outcome(&r, "mixed").run_s, outcome(&r, "mixed").finished_s), (Some(300), Some(300)));
    // A model the job cannot use is never given to it.
    let v100_only = job("v", 0, 16, 100);
    let r = run_jobs(nodes(&["V100", "K80"]), &[v100_only], &mut First, JobMode::Gangs, &DriverConfig::default());
    assert_eq!(r.summary.completed, 0, "16 GPUs of V100 do not exist");
    assert_eq!(r.run.waiting_by_reason.get("SCHED-GANG-UNSCHEDULABLE"), Some(&2), "{:?}", r.run.waiting_by_reason);
}

/// The loop with queues `a` and `b`, each guaranteed 8 GPUs (half of two
/// nodes), the rest of the queues as `cfg` sets them.
fn two_halves(cfg: impl FnOnce(&mut crate::quota::QueuesConfig)) -> DriverConfig {
    use crate::quota::{QueueSpec, QueueTree, QueuesConfig, Quota};
    let half = Quota { gpus: Some(8), ..Quota::default() };
    let list = ["a", "b"]
        .map(|q| QueueSpec {
            name: q.into(),
            parent: None,
            weight: 1.0,
            guarantee: half.clone(),
            limit: Quota::default(),
        })
        .to_vec();
    let mut queues = QueuesConfig { list, ..QueuesConfig::default() };
    cfg(&mut queues);
    DriverConfig { queues: QueueTree::new(&queues).unwrap(), ..DriverConfig::default() }
}

/// Team a fills the cluster with long jobs at 0; team b's short jobs come
/// at 10. In one queue b waits for a's jobs to finish; with a queue each,
/// guaranteed half the GPUs, b takes its half back at once (a's evicted
/// job restarts later) and the queues are treated alike.
#[test]
fn queues_with_guarantees_give_a_late_team_its_share_at_once() {
    let mut jobs: Vec<Job> = (0..4).map(|i| Job { queue: "a".into(), ..job(&format!("a{i}"), 0, 8, 1000) }).collect();
    jobs.extend((0..2).map(|i| Job { queue: "b".into(), ..job(&format!("b{i}"), 10, 8, 100) }));
    let fair = two_halves(|_| ());
    let one = run_jobs(nodes(&["V100", "V100"]), &jobs, &mut First, JobMode::Gangs, &DriverConfig::default());
    let two = run_jobs(nodes(&["V100", "V100"]), &jobs, &mut First, JobMode::Gangs, &fair);
    assert_eq!((one.summary.completed, two.summary.completed), (6, 6));
    assert_eq!(outcome(&one, "b0").started_s, Some(2000), "one queue: b waits behind all of a's jobs");
    assert_eq!(outcome(&two, "b0").started_s, Some(10), "b reclaims its guarantee when it asks");
    assert_eq!(outcome(&two, "b1").started_s, Some(110), "then runs within it, not past it");
    assert!(
        two.summary.jain_fairness > one.summary.jain_fairness,
        "{} vs {}",
        two.summary.jain_fairness,
        one.summary.jain_fairness
    );
    // While both asked for more than the cluster, one queue let a hold
    // everything (twice its fair half, b nothing); queues give each its half.
    assert!(one.summary.jain_share < 0.6, "{}", one.summary.jain_share);
    assert!(two.summary.jain_share > 0.95, "{}", two.summary.jain_share);
    // b's jobs ran 100 s each, done 100 and 200 s after they came: a mean
    // of (1 + 0.5) / 2; the index is Jain's over the queues' means.
    let progress = &two.summary.queue_progress;
    assert_eq!(progress.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(progress["b"], 0.75);
    assert_eq!(two.summary.jain_fairness, super::share::jain(&progress.values().copied().collect::<Vec<_>>()));
    assert_eq!(two.run.preemptions, 1, "one of a's jobs gave back b's half");
    assert_eq!(run_jobs(nodes(&["V100", "V100"]), &jobs, &mut First, JobMode::Gangs, &fair), two, "deterministic");
}

/// Two queues, each guaranteed 8 of 16 GPUs; team a fills both nodes with
/// 8-GPU jobs of 10,000 s at 0, team b asks at 10 with `b`; every job
/// checkpoints every `checkpoint_s`; `cfg` sets the rest of the queues.
fn two_teams(b: Vec<Job>, checkpoint_s: Option<u64>, cfg: impl FnOnce(&mut crate::quota::QueuesConfig)) -> JobReport {
    let mut jobs: Vec<Job> = (0..2).map(|i| Job { queue: "a".into(), ..job(&format!("a{i}"), 0, 8, 10_000) }).collect();
    jobs.extend(b.into_iter().map(|j| Job { queue: "b".into(), ..j }));
    for j in &mut jobs {
        j.checkpoint_s = checkpoint_s;
    }
    run_jobs(nodes(&["V100", "V100"]), &jobs, &mut First, JobMode::Gangs, &two_halves(cfg))
}

/// b reclaims its guarantee at 10 from one of a's jobs: without
/// checkpoints the victim starts over; checkpointing every 4 s it keeps
/// 8 s of its run (every 3 s: 9 s; every 20 s: nothing yet) and finishes
/// that much sooner, every decision else the same.
#[test]
fn an_evicted_job_goes_on_from_its_last_checkpoint() {
    let b = || vec![job("b0", 10, 8, 100)];
    let lost = two_teams(b(), None, |_| ());
    let victim = lost.outcomes.iter().find(|o| o.restarts == 1).expect("b took one of a's jobs").name.clone();
    let finished = |r: &JobReport| outcome(r, &victim).finished_s.unwrap();
    for (every, kept) in [(4, 8), (3, 9), (20, 0)] {
        let with = two_teams(b(), Some(every), |_| ());
        assert_eq!(outcome(&with, &victim).restarts, 1, "checkpoint every {every} s");
        assert_eq!(finished(&with) + kept, finished(&lost), "checkpoint every {every} s");
        assert_eq!(outcome(&with, &victim).run_s, Some(10_000), "a whole run's length, as before");
        assert_eq!(with.summary.completed, 3);
    }
}

/// b's one job needs all 16 GPUs, twice its guarantee. Reclaim up to the
/// guarantee cannot make room for it, so it waits for a's jobs to end;
/// with remembered use and reclaim up to the fair share, b is owed while
/// it waits, its share grows past 16 and a's falls to nothing, and it
/// takes its turn long before — a's jobs go on from their checkpoints.
/// With a minimum run time, not before a's jobs have run that long.
#[test]
fn a_job_wider_than_its_guarantee_takes_its_turn_by_reclaim() {
    let b = || vec![job("b0", 10, 16, 100)];
    let turns = |q: &mut crate::quota::QueuesConfig| {
        q.fair_share_gate = true;
        q.usage_half_life_s = Some(600);
        q.reclaim_to_fair_share = true;
    };
    let guarantee = two_teams(b(), Some(60), |q| {
        q.fair_share_gate = true;
        q.usage_half_life_s = Some(600);
    });
    assert_eq!(outcome(&guarantee, "b0").started_s, Some(10_000), "b waits for a's jobs to end");
    let shared = two_teams(b(), Some(60), turns);
    let start = outcome(&shared, "b0").started_s.unwrap();
    assert!((11..5_000).contains(&start), "b takes its turn by reclaim: started at {start}");
    // It started in a telemetry tick's pass, with no event of the world
    // due before 10,000: its end still comes at its own time.
    assert_eq!(outcome(&shared, "b0").finished_s, Some(start + 100));
    assert_eq!(shared.summary.completed, 3);
    assert!(shared.outcomes.iter().filter(|o| o.queue == "a").all(|o| o.restarts == 1), "{:?}", shared.outcomes);
    // a's jobs kept their checkpoints: each finishes by 10,000 + b's turn
    // + the under-a-minute lost to its eviction.
    for a in ["a0", "a1"] {
        assert!(outcome(&shared, a).finished_s.unwrap() < 10_000 + 100 + 60 + start, "{:?}", outcome(&shared, a));
    }
    let late = two_teams(b(), Some(60), |q| {
        turns(q);
        q.reclaim_min_runtime_s = Some(6_000);
    });
    let start = outcome(&late, "b0").started_s.unwrap();
    assert!((6_000..10_000).contains(&start), "not before a's jobs ran 6,000 s: started at {start}");
    assert_eq!(two_teams(b(), Some(60), turns), shared, "deterministic");
}
