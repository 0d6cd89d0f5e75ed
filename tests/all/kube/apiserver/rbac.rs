//! Authentication by bearer token and RBAC authorization
//! (`rbac.authorization.k8s.io/v1`) as the API server does them: a request
//! is allowed only if a ClusterRole bound by a ClusterRoleBinding, or a
//! Role bound by a RoleBinding in the request's namespace, has a rule whose
//! verbs, API groups, resources (`pods/binding` for a subresource) and
//! resource names all match. What is not granted is refused with 403 and
//! recorded, so a test can say that nothing was refused. The rules are the
//! objects in the store: the server starts with `deploy/kubernetes/rbac.yaml`
//! applied.

use std::collections::{BTreeMap, HashMap};

use axum::http::{HeaderMap, Method, header};
use serde_json::Value;

use super::Kind;

/// The token of the scheduler's service account (what Tessera gets).
pub const SCHEDULER_TOKEN: &str = "tessera-scheduler-token";
/// A cluster administrator's token (kubectl in the tests).
pub const ADMIN_TOKEN: &str = "cluster-admin-token";

/// Who a request is from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum User {
    /// `system:masters`: everything is allowed.
    Admin,
    /// A service account.
    ServiceAccount {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl User {
    /// The user named by the request's bearer token, if it has a known one.
    /// kubectl sends no token over plain HTTP (client-go keeps credentials
    /// for TLS): a kubectl request without one is an administrator's, as
    /// on the API server's old insecure port.
    pub fn from_headers(headers: &HeaderMap) -> Option<Self> {
        let Some(auth) = headers.get(header::AUTHORIZATION) else {
            let agent = headers.get(header::USER_AGENT).and_then(|a| a.to_str().ok()).unwrap_or("");
            return agent.starts_with("kubectl/").then_some(Self::Admin);
        };
        let token = auth.to_str().ok()?.strip_prefix("Bearer ")?;
        match token {
            ADMIN_TOKEN => Some(Self::Admin),
            SCHEDULER_TOKEN => {
                Some(Self::ServiceAccount { namespace: "tessera-system".into(), name: "tessera-scheduler".into() })
            }
            _ => None,
        }
    }

    fn name(&self) -> String {
        match self {
            Self::Admin => "kubernetes-admin".into(),
            Self::ServiceAccount { namespace, name } => format!("system:serviceaccount:{namespace}:{name}"),
        }
    }
}

/// What a request asks to do, in RBAC's terms.
#[derive(Debug, Clone)]
pub struct Attributes {
    /// get, list, watch, create, update, patch, delete.
    pub verb: &'static str,
    /// The API group (`""` for core).
    pub group: &'static str,
    /// The resource, with its subresource (`pods/binding`).
    pub resource: String,
    /// The namespace (`""` for a cluster-scoped request).
    pub namespace: String,
    /// The object's name (`""` for create, and for list and watch without a
    /// `metadata.name` field selector).
    pub name: String,
}

impl Attributes {
    /// The attributes of a request.
    pub fn of(
        method: &Method,
        kind: &'static Kind,
        namespace: Option<&str>,
        name: Option<&str>,
        sub: Option<&str>,
        q: &HashMap<String, String>,
    ) -> Self {
        let watching = q.get("watch").is_some_and(|w| w == "true" || w == "1");
        let verb = match (method, name, sub) {
            (&Method::GET, None, _) if watching => "watch",
            (&Method::GET, None, _) => "list",
            (&Method::GET, Some(_), _) => "get",
            (&Method::POST, _, _) => "create",
            (&Method::PUT, _, _) => "update",
            (&Method::PATCH, _, _) => "patch",
            (&Method::DELETE, _, _) => "delete",
            _ => "unknown",
        };
        // list and watch name an object only through a field selector on
        // its name (client-go's single-object informer).
        let selected = q.get("fieldSelector").and_then(|f| f.strip_prefix("metadata.name=")).map(str::to_string);
        let name = match (verb, name) {
            ("list" | "watch", _) => selected.unwrap_or_default(),
            ("create", _) if sub.is_none() => String::new(),
            (_, n) => n.unwrap_or_default().to_string(),
        };
        let resource = match sub {
            Some(s) => format!("{}/{s}", kind.plural),
            None => kind.plural.to_string(),
        };
        Self { verb, group: kind.group, resource, namespace: namespace.unwrap_or_default().to_string(), name }
    }

    /// The API server's words for a refusal.
    pub fn forbidden(&self, user: &User) -> String {
        let group = if self.group.is_empty() { String::new() } else { format!(".{}", self.group) };
        let (resource, sub) =
            self.resource.split_once('/').map_or((self.resource.as_str(), None), |(r, s)| (r, Some(s)));
        let what = match sub {
            Some(s) => format!("resource \"{resource}/{s}\""),
            None => format!("resource \"{resource}\""),
        };
        let scope = if self.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{}\"", self.namespace)
        };
        let named = if self.name.is_empty() { String::new() } else { format!(" \"{}\"", self.name) };
        format!(
            "{resource}{group}{named} is forbidden: User \"{}\" cannot {} {what} in API group \"{}\" {scope}",
            user.name(),
            self.verb,
            self.group
        )
    }
}

type Store = BTreeMap<(&'static str, String, String), Value>;

fn has(list: &Value, want: &str) -> bool {
    list.as_array().is_some_and(|xs| xs.iter().any(|x| x == want || x == "*"))
}

fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    let names_ok = rule["resourceNames"]
        .as_array()
        .is_none_or(|names| names.is_empty() || (!a.name.is_empty() && names.iter().any(|n| n == a.name.as_str())));
    has(&rule["verbs"], a.verb) && has(&rule["apiGroups"], a.group) && has(&rule["resources"], &a.resource) && names_ok
}

fn binds(binding: &Value, user: &User) -> bool {
    let User::ServiceAccount { namespace, name } = user else { return false };
    binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| s["kind"] == "ServiceAccount" && s["name"] == name.as_str() && s["namespace"] == namespace.as_str())
}

fn role_allows(store: &Store, plural: &'static str, ns: &str, name: &str, a: &Attributes) -> bool {
    store
        .get(&(plural, ns.to_string(), name.to_string()))
        .is_some_and(|role| role["rules"].as_array().into_iter().flatten().any(|r| rule_allows(r, a)))
}

/// Whether `user` may do `a`, by the RBAC objects in `store`.
pub fn allowed(store: &Store, user: &User, a: &Attributes) -> bool {
    if *user == User::Admin {
        return true;
    }
    let by_cluster = store.iter().filter(|((p, ..), _)| *p == "clusterrolebindings").any(|(_, b)| {
        binds(b, user)
            && b["roleRef"]["kind"] == "ClusterRole"
            && role_allows(store, "clusterroles", "", b["roleRef"]["name"].as_str().unwrap_or_default(), a)
    });
    by_cluster
        || (!a.namespace.is_empty()
            && store.iter().filter(|((p, ns, _), _)| *p == "rolebindings" && *ns == a.namespace).any(|(_, b)| {
                let role = b["roleRef"]["name"].as_str().unwrap_or_default();
                binds(b, user)
                    && match b["roleRef"]["kind"].as_str() {
                        Some("Role") => role_allows(store, "roles", &a.namespace, role, a),
                        Some("ClusterRole") => role_allows(store, "clusterroles", "", role, a),
                        _ => false,
                    }
            }))
}
