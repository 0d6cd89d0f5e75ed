//! The OpenAPI 3.1 document served at `/openapi.json`, generated from the
//! handlers and types with utoipa so that it cannot drift from the code.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Tessera", description = "Explain, attribution and control API of `tessera serve`."),
    paths(
        api::healthz,
        api::readyz,
        api::metrics,
        api::status,
        api::list_decisions,
        api::explain,
        api::list_plans,
        api::plan,
        api::plugins,
        api::load_plugin,
        api::policy,
        api::swap_policy,
        api::attribution,
        api::snapshot,
        crate::rollout::view,
        crate::rollout::set_candidate,
        crate::rollout::set_stage,
        crate::rollout::record_verdict,
        crate::rollout::promote,
        crate::rollout::rollback,
        crate::campaigns::view,
        crate::campaigns::run_now,
    ),
    components(schemas(
        api::ApiError,
        api::PluginView,
        api::PluginLoaded,
        api::PolicyInfo,
        crate::Status,
        crate::record::DecisionRecord,
        crate::record::PlanRecord,
        crate::attribution::Attribution,
    )),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

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
        ] {
            assert!(paths.contains_key(p), "{p} is not documented");
        }
        assert!(paths["/v1/plugins"]["post"]["security"].is_array(), "POST /v1/plugins needs the bearer token");
        assert!(doc["components"]["schemas"]["DecisionRecord"].is_object());
    }
}
