//! What the service keeps per live pod: its name and workload for the
//! records, and the root span of its latest placement (moves link to it).

use std::collections::HashMap;

use opentelemetry::trace::SpanContext;
use tessera_core::model::PodId;

/// One pod.
pub(super) struct PodMeta {
    pub name: String,
    pub workload: String,
    /// The root span of its latest placement decision.
    pub placed_by: Option<SpanContext>,
}

/// The live pods, by id.
#[derive(Default)]
pub(super) struct Pods(HashMap<PodId, PodMeta>);

impl Pods {
    pub fn insert(&mut self, id: PodId, name: &str, workload: &str) {
        self.0.insert(id, PodMeta { name: name.into(), workload: workload.into(), placed_by: None });
    }

    pub fn remove(&mut self, id: PodId) {
        self.0.remove(&id);
    }

    pub fn get(&self, id: PodId) -> Option<&PodMeta> {
        self.0.get(&id)
    }

    /// Its name, or `pod-<id>` for a pod the backend never named.
    pub fn name(&self, id: PodId) -> String {
        self.0.get(&id).map_or_else(|| format!("pod-{id}"), |p| p.name.clone())
    }

    /// The span of its latest placement.
    pub fn placed_by(&self, id: PodId) -> Option<SpanContext> {
        self.0.get(&id).and_then(|p| p.placed_by.clone())
    }

    /// Its latest placement was traced as `span`.
    pub fn placed(&mut self, id: PodId, span: SpanContext) {
        if let Some(p) = self.0.get_mut(&id) {
            p.placed_by = Some(span);
        }
    }
}
