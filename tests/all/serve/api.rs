//! The HTTP API over loopback: explain a decision made moments ago,
//! errors with stable codes, the token on mutations, hot swaps.

use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use serde_json::Value;
use tessera_plugins::{NOT_A_POLICY, TOPOLOGY_SPREAD};

use super::{Running, TOKEN, config};

async fn json(r: reqwest::Response) -> (StatusCode, Value) {
    let status = r.status();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")))
}

/// Asserts an error answer: status, stable code, and a message.
async fn error(r: reqwest::Response, status: StatusCode, code: &str) -> String {
    let (s, body) = json(r).await;
    assert_eq!(s, status, "{body}");
    assert_eq!(body["code"], code, "{body}");
    let message = body["message"].as_str().unwrap().to_string();
    assert!(!message.is_empty(), "{body}");
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_explains_recent_decisions_and_guards_its_mutations() {
    let svc = Running::start(config(None)).await;
    let http = reqwest::Client::new();
    svc.wait("a bound decision among three", Duration::from_secs(60), |s| {
        let log = s.decisions.read().unwrap();
        log.len() >= 3 && log.newest_first().any(|d| d.node.is_some())
    })
    .await;

    // Explain: a decision made moments ago, by pod name.
    let rec = svc.shared.decisions.read().unwrap().newest_first().find(|d| d.node.is_some()).unwrap().clone();
    let (s, d) = json(http.get(svc.url(&format!("/v1/decisions/{}", rec.pod))).send().await.unwrap()).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(d["pod"], rec.pod);
    assert_eq!(d["node"], rec.node.clone().unwrap());
    assert_eq!(d["trace_id"].as_str().unwrap().len(), 32);
    assert!(d["candidates"].as_u64().unwrap() > 0 && d["feasible"].as_u64().unwrap() > 0, "{d}");
    let plugins: Vec<&str> = d["plugins"].as_array().unwrap().iter().map(|p| p["plugin"].as_str().unwrap()).collect();
    assert_eq!(plugins, ["fgd", "topology-spread"], "the default policy's scorers, in order");
    assert!(d["plugins"][0]["winner_score"].is_i64(), "{d}");
    assert!(d["policy"].as_str().unwrap().starts_with("default: fgd@"), "{d}");
    let age = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as u64
        - d["at_unix_ms"].as_u64().unwrap();
    assert!(age < 60_000, "decided {age} ms ago");
    let (s, list) = json(http.get(svc.url("/v1/decisions?limit=3")).send().await.unwrap()).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list.as_array().unwrap().len(), 3);

    // Not found, malformed path and query: JSON with a stable code.
    error(
        http.get(svc.url("/v1/decisions/no-such-pod")).send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "DECISION-NOT-FOUND",
    )
    .await;
    error(http.get(svc.url("/v1/plans/seven")).send().await.unwrap(), StatusCode::BAD_REQUEST, "API-BAD-PATH").await;
    error(http.get(svc.url("/v1/plans/999999")).send().await.unwrap(), StatusCode::NOT_FOUND, "PLAN-NOT-FOUND").await;
    let m = error(
        http.get(svc.url("/v1/decisions?limit=0")).send().await.unwrap(),
        StatusCode::BAD_REQUEST,
        "API-BAD-QUERY",
    )
    .await;
    assert!(m.contains("limit 0"), "{m}");
    error(http.get(svc.url("/v1/plans?bogus=1")).send().await.unwrap(), StatusCode::BAD_REQUEST, "API-BAD-QUERY").await;
    error(http.get(svc.url("/v2/everything")).send().await.unwrap(), StatusCode::NOT_FOUND, "API-NOT-FOUND").await;
    error(
        http.delete(svc.url("/v1/plans")).send().await.unwrap(),
        StatusCode::METHOD_NOT_ALLOWED,
        "API-METHOD-NOT-ALLOWED",
    )
    .await;

    // Attribution: the decisions and plugins behind a metric's window.
    let m = error(
        http.get(svc.url("/v1/attribution?metric=tessera_cpu_seconds")).send().await.unwrap(),
        StatusCode::BAD_REQUEST,
        "ATTRIBUTION-UNKNOWN-METRIC",
    )
    .await;
    assert!(m.contains("tessera_decision_latency_seconds"), "the message lists the known metrics: {m}");
    error(
        http.get(svc.url("/v1/attribution?metric=decisions&from=200&to=100")).send().await.unwrap(),
        StatusCode::BAD_REQUEST,
        "ATTRIBUTION-BAD-WINDOW",
    )
    .await;
    let (s, a) =
        json(http.get(svc.url("/v1/attribution?metric=tessera_decision_latency_seconds_bucket")).send().await.unwrap())
            .await;
    assert_eq!(s, StatusCode::OK, "{a}");
    assert!(a["matched"].as_u64().unwrap() > 0, "{a}");
    let slowest = &a["decisions"][0];
    assert_eq!(slowest["trace_id"].as_str().unwrap().len(), 32, "{a}");
    let lat: Vec<u64> = a["decisions"].as_array().unwrap().iter().map(|d| d["latency_us"].as_u64().unwrap()).collect();
    assert!(lat.windows(2).all(|w| w[0] >= w[1]), "slowest first: {lat:?}");
    assert!(a["plugins"].as_array().unwrap().iter().any(|p| p["plugin"] == "fgd"), "{a}");

    // Mutations need the token; without it: 401 with a challenge.
    let policy = "name: packer\nplugins:\n  - name: binpack\n    source: builtin:binpack\n";
    let r = http.post(svc.url("/v1/policies")).body(policy).send().await.unwrap();
    assert_eq!(r.headers()["www-authenticate"], "Bearer realm=\"tessera\"");
    error(r, StatusCode::UNAUTHORIZED, "API-UNAUTHORIZED").await;
    let r = http.post(svc.url("/v1/policies")).bearer_auth("wrong-token-0123456789").body(policy).send().await.unwrap();
    error(r, StatusCode::UNAUTHORIZED, "API-UNAUTHORIZED").await;
    let r = http.post(svc.url("/v1/plugins?name=topology-spread")).body(TOPOLOGY_SPREAD.bytes).send().await.unwrap();
    error(r, StatusCode::UNAUTHORIZED, "API-UNAUTHORIZED").await;

    // Malformed bodies: 400 with the reason.
    let post = |path: &str, body: Vec<u8>| http.post(svc.url(path)).bearer_auth(TOKEN).body(body).send();
    let m = error(
        post("/v1/policies", b"name: x\nplugins: [".to_vec()).await.unwrap(),
        StatusCode::BAD_REQUEST,
        "POLICY-INVALID",
    )
    .await;
    assert!(m.contains("request body"), "{m}");
    let m = error(
        post("/v1/policies", format!("{policy}colour: blue\n").into_bytes()).await.unwrap(),
        StatusCode::BAD_REQUEST,
        "POLICY-INVALID",
    )
    .await;
    assert!(m.contains("colour"), "names the unknown field: {m}");
    error(post("/v1/policies", vec![0xff, 0xfe]).await.unwrap(), StatusCode::BAD_REQUEST, "API-BAD-BODY").await;
    let m = error(
        post("/v1/plugins?name=topology-spread", b"hello".to_vec()).await.unwrap(),
        StatusCode::BAD_REQUEST,
        "API-BAD-BODY",
    )
    .await;
    assert!(m.contains("not WebAssembly"), "{m}");
    error(post("/v1/plugins", TOPOLOGY_SPREAD.bytes.to_vec()).await.unwrap(), StatusCode::BAD_REQUEST, "API-BAD-QUERY")
        .await;
    let r = http
        .post(svc.url("/v1/plugins?name=topology-spread"))
        .bearer_auth(TOKEN)
        .header("content-type", "text/html")
        .body(TOPOLOGY_SPREAD.bytes)
        .send()
        .await
        .unwrap();
    error(r, StatusCode::UNSUPPORTED_MEDIA_TYPE, "API-UNSUPPORTED-MEDIA-TYPE").await;
    error(
        post("/v1/plugins?name=nope", TOPOLOGY_SPREAD.bytes.to_vec()).await.unwrap(),
        StatusCode::NOT_FOUND,
        "PLUGIN-NOT-FOUND",
    )
    .await;
    // A component that is not a policy fails its checks; nothing changes.
    error(
        post("/v1/plugins?name=topology-spread", NOT_A_POLICY.bytes.to_vec()).await.unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "PLUGIN-REJECTED",
    )
    .await;

    // A good component swaps into its slot: here today's plugin built
    // against the older contract, which the service still runs.
    let spread_0_1 = tessera_plugins::CONTRACT_0_1.iter().find(|a| a.name == "topology-spread").unwrap();
    let (s, loaded) = json(
        http.post(svc.url("/v1/plugins?name=topology-spread"))
            .bearer_auth(TOKEN)
            .header("content-type", "application/wasm")
            .body(spread_0_1.bytes)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{loaded}");
    assert_eq!(loaded["plugin"]["versions_loaded"], 2, "{loaded}");
    let (_, plugins) = json(http.get(svc.url("/v1/plugins")).send().await.unwrap()).await;
    let ts = plugins.as_array().unwrap().iter().find(|p| p["name"] == "topology-spread").unwrap();
    assert_eq!(ts["versions_loaded"], 2, "{plugins}");
    assert_eq!(ts["kind"], "scorer");
    assert_eq!(ts["contract"], "0.1.0", "{ts}");
    assert!(plugins.as_array().unwrap().iter().all(|p| p["name"] == "topology-spread" || p["contract"] == "0.2.2"));
    assert!(plugins.as_array().unwrap().iter().any(|p| p["name"] == "overload" && p["kind"] == "detector"));

    // A new policy: the next decisions are made by it.
    let (s, info) = json(
        http.post(svc.url("/v1/policies"))
            .bearer_auth(TOKEN)
            .header("content-type", "application/yaml")
            .body(policy)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{info}");
    assert_eq!(info["name"], "packer");
    assert_eq!(info["plugins"][0]["name"], "binpack");
    svc.wait("a decision by the new policy", Duration::from_secs(60), |s| {
        s.decisions.read().unwrap().last().is_some_and(|d| d.policy.starts_with("packer: binpack@"))
    })
    .await;

    // A snapshot of the cluster, and a chaos campaign on a twin of it.
    let (s, snap) = json(http.get(svc.url("/v1/snapshot")).send().await.unwrap()).await;
    assert_eq!(s, StatusCode::OK, "{snap}");
    assert_eq!(snap["backend"], "simulator");
    assert_eq!(snap["nodes"].as_array().unwrap().len(), 60);
    let running = snap["running"].as_array().unwrap().len();
    assert!(running > 0, "{snap}");
    twin_of_the_live_cluster(&snap, running).await;

    // Health, readiness, metrics, the OpenAPI document.
    let r = http.get(svc.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let (s, ready) = json(http.get(svc.url("/readyz")).send().await.unwrap()).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(ready["nodes"], 60);
    let r = http.get(svc.url("/metrics")).send().await.unwrap();
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("application/openmetrics-text; version=1.0.0"));
    let text = r.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"));
    assert!(text.contains("tessera_api_requests_total{route=\"/v1/decisions/{pod}\",status=\"2xx\"}"), "{text}");
    let (s, doc) = json(http.get(svc.url("/openapi.json")).send().await.unwrap()).await;
    assert_eq!(s, StatusCode::OK);
    assert!(doc["paths"]["/v1/attribution"]["get"].is_object());

    svc.stop().await;
}

#[test]
fn the_shipped_serve_config_lists_the_defaults() {
    let path = crate::repo().join("deploy/serve.yaml");
    let opts = tessera::serve::ServeOptions { config: Some(path.clone()), ..Default::default() };
    let cfg = tessera::serve::config(&opts, |_| None).unwrap();
    assert_eq!(cfg, tessera::serve::ServiceConfig::default());
    // Every field is listed, the Kubernetes backend's included.
    let text = std::fs::read_to_string(&path).unwrap();
    let kube = serde_json::to_value(tessera_kube::KubeBackendConfig::default()).unwrap();
    for field in kube.as_object().unwrap().keys() {
        assert!(text.contains(&format!("{field}:")), "deploy/serve.yaml does not list kube.{field}");
    }
}

/// A campaign whose cluster is the service's snapshot runs on the same
/// nodes, with the live pods arriving first.
async fn twin_of_the_live_cluster(snap: &Value, running: usize) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("live.json"), snap.to_string()).unwrap();
    let campaign = dir.path().join("live.yaml");
    std::fs::write(
        &campaign,
        "name: live\ncluster: {snapshot: live.json}\nworkload: {builtin: {pods: 200, load: 0.5}}\n\
         candidate: binpack\nbaseline: default\nseeds: [1]\nscenarios:\n  - name: crash\n    faults:\n\
         \x20     - {kind: node-crash, start: {at: 0}, duration_s: 600, target: {count: 3}}\n",
    )
    .unwrap();
    let report = tokio::task::spawn_blocking(move || tessera::chaos::verify(&campaign)).await.unwrap().unwrap();
    assert_eq!(report.runs.len(), 2);
    for r in &report.runs {
        assert_eq!(r.outcome.lost, 0, "{r:?}");
        assert!(r.outcome.submitted as usize >= 200 + running, "the live pods arrive too: {r:?}");
    }
}

/// Sends a request's head over raw TCP, `sent` bytes of its body, then
/// waits up to `wait` for the first line of the answer.
async fn head_only(svc: &Running, head: &str, sent: usize, wait: Duration) -> (Option<String>, tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(svc.addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&vec![0u8; sent]).await.unwrap();
    let mut buf = [0u8; 256];
    let line = match tokio::time::timeout(wait, s.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => String::from_utf8_lossy(&buf[..n]).lines().next().map(str::to_string),
        _ => None,
    };
    (line, s)
}

/// The token comes before the body: an anonymous 60 MB upload is refused
/// from its headers, without the service waiting for (or buffering) a
/// byte of the body; components are buffered only so many at once, and
/// the OpenAPI document lists the 403 every mutating endpoint may answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_checked_before_the_body_is_read() {
    let svc = Running::start(config(None)).await;
    let upload = |token: &str| {
        let auth = if token.is_empty() { String::new() } else { format!("Authorization: Bearer {token}\r\n") };
        format!(
            "POST /v1/plugins?name=binpack HTTP/1.1\r\nHost: t\r\nContent-Type: application/wasm\r\n{auth}Content-Length: 60000000\r\n\r\n"
        )
    };
    // No body at all follows: an answer can only come from the headers.
    let (line, c1) = head_only(&svc, &upload(""), 0, Duration::from_secs(5)).await;
    assert!(line.as_deref().is_some_and(|l| l.contains(" 401 ")), "{line:?}");
    let (line, c2) = head_only(&svc, &upload("wrong-token-0123456789"), 0, Duration::from_secs(5)).await;
    assert!(line.as_deref().is_some_and(|l| l.contains(" 401 ")), "{line:?}");
    // Two authorised uploads stall mid-body: a third is told to come back.
    let (a, ca) = head_only(&svc, &upload(TOKEN), 1024, Duration::from_millis(300)).await;
    let (b, cb) = head_only(&svc, &upload(TOKEN), 1024, Duration::from_millis(300)).await;
    assert!(a.is_none() && b.is_none(), "they are being read: {a:?} {b:?}");
    let (c, cc) = head_only(&svc, &upload(TOKEN), 0, Duration::from_secs(5)).await;
    assert!(c.as_deref().is_some_and(|l| l.contains(" 503 ")), "{c:?}");
    drop((c1, c2, ca, cb, cc));

    let doc: Value = reqwest::get(svc.url("/openapi.json")).await.unwrap().json().await.unwrap();
    for (path, method) in [("/v1/plugins", "post"), ("/v1/policies", "post")] {
        assert!(doc["paths"][path][method]["responses"]["403"].is_object(), "{path} {method}: no 403 documented");
    }
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_are_closed_after_the_header_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut cfg = config(None);
    cfg.header_read_timeout_ms = 300;
    let svc = Running::start(cfg).await;
    // Headers begun and never finished: axum::serve held every one of
    // these forever.
    let mut held = Vec::new();
    for _ in 0..200 {
        let mut s = tokio::net::TcpStream::connect(svc.addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ").await.unwrap();
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    for (i, s) in held.iter_mut().enumerate() {
        let mut rest = Vec::new();
        // Closed by the service (perhaps after a 408): the read ends.
        let r = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
        assert!(r.is_ok(), "connection {i} is still held open");
    }
    // The service still answers.
    let r = reqwest::get(svc.url("/healthz")).await.unwrap();
    assert!(r.status().is_success());
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posted_documents_are_bounded_and_sources_stay_in_their_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spread.wasm"), TOPOLOGY_SPREAD.bytes).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    let mut cfg = config(None);
    cfg.sources_dir = Some(dir.path().to_path_buf());
    let svc = Running::start(cfg).await;
    let http = reqwest::Client::new();
    let post = |body: String| http.post(svc.url("/v1/policies")).bearer_auth(TOKEN).body(body).send();
    let doc = |source: &str| format!("name: probe\nplugins:\n  - name: spread\n    source: {source}\n");

    // Outside the directory, by `..` or absolute path: refused, and the
    // file's content never shows.
    let secret = outside.path().join("secret");
    let escape = format!("../{}/secret", outside.path().file_name().unwrap().to_str().unwrap());
    for source in [secret.to_str().unwrap(), escape.as_str(), "/etc/passwd"] {
        let m = error(post(doc(source)).await.unwrap(), StatusCode::BAD_REQUEST, "POLICY-INVALID").await;
        assert!(m.contains("plugin spread"), "{m}");
        assert!(!m.contains("root:"), "{source}: {m}");
    }
    // Inside: loaded.
    let (s, info) = json(post(doc("spread.wasm")).await.unwrap()).await;
    assert_eq!(s, StatusCode::OK, "{info}");

    // A 100,000-deep document is refused at once, and the service answers
    // meanwhile (it took ~40 s on the async threads).
    let deep = format!("name: x\nplugins: []\nx: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let t0 = std::time::Instant::now();
    let (a, b, health) = tokio::join!(post(deep.clone()), post(deep), reqwest::get(svc.url("/healthz")));
    assert!(health.unwrap().status().is_success());
    for r in [a, b] {
        let m = error(r.unwrap(), StatusCode::BAD_REQUEST, "POLICY-INVALID").await;
        assert!(m.contains("nested deeper than 64 levels"), "{m}");
    }
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());

    // A weight that would overflow totals to NaN.
    let m = error(
        post("name: big\nplugins:\n  - name: binpack\n    source: builtin:binpack\n    weight: 1e308\n".into())
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "POLICY-INVALID",
    )
    .await;
    assert!(m.contains("plugins[0].weight") && m.contains("0..=1000000"), "{m}");
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_sources_dir_posted_documents_name_only_builtin_plugins() {
    let svc = Running::start(config(None)).await;
    let http = reqwest::Client::new();
    let body = "name: probe\nplugins:\n  - name: spread\n    source: /etc/passwd\n";
    let r = http.post(svc.url("/v1/policies")).bearer_auth(TOKEN).body(body).send().await.unwrap();
    let m = error(r, StatusCode::BAD_REQUEST, "POLICY-INVALID").await;
    assert!(m.contains("only `builtin:`") && !m.contains("root:"), "{m}");
    svc.stop().await;
}
