//! The pod subresources Tessera writes: `binding` (409 when already
//! bound) and `eviction` (a `policy/v1` Eviction body, strictly decoded;
//! 429 while a matching disruption budget allows none). The kubelet's part
//! is played too, as strictly as the real one admits pods: a bound pod
//! starts only if its node's `nvidia.com/gpu` is not over-committed by the
//! pods on it (terminating ones included) and no GPU index it was given
//! (`tessera.io/gpu-index`) is taken by another; otherwise it fails with
//! reason `OutOfnvidia.com/gpu`, and the test's counters say so.

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
        if let Some(other) = s.races.remove(&format!("{ns}/{name}")) {
            // Someone else's binding lands first (another scheduler).
            let mut theirs = pod.clone();
            theirs["spec"]["nodeName"] = json!(other);
            theirs["status"]["phase"] = json!("Running");
            pod = self.store(&mut s, kind, ns, name, theirs);
        }
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
        // The kubelet's part: the pod starts, or is refused.
        match admit(&s.objects, node, ns, name, &pod) {
            Ok(()) => pod["status"]["phase"] = json!("Running"),
            Err(why) => {
                s.counters.kubelet_rejections.push(format!("{ns}/{name} on {node}: {why}"));
                pod["status"]["phase"] = json!("Failed");
                pod["status"]["reason"] = json!("OutOfnvidia.com/gpu");
                pod["status"]["message"] = json!(format!("Pod was rejected: {why}"));
            }
        }
        self.store(&mut s, kind, ns, name, pod);
        *s.counters.bindings.entry(format!("{ns}/{name}")).or_insert(0) += 1;
        (
            StatusCode::CREATED,
            axum::Json(json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})),
        )
            .into_response()
    }

    pub(super) fn evict(&self, ns: &str, name: &str, body: &Value) -> Response {
        if let Err(why) = eviction_body(name, body) {
            return status(400, "BadRequest", why);
        }
        let mut s = self.inner.lock().unwrap();
        s.counters.eviction_attempts.push((format!("{ns}/{name}"), std::time::Instant::now()));
        let Some(mut pod) = s.objects.get(&("pods", ns.to_string(), name.to_string())).cloned() else {
            return status(404, "NotFound", format!("pods \"{name}\" not found"));
        };
        let want = &body["deleteOptions"]["preconditions"]["uid"];
        if want.is_string() && *want != pod["metadata"]["uid"] {
            return status(
                409,
                "Conflict",
                format!(
                    "Precondition failed: UID in precondition: {want}, UID in object meta: {}",
                    pod["metadata"]["uid"]
                ),
            );
        }
        if pod["metadata"]["deletionTimestamp"].is_string() {
            // Already terminating: accepted again, nothing more to do.
            return (
                StatusCode::CREATED,
                axum::Json(json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})),
            )
                .into_response();
        }
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
            // As the API server answers: 429, try again in 10 s (the
            // header and the Status's details both say so).
            let wait = s.retry_after_s;
            let mut r = status(
                429,
                "TooManyRequests",
                format!(
                    "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget {pdb} needs more healthy pods."
                ),
            );
            r.headers_mut().insert("Retry-After", wait.to_string().parse().unwrap());
            return with_retry_after(r, wait);
        }
        let pdb_kind = find_kind("policy", "v1", "poddisruptionbudgets").unwrap();
        for (n, mut b) in budgets {
            let allowed = b["status"]["disruptionsAllowed"].as_i64().unwrap_or(0);
            b["status"]["disruptionsAllowed"] = json!(allowed - 1);
            self.store(&mut s, pdb_kind, ns, &n, b);
        }
        // The pod terminates: it keeps its node's resources (the kubelet
        // releases them when its containers are gone) for the grace
        // period, then it is gone.
        let kind = find_kind("", "v1", "pods").unwrap();
        s.counters.evictions += 1;
        let grace = s.termination_grace;
        if grace.is_zero() {
            self.remove(&mut s, kind, ns, name);
        } else {
            pod["metadata"]["deletionTimestamp"] = json!("2026-12-01T00:00:30Z");
            pod["metadata"]["deletionGracePeriodSeconds"] = json!(grace.as_secs());
            let uid = pod["metadata"]["uid"].clone();
            self.store(&mut s, kind, ns, name, pod);
            let (srv, ns, name) = (self.clone(), ns.to_string(), name.to_string());
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                let mut s = srv.inner.lock().unwrap();
                let same =
                    s.objects.get(&("pods", ns.clone(), name.clone())).is_some_and(|p| p["metadata"]["uid"] == uid);
                if same {
                    srv.remove(&mut s, kind, &ns, &name);
                }
            });
        }
        (
            StatusCode::CREATED,
            axum::Json(json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})),
        )
            .into_response()
    }
}

/// Decodes an Eviction as the API server does, strictly: a `policy/v1`
/// `Eviction` naming the pod, with no field the type does not have.
fn eviction_body(name: &str, body: &Value) -> Result<(), String> {
    let Some(o) = body.as_object() else { return Err("an Eviction body is an object".into()) };
    if let Some(k) = o.keys().find(|k| !["apiVersion", "kind", "metadata", "deleteOptions"].contains(&k.as_str())) {
        return Err(format!("strict decoding error: unknown field \"{k}\""));
    }
    if body["apiVersion"] != "policy/v1" || body["kind"] != "Eviction" {
        return Err(format!("Object 'Kind' is missing or not policy/v1 Eviction in {body}"));
    }
    if body["metadata"]["name"] != name {
        return Err(format!("name in URL does not match name in Eviction object: {body}"));
    }
    Ok(())
}

/// Whole GPUs a pod asks for (the device plugin's extended resource).
fn gpus_of(pod: &Value) -> u64 {
    let q =
        |c: &Value, which: &str| c["resources"][which]["nvidia.com/gpu"].as_str().and_then(|v| v.parse::<u64>().ok());
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| q(c, "limits").or(q(c, "requests")).unwrap_or(0))
        .sum()
}

/// The GPU indices a pod was given, and the share of each (milli).
fn indices_of(pod: &Value) -> Vec<(u32, u64)> {
    let a = &pod["metadata"]["annotations"];
    let milli = a["tessera.io/gpu-milli"].as_str().and_then(|m| m.parse().ok()).unwrap_or(1000);
    a["tessera.io/gpu-index"]
        .as_str()
        .into_iter()
        .flat_map(|v| v.split(','))
        .filter_map(|i| i.trim().parse().ok())
        .map(|i| (i, milli))
        .collect()
}

/// The kubelet's admission of `ns/name` on `node`: its GPUs fit beside
/// every other pod there that has not finished (terminating pods still
/// hold theirs), and no index it was given is over-used.
fn admit(
    objects: &std::collections::BTreeMap<(&'static str, String, String), Value>,
    node: &str,
    ns: &str,
    name: &str,
    pod: &Value,
) -> Result<(), String> {
    let capacity = objects
        .get(&("nodes", String::new(), node.to_string()))
        .and_then(|n| n["status"]["allocatable"]["nvidia.com/gpu"].as_str().and_then(|v| v.parse::<u64>().ok()))
        .unwrap_or(0);
    let others: Vec<&Value> = objects
        .iter()
        .filter(|((p, n, m), o)| {
            *p == "pods"
                && !(n == ns && m == name)
                && o["spec"]["nodeName"] == node
                && !matches!(o["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
        })
        .map(|(_, o)| o)
        .collect();
    let (asked, used) = (gpus_of(pod), others.iter().map(|o| gpus_of(o)).sum::<u64>());
    if asked > 0 && used + asked > capacity {
        return Err(format!(
            "Node didn't have enough resource: nvidia.com/gpu, requested: {asked}, used: {used}, capacity: {capacity}"
        ));
    }
    let mut per_index: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
    for (i, m) in others.iter().flat_map(|o| indices_of(o)) {
        *per_index.entry(i).or_default() += m;
    }
    for (i, m) in indices_of(pod) {
        if u64::from(i) >= capacity.max(1) && capacity > 0 {
            return Err(format!("GPU {i} does not exist on {node} ({capacity} GPUs)"));
        }
        let held = per_index.get(&i).copied().unwrap_or(0);
        if held + m > 1000 {
            return Err(format!("GPU {i} on {node} is taken ({held} milli in use, {m} more asked)"));
        }
    }
    Ok(())
}

/// A 429 whose Status carries `details.retryAfterSeconds`.
fn with_retry_after(r: Response, wait: u64) -> Response {
    let (mut parts, _) = r.into_parts();
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "TooManyRequests",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget needs more healthy pods"}], "retryAfterSeconds": wait},
        "code": 429,
    });
    let bytes = serde_json::to_vec(&body).unwrap();
    parts.headers.insert(axum::http::header::CONTENT_LENGTH, bytes.len().into());
    Response::from_parts(parts, axum::body::Body::from(bytes))
}
