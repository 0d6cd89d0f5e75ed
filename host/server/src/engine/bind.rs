//! The loop's decisions carried out by the backend: the pass's binds
//! together, preemptions as evictions then a bind once the victims have
//! released their room (the preemptor holds it in the model meanwhile:
//! kube-scheduler's nominated node); a pod whose bind the backend refused
//! leaves the model's node and waits out a backoff (kube-scheduler's pod
//! backoff, or longer if the cluster asked: `Retry-After`) before it is
//! queued again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tessera_core::cluster::Placement;
use tessera_core::driver::Model;
use tessera_core::model::{Pod, PodId};
use tessera_core::sched::Event;

use super::env::Env;
use crate::backend::{BackendError, BackendOp};

/// A pod whose bind the backend refused, out of the queue until `until`.
struct Held {
    id: PodId,
    pod: Pod,
    until: Instant,
}

/// Wait after a pod's `n`-th refused bind: 1, 2, 4, 8, then 10 s, so a
/// refusing backend is not hammered.
fn backoff(n: u32) -> Duration {
    Duration::from_secs((1u64 << n.saturating_sub(1).min(4)).min(10))
}

/// A preemptor placed in the model whose victims were evicted but still
/// hold their room on the node: bound once they hold nothing.
struct Nominated {
    pod: PodId,
    placement: Placement,
    victims: Vec<PodId>,
    since: Instant,
}

/// How long a preemptor waits for its victims to be gone before it gives
/// the room up and is queued again (a victim's termination grace period is
/// 30 s by default).
const NOMINATION_TIMEOUT: Duration = Duration::from_secs(120);

/// Binds and evictions, and the pods waiting out a backoff.
#[derive(Default)]
pub(super) struct Binder {
    held: Vec<Held>,
    /// Refused binds per pod, for the backoff.
    failures: HashMap<PodId, u32>,
    /// Preemptors waiting for their victims to be gone.
    nominated: Vec<Nominated>,
}

impl Binder {
    /// The backend said something of pod `id` (it runs, left, or was
    /// submitted again): that supersedes a hold; once gone, its failures
    /// are forgotten.
    pub fn heard_of(&mut self, id: PodId, gone: bool) {
        self.held.retain(|h| h.id != id);
        self.nominated.retain(|n| n.pod != id);
        if gone {
            self.failures.remove(&id);
        }
    }

    /// Has the backend bind what the pass bound and stop what it preempted.
    pub fn carry_out(&mut self, env: &mut Env<'_>, model: &mut Model, events: &[Event]) {
        // Plain binds go to the backend together (it may run them at once);
        // a preemption evicts first, then binds.
        let batch: Vec<(PodId, Placement)> = events
            .iter()
            .filter_map(|e| match e {
                Event::Bound { pod, placement, .. } => Some((*pod, *placement)),
                _ => None,
            })
            .collect();
        let results = if batch.is_empty() { Vec::new() } else { env.backend.bind_all(&batch) };
        for (&(pod, _), result) in batch.iter().zip(results) {
            self.after_bind(env, model, pod, result);
        }
        for e in events {
            let (pod, placement, victims) = match e {
                Event::Bound { .. } => continue,
                Event::Preempted { pod, placement, victims, .. } => (*pod, *placement, victims.as_slice()),
                Event::Unschedulable { pod, reason } => {
                    env.backend.unschedulable(*pod, reason.code());
                    continue;
                }
            };
            let mut room = true;
            let mut wait = None;
            for &v in victims {
                if let Err(err) = env.backend.evict(v) {
                    tracing::warn!(backend = env.backend.name(), "{err}");
                    env.backend_error(BackendOp::Evict.code());
                    room = false;
                    wait = wait.max(err.retry_after);
                }
            }
            // A victim that could not be evicted still holds its room (the
            // backend announces it running again): the pod waits.
            if !room {
                self.requeue(model, pod, wait);
                continue;
            }
            if victims.iter().any(|&v| env.backend.still_holds(v)) {
                self.nominated.push(Nominated { pod, placement, victims: victims.to_vec(), since: Instant::now() });
                continue;
            }
            let result = env.backend.bind(pod, placement);
            self.after_bind(env, model, pod, result);
        }
    }

    /// Binds the nominated preemptors whose victims are gone; one that
    /// waited too long gives its room up and is queued again.
    pub fn settle(&mut self, env: &mut Env<'_>, model: &mut Model) {
        if self.nominated.is_empty() {
            return;
        }
        for n in std::mem::take(&mut self.nominated) {
            if n.victims.iter().all(|&v| !env.backend.still_holds(v)) {
                let result = env.backend.bind(n.pod, n.placement);
                self.after_bind(env, model, n.pod, result);
            } else if n.since.elapsed() > NOMINATION_TIMEOUT {
                tracing::warn!(
                    backend = env.backend.name(),
                    pod = n.pod,
                    "the preemption's victims still hold their room after {NOMINATION_TIMEOUT:?}; queued again"
                );
                self.requeue(model, n.pod, None);
            } else {
                self.nominated.push(n);
            }
        }
    }

    /// This replica stops acting: nominated preemptors were never bound,
    /// so they wait in the queue again (the next leader decides).
    pub fn abandon(&mut self, model: &mut Model) {
        for n in std::mem::take(&mut self.nominated) {
            self.requeue(model, n.pod, Some(Duration::ZERO));
        }
    }

    /// What became of one bind.
    pub fn after_bind(&mut self, env: &mut Env<'_>, model: &mut Model, pod: PodId, result: Result<(), BackendError>) {
        match result {
            Ok(()) => {
                self.failures.remove(&pod);
            }
            Err(err) => {
                tracing::warn!(backend = env.backend.name(), "{err}");
                env.backend_error(err.code());
                self.requeue(model, pod, err.retry_after);
            }
        }
    }

    /// A decision the backend could not carry out: the pod leaves the
    /// model's node and waits out a backoff, or at least what the cluster
    /// asked (`at_least`), before it is queued again (if someone else bound
    /// it, the backend's events say where it runs).
    fn requeue(&mut self, model: &mut Model, id: PodId, at_least: Option<Duration>) {
        if let Some((pod, _)) = model.take(id) {
            let n = self.failures.entry(id).or_insert(0);
            *n += 1;
            let wait = match at_least {
                Some(Duration::ZERO) => Duration::ZERO,
                Some(d) => d.max(backoff(*n)),
                None => backoff(*n),
            };
            self.held.push(Held { id, pod, until: Instant::now() + wait });
        }
    }

    /// Queues again the held pods whose backoff is over; those the model
    /// would not take back (their id reused meanwhile) are returned.
    pub fn release(&mut self, model: &mut Model, now: u64) -> Vec<PodId> {
        if self.held.is_empty() {
            return Vec::new();
        }
        let t = Instant::now();
        let (due, wait): (Vec<Held>, Vec<Held>) =
            std::mem::take(&mut self.held).into_iter().partition(|h| h.until <= t);
        self.held = wait;
        due.into_iter().filter(|h| model.resubmit(h.id, h.pod.clone(), now).is_err()).map(|h| h.id).collect()
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
