//! Fairness of a job run as shares of the cluster: while the GPUs asked
//! for exceed the GPUs there are, each queue is entitled to its max-min
//! fair share (equal weights: water-filling, a queue asking for less than
//! an equal split gets what it asks and the rest is split among the
//! others), and the run is fair when every queue holds what it is
//! entitled to. Jain's index over queues of GPU-seconds held ÷ GPU-seconds
//! of fair share: 1 when each got its share, 1/n when one queue took it
//! all.

/// The shares of a run, integrated over time.
#[derive(Debug, Clone)]
pub(super) struct Shares {
    capacity: u64,
    /// GPUs asked for (jobs arrived and not finished), per queue.
    demand: Vec<u64>,
    /// GPUs held by running members, per queue.
    held: Vec<u64>,
    /// GPU-seconds held while contended, per queue.
    got: Vec<f64>,
    /// GPU-seconds of fair share while contended, per queue.
    fair: Vec<f64>,
}

impl Shares {
    /// `queues` queues on a cluster of `capacity` GPUs.
    pub(super) fn new(queues: usize, capacity: u64) -> Self {
        Self {
            capacity,
            demand: vec![0; queues],
            held: vec![0; queues],
            got: vec![0.0; queues],
            fair: vec![0.0; queues],
        }
    }

    /// Queue `q` asks for `gpus` more (a job arrived) or fewer (one ended).
    pub(super) fn ask(&mut self, q: usize, gpus: u64, more: bool) {
        let d = &mut self.demand[q];
        *d = if more { *d + gpus } else { d.saturating_sub(gpus) };
    }

    /// Queue `q` holds `before` GPUs fewer and `after` more.
    pub(super) fn hold(&mut self, q: usize, before: u64, after: u64) {
        self.held[q] = (self.held[q] + after).saturating_sub(before);
    }

    /// `dt` seconds pass as things are.
    pub(super) fn pass(&mut self, dt: u64) {
        if dt == 0 || self.demand.iter().sum::<u64>() <= self.capacity {
            return;
        }
        let fair = max_min_fair(self.capacity, &self.demand);
        for (got, &held) in self.got.iter_mut().zip(&self.held) {
            *got += held as f64 * dt as f64;
        }
        for (sum, f) in self.fair.iter_mut().zip(fair) {
            *sum += f * dt as f64;
        }
    }

    /// Per queue, held ÷ fair share while contended (none if it was
    /// entitled to nothing).
    pub(super) fn ratios(&self) -> Vec<Option<f64>> {
        self.got.iter().zip(&self.fair).map(|(g, f)| (*f > 0.0).then(|| g / f)).collect()
    }

    /// Jain's index over the queues that were entitled to anything of
    /// held ÷ fair share (1 if demand never exceeded the cluster).
    pub(super) fn jain(&self) -> f64 {
        let x: Vec<f64> = self.ratios().into_iter().flatten().collect();
        jain(&x)
    }
}

/// Jain's fairness index of `x`: (Σx)² / (n · Σx²); 1 for none.
pub fn jain(x: &[f64]) -> f64 {
    let (sum, squares) = (x.iter().sum::<f64>(), x.iter().map(|v| v * v).sum::<f64>());
    if squares > 0.0 { sum * sum / (x.len() as f64 * squares) } else { 1.0 }
}

/// Max-min fair shares of `capacity` GPUs among queues asking for
/// `demand`, equal weights (the queues' water-filling,
/// [`crate::quota::water_fill`], in thousandths of a GPU).
pub fn max_min_fair(capacity: u64, demand: &[u64]) -> Vec<f64> {
    let want: Vec<u64> = demand.iter().map(|d| d * 1000).collect();
    let mut got = vec![0; demand.len()];
    crate::quota::water_fill(capacity * 1000, &want, &vec![1.0; demand.len()], &mut got);
    got.iter().map(|&g| g as f64 / 1000.0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn water_filling_gives_the_small_what_they_ask_and_splits_the_rest() {
        assert_eq!(max_min_fair(12, &[2, 10, 10]), [2.0, 5.0, 5.0]);
        assert_eq!(max_min_fair(12, &[20, 20, 20]), [4.0, 4.0, 4.0]);
        assert_eq!(max_min_fair(12, &[0, 3, 30]), [0.0, 3.0, 9.0]);
        assert_eq!(max_min_fair(12, &[1, 2, 3]), [1.0, 2.0, 3.0], "room for all");
    }

    #[test]
    fn a_queue_that_takes_more_than_its_share_lowers_the_index() {
        let mut s = Shares::new(2, 8);
        s.ask(0, 16, true);
        s.ask(1, 16, true);
        s.hold(0, 0, 8);
        s.pass(10);
        assert!((s.jain() - 0.5).abs() < 1e-9, "one queue held everything: {}", s.jain());
        s.hold(0, 8, 4);
        s.hold(1, 0, 4);
        s.pass(1_000_000);
        assert!(s.jain() > 0.999, "{}", s.jain());
        // Without contention nothing counts.
        let mut quiet = Shares::new(2, 8);
        quiet.ask(0, 4, true);
        quiet.hold(0, 0, 4);
        quiet.pass(100);
        assert_eq!(quiet.jain(), 1.0);
    }
}
