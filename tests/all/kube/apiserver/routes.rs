//! Every request: authentication and RBAC, then the verb on the resource
//! (list, watch, get, create, replace, merge patch, delete, the pod
//! subresources), each write validated first.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::discovery::{discovery_groups, discovery_resources};
use super::{ApiServer, merge_patch, parse, rbac, schema, status};

pub(super) async fn handle(
    State(srv): State<ApiServer>,
    method: Method,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path();
    match path {
        "/api" => return axum::Json(json!({"kind": "APIVersions", "versions": ["v1"]})).into_response(),
        "/apis" => return discovery_groups(&srv.inner.lock().unwrap().objects),
        "/version" => {
            return axum::Json(json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-tessera-test"}))
                .into_response();
        }
        _ => {}
    }
    if let Some(list) = discovery_resources(&srv.inner.lock().unwrap().objects, path) {
        return list;
    }
    let t = match parse(path) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => return status(400, "BadRequest", format!("not JSON: {e}")),
        }
    };
    if !schema::served(&srv.inner.lock().unwrap().objects, t.kind) {
        return status(404, "NotFound", format!("the server could not find the requested resource {path}"));
    }
    let strict = q.get("fieldValidation").is_some_and(|v| v == "Strict");
    let ns = if t.kind.namespaced { t.namespace.clone() } else { Some(String::new()) };
    let agent = headers.get(header::USER_AGENT).and_then(|a| a.to_str().ok()).unwrap_or("-");
    let agent = agent.split_whitespace().next().unwrap_or("-").to_string();
    srv.inner.lock().unwrap().counters.user_agents.insert(agent);
    let Some(user) = rbac::User::from_headers(&headers) else {
        return status(401, "Unauthorized", "Unauthorized");
    };
    let namespace = if t.kind.namespaced {
        Some(
            t.namespace
                .clone()
                .or_else(|| {
                    (method == Method::POST)
                        .then(|| body["metadata"]["namespace"].as_str().unwrap_or("default").to_string())
                })
                .unwrap_or_default(),
        )
    } else {
        None
    };
    let asked = rbac::Attributes::of(&method, t.kind, namespace.as_deref(), t.name.as_deref(), t.sub.as_deref(), &q);
    let may = {
        let s = srv.inner.lock().unwrap();
        rbac::allowed(&s.objects, &user, &asked)
    };
    if !may {
        let message = asked.forbidden(&user);
        srv.inner.lock().unwrap().counters.forbidden.push(message.clone());
        return status(403, "Forbidden", message);
    }
    if t.kind.plural == "leases" && matches!(method, Method::PUT | Method::POST) {
        let cut = srv.inner.lock().unwrap().partitioned.clone();
        if cut.is_some() && body["spec"]["holderIdentity"].as_str() == cut.as_deref() {
            return status(503, "ServiceUnavailable", "this replica is cut off");
        }
    }
    match (&method, &t.name, &t.sub) {
        (&Method::GET, None, None) if q.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            srv.watch(t.kind, t.namespace.clone(), &q)
        }
        (&Method::GET, None, None) => srv.list_response(t.kind, t.namespace.as_deref()),
        (&Method::GET, Some(name), None) => match srv.get(t.kind.plural, ns.as_deref().unwrap_or(""), name) {
            Some(o) => axum::Json(o).into_response(),
            None => status(404, "NotFound", format!("{} \"{name}\" not found", t.kind.plural)),
        },
        (&Method::POST, None, None) => {
            let name = body["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let ns =
                if t.kind.namespaced { t.namespace.clone().unwrap_or_else(|| "default".into()) } else { String::new() };
            let mut body = body;
            let mut s = srv.inner.lock().unwrap();
            if let Err(why) = schema::validate(&s.objects, t.kind, &ns, &mut body, strict) {
                s.counters.invalid.push(why.clone());
                let code = if why.starts_with("namespaces ") || why.starts_with("no matches") { 404 } else { 422 };
                return status(code, if code == 404 { "NotFound" } else { "Invalid" }, why);
            }
            if q.contains_key("dryRun") {
                return (StatusCode::CREATED, axum::Json(body)).into_response();
            }
            if s.objects.contains_key(&(t.kind.plural, ns.clone(), name.clone())) {
                return status(409, "AlreadyExists", format!("{} \"{name}\" already exists", t.kind.plural));
            }
            let o = srv.store(&mut s, t.kind, &ns, &name, body);
            (StatusCode::CREATED, axum::Json(o)).into_response()
        }
        (&Method::PUT, Some(name), None) => {
            let ns = ns.unwrap_or_default();
            let mut s = srv.inner.lock().unwrap();
            let key = (t.kind.plural, ns.clone(), name.clone());
            let Some(current) = s.objects.get(&key) else {
                return status(404, "NotFound", format!("{} \"{name}\" not found", t.kind.plural));
            };
            let given = body["metadata"]["resourceVersion"].as_str();
            if given.is_some_and(|g| Some(g) != current["metadata"]["resourceVersion"].as_str()) {
                s.counters.conflicts += 1;
                return status(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                        t.kind.plural
                    ),
                );
            }
            let mut body = body;
            if let Err(why) = schema::validate(&s.objects, t.kind, &ns, &mut body, strict) {
                s.counters.invalid.push(why.clone());
                return status(422, "Invalid", why);
            }
            let o = srv.store(&mut s, t.kind, &ns, name, body);
            axum::Json(o).into_response()
        }
        (&Method::PATCH, Some(name), None | Some(_)) if t.sub.as_deref().is_none_or(|s| s == "status") => {
            let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
            if !(ct.starts_with("application/merge-patch+json")
                || ct.starts_with("application/strategic-merge-patch+json"))
            {
                return status(415, "UnsupportedMediaType", format!("patch type {ct} is not supported here"));
            }
            let ns = ns.unwrap_or_default();
            let mut s = srv.inner.lock().unwrap();
            let Some(mut o) = s.objects.get(&(t.kind.plural, ns.clone(), name.clone())).cloned() else {
                return status(404, "NotFound", format!("{} \"{name}\" not found", t.kind.plural));
            };
            merge_patch(&mut o, &body);
            if let Err(why) = schema::validate(&s.objects, t.kind, &ns, &mut o, strict) {
                s.counters.invalid.push(why.clone());
                return status(422, "Invalid", why);
            }
            let o = srv.store(&mut s, t.kind, &ns, name, o);
            axum::Json(o).into_response()
        }
        (&Method::DELETE, Some(name), None) => {
            let ns = ns.unwrap_or_default();
            let mut s = srv.inner.lock().unwrap();
            match srv.remove(&mut s, t.kind, &ns, name) {
                Some(o) => axum::Json(o).into_response(),
                None => status(404, "NotFound", format!("{} \"{name}\" not found", t.kind.plural)),
            }
        }
        (&Method::POST, Some(name), Some(sub)) if t.kind.plural == "pods" && sub == "binding" => {
            srv.bind(&ns.unwrap_or_default(), name, &body)
        }
        (&Method::POST, Some(name), Some(sub)) if t.kind.plural == "pods" && sub == "eviction" => {
            srv.evict(&ns.unwrap_or_default(), name, &body)
        }
        _ => status(405, "MethodNotAllowed", format!("{method} {path} is not supported here")),
    }
}
