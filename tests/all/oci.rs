//! `tessera plugin push` and `pull` against a registry speaking the OCI
//! distribution API over loopback, as strict as a real one: uploads are
//! checked against their digest, a manifest naming a blob the registry
//! lacks is refused, pushes need a bearer token that only the right
//! credentials get. What is pushed is what the TesseraPolicy controller's
//! pull (`tessera_kube::oci::pull`) reads back, pinned by the digest push
//! prints.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tessera_kube::oci::{self, Credentials, sha256_hex};

#[derive(Default)]
struct Store {
    blobs: HashMap<String, Vec<u8>>,
    /// By tag and by digest: (content type, bytes).
    manifests: HashMap<String, (String, Vec<u8>)>,
    uploads: HashMap<String, ()>,
    next: u64,
    /// Blob uploads that were started (a blob the registry has is skipped).
    started: u64,
}

#[derive(Clone)]
struct Registry {
    store: Arc<Mutex<Store>>,
    token_url: String,
}

const USER: &str = "ci";
const PASSWORD: &str = "s3cret";

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(json!({"errors": [{"code": code, "message": message}]}))).into_response()
}

/// `USER:PASSWORD` in base64, as HTTP basic authentication sends it.
const BASIC: &str = "Basic Y2k6czNjcmV0";

async fn token(headers: HeaderMap) -> Response {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(BASIC) {
        axum::Json(json!({"token": "push-token"})).into_response()
    } else {
        error(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", "bad credentials")
    }
}

fn digest_of(b: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(b))
}

async fn v2(
    State(r): State<Registry>,
    method: Method,
    Path(path): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // Reads are anonymous; writes need the token.
    let write = !matches!(method, Method::GET | Method::HEAD);
    if write && headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer push-token") {
        let repo = path.split("/blobs/").next().unwrap_or(&path).split("/manifests/").next().unwrap_or(&path);
        let challenge =
            format!(r#"Bearer realm="{}",service="stand-in",scope="repository:{repo}:pull,push""#, r.token_url);
        return (StatusCode::UNAUTHORIZED, [("www-authenticate", challenge)], "").into_response();
    }
    let mut s = r.store.lock().unwrap();
    if let Some((repo, rest)) = path.split_once("/blobs/uploads/") {
        if method == Method::POST && rest.is_empty() {
            s.next += 1;
            s.started += 1;
            let id = format!("u{}", s.next);
            s.uploads.insert(id.clone(), ());
            return (StatusCode::ACCEPTED, [("location", format!("/v2/{repo}/blobs/uploads/{id}"))], "")
                .into_response();
        }
        if method == Method::PUT && s.uploads.remove(rest).is_some() {
            let Some(d) = q.get("digest") else { return error(StatusCode::BAD_REQUEST, "DIGEST_INVALID", "no digest") };
            if *d != digest_of(&body) {
                return error(StatusCode::BAD_REQUEST, "DIGEST_INVALID", "digest does not match the content");
            }
            s.blobs.insert(format!("{repo}@{d}"), body.to_vec());
            return (StatusCode::CREATED, [("docker-content-digest", d.clone())], "").into_response();
        }
        return error(StatusCode::NOT_FOUND, "BLOB_UPLOAD_UNKNOWN", rest);
    }
    if let Some((repo, d)) = path.split_once("/blobs/") {
        return match s.blobs.get(&format!("{repo}@{d}")) {
            Some(b) if method == Method::HEAD => {
                (StatusCode::OK, [("content-length", b.len().to_string())]).into_response()
            }
            Some(b) => b.clone().into_response(),
            None => error(StatusCode::NOT_FOUND, "BLOB_UNKNOWN", d),
        };
    }
    if let Some((repo, reference)) = path.split_once("/manifests/") {
        if method == Method::PUT {
            let ct = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
            if ct != "application/vnd.oci.image.manifest.v1+json" {
                return error(StatusCode::BAD_REQUEST, "MANIFEST_INVALID", &format!("content type {ct:?}"));
            }
            let Ok(m) = serde_json::from_slice::<Value>(&body) else {
                return error(StatusCode::BAD_REQUEST, "MANIFEST_INVALID", "not JSON");
            };
            if m["schemaVersion"] != 2 || m["mediaType"] != ct.as_str() {
                return error(StatusCode::BAD_REQUEST, "MANIFEST_INVALID", "schemaVersion 2 and its mediaType");
            }
            let mut referenced = vec![m["config"].clone()];
            referenced.extend(m["layers"].as_array().cloned().unwrap_or_default());
            for d in &referenced {
                let digest = d["digest"].as_str().unwrap_or_default();
                let size = d["size"].as_u64();
                match s.blobs.get(&format!("{repo}@{digest}")) {
                    Some(b) if Some(b.len() as u64) == size => {}
                    _ => return error(StatusCode::BAD_REQUEST, "MANIFEST_BLOB_UNKNOWN", digest),
                }
            }
            let d = digest_of(&body);
            s.manifests.insert(format!("{repo}:{reference}"), (ct.clone(), body.to_vec()));
            s.manifests.insert(format!("{repo}:{d}"), (ct, body.to_vec()));
            return (StatusCode::CREATED, [("docker-content-digest", d)], "").into_response();
        }
        return match s.manifests.get(&format!("{repo}:{reference}")) {
            Some((ct, b)) => ([("content-type", ct.clone())], b.clone()).into_response(),
            None => error(StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN", reference),
        };
    }
    error(StatusCode::NOT_FOUND, "NAME_UNKNOWN", &path)
}

async fn registry() -> (String, Arc<Mutex<Store>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let store = Arc::new(Mutex::new(Store::default()));
    let r = Registry { store: store.clone(), token_url: format!("http://{addr}/token") };
    let app = axum::Router::new()
        .route("/token", axum::routing::get(token))
        .route("/v2/{*path}", axum::routing::any(v2))
        .with_state(r);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr.to_string(), store)
}

fn creds() -> Credentials {
    Credentials { username: USER.into(), password: PASSWORD.into() }
}

#[tokio::test]
async fn a_pushed_component_is_pulled_back_by_the_digest_push_printed() {
    let (addr, store) = registry().await;
    let http = reqwest::Client::new();
    let component = tessera_plugins::BINPACK.bytes;
    let reference = format!("{addr}/plugins/binpack:0.1.0");
    let digest = oci::push(&http, &reference, component, Some(&creds())).await.unwrap();
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{digest}");

    // What the TesseraPolicy controller reads, by tag and pinned.
    assert_eq!(oci::pull(&http, &reference).await.unwrap(), component);
    assert_eq!(oci::pull(&http, &format!("{addr}/plugins/binpack@{digest}")).await.unwrap(), component);

    // Pushed again: the same digest (nothing in it changes between pushes),
    // and the blobs the registry has are not uploaded again.
    let started = store.lock().unwrap().started;
    assert_eq!(started, 2, "config and layer");
    assert_eq!(oci::push(&http, &reference, component, Some(&creds())).await.unwrap(), digest);
    assert_eq!(store.lock().unwrap().started, 2);
}

#[tokio::test]
async fn pushes_without_the_right_credentials_are_refused_with_the_reason() {
    let (addr, store) = registry().await;
    let http = reqwest::Client::new();
    let reference = format!("{addr}/plugins/binpack:0.1.0");
    let e = oci::push(&http, &reference, tessera_plugins::BINPACK.bytes, None).await.unwrap_err();
    assert!(e.contains("token from") && e.contains("401"), "{e}");
    let wrong = Credentials { username: USER.into(), password: "guess".into() };
    let e = oci::push(&http, &reference, tessera_plugins::BINPACK.bytes, Some(&wrong)).await.unwrap_err();
    assert!(e.contains("401"), "{e}");
    assert!(store.lock().unwrap().manifests.is_empty(), "nothing was stored");
    // A digest is the registry's answer, not something to push to.
    let pinned = format!("{addr}/plugins/binpack@sha256:{}", "a".repeat(64));
    let e = oci::push(&http, &pinned, tessera_plugins::BINPACK.bytes, Some(&creds())).await.unwrap_err();
    assert!(e.contains("push to a tag"), "{e}");
}

/// The CLI's push and pull (`tessera plugin push FILE oci://…`, `pull`):
/// the file's bytes go up, the digest printed pins them, and pull writes
/// the same bytes.
#[tokio::test]
async fn the_cli_pushes_a_file_and_pulls_it_back_pinned() {
    let (addr, _) = registry().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("binpack.wasm");
    std::fs::write(&file, tessera_plugins::BINPACK.bytes).unwrap();
    let pushed =
        tessera::distribute::push_file(&file, &format!("oci://{addr}/team/binpack:v1"), Some(creds())).await.unwrap();
    assert!(pushed.starts_with(&format!("oci://{addr}/team/binpack@sha256:")), "{pushed}");
    let out = dir.path().join("pulled.wasm");
    let digest = tessera::distribute::pull_file(&pushed, &out).await.unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), tessera_plugins::BINPACK.bytes);
    assert_eq!(digest, format!("sha256:{}", sha256_hex(tessera_plugins::BINPACK.bytes)));
    // Not a component: refused before anything is sent.
    std::fs::write(&file, b"not wasm").unwrap();
    let e = tessera::distribute::push_file(&file, &format!("oci://{addr}/team/x:v1"), None).await.unwrap_err();
    assert!(e.to_string().contains("\\0asm"), "{e}");
    let e = tessera::distribute::push_file(&file, &format!("{addr}/team/x:v1"), None).await.unwrap_err();
    assert!(e.to_string().contains("oci://"), "{e}");
}

/// A registry that serves more than a component may be, under a manifest
/// that gives no size: the pull is cut off at the bound, not buffered.
#[tokio::test]
async fn an_oversized_blob_is_cut_off_at_the_bound() {
    let (addr, store) = registry().await;
    let big = vec![0u8; oci::MAX_BYTES + 1];
    let d = digest_of(&big);
    let config = b"{}".to_vec();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": digest_of(&config), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": d}],
    }))
    .unwrap();
    {
        let mut s = store.lock().unwrap();
        s.blobs.insert(format!("x/big@{d}"), big);
        let ct = "application/vnd.oci.image.manifest.v1+json".to_string();
        s.manifests.insert("x/big:v1".into(), (ct, manifest));
    }
    let e = oci::pull(&reqwest::Client::new(), &format!("{addr}/x/big:v1")).await.unwrap_err();
    assert!(e.contains("larger than"), "{e}");
}
