//! The agent over real HTTP, fed by the recorded 8×H100 fixture: what the
//! scheduler reads on `/v1/sample`, what Prometheus scrapes on `/metrics`,
//! and the health transitions of the recording (the GPU whose uncorrected
//! ECC count grows fails, the hot one is degraded, XID 79 fails a GPU).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tessera_agent::gpu::{GpuSource, RecordedSource};
use tessera_agent::health::Tracker;
use tessera_agent::host::HostSource;
use tessera_agent::serve::{Published, router, sample_and_publish, serve};
use tessera_agent::{Agent, AgentSample, Health};
use tessera_core::model::GpuHealth;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nvml-h100x8.json")
}

fn agent() -> Agent {
    let source: Box<dyn GpuSource> = Box::new(RecordedSource::from_file(&fixture()).unwrap());
    let host = HostSource::new().first_interval(Duration::from_millis(20));
    Agent::new("gpu-node-1", Ok(source), host, Tracker::default())
}

async fn listen() -> (tokio::net::TcpListener, String) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    (l, base)
}

async fn get_sample(base: &str) -> (AgentSample, Value) {
    let v: Value =
        reqwest::get(format!("{base}/v1/sample")).await.unwrap().error_for_status().unwrap().json().await.unwrap();
    (serde_json::from_value(v.clone()).unwrap(), v)
}

async fn get_metrics(base: &str) -> String {
    let r = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/openmetrics-text; version=1.0.0; charset=utf-8");
    r.text().await.unwrap()
}

fn health(s: &AgentSample) -> Vec<Health> {
    s.gpus.iter().map(|g| g.health).collect()
}

/// The metric line for GPU `gpu` of the fixture (labels in order).
fn line(s: &AgentSample, metric: &str, gpu: usize, extra: &str, value: &str) -> String {
    let g = &s.gpus[gpu];
    format!(
        r#"tessera_agent_{metric}{{node="gpu-node-1",gpu="{gpu}",uuid="{}",model="{}"{extra}}} {value}"#,
        g.uuid, g.name
    )
}

fn has(text: &str, line: &str) {
    assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorded_node_over_http() {
    let published = Arc::new(Published::new());
    let (listener, base) = listen().await;
    tokio::spawn(axum::serve(listener, router(published.clone())).into_future());

    let r = reqwest::get(format!("{base}/v1/sample")).await.unwrap();
    assert_eq!(r.status(), 503, "nothing sampled yet");
    assert_eq!(reqwest::get(format!("{base}/healthz")).await.unwrap().text().await.unwrap(), "ok\n");

    use Health::{Degraded as D, Failed as F, Healthy as H};
    // First sample: all healthy but GPU 5, at 87 °C.
    let mut a = sample_and_publish(agent(), &published).await;
    let (s, v) = get_sample(&base).await;
    assert_eq!(s.node, "gpu-node-1");
    assert!(s.nvml.available);
    assert_eq!(s.nvml.driver_version.as_deref(), Some("550.90.07"));
    assert!(s.cpu.cores > 0 && s.memory.total_mib > 0);
    assert_eq!(s.gpus.len(), 8);
    assert_eq!(health(&s), [H, H, H, H, H, D, H, H]);
    let g0 = &s.gpus[0];
    assert_eq!((g0.util_permille, g0.memory_used_mib, g0.memory_total_mib), (970, 73_216, 81_559));
    assert_eq!((g0.temperature_c, g0.power_w), (Some(64), Some(612.4)));
    assert_eq!(g0.name, "NVIDIA H100 80GB HBM3");
    assert_eq!(v["gpus"][5]["health"], "degraded");
    assert_eq!(v["gpus"][5]["health_reason"], "87 °C ≥ 85 °C");
    let m = get_metrics(&base).await;
    has(&m, &line(&s, "gpu_utilization_ratio", 0, "", "0.97"));
    has(&m, &line(&s, "gpu_memory_total_bytes", 0, "", "85520809984"));
    has(&m, &line(&s, "gpu_temperature_celsius", 5, "", "87"));
    has(&m, &line(&s, "gpu_power_watts", 4, "", "71.2"));
    has(&m, &line(&s, "gpu_health", 5, r#",state="degraded""#, "1"));
    has(&m, &line(&s, "gpu_health", 3, r#",state="healthy""#, "1"));
    has(&m, &line(&s, "gpu_ecc_errors_total", 2, r#",type="corrected""#, "4"));
    has(&m, r#"tessera_agent_nvml_available{node="gpu-node-1"} 1"#);

    // Second: GPU 3's uncorrected ECC count grew (failed); GPU 2 collects
    // corrected errors (degraded); GPU 1's XID 13 is the application's.
    a = sample_and_publish(a, &published).await;
    let (s, _) = get_sample(&base).await;
    assert_eq!(health(&s), [H, H, D, F, H, D, H, H]);
    assert_eq!(s.gpus[3].health_reason.as_deref(), Some("2 uncorrected ECC errors"));
    assert_eq!(s.gpus[3].ecc_uncorrected, Some(2));
    assert_eq!(s.gpus[2].health_reason.as_deref(), Some("5 corrected ECC errors since the last sample"));
    assert_eq!(s.gpus[1].xid_events.iter().map(|e| e.xid).collect::<Vec<_>>(), [13]);
    assert_eq!(s.gpus[1].xid_events[0].at_unix_ms, s.taken_at_unix_ms);
    assert_eq!(s.gpus[5].health_reason.as_deref(), Some("88 °C ≥ 85 °C; clocks held down by hardware"));
    let m = get_metrics(&base).await;
    has(&m, &line(&s, "gpu_health", 3, r#",state="failed""#, "1"));
    has(&m, &line(&s, "gpu_health", 3, r#",state="healthy""#, "0"));
    has(&m, &line(&s, "gpu_ecc_errors_total", 3, r#",type="uncorrected""#, "2"));
    has(&m, &line(&s, "gpu_xid_events_total", 1, r#",xid="13""#, "1"));

    // Third: GPU 6 reports XID 79 and is lost; GPU 3 stays failed, GPU 2 is
    // healthy again. The scheduler's view follows.
    a = sample_and_publish(a, &published).await;
    let (s, v) = get_sample(&base).await;
    assert_eq!(health(&s), [H, H, H, F, H, D, F, H]);
    assert!(s.gpus[6].lost);
    assert_eq!(v["gpus"][6]["lost"], true);
    assert_eq!(
        s.gpus[6].health_reason.as_deref(),
        Some("lost by NVML (GPU fell off the bus or is inaccessible); XID 79 (fallen off the bus)")
    );
    assert_eq!(s.gpus[6].temperature_c, None);
    let mut expected = vec![GpuHealth::Healthy; 8];
    (expected[3], expected[5], expected[6]) = (GpuHealth::Failed, GpuHealth::Degraded, GpuHealth::Failed);
    assert_eq!(s.gpu_health(), expected);
    let n = s.to_node_sample();
    assert_eq!(n.gpu_util_permille, [970, 950, 960, 0, 0, 990, 0, 440]);
    let m = get_metrics(&base).await;
    has(&m, &line(&s, "gpu_xid_events_total", 6, r#",xid="79""#, "1"));
    has(&m, &line(&s, "gpu_health", 6, r#",state="failed""#, "1"));
    let g6 = format!(r#"gpu="6",uuid="{}""#, s.gpus[6].uuid);
    assert!(!m.lines().any(|l| l.starts_with("tessera_agent_gpu_temperature_celsius") && l.contains(&g6)), "{m}");

    // The recording is over: the last sample holds, its XID not counted twice.
    let _ = sample_and_publish(a, &published).await;
    let (s, _) = get_sample(&base).await;
    assert_eq!(health(&s), [H, H, H, F, H, D, F, H]);
    has(&get_metrics(&base).await, &line(&s, "gpu_xid_events_total", 6, r#",xid="79""#, "1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_samples_every_interval_until_shutdown() {
    let (listener, base) = listen().await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(agent(), listener, Duration::from_millis(50), async {
        let _ = stopped.await;
    }));
    // Served from the start, then the background task walks the recording.
    let (s, _) = get_sample(&base).await;
    assert_eq!(s.gpus.len(), 8);
    let mut lost = false;
    for _ in 0..200 {
        let (s, _) = get_sample(&base).await;
        if s.gpus[6].lost {
            lost = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(lost, "the third recorded sample was published");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), server).await.unwrap().unwrap().unwrap();
}
