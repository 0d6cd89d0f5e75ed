//! What the backend says happened, folded into the loop's model (pods
//! submitted, already running elsewhere, or gone; nodes joining, changing
//! and leaving), and the loop's decisions carried out by the backend
//! (binds, evictions of preemption victims), with a backoff for a pod
//! whose bind the backend refused.

use std::time::{Duration, Instant};

use tessera_core::cluster::Placement;
use tessera_core::driver::{ClusterEvent, Model};
use tessera_core::model::Pod;
use tessera_core::sched::{Event, PodId};

use super::PodMeta;
use super::service::Service;

/// A pod whose bind the backend refused, out of the queue until `until`.
pub(super) struct Held {
    id: PodId,
    pod: Pod,
    until: Instant,
}

/// Wait after a pod's `n`-th refused bind: 1, 2, 4, 8, then 10 s
/// (kube-scheduler's pod backoff), so a refusing backend is not hammered.
pub(super) fn backoff(n: u32) -> Duration {
    Duration::from_secs((1u64 << n.saturating_sub(1).min(4)).min(10))
}

impl Service {
    /// One event of the backend's, at `now`.
    pub(super) fn take_event(&mut self, model: &mut Model, event: ClusterEvent, now: u64) {
        // Whatever the backend says of a held pod supersedes the hold.
        if let ClusterEvent::Deleted { id } | ClusterEvent::Running { id, .. } | ClusterEvent::Submitted { id, .. } =
            &event
        {
            self.held.retain(|h| h.id != *id);
            if matches!(event, ClusterEvent::Deleted { .. }) {
                self.bind_failures.remove(id);
            }
        }
        let meta = match &event {
            ClusterEvent::Submitted { id, pod } | ClusterEvent::Running { id, pod, .. } => {
                Some((*id, PodMeta { name: pod.name.clone(), workload: pod.workload.clone(), placed_by: None }))
            }
            _ => None,
        };
        if let ClusterEvent::Deleted { id } = &event {
            self.pods.remove(id);
        }
        match model.apply(event, now) {
            Ok(()) => {
                if let Some((id, meta)) = meta {
                    self.pods.insert(id, meta);
                }
            }
            Err(e) => {
                tracing::warn!(backend = self.backend.name(), "{e}");
                self.count_backend_error(e.code());
            }
        }
    }

    /// Has the backend bind what the pass bound and stop what it preempted.
    pub(super) fn carry_out(&mut self, model: &mut Model, events: &[Event]) {
        // Plain binds go to the backend together (it may run them at once);
        // a preemption evicts first, then binds.
        let batch: Vec<(PodId, Placement)> = events
            .iter()
            .filter_map(|e| match e {
                Event::Bound { pod, placement, .. } => Some((*pod, *placement)),
                _ => None,
            })
            .collect();
        let results = if batch.is_empty() { Vec::new() } else { self.backend.bind_all(&batch) };
        for (&(pod, _), result) in batch.iter().zip(results) {
            self.after_bind(model, pod, result);
        }
        for e in events {
            let (pod, placement, victims) = match e {
                Event::Bound { .. } => continue,
                Event::Preempted { pod, placement, victims, .. } => (*pod, *placement, victims.as_slice()),
                Event::Unschedulable { pod, reason } => {
                    self.backend.unschedulable(*pod, reason.code());
                    continue;
                }
            };
            let mut room = true;
            for &v in victims {
                if let Err(err) = self.backend.evict(v) {
                    tracing::warn!(backend = self.backend.name(), "{err}");
                    self.count_backend_error("BACKEND-EVICT");
                    room = false;
                }
            }
            // A victim that could not be evicted still holds its room (the
            // backend announces it running again): the pod waits.
            if !room {
                self.requeue(model, pod);
                continue;
            }
            let result = self.backend.bind(pod, placement);
            self.after_bind(model, pod, result);
        }
    }

    pub(super) fn after_bind(
        &mut self,
        model: &mut Model,
        pod: PodId,
        result: Result<(), crate::backend::BackendError>,
    ) {
        match result {
            Ok(()) => {
                self.bind_failures.remove(&pod);
            }
            Err(err) => {
                tracing::warn!(backend = self.backend.name(), "{err}");
                self.count_backend_error("BACKEND-BIND");
                self.requeue(model, pod);
            }
        }
    }

    pub(super) fn count_backend_error(&self, code: &str) {
        self.shared.metrics.backend_errors.get_or_create(&crate::metrics::CodeLabel { code: code.into() }).inc();
    }

    /// A decision the backend could not carry out: the pod leaves the
    /// model's node and waits out a backoff before it is queued again (if
    /// someone else bound it, the backend's events say where it runs).
    pub(super) fn requeue(&mut self, model: &mut Model, id: PodId) {
        if let Some((pod, _)) = model.take(id) {
            let n = self.bind_failures.entry(id).or_insert(0);
            *n += 1;
            self.held.push(Held { id, pod, until: Instant::now() + backoff(*n) });
        }
    }

    /// Queues again the held pods whose backoff is over.
    pub(super) fn release_held(&mut self, model: &mut Model, now: u64) {
        if self.held.is_empty() {
            return;
        }
        let t = Instant::now();
        let (due, wait): (Vec<Held>, Vec<Held>) =
            std::mem::take(&mut self.held).into_iter().partition(|h| h.until <= t);
        self.held = wait;
        for h in due {
            if model.resubmit(h.id, h.pod, now).is_err() {
                self.pods.remove(&h.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bind_backoff_doubles_to_ten_seconds() {
        let secs: Vec<u64> = (1..=7).map(|n| super::backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 10, 10, 10]);
    }
}
