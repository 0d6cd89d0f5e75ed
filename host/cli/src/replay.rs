//! What must replay runs on one kind of runtime: plugin calls bounded by
//! fuel, never by a clock (`tessera_wasm::budget`), so the same inputs give
//! byte-identical output on any machine, idle or loaded. The simulator,
//! `plan`, the online loop, the chaos twin and the quality and fidelity
//! benches get their runtime here.

use std::path::PathBuf;

use anyhow::Result;
use tessera_wasm::{CallBudget, Runtime, RuntimeConfig};

/// A runtime for replays (compiled components cached in `cache_dir`).
pub fn runtime(cache_dir: Option<PathBuf>) -> Result<Runtime> {
    Ok(Runtime::new(RuntimeConfig { cache_dir, budget: CallBudget::REPLAY, ..RuntimeConfig::default() })?)
}

/// Runs `jobs` on every core, all sharing one runtime (each plugin is
/// compiled once, into a cache removed afterwards); results in job order.
pub fn run_parallel<J: Send, R: Send>(jobs: Vec<J>, run: impl Fn(&Runtime, J) -> R + Sync) -> Result<Vec<R>> {
    let cache = std::env::temp_dir().join(format!("tessera-runs-{}", std::process::id()));
    let rt = runtime(Some(cache.clone()))?;
    let queue = std::sync::Mutex::new(jobs.into_iter().enumerate().collect::<Vec<_>>());
    let results = std::sync::Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let Some((i, job)) = queue.lock().unwrap_or_else(|p| p.into_inner()).pop() else { break };
                    let r = run(&rt, job);
                    results.lock().unwrap_or_else(|p| p.into_inner()).push((i, r));
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&cache);
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by_key(|r| r.0);
    Ok(results.into_iter().map(|(_, r)| r).collect())
}
