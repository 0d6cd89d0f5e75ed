//! The sandbox under load: limits judge the plugin, not the machine. With
//! busy threads on every core (started here), a well-behaved plugin meets
//! its deadline of CPU however long the host keeps it waiting, a looping
//! one is still stopped, and what must replay replays byte for byte
//! (`host/cli/tests/cli.rs` runs the simulator so).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tessera_core::{Pod, Resources};
use tessera_plugins::{BINPACK, HOSTILE};
use tessera_policy::Bounded;
use tessera_wasm::{CallBudget, CallFault, PluginSpec, Runtime, RuntimeConfig};

use crate::{cache_dir, cluster, load, member, policy};

/// Busy threads until dropped: on every core (twice over), or on the
/// calling thread's own core.
pub struct Contention {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// The calling thread's CPUs before `on_this_cpu` pinned it.
    #[cfg(target_os = "linux")]
    restore: Option<libc::cpu_set_t>,
}

impl Contention {
    pub fn start() -> Self {
        let n = 2 * std::thread::available_parallelism().map_or(2, |n| n.get());
        Self::spawn(n, || {})
    }

    /// `n` busy threads pinned, with the calling thread, to the core the
    /// caller runs on: the caller gets about 1/(n+1) of it however many
    /// cores the machine has or how a container's quota is spread over
    /// them (with busy threads "on every core", a CI runner whose cgroup
    /// quota is two CPUs but whose threads may run on any of its many
    /// cores left the caller a core of its own: one call in 5,000 was
    /// delayed). Elsewhere than Linux, `start`.
    pub fn on_this_cpu(n: usize) -> Self {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: plain libc calls on a zeroed set; pid 0 is the calling thread.
            #[allow(unsafe_code)]
            unsafe {
                let mut before: libc::cpu_set_t = std::mem::zeroed();
                let size = std::mem::size_of::<libc::cpu_set_t>();
                let cpu = libc::sched_getcpu();
                if cpu >= 0 && libc::sched_getaffinity(0, size, &mut before) == 0 {
                    let mut one: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu as usize, &mut one);
                    if libc::sched_setaffinity(0, size, &one) == 0 {
                        let mut c = Self::spawn(n, move || {
                            libc::sched_setaffinity(0, size, &one);
                        });
                        c.restore = Some(before);
                        return c;
                    }
                }
            }
        }
        let _ = n;
        Self::start()
    }

    fn spawn(n: usize, pin: impl Fn() + Clone + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let (stop, pin) = (stop.clone(), pin.clone());
                std::thread::spawn(move || {
                    pin();
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
                    }
                })
            })
            .collect();
        Self {
            stop,
            threads,
            #[cfg(target_os = "linux")]
            restore: None,
        }
    }
}

impl Drop for Contention {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        #[cfg(target_os = "linux")]
        if let Some(before) = self.restore.take() {
            // SAFETY: restores the calling thread's own set, read in `on_this_cpu`.
            #[allow(unsafe_code)]
            unsafe {
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &before);
            }
        }
    }
}

fn pod() -> Pod {
    Pod {
        name: "p".into(),
        requests: Resources { cpu_milli: 1000, memory_mib: 512 },
        gpu_count: 1,
        gpu_milli: 1000,
        ..Pod::default()
    }
}

fn service_runtime() -> Runtime {
    Runtime::new(RuntimeConfig { cache_dir: Some(cache_dir()), ..RuntimeConfig::default() }).unwrap()
}

/// A plugin that spins ~1 ms of CPU per call with a 5 ms deadline: on a
/// machine this busy its calls often span more than 5 ms of wall time, and
/// none is a fault, because it never uses 5 ms of CPU. The host's
/// starvation is counted as such.
#[test]
fn a_well_behaved_plugin_under_contention_collects_no_faults() {
    let rt = service_runtime();
    let mut spec = PluginSpec::new("spinner");
    spec.config_json = r#"{"mode": "spin", "spin": 200000}"#.into();
    spec.limits.deadline_ms = Bounded(5);
    let (spinner, _) = rt.load(&spec, HOSTILE.bytes).unwrap();
    let nodes = cluster(8);
    let p = policy(vec![member(load(&rt, BINPACK, "binpack", "null"), 1.0), member(spinner.clone(), 1.0)], &nodes);
    // Three busy threads on this thread's core: its calls wait for their
    // turns (well past 5 ms of wall time), never past the safety net of
    // ten deadlines.
    let busy = Contention::on_this_cpu(3);
    // Calls made before the loop (loading, the policy's first sync of the
    // cluster) may be starved too when other tests load the machine; they
    // belong to no decision.
    let starved_before = spinner.starved_calls();
    let t0 = Instant::now();
    let (mut calls, mut slow, mut starved_seen) = (0, 0, 0);
    // Until the host has kept a few calls waiting past the deadline (what
    // a wall-clock deadline would have counted as the plugin's timeouts),
    // for up to a minute where pinning is not honoured.
    while (slow < 3 || calls < 200) && t0.elapsed() < Duration::from_secs(60) {
        let t = Instant::now();
        let d = p.decide(&pod(), &(0..8).collect::<Vec<_>>());
        assert!(d.errors.is_empty(), "a starved call counted as the plugin's fault: {:?}", d.errors);
        slow += usize::from(t.elapsed() > Duration::from_millis(5));
        starved_seen += d.host_starved;
        calls += 1;
    }
    drop(busy);
    eprintln!(
        "{calls} decisions in {:?}; {slow} over 5 ms of wall time; starved calls {} ({starved_before} before the loop)",
        t0.elapsed(),
        spinner.starved_calls()
    );
    assert!(slow >= 3, "the contention never delayed a call past its deadline: the test proves nothing");
    // Each decision says how many of its calls the host starved (its span
    // carries it as `tessera.host.starved_calls`).
    let starved_in_loop = spinner.starved_calls() - starved_before;
    assert!(starved_seen >= starved_in_loop, "{starved_seen} < {starved_in_loop}");
}

/// A looping plugin is still stopped under contention: a timeout once it
/// used its deadline of CPU, or host overload if the host starved it past
/// the safety net, within that net either way, and the rest of the policy
/// decides.
#[test]
fn a_looping_plugin_under_contention_is_still_stopped() {
    let rt = service_runtime();
    let mut spec = PluginSpec::new("looper");
    spec.config_json = r#"{"min_candidates": 5, "mode": "loop"}"#.into();
    spec.limits.deadline_ms = Bounded(20);
    let (looper, _) = rt.load(&spec, HOSTILE.bytes).unwrap();
    let nodes = cluster(8);
    let p = policy(vec![member(load(&rt, BINPACK, "binpack", "null"), 1.0), member(looper, 1.0)], &nodes);
    let busy = Contention::start();
    let t = Instant::now();
    let d = p.decide(&pod(), &(0..8).collect::<Vec<_>>());
    let took = t.elapsed();
    drop(busy);
    assert_eq!(d.errors.len(), 1, "{:?}", d.errors);
    assert!(
        matches!(d.errors[0].kind, CallFault::Timeout { deadline_ms: 20 } | CallFault::HostOverloaded { .. }),
        "{}",
        d.errors[0]
    );
    assert!(took < Duration::from_secs(2), "stopped after {took:?} (the safety net is 10 deadlines)");
    assert!(d.chosen.is_some(), "binpack still decides");
}

/// What must replay has no clock: a looping plugin is stopped by fuel
/// after the same work every time, as a timeout, with no wall-clock
/// deadline at all.
#[test]
fn a_replay_stops_a_looping_plugin_by_fuel_as_a_timeout() {
    let rt = Runtime::new(RuntimeConfig { budget: CallBudget::REPLAY, ..RuntimeConfig::default() }).unwrap();
    let mut spec = PluginSpec::new("looper");
    spec.config_json = r#"{"min_candidates": 5, "mode": "loop"}"#.into();
    spec.limits.deadline_ms = Bounded(5);
    let (looper, _) = rt.load(&spec, HOSTILE.bytes).unwrap();
    let nodes = cluster(8);
    let p = policy(vec![member(looper, 1.0)], &nodes);
    let d = p.decide(&pod(), &(0..8).collect::<Vec<_>>());
    assert!(matches!(d.errors[0].kind, CallFault::Timeout { deadline_ms: 5 }), "{}", d.errors[0]);
}

/// A fresh instance mirrors the whole cluster once: that sync is sized by
/// the cluster, not by one decision, so a tight deadline does not make a
/// large cluster unmirrorable (before, each fault dropped the instance and
/// the next one started over: every call faulted, forever). Under
/// contention, in the service and in a replay alike.
#[test]
fn a_fresh_instance_mirrors_a_large_cluster_within_its_sync_allowance() {
    let nodes = cluster(10_000);
    let candidates: Vec<u32> = (0..10_000).collect();
    let busy = Contention::start();
    for budget in [CallBudget::SERVICE, CallBudget::REPLAY] {
        let rt =
            Runtime::new(RuntimeConfig { budget, cache_dir: Some(cache_dir()), ..RuntimeConfig::default() }).unwrap();
        let mut spec = PluginSpec::new("binpack");
        spec.limits.deadline_ms = Bounded(5);
        let (binpack, _) = rt.load(&spec, BINPACK.bytes).unwrap();
        let p = policy(vec![member(binpack, 1.0)], &nodes);
        for round in 0..3 {
            let d = p.decide(&pod(), &candidates);
            assert!(d.errors.is_empty(), "{budget:?}, decision {round}: {:?}", d.errors);
            assert!(d.chosen.is_some(), "{budget:?}");
        }
    }
    drop(busy);
}

/// The sync's allowance is room for the mirror, not for a loop: a plugin
/// that loops in `apply` is stopped (a timeout in the service once it used
/// the deadline plus the allowance of CPU; by fuel in a replay), and the
/// rest of the policy decides.
#[test]
fn a_plugin_looping_in_apply_is_still_stopped() {
    for budget in [CallBudget::SERVICE, CallBudget::REPLAY] {
        let rt =
            Runtime::new(RuntimeConfig { budget, cache_dir: Some(cache_dir()), ..RuntimeConfig::default() }).unwrap();
        let mut spec = PluginSpec::new("looper");
        // Each instance's first apply passes; its next one loops.
        spec.config_json = r#"{"mode": "loop", "on": "apply", "after": 1}"#.into();
        spec.limits.deadline_ms = Bounded(20);
        let (looper, _) = rt.load(&spec, HOSTILE.bytes).unwrap();
        let mut nodes = cluster(8);
        let p = policy(vec![member(load(&rt, BINPACK, "binpack", "null"), 1.0), member(looper, 1.0)], &nodes);
        let d = p.decide(&pod(), &(0..8).collect::<Vec<_>>());
        assert!(d.errors.is_empty(), "{budget:?}: {:?}", d.errors);
        nodes[3].free.cpu_milli -= 1;
        p.upsert_nodes(&nodes[3..4]);
        let t = Instant::now();
        let d = p.decide(&pod(), &(0..8).collect::<Vec<_>>());
        let took = t.elapsed();
        assert_eq!(d.errors.len(), 1, "{budget:?}: {:?}", d.errors);
        // 20 ms and one delta's allowance.
        assert!(
            matches!(d.errors[0].kind, CallFault::Timeout { deadline_ms: 21 } | CallFault::HostOverloaded { .. }),
            "{budget:?}: {}",
            d.errors[0]
        );
        assert_eq!(d.errors[0].call, "apply", "{}", d.errors[0]);
        assert!(took < Duration::from_secs(2), "{budget:?}: stopped after {took:?}");
        assert!(d.chosen.is_some(), "binpack still decides");
    }
}
