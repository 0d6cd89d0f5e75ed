//! Online weight adaptation: Thompson sampling over candidate weight sets.
//!
//! Each arm is one set of plugin weights with a Beta(α, β) belief about its
//! reward in [0, 1] (e.g. 1 when a decision lowered fragmentation and broke
//! no SLA, 0 when it did the opposite; fractional rewards update α and β
//! fractionally). To decide, sample every arm's Beta and use the best arm;
//! rewards sharpen the beliefs, so the better weight set is chosen ever
//! more often while the others are still tried now and then. Seeded: the
//! same rewards give the same choices.

use rand::SeedableRng as _;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Beta, Distribution as _};
use serde::{Deserialize, Serialize};

/// One weight set and what has been learned of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmReport {
    /// The weights.
    pub weights: Vec<f64>,
    /// Times chosen.
    pub pulls: u64,
    /// Posterior mean reward, α / (α + β).
    pub mean_reward: f64,
}

#[derive(Debug, Clone)]
struct Arm {
    weights: Vec<f64>,
    alpha: f64,
    beta: f64,
    pulls: u64,
}

/// A Thompson-sampling bandit over weight sets.
#[derive(Debug, Clone)]
pub struct ThompsonBandit {
    arms: Vec<Arm>,
    rng: ChaCha8Rng,
}

/// A bandit needs at least one weight set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a bandit needs at least one weight set")]
pub struct NoArms;

impl ThompsonBandit {
    /// Arms with uniform Beta(1, 1) beliefs.
    pub fn new(weight_sets: Vec<Vec<f64>>, seed: u64) -> Result<Self, NoArms> {
        if weight_sets.is_empty() {
            return Err(NoArms);
        }
        let arms = weight_sets.into_iter().map(|weights| Arm { weights, alpha: 1.0, beta: 1.0, pulls: 0 }).collect();
        Ok(Self { arms, rng: ChaCha8Rng::seed_from_u64(seed) })
    }

    /// Chooses an arm (ties: the lowest index) and returns it with its
    /// weights.
    pub fn choose(&mut self) -> (usize, &[f64]) {
        let mut best = (0, f64::NEG_INFINITY);
        for (i, arm) in self.arms.iter().enumerate() {
            // α, β ≥ 1 always, so the distribution exists.
            let draw = Beta::new(arm.alpha, arm.beta).map_or(0.5, |b| b.sample(&mut self.rng));
            if draw > best.1 {
                best = (i, draw);
            }
        }
        self.arms[best.0].pulls += 1;
        (best.0, &self.arms[best.0].weights)
    }

    /// Records the reward (clamped to [0, 1]; NaN counts as 0) of a
    /// decision made with `arm`.
    pub fn reward(&mut self, arm: usize, reward: f64) {
        let r = if reward.is_nan() { 0.0 } else { reward.clamp(0.0, 1.0) };
        if let Some(a) = self.arms.get_mut(arm) {
            a.alpha += r;
            a.beta += 1.0 - r;
        }
    }

    /// What has been learned, per arm.
    pub fn report(&self) -> Vec<ArmReport> {
        self.arms
            .iter()
            .map(|a| ArmReport {
                weights: a.weights.clone(),
                pulls: a.pulls,
                mean_reward: a.alpha / (a.alpha + a.beta),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use rand::RngExt as _;

    use super::*;

    /// Two weight sets whose decisions succeed 30% and 70% of the time.
    fn run(seed: u64, rounds: usize) -> (ThompsonBandit, Vec<usize>) {
        let mut b = ThompsonBandit::new(vec![vec![1.0, 0.0], vec![0.0, 1.0]], seed).unwrap();
        let mut world = ChaCha8Rng::seed_from_u64(seed ^ 0xABCD);
        let p = [0.3, 0.7];
        let mut chosen = Vec::new();
        for _ in 0..rounds {
            let (arm, _) = b.choose();
            let r = if world.random::<f64>() < p[arm] { 1.0 } else { 0.0 };
            b.reward(arm, r);
            chosen.push(arm);
        }
        (b, chosen)
    }

    #[test]
    fn converges_to_the_better_weight_set() {
        let (b, chosen) = run(7, 2_000);
        let late = &chosen[1_500..];
        let better = late.iter().filter(|&&a| a == 1).count() as f64 / late.len() as f64;
        assert!(better > 0.9, "the 70% arm gets {better:.2} of the last 500 decisions");
        let rep = b.report();
        assert!((rep[1].mean_reward - 0.7).abs() < 0.05, "{rep:?}");
        assert!(rep[0].pulls >= 5, "the worse arm was still explored: {rep:?}");
        assert_eq!(rep.iter().map(|a| a.pulls).sum::<u64>(), 2_000);
    }

    #[test]
    fn seeded_and_defensive() {
        assert_eq!(run(3, 300).1, run(3, 300).1);
        assert_eq!(ThompsonBandit::new(vec![], 1).unwrap_err(), NoArms);
        let mut b = ThompsonBandit::new(vec![vec![1.0]], 1).unwrap();
        b.reward(0, f64::NAN);
        b.reward(0, 7.0);
        b.reward(5, 1.0);
        assert_eq!(b.report()[0].mean_reward, 2.0 / 4.0);
    }
}
