//! The policy side of the API: the running policy and its plugins, a new
//! version of one plugin, a new policy document.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::app::{AppState, authorize, content_type, not_stopping};
use super::error::{ApiError, Code};
use crate::control::{Control, PolicyHandle};

type ApiResult<T> = Result<Json<T>, ApiError>;

/// Largest plugin component accepted, bytes: the cap on component files.
pub const MAX_COMPONENT_BYTES: usize = tessera_input::Limit::COMPONENT.max_bytes as usize;

/// Largest policy document accepted, bytes: the cap on policy files.
pub const MAX_POLICY_BYTES: usize = tessera_input::Limit::POLICY.max_bytes as usize;

/// A plugin of the running policy.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PluginView {
    /// Name in the policy.
    pub name: String,
    /// `scorer` or `detector`.
    pub kind: String,
    /// Version serving calls.
    pub version: String,
    /// The `tessera:policy` contract version its component was built
    /// against (`0.2.2`, `0.2.1`, `0.2.0` or `0.1.0`).
    pub contract: String,
    /// Its content key (SHA-256 of the component and its configuration).
    pub key: String,
    /// What it does, as it says.
    pub description: String,
    /// Weight of its normalised scores.
    pub weight: f64,
    /// Calls made to this slot since its version was loaded.
    pub calls: u64,
    /// Faults counted.
    pub faults: u64,
    /// Quarantined: calls are refused until a new version is loaded.
    pub quarantined: bool,
    /// Versions loaded into this slot so far.
    pub versions_loaded: u64,
    /// Calls of the current version the host starved: host overload, not
    /// the plugin's fault.
    pub host_starved_calls: u64,
    /// How far a scorer says its answers may be reused (`fresh`, `node`,
    /// `node-shape`); `None` for a detector.
    pub reuse: Option<String>,
    /// The host found this version breaking its reuse promise
    /// (`PLUGIN-REUSE-BROKEN`): it is asked afresh from then on.
    pub reuse_promise_broken: bool,
}

/// The running policy's plugins.
#[utoipa::path(get, path = "/v1/plugins", responses((status = 200, body = Vec<PluginView>)))]
pub async fn plugins(State(s): State<AppState>) -> Json<Vec<PluginView>> {
    let view = s.shared.policy.read().unwrap_or_else(|p| p.into_inner());
    Json(view.members.iter().map(plugin_view).collect())
}

fn plugin_view(m: &tessera_wasm::Member) -> PluginView {
    let v = m.slot.current();
    let st = m.slot.stats();
    PluginView {
        name: m.name.clone(),
        kind: v.kind().to_string(),
        version: v.version().to_string(),
        contract: v.contract().to_string(),
        key: v.key().to_string(),
        description: v.info().description.clone(),
        weight: m.weight,
        calls: st.calls,
        faults: st.faults,
        quarantined: st.quarantined,
        versions_loaded: st.versions,
        host_starved_calls: st.host_starved,
        reuse: (v.kind() == tessera_wasm::WorldKind::Scorer).then(|| v.declared_scope().to_string()),
        reuse_promise_broken: v.promise_broken(),
    }
}

/// `?name=`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct PluginName {
    /// The plugin of the running policy to replace.
    pub name: String,
}

/// What a plugin load did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PluginLoaded {
    /// The plugin, with its new version.
    pub plugin: PluginView,
    /// The version it replaced.
    pub previous_version: String,
}

/// Loads a new version of one of the running policy's plugins (a WASI
/// component, `application/wasm`), checks it beside the running one and
/// swaps it in; calls in flight finish on the old version.
#[utoipa::path(post, path = "/v1/plugins", params(PluginName), request_body(content = Vec<u8>, content_type = "application/wasm"),
    security(("bearer" = [])), responses(
    (status = 200, body = PluginLoaded),
    (status = 400, description = "Malformed request", body = ApiError),
    (status = 401, description = "No or wrong bearer token", body = ApiError),
    (status = 404, description = "No such plugin in the running policy", body = ApiError),
    (status = 422, description = "The component failed its checks", body = ApiError),
))]
pub async fn load_plugin(
    State(s): State<AppState>,
    headers: HeaderMap,
    q: Result<Query<PluginName>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<PluginLoaded> {
    authorize(&s, &headers)?;
    let Query(PluginName { name }) = q?;
    content_type(&headers, &["application/wasm", "application/octet-stream"])?;
    let body = body?;
    if body.is_empty() {
        return Err(ApiError::new(Code::ApiBadBody, "the body is empty: send the component"));
    }
    if !tessera_wasm::is_wasm(&body) {
        return Err(ApiError::new(
            Code::ApiBadBody,
            "the body is not WebAssembly (no \\0asm magic): send the compiled component",
        ));
    }
    let entry = {
        let view = s.shared.policy.read().unwrap_or_else(|p| p.into_inner());
        view.doc.plugins.iter().find(|p| p.name == name).cloned()
    }
    .ok_or_else(|| ApiError::new(Code::PluginNotFound, format!("the running policy has no plugin {name:?}")))?;
    let (loader, seed) = (s.loader.clone(), s.seed);
    let version = tokio::task::spawn_blocking(move || loader.load_plugin(&entry, seed, &body))
        .await
        .map_err(|e| ApiError::new(Code::ApiInternal, e.to_string()))?
        .map_err(|e| ApiError::new(Code::PluginRejected, e.to_string()))?;
    not_stopping(&s)?;
    let old = s
        .control
        .ask(|done| Control::SwapPlugin { name: name.clone(), version, done })
        .await?
        .ok_or_else(|| ApiError::new(Code::PluginGone, format!("plugin {name:?} left the policy meanwhile")))?;
    let view = s.shared.policy.read().unwrap_or_else(|p| p.into_inner());
    let member = view
        .members
        .iter()
        .find(|m| m.name == name)
        .ok_or_else(|| ApiError::new(Code::PluginGone, format!("plugin {name:?} left the policy meanwhile")))?;
    Ok(Json(PluginLoaded { plugin: plugin_view(member), previous_version: old.version().to_string() }))
}

/// The running policy.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PolicyInfo {
    /// Its name.
    pub name: String,
    /// Its plugins.
    pub plugins: Vec<PluginView>,
    /// The document, as loaded.
    #[schema(value_type = Object)]
    pub document: tessera_policy::PolicyDocument,
}

/// The running policy and its document.
#[utoipa::path(get, path = "/v1/policies", responses((status = 200, body = PolicyInfo)))]
pub async fn policy(State(s): State<AppState>) -> Json<PolicyInfo> {
    let view = s.shared.policy.read().unwrap_or_else(|p| p.into_inner());
    Json(PolicyInfo {
        name: view.name.clone(),
        plugins: view.members.iter().map(plugin_view).collect(),
        document: view.doc.clone(),
    })
}

/// Replaces the running policy with a policy document (YAML or JSON). Its
/// plugins are all loaded and checked first; the next pass uses it.
#[utoipa::path(post, path = "/v1/policies", request_body(content = String, content_type = "application/yaml"),
    security(("bearer" = [])), responses(
    (status = 200, body = PolicyInfo),
    (status = 400, description = "Malformed or invalid document", body = ApiError),
    (status = 401, description = "No or wrong bearer token", body = ApiError),
    (status = 422, description = "A plugin failed to load", body = ApiError),
))]
pub async fn swap_policy(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<PolicyInfo> {
    let (loaded, doc) = load_policy_body(&s, &headers, body).await?;
    s.shared.metrics.zero_known_series(&doc);
    not_stopping(&s)?;
    s.control.ask(|done| Control::SwapPolicy { policy: loaded, doc: Box::new(doc), done }).await?;
    Ok(policy(State(s)).await)
}

/// A policy document from a mutating request (token, media type, UTF-8,
/// schema), with all its plugins loaded and checked.
pub async fn load_policy_body(
    s: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(tessera_wasm::Policy, tessera_policy::PolicyDocument), ApiError> {
    authorize(s, headers)?;
    content_type(headers, &["application/yaml", "application/x-yaml", "text/yaml", "application/json", "text/plain"])?;
    let body = body?;
    // Parsing and resolving sources is blocking work (the file system, a
    // large document): off the async threads, so `/healthz` still answers.
    let sources_dir = s.sources_dir.clone();
    let doc = tokio::task::spawn_blocking(move || {
        let text = std::str::from_utf8(&body)
            .map_err(|e| ApiError::new(Code::ApiBadBody, format!("the body is not UTF-8: {e}")))?;
        let mut doc = tessera_policy::PolicyDocument::parse(text, "request body")
            .map_err(|e| ApiError::new(Code::PolicyInvalid, e.to_string()))?;
        doc.resolve_sources(sources_dir.as_deref()).map_err(|e| {
            let reason = match e {
                tessera_policy::PolicyError::Invalid { reason, .. } => reason,
                other => other.to_string(),
            };
            ApiError::new(Code::PolicyInvalid, format!("request body: {reason}"))
        })?;
        Ok::<_, ApiError>(doc)
    })
    .await
    .map_err(|e| ApiError::new(Code::ApiInternal, e.to_string()))??;
    let handle = PolicyHandle { handle: s.control.clone(), loader: s.loader.clone() };
    let loaded = handle.load(&doc).await?;
    Ok((loaded, doc))
}
