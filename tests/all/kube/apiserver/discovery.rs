//! Discovery: the group list and each group version's resources, as
//! kubectl and kube-rs read them.

use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{KINDS, status};

type Store = std::collections::BTreeMap<(&'static str, String, String), Value>;

pub(super) fn discovery_groups(store: &Store) -> Response {
    let mut groups: Vec<(&str, &str)> = KINDS
        .iter()
        .filter(|k| !k.group.is_empty() && super::schema::served(store, k))
        .map(|k| (k.group, k.version))
        .collect();
    // Each group once, where it first appears (its kinds need not be
    // listed together).
    let mut seen = std::collections::BTreeSet::new();
    groups.retain(|g| seen.insert(*g));
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(g, v)| {
            let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
            json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv})
        })
        .collect();
    axum::Json(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})).into_response()
}

pub(super) fn discovery_resources(store: &Store, path: &str) -> Option<Response> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version) = match segs.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => return None,
    };
    let resources: Vec<Value> = KINDS
        .iter()
        .filter(|k| k.group == group && k.version == version && super::schema::served(store, k))
        .flat_map(|k| {
            let main = json!({
                "name": k.plural, "singularName": k.kind.to_lowercase(), "namespaced": k.namespaced, "kind": k.kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            });
            let subs: Vec<Value> = if k.plural == "pods" {
                vec![
                    json!({"name": "pods/binding", "singularName": "", "namespaced": true, "kind": "Binding", "verbs": ["create"]}),
                    json!({"name": "pods/eviction", "singularName": "", "namespaced": true, "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}),
                ]
            } else {
                Vec::new()
            };
            std::iter::once(main).chain(subs)
        })
        .collect();
    if resources.is_empty() {
        return Some(status(404, "NotFound", format!("no group version {path}")));
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(
        axum::Json(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
            .into_response(),
    )
}
