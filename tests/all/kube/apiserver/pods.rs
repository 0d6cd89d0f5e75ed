//! The pod subresources Tessera writes: `binding` (409 when already
//! bound; the kubelet's part, the pod starting, is played too) and
//! `eviction` (429 while a matching disruption budget allows none).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{ApiServer, find_kind, labels_match, status};

impl ApiServer {
    pub(super) fn bind(&self, ns: &str, name: &str, body: &Value) -> Response {
        let Some(node) = body["target"]["name"].as_str() else {
            return status(400, "BadRequest", "a Binding needs target.name");
        };
        let kind = find_kind("", "v1", "pods").unwrap();
        let mut s = self.inner.lock().unwrap();
        let Some(mut pod) = s.objects.get(&("pods", ns.to_string(), name.to_string())).cloned() else {
            return status(404, "NotFound", format!("pods \"{name}\" not found"));
        };
        if let Some(bound) = pod["spec"]["nodeName"].as_str() {
            s.counters.binding_conflicts += 1;
            return status(409, "Conflict", format!("pod {name} is already assigned to node \"{bound}\""));
        }
        pod["spec"]["nodeName"] = json!(node);
        // As the API server does: the Binding's annotations go onto the pod.
        if let Some(a) = body["metadata"]["annotations"].as_object() {
            for (k, v) in a {
                pod["metadata"]["annotations"][k] = v.clone();
            }
        }
        // The kubelet's part: the pod starts.
        pod["status"]["phase"] = json!("Running");
        self.store(&mut s, kind, ns, name, pod);
        *s.counters.bindings.entry(format!("{ns}/{name}")).or_insert(0) += 1;
        (
            StatusCode::CREATED,
            axum::Json(json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})),
        )
            .into_response()
    }

    pub(super) fn evict(&self, ns: &str, name: &str) -> Response {
        let mut s = self.inner.lock().unwrap();
        let Some(pod) = s.objects.get(&("pods", ns.to_string(), name.to_string())).cloned() else {
            return status(404, "NotFound", format!("pods \"{name}\" not found"));
        };
        let labels = pod["metadata"]["labels"].clone();
        let budgets: Vec<(String, Value)> = s
            .objects
            .iter()
            .filter(|((p, n, _), pdb)| {
                *p == "poddisruptionbudgets" && n == ns && labels_match(&pdb["spec"]["selector"], &labels)
            })
            .map(|((_, _, n), v)| (n.clone(), v.clone()))
            .collect();
        if let Some((pdb, _)) =
            budgets.iter().find(|(_, b)| b["status"]["disruptionsAllowed"].as_i64().unwrap_or(0) <= 0)
        {
            s.counters.evictions_refused += 1;
            return status(
                429,
                "TooManyRequests",
                format!(
                    "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget {pdb} needs more healthy pods."
                ),
            );
        }
        let pdb_kind = find_kind("policy", "v1", "poddisruptionbudgets").unwrap();
        for (n, mut b) in budgets {
            let allowed = b["status"]["disruptionsAllowed"].as_i64().unwrap_or(0);
            b["status"]["disruptionsAllowed"] = json!(allowed - 1);
            self.store(&mut s, pdb_kind, ns, &n, b);
        }
        let kind = find_kind("", "v1", "pods").unwrap();
        self.remove(&mut s, kind, ns, name);
        s.counters.evictions += 1;
        (
            StatusCode::CREATED,
            axum::Json(json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})),
        )
            .into_response()
    }
}
