//! `TesseraPolicy` objects reach the running service: components pulled
//! from an OCI registry (with its bearer-token challenge) and from a
//! ConfigMap, checked against their pinned digests, loaded, handed to the
//! loop as the rollout's candidate or as the active policy; a tampered
//! component is refused with a condition naming it, and the running policy
//! stays as it was. Real components, a registry speaking the distribution
//! API over loopback, the in-process API server.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::{Value, json};
use tessera_kube::oci::sha256_hex;

use super::apiserver::ApiServer;
use super::node;
use crate::serve::Running;

#[derive(Clone)]
struct Registry {
    manifest: Vec<u8>,
    blob: Vec<u8>,
    token_url: String,
    /// Requests to `/flaky.wasm` so far (the first one fails).
    flaky: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

async fn flaky(State(r): State<Registry>) -> Response {
    if r.flaky.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
        return (StatusCode::SERVICE_UNAVAILABLE, "try again").into_response();
    }
    r.blob.clone().into_response()
}

async fn registry_get(State(r): State<Registry>, Path(path): Path<String>, headers: HeaderMap) -> Response {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer pull-token") {
        let challenge = format!(
            r#"Bearer realm="{}",service="test-registry",scope="repository:plugins/binpack:pull""#,
            r.token_url
        );
        return (StatusCode::UNAUTHORIZED, [("www-authenticate", challenge)], "").into_response();
    }
    let digest = |b: &[u8]| format!("sha256:{}", sha256_hex(b));
    if path == "plugins/binpack/manifests/0.1.0" || path == format!("plugins/binpack/manifests/{}", digest(&r.manifest))
    {
        return ([("content-type", "application/vnd.oci.image.manifest.v1+json")], r.manifest.clone()).into_response();
    }
    if path == format!("plugins/binpack/blobs/{}", digest(&r.blob)) {
        return r.blob.clone().into_response();
    }
    StatusCode::NOT_FOUND.into_response()
}

/// A registry serving `blob` as `plugins/binpack:0.1.0`, behind a token.
async fn registry(blob: &[u8]) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = b"{}";
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": format!("sha256:{}", sha256_hex(config)), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": format!("sha256:{}", sha256_hex(blob)), "size": blob.len()}]
    });
    let r = Registry {
        manifest: serde_json::to_vec(&manifest).unwrap(),
        blob: blob.to_vec(),
        token_url: format!("http://{addr}/token"),
        flaky: Default::default(),
    };
    let app = axum::Router::new()
        .route("/token", axum::routing::get(|| async { axum::Json(json!({"token": "pull-token"})) }))
        .route("/v2/{*path}", axum::routing::get(registry_get))
        .route("/flaky.wasm", axum::routing::get(flaky))
        .with_state(r);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr.to_string()
}

fn condition(srv: &ApiServer, name: &str) -> Option<Value> {
    srv.get("tesserapolicies", "tessera-system", name).and_then(|p| p["status"]["conditions"].get(0).cloned())
}

async fn until(what: &str, f: impl Fn() -> bool) {
    let t0 = std::time::Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn policy(name: &str, rollout: &str, document: &str, components: Value) -> Value {
    json!({
        "apiVersion": "tessera.io/v1alpha1", "kind": "TesseraPolicy",
        "metadata": {"name": name, "namespace": "tessera-system"},
        "spec": {"rollout": rollout, "document": document, "components": components}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_in_the_cluster_load_pinned_components_through_the_rollout_path() {
    let binpack = tessera_plugins::by_name("binpack").unwrap().bytes;
    let spread = tessera_plugins::by_name("topology-spread").unwrap().bytes;
    let reg = registry(binpack).await;
    let srv = ApiServer::start().await;
    srv.put(node("gpu-0", 8, "zone-a"));
    srv.put(node("gpu-1", 8, "zone-b"));
    let cm = ConfigMap {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("tessera-components".into()),
            namespace: Some("tessera-system".into()),
            ..Default::default()
        },
        binary_data: Some([("topology-spread.wasm".to_string(), ByteString(spread.to_vec()))].into()),
        ..Default::default()
    };
    let mut cm = serde_json::to_value(cm).unwrap();
    cm["apiVersion"] = json!("v1");
    cm["kind"] = json!("ConfigMap");
    srv.put(cm);

    let mut cfg = super::service::replica("policies");
    cfg.kube.leader_election = false;
    let (server, listener) = tessera::serve::start_kube(cfg, srv.config()).await.unwrap();
    let svc = Running::serve(server, listener).await;

    let document = "name: packer\nplugins:\n  - name: binpack\n    source: binpack.wasm\n    weight: 2\n  - name: topology-spread\n    source: topology-spread.wasm\n";
    let components = json!([
        {"plugin": "binpack", "oci": format!("{reg}/plugins/binpack:0.1.0"), "sha256": sha256_hex(binpack)},
        {"plugin": "topology-spread", "configMap": {"name": "tessera-components", "key": "topology-spread.wasm"}, "sha256": sha256_hex(spread)},
    ]);
    srv.put(policy("packer", "candidate", document, components.clone()));
    until("the candidate", || svc.shared.rollout.read().unwrap().candidate.as_deref() == Some("packer")).await;
    until("its Applied condition", || condition(&srv, "packer").is_some()).await;
    let c = condition(&srv, "packer").unwrap();
    assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("True"), Some("Applied")), "{c}");
    assert!(c["message"].as_str().unwrap().contains("candidate"), "{c}");
    assert_eq!(svc.shared.policy.read().unwrap().name, "default", "a candidate does not act yet");
    // The components were cached under their digests.
    let members = svc.shared.rollout.read().unwrap().clone();
    assert_eq!(members.stage, Some(tessera_server::rollout::Stage::Shadow));

    // A tampered component: refused, named, and nothing running changes.
    let wrong = "0".repeat(64);
    let tampered = json!([{"plugin": "binpack", "oci": format!("{reg}/plugins/binpack:0.1.0"), "sha256": wrong}]);
    srv.put(policy("tampered", "immediate", &document.replace("packer", "tampered"), tampered));
    until("the refusal", || condition(&srv, "tampered").is_some()).await;
    let c = condition(&srv, "tampered").unwrap();
    assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("False"), Some("DigestMismatch")), "{c}");
    let m = c["message"].as_str().unwrap();
    assert!(m.contains("plugin binpack") && m.contains(&sha256_hex(binpack)) && m.contains(&wrong), "{m}");
    assert_eq!(svc.shared.policy.read().unwrap().name, "default");
    assert_eq!(svc.shared.rollout.read().unwrap().candidate.as_deref(), Some("packer"));

    // A document that does not validate: refused with the validator's words.
    srv.put(policy("broken", "candidate", "name: broken\nplugins: []\nunknown_field: 1\n", json!([])));
    until("the refusal", || condition(&srv, "broken").is_some()).await;
    let c = condition(&srv, "broken").unwrap();
    assert_eq!(c["reason"], "InvalidDocument", "{c}");
    assert!(c["message"].as_str().unwrap().contains("unknown_field"), "{c}");

    // A file source no component supplies would be read from the
    // scheduler's own disk: refused.
    let sneaky = "name: sneaky\nplugins:\n  - name: binpack\n    source: /etc/passwd\n";
    srv.put(policy("sneaky", "candidate", sneaky, json!([])));
    until("the refusal", || condition(&srv, "sneaky").is_some()).await;
    let c = condition(&srv, "sneaky").unwrap();
    assert_eq!(c["reason"], "InvalidDocument", "{c}");
    let m = c["message"].as_str().unwrap();
    assert!(m.contains("plugin binpack names the file /etc/passwd") && !m.contains("root:"), "{m}");

    // The same policy made immediate (a new generation): it is active.
    srv.put(policy("packer", "immediate", document, components));
    until("packer active", || svc.shared.policy.read().unwrap().name == "packer").await;
    until("the new generation's condition", || condition(&srv, "packer").is_some_and(|c| c["observedGeneration"] == 2))
        .await;
    let members: Vec<String> =
        svc.shared.policy.read().unwrap().doc.plugins.iter().map(|p| p.source.to_string()).collect();
    assert!(members.iter().all(|s| s.ends_with(".wasm") && s.contains("components")), "{members:?}");

    // A URL that fails once: reported, then tried again and applied.
    let flaky_doc = "name: flaky\nplugins:\n  - name: binpack\n    source: binpack.wasm\n";
    let url = json!([{"plugin": "binpack", "url": format!("http://{reg}/flaky.wasm"), "sha256": sha256_hex(binpack)}]);
    srv.put(policy("flaky", "candidate", flaky_doc, url));
    until("the first refusal", || condition(&srv, "flaky").is_some_and(|c| c["reason"] == "FetchFailed")).await;
    assert!(condition(&srv, "flaky").unwrap()["message"].as_str().unwrap().contains("503"));
    until("the retry", || condition(&srv, "flaky").is_some_and(|c| c["status"] == "True")).await;
    assert_eq!(svc.shared.rollout.read().unwrap().candidate.as_deref(), Some("flaky"));
    svc.stop().await;
    srv.assert_sound();
}
