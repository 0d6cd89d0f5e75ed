//! Time-based fair share (`queues.usage_half_life_s`): the GPU-seconds each
//! queue held over (or under) its fair share while demand exceeded the
//! cluster, remembered with a half-life, and the shares the fair-share
//! gate holds queues to because of it.
//!
//! A queue that held more than its share owes; one that wanted its share
//! and did not get it (its jobs did not fit, or waited behind others') is
//! owed. Each leaf's share moves by its balance spread over one half-life,
//! paid to or by the other leaves in proportion to their shares, so the
//! shares still add up to what they did: a queue whose jobs are wider than
//! its share runs them in turns with the others instead of holding more
//! than its share whenever it can. A leaf is never held to more than it
//! asks for, and what it is credited past that goes back to the leaves
//! under theirs, so credit alone never keeps GPUs idle for a queue that
//! wants nothing, nor holds the others to less than the cluster.
//!
//! Deterministic: the decay is a power of a half times a fixed series,
//! in `+ − × ÷` only (no platform maths library), over queues in order.

use crate::quota::QueueTree;

/// What the gate remembers of use.
#[derive(Debug, Clone)]
pub(in crate::sched) struct Usage {
    half_life_s: u64,
    /// Per queue: GPU thousandth-seconds held over (+) or under (−) its
    /// fair share while contended, decayed.
    balance: Vec<f64>,
    /// Per queue: GPU thousandth-seconds held while contended, decayed …
    held: Vec<f64>,
    /// … and its fair share of them (for [`Self::fairness`]).
    entitled: Vec<f64>,
    /// When the last pass began, if one did.
    at: Option<u64>,
    /// As the last pass left them, per queue: GPUs used (thousandths) …
    used: Vec<u64>,
    /// … its fair share …
    share: Vec<u64>,
    /// … and whether the GPUs asked for exceeded the cluster's.
    contended: bool,
}

impl Usage {
    /// `queues` queues, nothing remembered yet.
    pub(in crate::sched) fn new(queues: usize, half_life_s: u64) -> Self {
        Self {
            half_life_s: half_life_s.max(1),
            balance: vec![0.0; queues],
            held: vec![0.0; queues],
            entitled: vec![0.0; queues],
            at: None,
            used: vec![0; queues],
            share: vec![0; queues],
            contended: false,
        }
    }

    /// A pass begins at `now`: the time since the last one is accounted
    /// (as that pass left the queues), and `share` (each queue's fair
    /// share of GPUs now) is what this one is measured against.
    pub(in crate::sched) fn begin(&mut self, now: u64, share: Vec<u64>, contended: bool) {
        if let Some(at) = self.at {
            let dt = now.saturating_sub(at);
            if dt > 0 {
                let f = half_decay(dt, self.half_life_s);
                // Held at a constant rate through the interval, decayed on
                // average by half of it (the trapezoid); only contended
                // time counts.
                let span = if self.contended { dt as f64 * (1.0 + f) / 2.0 } else { 0.0 };
                for q in 0..self.balance.len() {
                    let (u, s) = (self.used[q] as f64, self.share[q] as f64);
                    self.balance[q] = self.balance[q] * f + (u - s) * span;
                    self.held[q] = self.held[q] * f + u * span;
                    self.entitled[q] = self.entitled[q] * f + s * span;
                }
            }
        }
        self.at = Some(now);
        self.share = share;
        self.contended = contended;
    }

    /// The pass ends with `used` GPUs (thousandths) per queue.
    pub(in crate::sched) fn end(&mut self, used: Vec<u64>) {
        self.used = used;
    }

    /// Jain's index over the leaves of `tree` that were entitled to
    /// anything of held ÷ entitled GPU-seconds, as remembered: 1 when every
    /// such leaf held the same multiple of its fair share (or fewer than
    /// two were entitled), toward 1/n as one leaf held everything.
    pub(in crate::sched) fn fairness(&self, tree: &QueueTree) -> f64 {
        let ratios: Vec<f64> = (0..tree.nodes().len())
            .filter(|&q| tree.nodes()[q].is_leaf() && self.entitled[q] > 0.0)
            .map(|q| self.held[q] / self.entitled[q])
            .collect();
        let (sum, squares) = ratios.iter().fold((0.0, 0.0), |(a, b), r| (a + r, b + r * r));
        if ratios.len() < 2 || squares == 0.0 { 1.0 } else { sum * sum / (ratios.len() as f64 * squares) }
    }

    /// GPU thousandth-seconds queue `q` held over its share (negative:
    /// under), as remembered now.
    #[cfg(test)]
    pub(in crate::sched) fn balance(&self, q: usize) -> f64 {
        self.balance[q]
    }

    /// The shares the gate holds each queue to: each leaf's fair share (as
    /// given to [`Self::begin`]) moved by its balance over one half-life,
    /// paid to or by the other leaves in proportion to their shares, within
    /// `0..=demand` — what a leaf is moved past its demand going to the
    /// leaves under theirs, by their shares; a parent the sum of its
    /// children's.
    pub(in crate::sched) fn shares(&self, tree: &QueueTree, demand: &[u64]) -> Vec<u64> {
        let share = &self.share;
        let leaves: Vec<usize> = (0..tree.nodes().len()).filter(|&q| tree.nodes()[q].is_leaf()).collect();
        let total_share: f64 = leaves.iter().map(|&l| share[l] as f64).sum();
        let total_balance: f64 = leaves.iter().map(|&l| self.balance[l]).sum();
        let h = self.half_life_s as f64;
        let mut moved: Vec<f64> = vec![0.0; share.len()];
        for &l in &leaves {
            let part = if total_share > 0.0 { total_balance * share[l] as f64 / total_share } else { 0.0 };
            moved[l] = (share[l] as f64 - (self.balance[l] - part) / h).max(0.0);
        }
        // What a leaf is moved past its demand goes to the leaves still
        // under theirs, by their shares, up to the shares' total (a leaf
        // that owes more than its share holds none of it), until all have
        // what they ask for: credit a queue cannot use is not taken from
        // the others.
        for _ in 0..=leaves.len() {
            for &l in &leaves {
                moved[l] = moved[l].min(demand[l] as f64);
            }
            let free = total_share - leaves.iter().map(|&l| moved[l]).sum::<f64>();
            let open: Vec<usize> = leaves.iter().copied().filter(|&l| moved[l] < demand[l] as f64).collect();
            if free < 1.0 || open.is_empty() {
                break;
            }
            let weight: f64 = open.iter().map(|&l| share[l] as f64).sum();
            for &l in &open {
                let w = if weight > 0.0 { share[l] as f64 / weight } else { 1.0 / open.len() as f64 };
                moved[l] += free * w;
            }
        }
        let mut out = vec![0u64; share.len()];
        for &l in &leaves {
            out[l] = (moved[l].round() as u64).min(demand[l]);
        }
        for &l in &leaves {
            let mut at = tree.nodes()[l].parent;
            while let Some(p) = at {
                out[p] += out[l];
                at = tree.nodes()[p].parent;
            }
        }
        out
    }
}

/// ½^(dt / half_life), in basic arithmetic only: whole half-lives exactly,
/// the rest by a series for e^−x that has converged to the last bit.
pub(in crate::sched) fn half_decay(dt: u64, half_life_s: u64) -> f64 {
    let h = half_life_s.max(1);
    let whole = dt / h;
    if whole >= 1_100 {
        return 0.0;
    }
    let x = (dt % h) as f64 / h as f64 * std::f64::consts::LN_2;
    let (mut term, mut sum) = (1.0f64, 1.0f64);
    for i in 1..=18 {
        term *= -x / f64::from(i);
        sum += term;
    }
    let mut f = sum;
    for _ in 0..whole {
        f *= 0.5;
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::{QueueSpec, QueuesConfig};

    #[test]
    fn the_decay_halves_each_half_life_and_is_smooth_between() {
        assert_eq!(half_decay(0, 100), 1.0);
        assert_eq!(half_decay(100, 100), 0.5);
        assert_eq!(half_decay(300, 100), 0.125);
        let mid = half_decay(50, 100);
        assert!((mid - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-15, "{mid}");
        let (a, b) = (half_decay(30, 100), half_decay(70, 100));
        assert!((a * b - 0.5).abs() < 1e-15, "decays compose: {}", a * b);
        assert_eq!(half_decay(u64::MAX, 60), 0.0);
    }

    fn two_leaves() -> QueueTree {
        let q = |name: &str| QueueSpec {
            name: name.into(),
            parent: None,
            weight: 1.0,
            guarantee: Default::default(),
            limit: Default::default(),
        };
        let cfg = QueuesConfig {
            list: vec![q("a"), q("b")],
            fair_share_gate: true,
            usage_half_life_s: Some(100),
            ..QueuesConfig::default()
        };
        QueueTree::new(&cfg).unwrap()
    }

    /// a holds 8 of 8 GPUs for 100 s while b asks for 4: a owes, b is
    /// owed, and the shares the gate uses move from a to b by the same
    /// amount (still adding up to the cluster).
    #[test]
    fn a_queue_over_its_share_owes_and_the_other_is_owed_as_much() {
        let tree = two_leaves();
        let (a, b) = (tree.index("a").unwrap(), tree.index("b").unwrap());
        let n = tree.nodes().len();
        let mut u = Usage::new(n, 100);
        let mut share = vec![0; n];
        share[a] = 4_000;
        share[b] = 4_000;
        let mut used = vec![0; n];
        used[a] = 8_000;
        u.begin(0, share.clone(), true);
        u.end(used.clone());
        u.begin(100, share.clone(), true);
        assert!(u.balance(a) > 0.0 && u.balance(b) < 0.0);
        assert!((u.balance(a) + u.balance(b)).abs() < 1e-6, "{} {}", u.balance(a), u.balance(b));
        let demand = vec![16_000; n];
        let moved = u.shares(&tree, &demand);
        assert!(moved[a] < 4_000 && moved[b] > 4_000, "{moved:?}");
        assert_eq!(moved[a] + moved[b], 8_000);
        // b is never held to more than it asks for.
        let mut small = demand.clone();
        small[b] = 4_000;
        assert_eq!(u.shares(&tree, &small)[b], 4_000);
        // … and the credit b cannot use is not taken from a: a owes, but
        // with b asking for no more than it holds a keeps the rest.
        assert_eq!(u.shares(&tree, &small)[a], 4_000, "{:?}", u.shares(&tree, &small));
        small[b] = 2_000;
        assert_eq!(u.shares(&tree, &small)[a], 6_000, "{:?}", u.shares(&tree, &small));
        // Uncontended time adds nothing, and what was owed decays.
        u.end(used.clone());
        u.begin(200, share.clone(), false);
        let before = u.balance(a);
        assert!(before > 300_000.0, "still contended until 200: {before}");
        u.end(used);
        u.begin(300, share, false);
        assert!((u.balance(a) - before / 2.0).abs() < 1e-6, "{} → {}", before, u.balance(a));
    }

    /// Fairness as remembered: 1 while both hold their share, 1/2 when one
    /// held everything it could while the other got nothing, between as
    /// the memory of it decays under fair use.
    #[test]
    fn remembered_fairness_is_jains_index_of_held_over_share() {
        let tree = two_leaves();
        let (a, b) = (tree.index("a").unwrap(), tree.index("b").unwrap());
        let n = tree.nodes().len();
        let mut u = Usage::new(n, 100);
        assert_eq!(u.fairness(&tree), 1.0, "nothing remembered");
        let mut share = vec![0; n];
        share[a] = 4_000;
        share[b] = 4_000;
        let mut used = vec![0; n];
        used[a] = 4_000;
        used[b] = 4_000;
        u.begin(0, share.clone(), true);
        u.end(used.clone());
        u.begin(100, share.clone(), true);
        assert!((u.fairness(&tree) - 1.0).abs() < 1e-12);

        let mut u = Usage::new(n, 100);
        let mut unfair = vec![0; n];
        unfair[a] = 8_000;
        u.begin(0, share.clone(), true);
        u.end(unfair);
        u.begin(100, share.clone(), true);
        assert!((u.fairness(&tree) - 0.5).abs() < 1e-12, "{}", u.fairness(&tree));
        u.end(used.clone());
        u.begin(200, share.clone(), true);
        let mid = u.fairness(&tree);
        assert!(mid > 0.5 && mid < 1.0, "{mid}");
        u.end(used);
        u.begin(400, share, true);
        assert!(u.fairness(&tree) > mid, "fair use lifts it as the unfair stretch decays");
    }
}
