//! An endless stream of pods for the simulator backend: the built-in
//! workload's shapes arriving as a Poisson process at the configured load,
//! generated a chunk at a time (each chunk seeded from the last), so the
//! service runs for as long as it is left running.

use std::collections::VecDeque;

use tessera_core::model::{Node, Pod};
use tessera_core::sched::PodId;
use tessera_core::synthetic;

/// Pods per chunk, per GPU of the cluster.
const CHUNK_PER_GPU: usize = 2;

/// The arrivals still to come.
pub struct ArrivalStream {
    models: Vec<String>,
    total_gpus: u64,
    load: f64,
    seed: u64,
    chunk: u64,
    /// Backend time the current chunk started at.
    base: u64,
    pending: VecDeque<(u64, Pod, u64)>,
    next_id: PodId,
}

impl ArrivalStream {
    /// Arrivals for `nodes` at `load` × their GPU capacity.
    pub fn new(nodes: &[Node], load: f64, seed: u64) -> Self {
        let models = tessera_core::synthetic::gpu_models(nodes);
        let total_gpus = nodes.iter().map(|n| n.gpus.len() as u64).sum::<u64>().max(1);
        Self { models, total_gpus, load, seed, chunk: 0, base: 0, pending: VecDeque::new(), next_id: 0 }
    }

    fn refill(&mut self) {
        let seed = self.seed ^ self.chunk.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let count = (self.total_gpus as usize * CHUNK_PER_GPU).max(16);
        let pods = synthetic::pods(count, &self.models, seed);
        let arrivals = synthetic::arrivals(&pods, self.total_gpus, self.load, seed);
        let last = arrivals.last().map_or(1, |a| a.at.max(1));
        for a in arrivals {
            let leaves = a.leaves_at.unwrap_or(u64::MAX);
            self.pending.push_back((self.base + a.at, a.pod, self.base.saturating_add(leaves)));
        }
        self.base += last;
        self.chunk += 1;
    }

    /// Pods arriving up to `now` (backend seconds), in order: id, pod
    /// (named `pod-<id>`), arrival time, departure time.
    pub fn until(&mut self, now: u64) -> Vec<(PodId, Pod, u64, u64)> {
        let mut out = Vec::new();
        loop {
            if self.pending.is_empty() {
                self.refill();
            }
            match self.pending.front() {
                Some(&(at, _, _)) if at <= now => {
                    let (at, mut pod, leaves) = self.pending.pop_front().expect("just peeked");
                    let id = self.next_id;
                    self.next_id += 1;
                    pod.name = format!("pod-{id}");
                    out.push((id, pod, at, leaves));
                }
                _ => return out,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_never_runs_dry_and_keeps_time_order() {
        let nodes = synthetic::cluster(4, 7);
        let mut s = ArrivalStream::new(&nodes, 1.0, 7);
        let (mut last, mut last_at) = (0, 0);
        let mut seen = 0;
        for step in 1..=50u64 {
            let now = step * 20_000;
            for (id, pod, at, leaves) in s.until(now) {
                assert_eq!(id, seen);
                assert_eq!(pod.name, format!("pod-{id}"));
                assert!(leaves >= last);
                assert!(at >= last_at && at <= now && leaves >= at, "in time order");
                last_at = at;
                seen += 1;
            }
            last = now;
        }
        // Several chunks were drawn (a chunk is 2 pods per GPU).
        let gpus: usize = nodes.iter().map(|n| n.gpus.len()).sum();
        assert!(seen as usize > 3 * gpus * CHUNK_PER_GPU, "{seen} pods for {gpus} GPUs");
        // Same seed, same stream.
        let mut again = ArrivalStream::new(&nodes, 1.0, 7);
        let a: Vec<_> = again.until(100_000).into_iter().map(|(i, p, at, l)| (i, p.gpu_count, at, l)).collect();
        let mut once = ArrivalStream::new(&nodes, 1.0, 7);
        let b: Vec<_> = once.until(100_000).into_iter().map(|(i, p, at, l)| (i, p.gpu_count, at, l)).collect();
        assert_eq!(a, b);
    }
}
