//! Validation as the API server does it on every write, so that a manifest
//! or a request the real one refuses is refused here too:
//! - a built-in kind decodes into its API type (`k8s-openapi`): a wrong
//!   type is refused; with `fieldValidation=Strict` (kubectl's default) an
//!   unknown field is refused too, else dropped;
//! - a custom resource is checked against its CRD's `openAPIV3Schema`
//!   (types, `required`, `enum`, `x-kubernetes-int-or-string`,
//!   `x-kubernetes-preserve-unknown-fields`), and needs its CRD;
//! - a namespaced object needs its namespace (`NamespaceLifecycle`).

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::Kind;

type Store = std::collections::BTreeMap<(&'static str, String, String), Value>;

/// Whether the CRD of `kind` exists (always, for a built-in kind).
pub fn served(store: &Store, kind: &Kind) -> bool {
    !is_custom(kind)
        || store.contains_key(&("customresourcedefinitions", String::new(), format!("{}.{}", kind.plural, kind.group)))
}

fn is_custom(kind: &Kind) -> bool {
    kind.group == "tessera.io" || kind.group == "scheduling.x-k8s.io"
}

/// Checks `object` (of `kind`, in namespace `ns`) for a write; drops the
/// unknown fields of a lenient one. `Err` is the API server's message.
pub fn validate(store: &Store, kind: &Kind, ns: &str, object: &mut Value, strict: bool) -> Result<(), String> {
    if kind.namespaced && !store.contains_key(&("namespaces", String::new(), ns.to_string())) {
        return Err(format!("namespaces \"{ns}\" not found"));
    }
    let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let invalid = |errors: Vec<String>| format!("{} \"{name}\" is invalid: {}", kind.kind, errors.join(", "));
    if is_custom(kind) {
        let crd = store
            .get(&("customresourcedefinitions", String::new(), format!("{}.{}", kind.plural, kind.group)))
            .ok_or_else(|| format!("no matches for kind \"{}\" in group \"{}\"", kind.kind, kind.group))?;
        let version = crd["spec"]["versions"].as_array().into_iter().flatten().find(|v| v["name"] == kind.version);
        let schema = version.map(|v| v["schema"]["openAPIV3Schema"].clone()).unwrap_or(Value::Null);
        let mut errors = Vec::new();
        let mut unknown = Vec::new();
        if let Some(o) = object.as_object_mut() {
            for (k, v) in o.iter_mut() {
                if ["apiVersion", "kind", "metadata"].contains(&k.as_str()) {
                    continue;
                }
                match schema["properties"].get(k) {
                    Some(s) => check(s, v, k, &mut errors, &mut unknown),
                    None => unknown.push(k.clone()),
                }
            }
        }
        if !errors.is_empty() {
            return Err(invalid(errors));
        }
        return settle(object, unknown, strict);
    }
    let back = match decode(kind.kind, object) {
        Ok(back) => back,
        Err(e) => return Err(invalid(vec![e])),
    };
    let mut unknown = Vec::new();
    extra(object, &back, "", &mut unknown);
    settle(object, unknown, strict)
}

/// Unknown fields: an error when strict, else dropped.
fn settle(object: &mut Value, unknown: Vec<String>, strict: bool) -> Result<(), String> {
    if unknown.is_empty() {
        return Ok(());
    }
    if strict {
        let list: Vec<String> = unknown.iter().map(|u| format!("unknown field \"{u}\"")).collect();
        return Err(format!("strict decoding error: {}", list.join(", ")));
    }
    for path in unknown {
        let path = path.replace('[', ".").replace(']', "");
        let mut at = &mut *object;
        let parts: Vec<&str> = path.split('.').collect();
        for p in &parts[..parts.len() - 1] {
            at = match p.parse::<usize>() {
                Ok(i) => &mut at[i],
                Err(_) => &mut at[*p],
            };
        }
        if let Some(o) = at.as_object_mut() {
            o.remove(parts[parts.len() - 1]);
        }
    }
    Ok(())
}

fn typed<T: DeserializeOwned + Serialize>(v: &Value) -> Result<Value, String> {
    let t: T = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(t).map_err(|e| e.to_string())
}

/// `v` through its API type and back.
fn decode(kind: &str, v: &Value) -> Result<Value, String> {
    use k8s_openapi::api::{apps, batch, coordination, core, policy, rbac};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    match kind {
        "Node" => typed::<core::v1::Node>(v),
        "Pod" => typed::<core::v1::Pod>(v),
        "Namespace" => typed::<core::v1::Namespace>(v),
        "ConfigMap" => typed::<core::v1::ConfigMap>(v),
        "Service" => typed::<core::v1::Service>(v),
        "ServiceAccount" => typed::<core::v1::ServiceAccount>(v),
        "Event" => typed::<core::v1::Event>(v),
        "Deployment" => typed::<apps::v1::Deployment>(v),
        "DaemonSet" => typed::<apps::v1::DaemonSet>(v),
        "Job" => typed::<batch::v1::Job>(v),
        "CronJob" => typed::<batch::v1::CronJob>(v),
        "PodDisruptionBudget" => typed::<policy::v1::PodDisruptionBudget>(v),
        "Lease" => typed::<coordination::v1::Lease>(v),
        "ClusterRole" => typed::<rbac::v1::ClusterRole>(v),
        "ClusterRoleBinding" => typed::<rbac::v1::ClusterRoleBinding>(v),
        "Role" => typed::<rbac::v1::Role>(v),
        "RoleBinding" => typed::<rbac::v1::RoleBinding>(v),
        "CustomResourceDefinition" => typed::<CustomResourceDefinition>(v),
        other => Err(format!("no schema for {other}")),
    }
}

/// Paths in `given` that the typed round trip `back` lost (nulls aside).
fn extra(given: &Value, back: &Value, path: &str, out: &mut Vec<String>) {
    let at = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
    match (given, back) {
        (Value::Object(g), Value::Object(b)) => {
            for (k, v) in g {
                match b.get(k) {
                    _ if v.is_null() => {}
                    None => out.push(at(k)),
                    Some(bv) => extra(v, bv, &at(k), out),
                }
            }
        }
        (Value::Array(g), Value::Array(b)) => {
            for (i, (gv, bv)) in g.iter().zip(b).enumerate() {
                extra(gv, bv, &at(&i.to_string()), out);
            }
        }
        _ => {}
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `v` at `path` against a structural schema.
fn check(schema: &Value, v: &mut Value, path: &str, errors: &mut Vec<String>, unknown: &mut Vec<String>) {
    let found = type_name(v);
    if v.is_null() {
        if schema["nullable"] != true {
            errors.push(format!("{path}: Invalid value: \"null\": {path} in body must be of type {}", schema["type"]));
        }
        return;
    }
    if schema["x-kubernetes-int-or-string"] == true {
        if !matches!(found, "integer" | "string") {
            errors
                .push(format!("{path}: Invalid value: \"{found}\": {path} in body must be of type integer or string"));
        }
        return;
    }
    let want = schema["type"].as_str().unwrap_or("");
    let fits = match want {
        "" => true,
        "number" => matches!(found, "integer" | "number"),
        w => w == found,
    };
    if !fits {
        errors.push(format!("{path}: Invalid value: \"{found}\": {path} in body must be of type {want}: \"{found}\""));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        errors.push(format!("{path}: Unsupported value: {v}: supported values: {}", list.join(", ")));
    }
    match v {
        Value::Object(o) => {
            for r in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if !o.contains_key(r) {
                    errors.push(format!("{path}.{r}: Required value"));
                }
            }
            let open = schema["x-kubernetes-preserve-unknown-fields"] == true;
            let props: Option<&Map<String, Value>> = schema["properties"].as_object();
            for (k, sub) in o.iter_mut() {
                let at = format!("{path}.{k}");
                match (props.and_then(|p| p.get(k)), schema.get("additionalProperties")) {
                    (Some(s), _) => check(s, sub, &at, errors, unknown),
                    (None, Some(extra)) if extra.is_object() => check(extra, sub, &at, errors, unknown),
                    (None, Some(Value::Bool(true))) => {}
                    (None, _) if open || props.is_none() && want.is_empty() => {}
                    (None, _) => unknown.push(at),
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                check(&schema["items"], item, &format!("{path}[{i}]"), errors, unknown);
            }
        }
        _ => {}
    }
}
