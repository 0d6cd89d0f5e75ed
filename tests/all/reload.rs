//! Hot reload: new versions are checked beside the running one and swapped
//! in atomically; calls in flight finish on the old version; no call is
//! lost; a version that fails its check never replaces the running one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tessera_core::{Pod, Resources};
use tessera_plugins::{BINPACK, HOSTILE};
use tessera_policy::Bounded;
use tessera_wasm::PluginSpec;

use crate::{cluster, load, member, policy, runtime};

fn pod() -> Pod {
    Pod {
        name: "p".into(),
        requests: Resources { cpu_milli: 500, memory_mib: 512 },
        gpu_count: 1,
        gpu_milli: 500,
        ..Pod::default()
    }
}

#[test]
fn reload_under_a_stream_of_calls_loses_no_call() {
    let rt = runtime();
    let p = Arc::new(policy(vec![member(load(&rt, BINPACK, "binpack", "null"), 1.0)], &cluster(64)));
    let ids: Arc<Vec<u32>> = Arc::new((0..64).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (p, ids, stop, done) = (p.clone(), ids.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let d = p.decide(&pod(), &ids);
                    if !d.errors.is_empty() || d.chosen.is_none() {
                        failures.push(format!("{:?}", d.errors));
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                failures
            })
        })
        .collect();
    for i in 0..6 {
        std::thread::sleep(Duration::from_millis(30));
        let v = load(&rt, BINPACK, "binpack", &format!(r#"{{"gpu_weight": {}}}"#, i + 1));
        p.swap("binpack", v);
    }
    std::thread::sleep(Duration::from_millis(30));
    stop.store(true, Ordering::Relaxed);
    let failures: Vec<String> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    assert!(failures.is_empty(), "{} calls failed: {:?}", failures.len(), &failures[..failures.len().min(3)]);
    assert!(done.load(Ordering::Relaxed) > 20, "the stream kept flowing");
    assert_eq!(p.member("binpack").unwrap().slot.stats().versions, 7);
}

#[test]
fn calls_in_flight_finish_on_the_old_version() {
    let rt = runtime();
    let mut spec = PluginSpec::new("hostile");
    spec.limits.deadline_ms = Bounded(10_000);
    spec.config_json = r#"{"mode": "spin", "spin": 400000000, "min_candidates": 5, "version": "1.0.0"}"#.into();
    let (v1, _) = rt.load(&spec, HOSTILE.bytes).unwrap();
    let p = Arc::new(policy(vec![member(v1, 1.0)], &cluster(8)));
    let ids: Vec<u32> = (0..8).collect();
    let in_flight = {
        let (p, ids) = (p.clone(), ids.clone());
        std::thread::spawn(move || p.decide(&pod(), &ids))
    };
    std::thread::sleep(Duration::from_millis(60));
    let v2 = load(&rt, HOSTILE, "hostile", r#"{"version": "2.0.0"}"#);
    let old = p.swap("hostile", v2).unwrap();
    assert_eq!(old.version(), "1.0.0");
    let d = in_flight.join().unwrap();
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    assert_eq!(d.outcomes[0].version, "1.0.0", "the call in flight finished on the old version");
    let d = p.decide(&pod(), &ids);
    assert_eq!(d.outcomes[0].version, "2.0.0");
}

#[test]
fn a_version_that_fails_its_check_never_replaces_the_running_one() {
    let rt = runtime();
    let p = policy(vec![member(load(&rt, HOSTILE, "hostile", r#"{"version": "1.0.0"}"#), 1.0)], &cluster(8));
    let mut spec = PluginSpec::new("hostile");
    spec.config_json = r#"{"mode": "panic", "version": "2.0.0"}"#.into();
    let err = rt.load(&spec, HOSTILE.bytes).unwrap_err();
    assert!(err.to_string().contains("failed its load check"), "{err}");
    let d = p.decide(&pod(), &(0..8).collect::<Vec<_>>());
    assert!(d.errors.is_empty());
    assert_eq!(d.outcomes[0].version, "1.0.0");
}

#[test]
fn a_swapped_in_version_rebuilds_its_mirror_from_the_feed() {
    let rt = runtime();
    let mut nodes = cluster(8);
    let p = policy(vec![member(load(&rt, BINPACK, "binpack", "null"), 1.0)], &nodes);
    let ids: Vec<u32> = (0..8).collect();
    assert_eq!(p.decide(&pod(), &ids).chosen, Some(7));
    // Node 2 fills up; then a new version arrives and must see that.
    for g in &mut nodes[2].gpus[..7] {
        g.free_milli = 0;
    }
    nodes[2].gpus[7].free_milli = 600;
    nodes[2].free.cpu_milli = 1000;
    p.upsert_nodes([&nodes[2]]);
    p.swap("binpack", load(&rt, BINPACK, "binpack", "null"));
    let d = p.decide(&pod(), &ids);
    assert_eq!(d.chosen, Some(2), "{d:?}");
    assert_eq!(d.gpu_hint, None, "binpack leaves the GPU to the host");
}

#[test]
fn a_decision_past_its_budget_uses_the_scores_gathered_so_far() {
    use tessera_plugins::TOPOLOGY_SPREAD;
    let rt = runtime();
    let mut slow = PluginSpec::new("hostile");
    slow.limits.deadline_ms = Bounded(10_000);
    slow.config_json = r#"{"mode": "spin", "spin": 200000000, "min_candidates": 5}"#.into();
    let (slow, _) = rt.load(&slow, HOSTILE.bytes).unwrap();
    let p = policy(
        vec![
            member(load(&rt, BINPACK, "binpack", "null"), 1.0),
            member(slow, 1.0),
            member(load(&rt, TOPOLOGY_SPREAD, "topology-spread", "null"), 1.0),
        ],
        &cluster(8),
    )
    .with_timeout(Duration::from_millis(20));
    let d = p.decide(&pod(), &(0..8).collect::<Vec<_>>());
    assert!(d.deadline_hit, "{d:?}");
    assert_eq!(
        d.outcomes.iter().map(|o| o.plugin.as_str()).collect::<Vec<_>>(),
        ["binpack", "hostile"],
        "spread was not asked"
    );
    assert_eq!(d.chosen, Some(7), "binpack's choice stands");
    // Without a budget every scorer answers.
    let d = policy(vec![member(load(&rt, BINPACK, "binpack", "null"), 1.0)], &cluster(8)).decide(&pod(), &[0, 1]);
    assert!(!d.deadline_hit);
}
