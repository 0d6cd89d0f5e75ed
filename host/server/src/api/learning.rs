//! The fine-tuning routes: the schedule, the latest runs, a run now.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};

use super::app::{AppState, authorize};
use super::error::{ApiError, Code};
use crate::state::LearningView;

/// The fine-tuning routes.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/v1/learning", get(view)).route("/v1/learning/run", post(run_now))
}

/// Scheduled fine-tuning: the schedule, the next start, the latest runs
/// (each with the gains of the model in use and the tuned one, and the
/// candidate it set).
#[utoipa::path(get, path = "/v1/learning", responses((status = 200, body = LearningView)))]
pub async fn view(State(s): State<AppState>) -> Json<LearningView> {
    Json(s.shared.learning.read().unwrap_or_else(|p| p.into_inner()).clone())
}

/// Fine-tunes now (202; follow it on `GET /v1/learning`). The tuned model
/// becomes the rollout's candidate in shadow, never the active policy.
#[utoipa::path(post, path = "/v1/learning/run", security(("bearer" = [])), responses(
    (status = 202, body = LearningView),
    (status = 401, body = ApiError),
    (status = 409, description = "Fine-tuning is not configured, or a run is under way", body = ApiError),
))]
pub async fn run_now(
    State(s): State<AppState>,
    headers: HeaderMap,
) -> Result<(StatusCode, Json<LearningView>), ApiError> {
    authorize(&s, &headers)?;
    let Some(manual) = &s.learning else {
        return Err(ApiError::new(
            Code::LearningNotScheduled,
            "fine-tuning is not configured: set learning.schedule (and a learned plugin in the policy)",
        ));
    };
    if s.shared.learning.read().unwrap_or_else(|p| p.into_inner()).running {
        return Err(ApiError::new(Code::LearningRunning, "fine-tuning is running; try when it ends"));
    }
    manual.notify_one();
    Ok((StatusCode::ACCEPTED, view(State(s)).await))
}
