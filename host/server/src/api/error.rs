//! The API's errors: one enum of stable codes, each with the HTTP status
//! it is answered with, so that no handler chooses a status and a code
//! apart. The body is JSON `{"code", "message"}`.

use axum::Json;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::control::{ApplyError, ControlError};
use crate::rollout::RolloutError;

/// Every code the API answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING-KEBAB-CASE")]
pub enum Code {
    /// A malformed path parameter.
    ApiBadPath,
    /// A malformed or unknown query parameter.
    ApiBadQuery,
    /// A malformed body.
    ApiBadBody,
    /// A body over the route's limit.
    ApiBodyTooLarge,
    /// A body of a media type the route does not take.
    ApiUnsupportedMediaType,
    /// No such route.
    ApiNotFound,
    /// The route does not take this method.
    ApiMethodNotAllowed,
    /// No or a wrong bearer token.
    ApiUnauthorized,
    /// Mutating endpoints are off: no token is configured.
    ApiTokenNotConfigured,
    /// The loop is starting, stopping, or did not answer.
    ApiNotReady,
    /// As many uploads as the service buffers at once are under way.
    ApiBusy,
    /// A failure of the service itself.
    ApiInternal,
    /// No decision about the pod is held.
    DecisionNotFound,
    /// No such plan is held.
    PlanNotFound,
    /// The running policy has no such plugin.
    PluginNotFound,
    /// The plugin left the policy while its new version loaded.
    PluginGone,
    /// The component failed its checks.
    PluginRejected,
    /// The policy document is malformed or invalid.
    PolicyInvalid,
    /// A plugin of the document did not load.
    PolicyLoadFailed,
    /// The metric cannot be attributed.
    AttributionUnknownMetric,
    /// The window is not one.
    AttributionBadWindow,
    /// No candidate is being rolled out.
    RolloutNoCandidate,
    /// The candidate is not at the stage the step needs.
    RolloutStage,
    /// No chaos verdict was recorded for the candidate.
    RolloutNoVerdict,
    /// The candidate's verdict is BLOCK.
    RolloutBlocked,
    /// The verdict is too old.
    RolloutVerdictStale,
    /// No campaign is scheduled.
    ChaosNotScheduled,
    /// A campaign is running.
    ChaosRunning,
    /// Fine-tuning is not configured.
    LearningNotScheduled,
    /// Fine-tuning is running.
    LearningRunning,
}

impl Code {
    /// The HTTP status the code is answered with.
    pub fn status(self) -> StatusCode {
        match self {
            Code::ApiBadPath
            | Code::ApiBadQuery
            | Code::ApiBadBody
            | Code::PolicyInvalid
            | Code::AttributionUnknownMetric
            | Code::AttributionBadWindow => StatusCode::BAD_REQUEST,
            Code::ApiBodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Code::ApiUnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::ApiNotFound | Code::DecisionNotFound | Code::PlanNotFound | Code::PluginNotFound => {
                StatusCode::NOT_FOUND
            }
            Code::ApiMethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Code::ApiUnauthorized => StatusCode::UNAUTHORIZED,
            Code::ApiTokenNotConfigured => StatusCode::FORBIDDEN,
            Code::ApiNotReady | Code::ApiBusy => StatusCode::SERVICE_UNAVAILABLE,
            Code::ApiInternal => StatusCode::INTERNAL_SERVER_ERROR,
            Code::PluginRejected | Code::PolicyLoadFailed => StatusCode::UNPROCESSABLE_ENTITY,
            Code::PluginGone
            | Code::RolloutNoCandidate
            | Code::RolloutStage
            | Code::RolloutNoVerdict
            | Code::RolloutBlocked
            | Code::RolloutVerdictStale
            | Code::ChaosNotScheduled
            | Code::ChaosRunning
            | Code::LearningNotScheduled
            | Code::LearningRunning => StatusCode::CONFLICT,
        }
    }
}

/// An API error: its code decides its status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApiError {
    /// Stable code (`DECISION-NOT-FOUND`, `API-BAD-BODY`, …).
    pub code: Code,
    /// What went wrong, for a person.
    pub message: String,
}

impl ApiError {
    /// An error with `code`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.code.status();
        let mut r = (status, Json(self)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"tessera\""));
        }
        r
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        Self::new(Code::ApiBadPath, r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        Self::new(Code::ApiBadQuery, r.body_text())
    }
}

impl From<BytesRejection> for ApiError {
    fn from(r: BytesRejection) -> Self {
        let code = if r.status() == StatusCode::PAYLOAD_TOO_LARGE { Code::ApiBodyTooLarge } else { Code::ApiBadBody };
        Self::new(code, r.body_text())
    }
}

impl From<ControlError> for ApiError {
    fn from(e: ControlError) -> Self {
        Self::new(Code::ApiNotReady, e.to_string())
    }
}

impl From<ApplyError> for ApiError {
    fn from(e: ApplyError) -> Self {
        match e {
            ApplyError::Load { .. } => Self::new(Code::PolicyLoadFailed, e.to_string()),
            ApplyError::Loop(c) => c.into(),
        }
    }
}

impl From<RolloutError> for ApiError {
    fn from(e: RolloutError) -> Self {
        let code = match e {
            RolloutError::NoCandidate => Code::RolloutNoCandidate,
            RolloutError::InShadow { .. } => Code::RolloutStage,
            RolloutError::NoVerdict { .. } => Code::RolloutNoVerdict,
            RolloutError::Blocked { .. } => Code::RolloutBlocked,
            RolloutError::Stale { .. } => Code::RolloutVerdictStale,
        };
        Self::new(code, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_spelled_as_the_api_answers_them() {
        let text = serde_json::to_string(&ApiError::new(Code::DecisionNotFound, "x")).unwrap();
        assert_eq!(text, r#"{"code":"DECISION-NOT-FOUND","message":"x"}"#);
        assert_eq!(serde_json::to_string(&Code::ApiBodyTooLarge).unwrap(), r#""API-BODY-TOO-LARGE""#);
        assert_eq!(Code::RolloutVerdictStale.status(), StatusCode::CONFLICT);
    }
}
