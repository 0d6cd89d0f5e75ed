//! The movement journal kept in a ConfigMap on the in-process API server:
//! a leader executing a plan stops after any of its writes, a new leader
//! opens the same journal, resumes the plan and ends with the cluster as
//! an uninterrupted run leaves it; the old leader's next write is refused
//! (the journal fences it).

use std::collections::BTreeMap;

use tessera_core::cluster::{Cluster, Placement, choose_gpus};
use tessera_core::model::{Node, Pod, Resources};
use tessera_kube::journal::ConfigMapJournal;
use tessera_movement::exec::Executor;
use tessera_movement::journal::{Entry, Journal, JournalError, MemJournal};
use tessera_movement::sim::{SimActuator, SimActuatorConfig};
use tessera_movement::{MovePlan, MovementConfig, PodMove};

use super::apiserver::ApiServer;

/// Four 8-GPU nodes; eight one-GPU pods on the first; a plan moving six.
fn scene() -> (SimActuator, MovePlan, Cluster) {
    let mut c = Cluster::new(
        (0..4)
            .map(|i| Node::new(0, format!("n{i}"), Resources { cpu_milli: 64_000, memory_mib: 262_144 }, 8, "A100"))
            .collect(),
    );
    let mut pods = Vec::new();
    for i in 0..8u64 {
        let spec = Pod {
            name: format!("p{i}"),
            namespace: "ml".into(),
            workload: format!("w{}", i % 3),
            requests: Resources { cpu_milli: 1_000, memory_mib: 1_024 },
            gpu_count: 1,
            gpu_milli: 1000,
            ..Pod::default()
        };
        let gpus = choose_gpus(c.node(0).unwrap(), &spec, None).unwrap();
        let at = c.bind(0, &spec, gpus).unwrap();
        pods.push((i, spec, at));
    }
    let plan = MovePlan {
        id: 3,
        moves: (0..6)
            .map(|i| PodMove {
                pod: i,
                spec: pods[i as usize].1.clone(),
                from: pods[i as usize].2,
                to: 1 + (i % 3) as u32,
                gpu_hint: None,
            })
            .collect(),
    };
    let act = SimActuator::new(c.clone(), pods, SimActuatorConfig { seed: 5, ..SimActuatorConfig::default() });
    (act, plan, c)
}

fn cfg() -> MovementConfig {
    MovementConfig { pause_duration_s: 10, ..MovementConfig::default() }
}

/// A journal that fails after `left` writes, as a leader that dies.
struct Dying<'a> {
    inner: &'a mut dyn Journal,
    left: usize,
}

impl Journal for Dying<'_> {
    fn append(&mut self, e: &Entry) -> Result<(), JournalError> {
        if self.left == 0 {
            return Err(JournalError::Crashed(0));
        }
        self.left -= 1;
        self.inner.append(e)
    }
    fn read_all(&mut self) -> Result<Vec<Entry>, JournalError> {
        self.inner.read_all()
    }
}

/// Ticks every 5 s until the plan is over or the journal fails; the time.
fn drive(ex: &mut Executor, act: &mut SimActuator, j: &mut dyn Journal, mut now: u64) -> u64 {
    for _ in 0..10_000 {
        if ex.finished() || ex.tick(act, j, now).is_err() {
            break;
        }
        now += 5;
    }
    now
}

fn placements(act: &SimActuator) -> BTreeMap<u64, Option<Placement>> {
    act.placements()
}

#[test]
fn a_new_leader_resumes_the_plan_from_the_journal_in_the_cluster() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let srv = rt.block_on(ApiServer::start());
    // As the scheduler's service account: its Role grants the one journal
    // ConfigMap, so each crash point starts from a cluster without it.
    let client = || rt.block_on(async { kube::Client::try_from(srv.config()).unwrap() });
    let name = "tessera-movement-journal";

    // The uninterrupted run.
    let (mut act, plan, cluster) = scene();
    let mut mem = MemJournal::default();
    let mut ex = Executor::start(cfg(), &plan, tessera_movement::dag::build(&cluster, &plan), &mut mem).unwrap();
    drive(&mut ex, &mut act, &mut mem, 0);
    assert!(ex.finished());
    let expected = placements(&act);
    let writes = mem.entries.len();
    assert!(writes > 10, "{writes} journal writes");

    for crash_after in [1, writes / 3, writes / 2, writes - 2] {
        if srv.get("configmaps", "tessera-system", name).is_some() {
            srv.delete("configmaps", "tessera-system", name);
        }
        // The old leader: dies after `crash_after` writes.
        let (mut act, plan, cluster) = scene();
        let mut old =
            ConfigMapJournal::open(client(), "tessera-system", name, "replica-a", rt.handle().clone()).unwrap();
        let now = {
            let mut dying = Dying { inner: &mut old, left: crash_after };
            match Executor::start(cfg(), &plan, tessera_movement::dag::build(&cluster, &plan), &mut dying) {
                Ok(mut ex) => drive(&mut ex, &mut act, &mut dying, 0),
                Err(_) => 0,
            }
        };
        // The new leader: the same journal, read from the cluster; opening
        // it fences the old leader at once.
        let mut new =
            ConfigMapJournal::open(client(), "tessera-system", name, "replica-b", rt.handle().clone()).unwrap();
        let e = old.append(&Entry::Batch { number: 98, steps: vec![] }).unwrap_err().to_string();
        assert!(e.contains("another writer"), "{e}");
        if let Some(mut ex) = Executor::resume(cfg(), &mut new, &act, now).unwrap() {
            drive(&mut ex, &mut act, &mut new, now);
            assert!(ex.finished(), "crash after {crash_after}");
        }
        assert_eq!(placements(&act), expected, "crash after write {crash_after}");
    }
    let cm = srv.get("configmaps", "tessera-system", name).unwrap();
    assert!(cm["data"]["00000000"].as_str().unwrap().starts_with("{\"Plan\""), "{cm}");
    assert_eq!(cm["metadata"]["annotations"]["tessera.io/journal-writer"], "replica-b");
    srv.assert_sound();
}
