//! What every part of the service's loop acts through: the backend, the
//! shared state (logs, metrics), the tracer, the movement settings, and
//! the backend's time of this step.

use tessera_movement::MovementConfig;

use crate::backend::Backend;
use crate::observe::Tracing;
use crate::state::Shared;

/// The surroundings of one step.
pub(super) struct Env<'a> {
    pub backend: &'a mut dyn Backend,
    pub shared: &'a Shared,
    pub tracing: &'a Tracing,
    pub movement: &'a MovementConfig,
    /// Backend time, seconds.
    pub now_s: u64,
}

impl Env<'_> {
    /// Counts a backend error under `code` (`BACKEND-BIND`, …).
    pub fn backend_error(&self, code: &str) {
        self.shared.metrics.count_backend_error(code);
    }
}
