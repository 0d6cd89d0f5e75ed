//! The web console in a real browser: `tessera serve` started here on
//! loopback, Debian's Chromium driven headless by playwright-core (npm,
//! pinned in `tests/console/package-lock.json`), the checks in
//! `tests/console/console.mjs`: the GPU map draws every node and GPU, a
//! pod's explanation shows the API's numbers, a heatmap cell opens its
//! decisions, a plan's DAG has a box per move, a promotion without the
//! token is refused, a candidate set from the page is the service's, and
//! a plugin's new version uploaded from the page is swapped in.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::{Running, TOKEN, config};

/// The browser and the script's packages, or why they are missing.
fn tools() -> Result<(PathBuf, PathBuf), String> {
    let chromium = std::env::var_os("CHROMIUM").map(PathBuf::from).unwrap_or_else(|| "/usr/bin/chromium".into());
    if !chromium.exists() {
        return Err(format!("{} is missing (Debian's chromium; .ci/run installs it)", chromium.display()));
    }
    let dir = crate::repo().join("tests/console");
    if !dir.join("node_modules/playwright-core").exists() {
        return Err("tests/console/node_modules is missing (npm ci --prefix tests/console; .ci/run runs it)".into());
    }
    Ok((chromium, dir))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_what_the_api_says_in_a_real_browser() {
    let (chromium, dir) = match tools() {
        Ok(t) => t,
        Err(why) => {
            assert!(std::env::var_os("CI").is_none(), "CI must run the browser tests: {why}");
            eprintln!("skipped: {why}");
            return;
        }
    };
    let mut cfg = config(None);
    cfg.console.trace_url = Some("http://jaeger.invalid/trace/{trace_id}".into());
    // More demand than room: some pods wait, and the page explains why.
    cfg.sim.load = 1.6;
    let svc = Running::start(cfg).await;
    svc.wait("decisions, a waiting pod and a plan", Duration::from_secs(120), |s| {
        let d = s.decisions.read().unwrap();
        d.len() >= 50
            && d.newest_first().any(|r| r.outcome.as_str() == "unschedulable")
            && s.plans.read().unwrap().newest_first().any(|p| !p.moves.is_empty())
    })
    .await;
    let url = svc.url("");
    // Screenshots of each view, kept as the test's artifacts.
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console");
    std::fs::create_dir_all(&shots).unwrap();
    let dir_for_shots = shots.clone();
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new("node");
        cmd.arg("console.mjs")
            .current_dir(&dir)
            .env("TESSERA_URL", url.trim_end_matches('/'))
            .env("TESSERA_TOKEN", TOKEN)
            .env("CHROMIUM", chromium)
            .env("SCREENSHOTS", &dir_for_shots)
            .env("PLUGIN_WASM", tessera_plugins::TOPOLOGY_SPREAD.path);
        cmd.output().expect("node runs")
    })
    .await
    .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the browser checks failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("ok - no request left the service"), "{stdout}");
    for view in ["cluster", "pod", "waiting", "decisions", "plan", "policies"] {
        assert!(shots.join(format!("{view}.png")).exists(), "no screenshot of {view}");
    }
    svc.stop().await;
}

/// The console's pages carry a policy that allows nothing from another
/// origin, and the console's own views answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_from_the_binary_and_loads_nothing_from_elsewhere() {
    let svc = Running::start(config(None)).await;
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = http.get(svc.url("/")).send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (303, "/ui/"));
    for (path, kind) in [("/ui/", "text/html"), ("/ui/console.js", "text/javascript"), ("/ui/console.css", "text/css")]
    {
        let r = http.get(svc.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert!(r.headers()["content-type"].to_str().unwrap().starts_with(kind), "{path}");
        let csp = r.headers()["content-security-policy"].to_str().unwrap().to_string();
        assert!(csp.contains("default-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
        // No address of another origin (the SVG namespace is a name, not
        // a request).
        let body = r.text().await.unwrap().replace("http://www.w3.org/2000/svg", "");
        assert!(!body.contains("http://") && !body.contains("https://"), "{path} names another origin");
    }
    let c: serde_json::Value = http.get(svc.url("/v1/console/cluster")).send().await.unwrap().json().await.unwrap();
    assert_eq!(c["nodes"].as_array().unwrap().len(), 60, "{c}");
    let cfg: serde_json::Value = http.get(svc.url("/v1/console/config")).send().await.unwrap().json().await.unwrap();
    assert_eq!((&cfg["trace_url"], &cfg["mutations"]), (&serde_json::Value::Null, &serde_json::Value::Bool(true)));
    // The stream: a pulse a second, as server-sent events.
    let mut r = http.get(svc.url("/v1/console/events")).send().await.unwrap();
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let chunk = tokio::time::timeout(Duration::from_secs(5), r.chunk()).await.unwrap().unwrap().unwrap();
    let text = String::from_utf8_lossy(&chunk);
    assert!(text.starts_with("event: pulse\ndata: {"), "{text}");
    drop(r);
    svc.stop().await;
}
