//! What the handlers share, and the checks every mutating request passes
//! (the bearer token, the media type).

use std::sync::Arc;

use axum::http::{HeaderMap, header};

use super::error::{ApiError, Code};
use crate::config::RolloutConfig;
use crate::control::LoopHandle;
use crate::loader::Loader;
use crate::state::Shared;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// State shared with the loop.
    pub shared: Arc<Shared>,
    /// Asks the loop.
    pub control: LoopHandle,
    /// Loads policies and plugins.
    pub loader: Arc<dyn Loader>,
    /// Bearer token of the mutating endpoints (none: they are disabled).
    pub token: Option<Arc<str>>,
    /// Seed for plugins loaded through the API.
    pub seed: u64,
    /// Rollout settings.
    pub rollout: RolloutConfig,
    /// Wakes the campaign scheduler (none: no campaign is scheduled).
    pub chaos: Option<Arc<tokio::sync::Notify>>,
    /// The console's trace link template (`console.trace_url`).
    pub trace_url: Option<Arc<str>>,
    /// Wakes the fine-tuning scheduler (none: fine-tuning does not run).
    pub learning: Option<Arc<tokio::sync::Notify>>,
    /// Slots of the component uploads buffered at once
    /// ([`super::MAX_UPLOADS_AT_ONCE`]).
    pub uploads: Arc<tokio::sync::Semaphore>,
    /// Where file sources of posted documents are read from (none: only
    /// `builtin:` sources).
    pub sources_dir: Option<Arc<std::path::Path>>,
}

/// Checks the bearer token in constant time.
pub fn authorize(s: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &s.token else {
        return Err(ApiError::new(
            Code::ApiTokenNotConfigured,
            "mutating endpoints are disabled: set api_token in the configuration or TESSERA_API_TOKEN",
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    match given {
        Some(g) if constant_time_eq(g.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::new(Code::ApiUnauthorized, "wrong bearer token")),
        None => Err(ApiError::new(
            Code::ApiUnauthorized,
            "this endpoint mutates the service: send Authorization: Bearer <api_token>",
        )),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A body's content type, when given, must be one of `allowed`.
pub fn content_type(headers: &HeaderMap, allowed: &[&str]) -> Result<(), ApiError> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else { return Ok(()) };
    let essence = ct.to_str().unwrap_or_default().split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    if allowed.contains(&essence.as_str()) {
        Ok(())
    } else {
        Err(ApiError::new(
            Code::ApiUnsupportedMediaType,
            format!("content type {essence:?} is not one of {}", allowed.join(", ")),
        ))
    }
}

/// Refuses a mutation while the service stops.
pub fn not_stopping(s: &AppState) -> Result<(), ApiError> {
    if s.shared.stopping.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ApiError::new(Code::ApiNotReady, "the service is stopping"));
    }
    Ok(())
}
