//! The `TesseraPolicy` controller: each new generation of a policy is
//! validated, its components fetched (OCI, URL or ConfigMap) and checked
//! against their pinned SHA-256, written to the component cache, loaded
//! (every plugin, or nothing changes) and handed to the loop through the
//! rollout path: as the candidate (shadow), or as the active policy with
//! `rollout: immediate`. Every replica applies it (a standby must be ready
//! to lead); the leader reports the outcome in the object's `Applied`
//! condition. A policy that fails leaves the running one as it was; one
//! whose components could not be fetched is tried again with a backoff.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tessera_policy::{Digest, PolicyDocument, Source};
use tessera_server::PolicyHandle;

use crate::crd::{ComponentSource, PolicyCondition, RolloutMode, TesseraPolicy, TesseraPolicyStatus};
use crate::leader::Leadership;
use crate::oci::{self, MAX_BYTES, sha256_hex};

/// Why a policy was not applied (the condition's reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// CamelCase reason.
    pub reason: &'static str,
    /// For a person.
    pub message: String,
}

fn refuse(reason: &'static str, message: impl Into<String>) -> Refusal {
    Refusal { reason, message: message.into() }
}

/// The controller.
pub struct PolicyController {
    client: Client,
    http: reqwest::Client,
    namespace: Option<String>,
    cache: PathBuf,
    policies: PolicyHandle,
    leadership: Leadership,
    /// Generations applied by this replica, by object UID.
    applied: HashMap<String, i64>,
    /// Policies whose components could not be fetched, to try again.
    retries: Vec<Retry>,
    /// Attempts so far of a policy being retried, by UID.
    attempts: HashMap<String, u32>,
}

/// A policy to apply again once `at` has passed.
struct Retry {
    at: std::time::Instant,
    attempt: u32,
    policy: TesseraPolicy,
}

impl PolicyController {
    /// A controller for the policies of `namespace` (all when none),
    /// caching components under `cache`.
    pub fn new(
        client: Client,
        namespace: Option<String>,
        cache: PathBuf,
        policies: PolicyHandle,
        leadership: Leadership,
    ) -> Self {
        let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(30)).build().unwrap_or_default();
        Self {
            client,
            http,
            namespace,
            cache,
            policies,
            leadership,
            applied: HashMap::new(),
            retries: Vec::new(),
            attempts: HashMap::new(),
        }
    }

    /// Watches the policies until the stream ends.
    pub async fn run(mut self) {
        let api: Api<TesseraPolicy> = match &self.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
        loop {
            tokio::select! {
                ev = stream.next() => match ev {
                    None => return,
                    Some(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p))) => self.reconcile(&p).await,
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::warn!("policy watch: {e}; retrying");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                },
                _ = tick.tick() => self.retry_due().await,
            }
        }
    }

    /// Tries again the policies whose fetch failed, once their backoff
    /// is over (a registry or URL that was down may be back).
    async fn retry_due(&mut self) {
        let now = std::time::Instant::now();
        let (due, wait): (Vec<Retry>, Vec<Retry>) =
            std::mem::take(&mut self.retries).into_iter().partition(|r| r.at <= now);
        self.retries = wait;
        for r in due {
            let uid = r.policy.metadata.uid.clone().unwrap_or_default();
            // A newer generation seen meanwhile was applied on its own.
            if self.applied.get(&uid) == Some(&r.policy.metadata.generation.unwrap_or(0)) {
                self.applied.remove(&uid);
                self.attempts.insert(uid, r.attempt);
                self.reconcile(&r.policy).await;
            }
        }
    }

    async fn reconcile(&mut self, p: &TesseraPolicy) {
        let (Some(uid), generation) = (p.metadata.uid.clone(), p.metadata.generation.unwrap_or(0)) else { return };
        if self.applied.get(&uid) == Some(&generation) {
            return;
        }
        self.applied.insert(uid.clone(), generation);
        let attempt = self.attempts.remove(&uid).unwrap_or(0) + 1;
        let outcome = self.apply(p).await;
        let name = format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any());
        if let Err(r) = &outcome
            && r.reason == "FetchFailed"
        {
            // Transient, perhaps: try again after 1, 2, 4 … 300 s.
            let wait = std::time::Duration::from_secs((1u64 << (attempt - 1).min(9)).min(300));
            self.retries.push(Retry { at: std::time::Instant::now() + wait, attempt, policy: p.clone() });
        }
        match &outcome {
            Ok(doc) => tracing::info!("TesseraPolicy {name}: policy {doc} applied ({:?})", p.spec.rollout),
            Err(r) => tracing::warn!("TesseraPolicy {name}: {}: {}", r.reason, r.message),
        }
        if self.leadership.is_leader() {
            self.report(p, generation, outcome).await;
        }
    }

    /// Builds, loads and hands over the policy; its document's name.
    pub async fn apply(&self, p: &TesseraPolicy) -> Result<String, Refusal> {
        let origin = format!("TesseraPolicy {}/{}", p.namespace().unwrap_or_default(), p.name_any());
        let mut doc =
            PolicyDocument::parse(&p.spec.document, &origin).map_err(|e| refuse("InvalidDocument", e.to_string()))?;
        for c in &p.spec.components {
            let entry = doc.plugins.iter_mut().find(|e| e.name == c.plugin).ok_or_else(|| {
                refuse(
                    "InvalidDocument",
                    format!("a component for plugin {}, which the document does not have", c.plugin),
                )
            })?;
            let source = c.source().map_err(|m| refuse("InvalidComponent", m))?;
            let want = Digest::try_from(c.sha256.clone()).map_err(|m| refuse("InvalidComponent", m))?;
            let bytes = self
                .fetch(&source, p.namespace().as_deref())
                .await
                .map_err(|m| refuse("FetchFailed", format!("plugin {}: {m}", c.plugin)))?;
            let got = sha256_hex(&bytes);
            if got != want.0 {
                return Err(refuse(
                    "DigestMismatch",
                    format!("plugin {}: the component's SHA-256 is {got}, the policy pins {}", c.plugin, want.0),
                ));
            }
            let path = self.store(&got, &bytes).map_err(|e| refuse("CacheFailed", e.to_string()))?;
            entry.source = Source::File(path);
            entry.sha256 = Some(want);
        }
        // A file source no component replaced would be read from the
        // scheduler's own file system: refused, as a posted document's is.
        if let Some(e) = doc
            .plugins
            .iter()
            .find(|e| matches!(&e.source, Source::File(_)) && !p.spec.components.iter().any(|c| c.plugin == e.name))
        {
            return Err(refuse(
                "InvalidDocument",
                format!(
                    "plugin {} names the file {}: a TesseraPolicy's components come from spec.components (or use builtin:)",
                    e.name, e.source
                ),
            ));
        }
        let name = doc.name.clone();
        let handed = match p.spec.rollout {
            RolloutMode::Candidate => self.policies.set_candidate(doc).await,
            RolloutMode::Immediate => self.policies.replace(doc).await,
        };
        handed.map_err(|m| refuse("LoadFailed", m.to_string()))?;
        Ok(name)
    }

    async fn fetch(&self, source: &ComponentSource<'_>, namespace: Option<&str>) -> Result<Vec<u8>, String> {
        match source {
            ComponentSource::Oci(r) => oci::pull(&self.http, r).await,
            ComponentSource::Url(u) => {
                if !(u.starts_with("https://") || u.starts_with("http://")) {
                    return Err(format!("{u}: only http(s) URLs"));
                }
                let r = self.http.get(*u).send().await.and_then(reqwest::Response::error_for_status);
                let bytes = r.map_err(|e| format!("{u}: {e}"))?.bytes().await.map_err(|e| format!("{u}: {e}"))?;
                if bytes.len() > MAX_BYTES {
                    return Err(format!("{u}: larger than {MAX_BYTES} bytes"));
                }
                Ok(bytes.to_vec())
            }
            ComponentSource::ConfigMap(k) => {
                let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace.unwrap_or("default"));
                let cm = api
                    .get(&k.name)
                    .await
                    .map_err(|e| format!("ConfigMap {}: {}", k.name, crate::calls::describe(&e)))?;
                cm.binary_data
                    .and_then(|mut d| d.remove(&k.key))
                    .map(|b| b.0)
                    .or_else(|| cm.data.and_then(|mut d| d.remove(&k.key)).map(String::into_bytes))
                    .ok_or_else(|| format!("ConfigMap {} has no key {}", k.name, k.key))
            }
        }
    }

    /// Writes a component under its digest (once).
    fn store(&self, sha: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&self.cache)?;
        let path = self.cache.join(format!("{sha}.wasm"));
        if !path.exists() {
            let tmp = self.cache.join(format!(".{sha}.{}", std::process::id()));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, &path)?;
        }
        Ok(path)
    }

    async fn report(&self, p: &TesseraPolicy, generation: i64, outcome: Result<String, Refusal>) {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let (status, reason, message) = match outcome {
            Ok(name) => (
                "True",
                "Applied",
                match p.spec.rollout {
                    RolloutMode::Candidate => format!("policy {name} is the rollout's candidate (shadow)"),
                    RolloutMode::Immediate => format!("policy {name} is active"),
                },
            ),
            Err(r) => ("False", r.reason, r.message),
        };
        let st = TesseraPolicyStatus {
            observed_generation: Some(generation),
            conditions: vec![PolicyCondition {
                type_: "Applied".into(),
                status: status.into(),
                reason: reason.into(),
                message,
                last_transition_time: now,
                observed_generation: generation,
            }],
        };
        let api: Api<TesseraPolicy> = Api::namespaced(self.client.clone(), &p.namespace().unwrap_or_default());
        let patch = serde_json::json!({"status": st});
        if let Err(e) = api.patch_status(&p.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::warn!("TesseraPolicy {}: cannot write its status: {e}", p.name_any());
        }
    }
}

/// The component cache directory for `cache_dir` (the service's), or a
/// temporary one.
pub fn cache_dir(cache_dir: Option<&Path>) -> PathBuf {
    cache_dir.map_or_else(|| std::env::temp_dir().join("tessera-components"), |d| d.join("components"))
}
