//! List and watch: a list carries the store's resourceVersion; a watch
//! replays history after the given resourceVersion (410 Gone when it was
//! compacted), then streams changes, with bookmarks when asked, until its
//! timeout or until the test drops every watch.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{ApiServer, Change, Kind};

impl ApiServer {
    pub(super) fn list_response(&self, kind: &'static Kind, namespace: Option<&str>) -> Response {
        let s = self.inner.lock().unwrap();
        let items: Vec<Value> = s
            .objects
            .iter()
            .filter(|((p, ns, _), _)| *p == kind.plural && namespace.is_none_or(|n| n == ns))
            .map(|(_, v)| v.clone())
            .collect();
        axum::Json(json!({
            "kind": format!("{}List", kind.kind), "apiVersion": kind.api_version(),
            "metadata": {"resourceVersion": s.rv.to_string()}, "items": items,
        }))
        .into_response()
    }

    pub(super) fn watch(
        &self,
        kind: &'static Kind,
        namespace: Option<String>,
        q: &HashMap<String, String>,
    ) -> Response {
        let from: u64 = q.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
        let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true");
        let timeout = q.get("timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(300u64);
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1024);
        let line = |v: Value| Ok(Bytes::from(format!("{v}\n")));
        let relevant =
            move |c: &Change| c.plural == kind.plural && namespace.as_ref().is_none_or(|n| *n == c.namespace);
        let mut live = self.changes.subscribe();
        let mut dropped = self.drop_watches.subscribe();
        let backlog: Result<Vec<Change>, ()> = {
            let mut s = self.inner.lock().unwrap();
            *s.counters.watches.entry(kind.plural.to_string()).or_insert(0) += 1;
            if from != 0 && from < s.compacted_to {
                s.counters.gone += 1;
                Err(())
            } else {
                Ok(s.history.iter().filter(|c| c.rv > from && relevant(c)).cloned().collect())
            }
        };
        let current_rv = self.inner.lock().unwrap().rv;
        tokio::spawn(async move {
            let Ok(backlog) = backlog else {
                let gone = json!({"type": "ERROR", "object": {
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": format!("too old resource version: {from} ({})", current_rv),
                    "reason": "Expired", "code": 410,
                }});
                let _ = tx.send(line(gone)).await;
                return;
            };
            let mut last = from;
            for c in backlog {
                last = c.rv;
                if tx.send(line(json!({"type": c.kind, "object": c.object}))).await.is_err() {
                    return;
                }
            }
            let deadline = tokio::time::sleep(Duration::from_secs(timeout));
            tokio::pin!(deadline);
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tokio::select! {
                    () = &mut deadline => return,
                    _ = dropped.changed() => return,
                    _ = tick.tick(), if bookmarks => {
                        let mark = json!({"type": "BOOKMARK", "object": {
                            "kind": kind.kind, "apiVersion": kind.api_version(),
                            "metadata": {"resourceVersion": last.max(from).to_string()},
                        }});
                        if tx.send(line(mark)).await.is_err() { return; }
                    }
                    c = live.recv() => match c {
                        Ok(c) if c.rv > last && relevant(&c) => {
                            last = c.rv;
                            if tx.send(line(json!({"type": c.kind, "object": c.object}))).await.is_err() { return; }
                        }
                        Ok(_) => {}
                        Err(_) => return,
                    },
                }
            }
        });
        Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)))
            .unwrap()
    }
}
