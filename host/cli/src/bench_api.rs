//! `tessera bench api`: explain requests at a fixed rate against a running
//! service on loopback, with its scheduling loop busy, and what they cost.
//!
//! Open loop: requests are issued on a fixed schedule whether or not the
//! earlier ones have answered (so a slow server shows as latency, not as a
//! politely lower rate), with at most `MAX_IN_FLIGHT` outstanding; a tick
//! that finds them all busy is counted as not sent.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use tokio::sync::Semaphore;

/// Requests outstanding at most.
pub const MAX_IN_FLIGHT: usize = 256;

/// What a load run measured.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Requests per second asked for.
    pub rate: u32,
    /// Seconds of load.
    pub duration_s: f64,
    /// Requests the schedule called for.
    pub scheduled: u64,
    /// Requests sent.
    pub sent: u64,
    /// Answered 200 with the asked pod's explanation.
    pub ok: u64,
    /// Answered otherwise, or not at all.
    pub errors: u64,
    /// Ticks skipped because every slot was busy.
    pub not_sent: u64,
    /// Answers per second over the run.
    pub achieved_rps: f64,
    /// Latency percentiles, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
    /// Decisions the scheduling loop made during the run.
    pub decisions_during: u64,
}

impl LoadReport {
    /// A table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let rows: [(&str, String); 11] = [
            ("rate asked (req/s)", self.rate.to_string()),
            ("duration (s)", format!("{:.1}", self.duration_s)),
            ("requests sent / scheduled", format!("{} / {}", self.sent, self.scheduled)),
            ("answered 200, correct", self.ok.to_string()),
            ("errors", self.errors.to_string()),
            ("not sent (all slots busy)", self.not_sent.to_string()),
            ("achieved (req/s)", format!("{:.0}", self.achieved_rps)),
            ("latency p50 (ms)", format!("{:.2}", self.p50_ms)),
            ("latency p99 (ms)", format!("{:.2}", self.p99_ms)),
            ("latency max (ms)", format!("{:.2}", self.max_ms)),
            ("decisions made meanwhile", self.decisions_during.to_string()),
        ];
        for (k, v) in rows {
            s += &format!("{k:<28} {v}\n");
        }
        s
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Sends `GET /v1/decisions/{pod}` for `pods` (round robin) to `addr` at
/// `rate` per second for `duration`; `decisions` reads the service's
/// decision count (to show the loop kept working).
pub async fn load(
    addr: SocketAddr,
    pods: &[String],
    rate: u32,
    duration: Duration,
    decisions: impl Fn() -> u64,
) -> Result<LoadReport> {
    anyhow::ensure!(!pods.is_empty(), "no pods to ask about");
    anyhow::ensure!(rate > 0, "the rate must be positive");
    let http = reqwest::Client::builder().pool_max_idle_per_host(MAX_IN_FLIGHT).build()?;
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let period = Duration::from_secs_f64(1.0 / f64::from(rate));
    let scheduled = (duration.as_secs_f64() * f64::from(rate)).round() as u64;
    let before = decisions();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(scheduled as usize);
    let mut not_sent = 0u64;
    for i in 0..scheduled {
        let at = start + period.mul_f64(i as f64);
        tokio::time::sleep_until(at.into()).await;
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            not_sent += 1;
            continue;
        };
        let pod = pods[i as usize % pods.len()].clone();
        let url = format!("http://{addr}/v1/decisions/{pod}");
        let http = http.clone();
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let ok = match http.get(&url).send().await {
                Ok(r) if r.status().is_success() => r
                    .json::<serde_json::Value>()
                    .await
                    .is_ok_and(|v| v["pod"] == pod.as_str() && v["trace_id"].as_str().is_some_and(|t| t.len() == 32)),
                _ => false,
            };
            drop(permit);
            (ok, t.elapsed().as_secs_f64() * 1000.0)
        }));
    }
    let mut lat = Vec::with_capacity(tasks.len());
    let (mut ok, mut errors) = (0u64, 0u64);
    for t in tasks {
        let (good, ms) = t.await?;
        if good {
            ok += 1;
        } else {
            errors += 1;
        }
        lat.push(ms);
    }
    let wall = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    Ok(LoadReport {
        rate,
        duration_s: duration.as_secs_f64(),
        scheduled,
        sent: lat.len() as u64,
        ok,
        errors,
        not_sent,
        achieved_rps: lat.len() as f64 / wall,
        p50_ms: percentile(&lat, 0.5),
        p99_ms: percentile(&lat, 0.99),
        max_ms: lat.last().copied().unwrap_or(0.0),
        decisions_during: decisions().saturating_sub(before),
    })
}

/// `tessera bench api`: starts the service on the simulator (defaults of
/// `cfg`, listening on a free loopback port), waits for `warm_decisions`
/// decisions, then runs [`load`] over the pods decided so far.
pub fn run(mut cfg: crate::serve::ServiceConfig, rate: u32, duration: Duration) -> Result<LoadReport> {
    cfg.serve.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let (server, listener) = crate::serve::start(cfg).await?;
        let addr = listener.local_addr()?;
        let shared = server.shared().clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(server.serve(listener, async {
            let _ = rx.await;
        }));
        let t0 = Instant::now();
        while shared.decisions.read().map(|d| d.len()).unwrap_or(0) < 200 {
            anyhow::ensure!(t0.elapsed() < Duration::from_secs(120), "the service made no decisions in 2 minutes");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let pods: Vec<String> = shared
            .decisions
            .read()
            .map(|d| d.newest_first().take(1000).map(|r| r.pod.clone()).collect())
            .unwrap_or_default();
        let count = || shared.metrics.decisions_total();
        let report = load(addr, &pods, rate, duration, count).await?;
        let _ = tx.send(());
        serving.await??;
        Ok(report)
    })
}
