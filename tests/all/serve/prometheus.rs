//! A real Prometheus (Debian's `prometheus` package; `.ci/run` installs it)
//! scrapes a running service every second with exemplar storage on and the
//! shipped alert rules loaded. Every PromQL expression of the shipped
//! dashboards and rules must return data through Prometheus's HTTP API,
//! every rule must evaluate, and the exemplars' trace ids must be traces
//! the service exported.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tessera_server::config::OtlpProtocol;

use super::{Receiver, Running, Trace, config};

/// The Prometheus binary: `PROMETHEUS_BIN`, else `prometheus` on `PATH`.
fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PROMETHEUS_BIN") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join("prometheus")).find(|p| p.is_file())
}

use crate::repo;

/// Kills Prometheus when the test ends, however it ends.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every `expr` of the shipped dashboards, Grafana's interval variables
/// replaced by a window that holds several 1 s scrapes.
fn dashboard_queries() -> Vec<(String, String)> {
    let dir = repo().join("deploy/grafana/dashboards");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let d: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for panel in d["panels"].as_array().unwrap() {
            for t in panel["targets"].as_array().unwrap() {
                let expr = t["expr"].as_str().unwrap().replace("$__rate_interval", "30s").replace("$__interval", "5s");
                assert!(!expr.contains('$'), "{}: unknown variable in {expr}", path.display());
                let name = format!("{} / {}", d["title"].as_str().unwrap(), panel["title"].as_str().unwrap());
                out.push((name, expr));
            }
        }
    }
    assert!(out.len() >= 15, "the dashboards hold the panels the issue names: {out:?}");
    out
}

/// The query of every rule: the expression left of its threshold.
fn rule_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("deploy/prometheus/rules.yaml")).unwrap();
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let mut out = Vec::new();
    for g in doc["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            let expr = r["expr"].as_str().unwrap().trim();
            let (lhs, threshold) = [" >= ", " <= ", " == ", " != ", " > ", " < "]
                .iter()
                .filter_map(|op| expr.rfind(op).map(|i| (&expr[..i], &expr[i + op.len()..])))
                .max_by_key(|(lhs, _)| lhs.len())
                .unwrap_or_else(|| panic!("rule expression without a threshold: {expr}"));
            assert!(threshold.trim().parse::<f64>().is_ok(), "threshold of {expr}");
            out.push((format!("rule {}", r["alert"].as_str().unwrap()), lhs.to_string()));
        }
    }
    assert!(out.len() >= 8);
    out
}

async fn get(http: &reqwest::Client, url: String) -> Value {
    let r = http.get(&url).send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
    let text = r.text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: {e}: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_service_and_every_dashboard_and_rule_query_returns_data() {
    let Some(bin) = binary() else {
        assert!(std::env::var_os("CI").is_none(), "CI must have prometheus installed (.ci/run installs it)");
        eprintln!("skipped: no prometheus binary (apt-get install prometheus, or set PROMETHEUS_BIN)");
        return;
    };
    let receiver = Receiver::default();
    let endpoint = receiver.grpc().await;
    let svc = Running::start(config(Some((endpoint, OtlpProtocol::Grpc)))).await;

    let dir = tempfile::tempdir().unwrap();
    let rules = repo().join("deploy/prometheus/rules.yaml");
    let cfg = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: tessera\n    static_configs:\n      - targets: ['{}']\n",
        rules.display(),
        svc.addr
    );
    std::fs::write(dir.path().join("prometheus.yml"), cfg).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let child = Command::new(&bin)
        .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--enable-feature=exemplar-storage")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let _guard = Guard(child);
    let prom = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let prom_log = || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();

    // Prometheus up, the target scraped without error.
    let t0 = Instant::now();
    let started_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    while !http.get(format!("{prom}/-/ready")).send().await.is_ok_and(|r| r.status().is_success()) {
        assert!(t0.elapsed() < Duration::from_secs(60), "prometheus did not start:\n{}", prom_log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    loop {
        let up = get(&http, format!("{prom}/api/v1/query?query=up")).await;
        if up["data"]["result"][0]["value"][1] == "1" {
            break;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let targets = get(&http, format!("{prom}/api/v1/targets")).await;
            panic!("tessera was not scraped: {targets}\n{}", prom_log());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Every query returns data (retrying while rates fill their windows).
    let queries: Vec<(String, String)> = dashboard_queries().into_iter().chain(rule_queries()).collect();
    let mut failing: Vec<(String, String, Value)> = Vec::new();
    let t0 = Instant::now();
    loop {
        failing.clear();
        for (name, q) in &queries {
            let r = http.get(format!("{prom}/api/v1/query")).query(&[("query", q.as_str())]).send().await.unwrap();
            let v: Value = r.json().await.unwrap();
            let ok = v["status"] == "success" && v["data"]["result"].as_array().is_some_and(|a| !a.is_empty());
            if !ok {
                failing.push((name.clone(), q.clone(), v));
            }
        }
        if failing.is_empty() || t0.elapsed() > Duration::from_secs(90) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(failing.is_empty(), "{} of {} queries return no data:\n{failing:#?}", failing.len(), queries.len());

    // Every rule evaluates.
    let t0 = Instant::now();
    loop {
        let rules = get(&http, format!("{prom}/api/v1/rules")).await;
        let all: Vec<&Value> = rules["data"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().iter())
            .collect();
        assert_eq!(all.len(), rule_queries().len(), "{rules}");
        let bad: Vec<&&Value> = all.iter().filter(|r| r["health"] != "ok").collect();
        if bad.is_empty() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "rules not healthy: {bad:#?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Exemplars: trace ids on the latency histogram and the counters.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64() + 1.0;
    let mut exemplars: Vec<(String, String)> = Vec::new();
    for metric in
        ["tessera_decision_latency_seconds_bucket", "tessera_decisions_total", "tessera_reschedule_attempts_total"]
    {
        let v = http
            .get(format!("{prom}/api/v1/query_exemplars"))
            .query(&[("query", metric), ("start", &started_at.to_string()), ("end", &now.to_string())])
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        let before = exemplars.len();
        for series in v["data"].as_array().unwrap() {
            for e in series["exemplars"].as_array().unwrap() {
                let id = e["labels"]["trace_id"].as_str().unwrap().to_string();
                assert_eq!(id.len(), 32, "{e}");
                exemplars.push((metric.to_string(), id));
            }
        }
        assert!(exemplars.len() > before, "no exemplars on {metric}: {v}");
    }

    // The exemplars' traces are the ones exported: a decision or a cycle.
    svc.stop().await;
    let spans = receiver.spans();
    let traces: HashSet<&str> = spans.iter().map(|s| s.trace_id.as_str()).collect();
    for (metric, id) in &exemplars {
        assert!(traces.contains(id.as_str()), "exemplar {id} of {metric} names no exported trace");
        let root = Trace::of(&spans, id).root.name.clone();
        let expected =
            if metric.starts_with("tessera_reschedule") { "tessera.resched.cycle" } else { "tessera.schedule.pod" };
        assert_eq!(root, expected, "exemplar of {metric}");
    }
}
