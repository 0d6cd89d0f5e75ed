//! The HTTP API: health, metrics, explain, plans, plugins, attribution,
//! snapshot, rollout and chaos runs; the mutating endpoints need the bearer
//! token from the configuration. It sits on top: handlers read the shared
//! state and ask the loop ([`crate::control`]); nothing below calls up.
//!
//! Every error is JSON `{"code", "message"}` with a stable code whose
//! status is fixed ([`error::Code`]); malformed paths, queries and bodies
//! get 400 with the reason.

mod app;
mod chaos;
mod console;
pub mod error;
mod learning;
mod openapi;
mod policies;
mod rollout;
mod views;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::handler::Handler as _;
use axum::middleware::{Next, from_fn_with_state};
use axum::response::Response;
use axum::routing::get;

pub use app::AppState;
pub use error::{ApiError, Code};
pub use openapi::document as openapi_document;
pub use policies::{MAX_COMPONENT_BYTES, MAX_POLICY_BYTES, PluginLoaded, PluginView, PolicyInfo};
pub use views::OPENMETRICS;

/// Component uploads buffered at once (each up to [`MAX_COMPONENT_BYTES`]).
pub const MAX_UPLOADS_AT_ONCE: usize = 2;

/// The router over `state`.
pub fn router(state: AppState) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(views::healthz))
        .route("/readyz", get(views::readyz))
        .route("/metrics", get(views::metrics))
        .route("/openapi.json", get(openapi::serve))
        .route("/v1/status", get(views::status))
        .route("/v1/decisions", get(views::list_decisions))
        .route("/v1/decisions/{pod}", get(views::explain))
        .route("/v1/decisions/{pod}/room", get(views::room))
        .route("/v1/plans", get(views::list_plans))
        .route("/v1/plans/{id}", get(views::plan))
        .route(
            "/v1/plugins",
            get(policies::plugins)
                .post(policies::load_plugin.layer(from_fn_with_state(state.clone(), token_first)))
                .layer(DefaultBodyLimit::max(MAX_COMPONENT_BYTES)),
        )
        .route(
            "/v1/policies",
            get(policies::policy)
                .post(policies::swap_policy.layer(from_fn_with_state(state.clone(), token_first)))
                .layer(DefaultBodyLimit::max(MAX_POLICY_BYTES)),
        )
        .route("/v1/attribution", get(views::attribution))
        .route("/v1/snapshot", get(views::snapshot))
        .merge(rollout::routes())
        .merge(chaos::routes())
        .merge(learning::routes())
        .merge(console::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(state.clone(), count_requests))
        .with_state(state)
}

/// The uploads (a component, a policy document) show their token before
/// a byte of their body is read: an anonymous upload is refused from its
/// headers, so it cannot make the service buffer it (the handlers check
/// again).
async fn token_first(State(s): State<AppState>, req: Request, next: Next) -> Response {
    use axum::response::IntoResponse as _;
    // An answer before the body is read: the connection cannot carry
    // another request (its unread body would be taken for one), so it is
    // closed, and the client told so, not left to write into a closed
    // socket on its next request.
    let closing = |e: ApiError| {
        let mut r = e.into_response();
        r.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
        r
    };
    if let Err(e) = app::authorize(&s, req.headers()) {
        return closing(e);
    }
    // Components are buffered whole (up to MAX_COMPONENT_BYTES): only so
    // many at once per service, whoever sends them.
    if *req.method() == axum::http::Method::POST && req.uri().path() == "/v1/plugins" {
        let Ok(_slot) = s.uploads.clone().try_acquire_owned() else {
            let busy = ApiError::new(Code::ApiBusy, format!("{MAX_UPLOADS_AT_ONCE} uploads are under way; try again"));
            return closing(busy);
        };
        return next.run(req).await;
    }
    next.run(req).await
}

async fn count_requests(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched", |m| m.as_str()).to_string();
    let r = next.run(req).await;
    let class = format!("{}xx", r.status().as_u16() / 100);
    s.shared.metrics.api_requests.get_or_create(&vec![("route".into(), route), ("status".into(), class)]).inc();
    r
}

async fn not_found() -> ApiError {
    ApiError::new(Code::ApiNotFound, "no such route; the routes are listed at /openapi.json")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(Code::ApiMethodNotAllowed, "method not allowed on this route")
}
