//! The manifests in `deploy/kubernetes` and `deploy/chaos`: every object
//! reads into its typed Kubernetes API struct and back without losing a
//! field (a misspelt field would be dropped), `kubectl apply
//! --dry-run=client` takes them all against the in-process API server, the
//! CRD is the one generated from the Rust type, and the embedded
//! configurations (serve.yaml, the sample policy, the alert rules, the
//! kube-scheduler extender configuration) are valid and agree with the
//! code.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

use super::apiserver::ApiServer;

use crate::repo;

fn manifest_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["deploy/kubernetes", "deploy/kubernetes/samples", "deploy/chaos"] {
        for e in std::fs::read_dir(repo().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "yaml") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// Every document of a multi-document YAML file.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| {
            use serde::Deserialize;
            Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// Through the typed struct and back.
fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

/// Where `typed` lost or changed something of `original`.
fn differences(path: &str, original: &Value, typed: &Value, out: &mut Vec<String>) {
    match (original, typed) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                match b.get(k) {
                    Some(w) => differences(&format!("{path}.{k}"), v, w, out),
                    None if v.is_null() => {}
                    None => out.push(format!("{path}.{k} is not a field of the type")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                differences(&format!("{path}[{i}]"), v, w, out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(format!("{path}: {a} became {b}")),
    }
}

#[test]
fn every_manifest_reads_into_its_api_type_without_losing_a_field() {
    let mut kinds = Vec::new();
    for file in manifest_files() {
        for doc in documents(&file) {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let typed = match kind.as_str() {
                "Namespace" => round_trip::<Namespace>(&doc),
                "ServiceAccount" => round_trip::<ServiceAccount>(&doc),
                "ConfigMap" => round_trip::<ConfigMap>(&doc),
                "Service" => round_trip::<Service>(&doc),
                "PersistentVolumeClaim" => round_trip::<PersistentVolumeClaim>(&doc),
                "Deployment" => round_trip::<Deployment>(&doc),
                "DaemonSet" => round_trip::<DaemonSet>(&doc),
                "Job" => round_trip::<Job>(&doc),
                "CronJob" => round_trip::<CronJob>(&doc),
                "PodDisruptionBudget" => round_trip::<PodDisruptionBudget>(&doc),
                "ClusterRole" => round_trip::<ClusterRole>(&doc),
                "ClusterRoleBinding" => round_trip::<ClusterRoleBinding>(&doc),
                "Role" => round_trip::<Role>(&doc),
                "RoleBinding" => round_trip::<RoleBinding>(&doc),
                "CustomResourceDefinition" => round_trip::<CustomResourceDefinition>(&doc),
                "TesseraPolicy" => round_trip::<tessera_kube::crd::TesseraPolicy>(&doc),
                other => panic!("{}: kind {other} is not checked here", file.display()),
            };
            let typed = typed.unwrap_or_else(|e| panic!("{} {kind}: {e}", file.display()));
            let mut diffs = Vec::new();
            differences(&kind, &doc, &typed, &mut diffs);
            assert!(diffs.is_empty(), "{}: {diffs:#?}", file.display());
            kinds.push(kind);
        }
    }
    for k in [
        "Deployment",
        "DaemonSet",
        "ClusterRole",
        "Role",
        "CustomResourceDefinition",
        "TesseraPolicy",
        "CronJob",
        "Job",
    ] {
        assert!(kinds.iter().any(|x| x == k), "no {k} in deploy/: {kinds:?}");
    }
}

#[test]
fn the_crd_is_generated_from_the_rust_type_and_the_embedded_configurations_are_valid() {
    let crd = std::fs::read_to_string(repo().join("deploy/kubernetes/crd.yaml")).unwrap();
    assert_eq!(
        crd,
        tessera_kube::crd::crd_yaml(),
        "deploy/kubernetes/crd.yaml is stale: run `tessera crd > deploy/kubernetes/crd.yaml`"
    );
    assert_eq!(
        std::fs::read_to_string(repo().join("deploy/kubernetes/podgroup-crd.yaml")).unwrap(),
        tessera_kube::podgroup::crd_yaml(),
        "deploy/kubernetes/podgroup-crd.yaml is stale: run `tessera crd podgroup > deploy/kubernetes/podgroup-crd.yaml`"
    );

    let docs = documents(&repo().join("deploy/kubernetes/scheduler.yaml"));
    let serve = docs.iter().find(|d| d["kind"] == "ConfigMap").unwrap()["data"]["serve.yaml"].as_str().unwrap();
    let cfg = tessera_server::ServeConfig::parse(serve, "deploy/kubernetes/scheduler.yaml").unwrap();
    assert_eq!(cfg.backend, tessera_server::config::BackendKind::Kubernetes);
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    assert_eq!(deployment["spec"]["replicas"], 2, "two replicas, one leader");
    let kube = tessera_kube::KubeBackendConfig::from_serve_yaml(serve, "deploy/kubernetes/scheduler.yaml").unwrap();
    assert_eq!(kube.lease_namespace, deployment["metadata"]["namespace"].as_str().unwrap());

    let obs = documents(&repo().join("deploy/kubernetes/observability.yaml"));
    let rules = obs.iter().find(|d| d["metadata"]["name"] == "tessera-prometheus-rules").unwrap();
    assert_eq!(
        rules["data"]["rules.yaml"].as_str().unwrap(),
        std::fs::read_to_string(repo().join("deploy/prometheus/rules.yaml")).unwrap(),
        "the rules ConfigMap must carry deploy/prometheus/rules.yaml"
    );

    let policy = &documents(&repo().join("deploy/kubernetes/samples/policy.yaml"))[0];
    let p: tessera_kube::crd::TesseraPolicy = serde_json::from_value(policy.clone()).unwrap();
    let doc = tessera_policy::PolicyDocument::parse(&p.spec.document, "deploy/kubernetes/samples/policy.yaml").unwrap();
    for c in &p.spec.components {
        c.source().unwrap();
        assert!(doc.plugins.iter().any(|e| e.name == c.plugin), "component for unknown plugin {}", c.plugin);
    }

    // kube-scheduler's extender configuration points at the Service and
    // at the verbs Tessera serves.
    let ext = &documents(&repo().join("deploy/kube-scheduler/extender.yaml"))[0]["extenders"][0];
    assert_eq!(ext["urlPrefix"], "http://tessera-scheduler.tessera-system.svc:8080/extender");
    for (verb, route) in
        [("filterVerb", "filter"), ("prioritizeVerb", "prioritize"), ("bindVerb", "bind"), ("preemptVerb", "preempt")]
    {
        assert_eq!(ext[verb], route);
    }
    assert_eq!(ext["nodeCacheCapable"], true);
}

fn kubectl() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("kubectl")).find(|p| p.is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_every_manifest_with_a_client_dry_run() {
    let Some(kubectl) = kubectl() else {
        assert!(std::env::var_os("CI").is_none(), "CI installs kubectl (Debian's kubernetes-client)");
        eprintln!("kubectl is not installed (Debian: kubernetes-client); skipped");
        return;
    };
    let srv = ApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = srv.kubeconfig(dir.path());
    let mut cmd = tokio::process::Command::new(kubectl);
    cmd.env("KUBECONFIG", &kubeconfig).env("HOME", dir.path()).args(["apply", "--dry-run=client", "--validate=false"]);
    for f in manifest_files() {
        cmd.arg("-f").arg(f);
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output()).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kubectl failed:\n{stdout}\n{stderr}");
    let objects: usize = manifest_files().iter().map(|f| documents(f).len()).sum();
    let created =
        stdout.lines().filter(|l| l.ends_with("created (dry run)") || l.ends_with("configured (dry run)")).count();
    assert_eq!(created, objects, "{stdout}\n{stderr}");
    assert!(stdout.contains("tesserapolicy.tessera.io/gpu-health created (dry run)"), "{stdout}");
    assert!(srv.list("deployments").is_empty(), "a dry run creates nothing");
}

/// `kubectl apply ARGS` against `srv` as an administrator: (success, what
/// it printed).
async fn apply(kubectl: &Path, srv: &ApiServer, dir: &Path, args: &[&str]) -> (bool, String) {
    let mut cmd = tokio::process::Command::new(kubectl);
    // No client-side schema (this server publishes no OpenAPI document):
    // the server validates.
    cmd.env("KUBECONFIG", srv.kubeconfig(dir)).env("HOME", dir).args(["apply", "--validate=false"]).args(args);
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output()).await.unwrap().unwrap();
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The manifests as a new user applies them, to a cluster with nothing in
/// it that validates every object as a real API server does (namespaces
/// must exist, a custom resource needs its CRD and matches its schema,
/// built-in kinds decode into their types, unknown fields refused):
/// `kubectl apply -f deploy/kubernetes/ -f deploy/chaos/` in one go, files
/// in name order, then the samples.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifests_apply_in_order_to_an_empty_cluster_that_validates_them() {
    let Some(kubectl) = kubectl() else {
        assert!(std::env::var_os("CI").is_none(), "CI installs kubectl (Debian's kubernetes-client)");
        eprintln!("kubectl is not installed (Debian: kubernetes-client); skipped");
        return;
    };
    let srv = ApiServer::start_empty().await;
    let dir = tempfile::tempdir().unwrap();
    let (k, c, s) =
        (repo().join("deploy/kubernetes"), repo().join("deploy/chaos"), repo().join("deploy/kubernetes/samples"));
    let (ok, out) = apply(&kubectl, &srv, dir.path(), &["-f", k.to_str().unwrap(), "-f", c.to_str().unwrap()]).await;
    assert!(ok, "first apply on an empty cluster:\n{out}");
    let (ok, out) = apply(&kubectl, &srv, dir.path(), &["-f", s.to_str().unwrap()]).await;
    assert!(ok, "the samples:\n{out}");
    assert!(srv.get("deployments", "tessera-system", "tessera-scheduler").is_some());
    let policy = srv.get("tesserapolicies", "tessera-system", "gpu-health").expect("the sample policy");
    assert!(policy["spec"]["components"][0]["sha256"].is_string(), "{policy}");
    // Applying again changes nothing and fails nothing.
    let (ok, out) = apply(&kubectl, &srv, dir.path(), &["-f", k.to_str().unwrap(), "-f", c.to_str().unwrap()]).await;
    assert!(ok, "second apply:\n{out}");

    // What a real server refuses, this one refuses: an unquoted digest of
    // zeros is YAML's integer 0, and a field the type does not have.
    let mut bad = std::fs::read_to_string(s.join("policy.yaml")).unwrap();
    bad = bad.replace("sha256: \"0000000000000000000000000000000000000000000000000000000000000000\"", "sha256: 0000");
    let f = dir.path().join("bad-policy.yaml");
    std::fs::write(&f, &bad).unwrap();
    let (ok, out) = apply(&kubectl, &srv, dir.path(), &["-f", f.to_str().unwrap()]).await;
    assert!(!ok && out.contains("must be of type string"), "{out}");
    let f = dir.path().join("bad-namespace.yaml");
    std::fs::write(&f, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: nowhere}\ndata: {a: b}\n")
        .unwrap();
    let (ok, out) = apply(&kubectl, &srv, dir.path(), &["-f", f.to_str().unwrap()]).await;
    assert!(!ok && out.contains("namespaces \"nowhere\" not found"), "{out}");
    // A field the type does not have: refused under strict field
    // validation (kubectl's default where the server publishes its
    // schema), dropped otherwise.
    let http = reqwest::Client::new();
    let cm =
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "datum": {"a": "b"}});
    let url = format!("{}/api/v1/namespaces/tessera-system/configmaps", srv.url());
    let post = |q: &'static str| {
        http.post(format!("{url}?fieldValidation={q}"))
            .bearer_auth(super::apiserver::rbac::ADMIN_TOKEN)
            .json(&cm)
            .send()
    };
    let r = post("Strict").await.unwrap();
    assert_eq!(r.status(), 422);
    let text = r.text().await.unwrap();
    assert!(text.contains("unknown field") && text.contains("datum"), "{text}");
    assert_eq!(post("Ignore").await.unwrap().status(), 201);
    assert!(srv.get("configmaps", "tessera-system", "x").unwrap().get("datum").is_none(), "dropped");
}
