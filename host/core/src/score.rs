//! Combining plugin scores into one decision.
//!
//! Each plugin's raw scores are min-max normalised to `0..=100` over the
//! candidates (like kube-scheduler's `NormalizeScore`), so plugins with
//! different scales can be weighted against each other; a plugin that gives
//! every candidate the same score expresses no preference and adds 0. The
//! weighted sum is compared in `f64`; ties go to the candidate that comes
//! first in candidate order, which callers keep sorted by node id, so a
//! decision never depends on hash order or timing.

/// Normalised range of one plugin's scores.
pub const MAX_NORMALISED: f64 = 100.0;

/// Adds `weight × normalise(values)` into `totals`.
///
/// # Panics
/// If `values` and `totals` differ in length: callers validate plugin output
/// before it gets here.
pub fn accumulate(totals: &mut [f64], values: &[i64], weight: f64) {
    assert_eq!(totals.len(), values.len(), "one score per candidate");
    let (Some(&min), Some(&max)) = (values.iter().min(), values.iter().max()) else {
        return;
    };
    if min == max || weight == 0.0 {
        return;
    }
    let span = (max as f64) - (min as f64);
    for (t, &v) in totals.iter_mut().zip(values) {
        *t += weight * MAX_NORMALISED * ((v as f64) - (min as f64)) / span;
    }
}

/// Index of the best total; ties go to the lowest index. `None` if empty.
pub fn select(totals: &[f64]) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, &t) in totals.iter().enumerate() {
        match best {
            Some((_, b)) if t <= b => {}
            _ => best = Some((i, t)),
        }
    }
    best.map(|(i, _)| i)
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
        assert_eq!(select(&totals), Some(1));
    }

    #[test]
    fn flat_scores_add_nothing_and_ties_go_first() {
        let mut totals = vec![0.0; 3];
        accumulate(&mut totals, &[7, 7, 7], 5.0);
        assert_eq!(totals, [0.0; 3]);
        assert_eq!(select(&totals), Some(0));
        assert_eq!(select(&[]), None);
        assert_eq!(select(&[1.0, 3.0, 3.0]), Some(1));
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        let mut totals = vec![0.0; 2];
        accumulate(&mut totals, &[i64::MIN, i64::MAX], 1.0);
        assert_eq!(totals, [0.0, 100.0]);
    }
}
