//! The OpenAPI 3.1 document served at `/openapi.json`, generated from the
//! handlers and types with utoipa so that it cannot drift from the code.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{chaos, console, error, learning, policies, rollout, views};

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        // Every operation that needs the token may also answer 403: the
        // service has none configured (its mutating endpoints are off).
        let forbidden = utoipa::openapi::ResponseBuilder::new()
            .description("No api_token is configured: mutating endpoints are disabled")
            .content(
                "application/json",
                utoipa::openapi::ContentBuilder::new()
                    .schema(Some(utoipa::openapi::Ref::from_schema_name("ApiError")))
                    .build(),
            )
            .build();
        for item in doc.paths.paths.values_mut() {
            for op in [&mut item.post, &mut item.put, &mut item.patch, &mut item.delete].into_iter().flatten() {
                if op.security.as_ref().is_some_and(|s| !s.is_empty()) {
                    op.responses.responses.entry("403".into()).or_insert_with(|| forbidden.clone().into());
                }
            }
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Tessera", description = "Explain, attribution and control API of `tessera serve`."),
    paths(
        views::healthz,
        views::readyz,
        views::metrics,
        views::status,
        views::list_decisions,
        views::explain,
        views::room,
        views::list_plans,
        views::plan,
        policies::plugins,
        policies::load_plugin,
        policies::policy,
        policies::swap_policy,
        views::attribution,
        views::snapshot,
        rollout::view,
        rollout::set_candidate,
        rollout::set_stage,
        rollout::record_verdict,
        rollout::promote,
        rollout::rollback,
        chaos::view,
        chaos::run_now,
        learning::view,
        learning::run_now,
        console::config,
        console::cluster,
        console::latency,
        console::events,
    ),
    components(schemas(
        error::ApiError,
        error::Code,
        policies::PluginView,
        policies::PluginLoaded,
        policies::PolicyInfo,
        crate::state::Status,
        crate::record::DecisionRecord,
        crate::record::PlanRecord,
        crate::attribution::Attribution,
    )),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

/// `GET /openapi.json`.
pub async fn serve() -> impl axum::response::IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, "application/json")], document())
}

/// The document, as JSON.
pub fn document() -> String {
    ApiDoc::openapi().to_pretty_json().expect("the OpenAPI document serialises")
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_route_is_documented() {
        let doc: serde_json::Value = serde_json::from_str(&super::document()).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        for p in [
            "/healthz",
            "/readyz",
            "/metrics",
            "/v1/status",
            "/v1/decisions",
            "/v1/decisions/{pod}",
            "/v1/decisions/{pod}/room",
            "/v1/plans",
            "/v1/plans/{id}",
            "/v1/plugins",
            "/v1/policies",
            "/v1/attribution",
            "/v1/snapshot",
            "/v1/rollout",
            "/v1/rollout/promote",
            "/v1/chaos",
            "/v1/chaos/run",
            "/v1/learning",
            "/v1/learning/run",
            "/v1/console/cluster",
            "/v1/console/latency",
            "/v1/console/events",
            "/v1/console/config",
        ] {
            assert!(paths.contains_key(p), "{p} is not documented");
        }
        assert!(paths["/v1/plugins"]["post"]["security"].is_array(), "POST /v1/plugins needs the bearer token");
        assert!(doc["components"]["schemas"]["DecisionRecord"].is_object());
    }
}
