//! Combining plugin scores into one decision.
//!
//! Each plugin's raw scores are min-max normalised to `0..=100` over the
//! candidates (like kube-scheduler's `NormalizeScore`), so plugins with
//! different scales can be weighted against each other; a plugin that gives
//! every candidate the same score expresses no preference and adds 0. The
//! weighted sum is compared in `f64`; ties go by a [`TieBreak`] (the lowest
//! node id, or a seeded ranking of nodes), so a decision never depends on
//! hash order or timing.

/// Normalised range of one plugin's scores.
pub const MAX_NORMALISED: f64 = 100.0;

/// Adds `weight × normalise(values)` into `totals`.
///
/// # Panics
/// If `values` and `totals` differ in length: callers validate plugin output
/// before it gets here.
pub fn accumulate(totals: &mut [f64], values: &[i64], weight: f64) {
    assert_eq!(totals.len(), values.len(), "one score per candidate");
    let Some(&first) = values.first() else { return };
    let (min, max) = values.iter().fold((first, first), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    if min == max || weight == 0.0 {
        return;
    }
    // One multiplication per candidate (this runs for every plugin over
    // every candidate); the order of candidates' scores is unchanged.
    let scale = weight * MAX_NORMALISED / ((max as f64) - (min as f64));
    for (t, &v) in totals.iter_mut().zip(values) {
        *t += scale * ((v as f64) - (min as f64));
    }
}

/// The most frequent of `codes` (ties: the first in sorted order), e.g. the
/// reason code to report when every candidate was rejected.
pub fn most_common<'a>(codes: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for c in codes {
        *counts.entry(c).or_insert(0) += 1;
    }
    counts.iter().max_by_key(|(c, n)| (**n, std::cmp::Reverse(**c))).map(|(c, _)| (*c).to_string())
}

/// How equal totals are decided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TieBreak {
    /// The lowest node id wins.
    #[default]
    NodeId,
    /// A fixed pseudo-random ranking of nodes drawn from the seed wins:
    /// like kube-scheduler ranking by node name when names carry random
    /// prefixes (as in the FGD paper's simulator), it spreads ties without
    /// favouring low ids, and replays exactly.
    SeededRank(u64),
}

impl TieBreak {
    /// The rank of `node` (lower wins a tie).
    pub fn rank(self, node: u32) -> u64 {
        match self {
            TieBreak::NodeId => u64::from(node),
            TieBreak::SeededRank(seed) => splitmix64(seed ^ splitmix64(u64::from(node))),
        }
    }
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Index of the best total among `nodes` (parallel slices); equal totals
/// go to the lowest [`TieBreak::rank`]. `None` if empty.
pub fn select_by(totals: &[f64], nodes: &[u32], tie: TieBreak) -> Option<usize> {
    let mut best: Option<(usize, f64, u64)> = None;
    for (i, (&t, &n)) in totals.iter().zip(nodes).enumerate() {
        let r = tie.rank(n);
        match best {
            Some((_, b, br)) if t < b || (t == b && r >= br) => {}
            _ => best = Some((i, t, r)),
        }
    }
    best.map(|(i, _, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_and_weights() {
        let mut totals = vec![0.0; 3];
        accumulate(&mut totals, &[10, 20, 30], 1.0);
        assert_eq!(totals, [0.0, 50.0, 100.0]);
        accumulate(&mut totals, &[-5, -5, -1_000_000], 2.0);
        assert_eq!(totals, [200.0, 250.0, 100.0]);
        assert_eq!(select_by(&totals, &[0, 1, 2], TieBreak::NodeId), Some(1));
    }

    #[test]
    fn flat_scores_add_nothing_and_ties_go_first() {
        let mut totals = vec![0.0; 3];
        accumulate(&mut totals, &[7, 7, 7], 5.0);
        assert_eq!(totals, [0.0; 3]);
        assert_eq!(select_by(&totals, &[0, 1, 2], TieBreak::NodeId), Some(0));
        assert_eq!(select_by(&[], &[], TieBreak::NodeId), None);
        assert_eq!(select_by(&[1.0, 3.0, 3.0], &[0, 1, 2], TieBreak::NodeId), Some(1));
        assert_eq!(
            select_by(&[3.0, 3.0], &[9, 4], TieBreak::NodeId),
            Some(1),
            "the lowest node id, not the first index"
        );
    }

    #[test]
    fn seeded_rank_breaks_ties_without_favouring_low_ids() {
        let totals = [5.0; 8];
        let nodes: Vec<u32> = (0..8).collect();
        assert_eq!(select_by(&totals, &nodes, TieBreak::NodeId), Some(0));
        let winners: std::collections::BTreeSet<usize> =
            (0..40).filter_map(|seed| select_by(&totals, &nodes, TieBreak::SeededRank(seed))).collect();
        assert!(winners.len() >= 5, "ties spread over nodes across seeds: {winners:?}");
        let s = TieBreak::SeededRank(3);
        assert_eq!(select_by(&totals, &nodes, s), select_by(&totals, &nodes, s), "and replay exactly");
        assert_eq!(select_by(&[1.0, 9.0, 2.0], &[0, 1, 2], s), Some(1), "a higher total still wins");
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        let mut totals = vec![0.0; 2];
        accumulate(&mut totals, &[i64::MIN, i64::MAX], 1.0);
        assert_eq!(totals, [0.0, 100.0]);
    }
}
