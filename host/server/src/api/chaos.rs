//! The chaos routes: the scheduled campaign, its latest runs, a run now.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};

use super::app::{AppState, authorize};
use super::error::{ApiError, Code};
use crate::state::ChaosView;

/// The chaos routes.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/v1/chaos", get(view)).route("/v1/chaos/run", post(run_now))
}

/// Scheduled campaigns: the schedule, the next start, the latest runs.
#[utoipa::path(get, path = "/v1/chaos", responses((status = 200, body = ChaosView)))]
pub async fn view(State(s): State<AppState>) -> Json<ChaosView> {
    Json(s.shared.chaos.read().unwrap_or_else(|p| p.into_inner()).clone())
}

/// Runs the scheduled campaign now (202; follow it on `GET /v1/chaos`).
#[utoipa::path(post, path = "/v1/chaos/run", security(("bearer" = [])), responses(
    (status = 202, body = ChaosView),
    (status = 401, body = ApiError),
    (status = 409, description = "No campaign is scheduled, or one is running", body = ApiError),
))]
pub async fn run_now(State(s): State<AppState>, headers: HeaderMap) -> Result<(StatusCode, Json<ChaosView>), ApiError> {
    authorize(&s, &headers)?;
    let Some(manual) = &s.chaos else {
        return Err(ApiError::new(
            Code::ChaosNotScheduled,
            "no campaign is configured: set chaos.schedule and chaos.campaign",
        ));
    };
    if s.shared.chaos.read().unwrap_or_else(|p| p.into_inner()).running {
        return Err(ApiError::new(Code::ChaosRunning, "a campaign is running; try when it ends"));
    }
    manual.notify_one();
    Ok((StatusCode::ACCEPTED, view(State(s)).await))
}
