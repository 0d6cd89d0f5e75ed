//! The 0/1 knapsack DP that fills one GPU (or node):
//! `f(n, c) = max(f(n−1, c), f(n−1, c − w_n) + v_n)`, over integer weights.

/// The subset of `items` (weight, value) of greatest total value whose
/// weights sum to at most `capacity`; indices ascending. Ties go to the
/// subset found first (items earlier in the slice preferred). Items of
/// weight 0 with positive value are always taken.
pub fn best_subset(capacity: u32, items: &[(u32, f64)]) -> Vec<usize> {
    let cap = capacity as usize;
    // best[c]: best value with weight ≤ c; take[n][c]: item n taken at c.
    let mut best = vec![0.0f64; cap + 1];
    let mut take = vec![vec![false; cap + 1]; items.len()];
    for (n, &(w, v)) in items.iter().enumerate() {
        let w = w as usize;
        if w > cap || v <= 0.0 {
            continue;
        }
        for c in (w..=cap).rev() {
            let with = best[c - w] + v;
            if with > best[c] + 1e-12 {
                best[c] = with;
                take[n][c] = true;
            }
        }
    }
    let mut out = Vec::new();
    let mut c = cap;
    for n in (0..items.len()).rev() {
        if take[n][c] {
            out.push(n);
            c -= items[n].0 as usize;
        }
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(items: &[(u32, f64)], set: &[usize]) -> f64 {
        set.iter().map(|&i| items[i].1).sum()
    }

    #[test]
    fn fills_exactly_where_best_fit_would_not() {
        // Free 60 units; best fit of the largest first takes 50 and wastes
        // 10; the DP takes 30 + 30.
        let items = [(50, 50.0), (30, 30.0), (30, 30.0)];
        assert_eq!(best_subset(60, &items), vec![1, 2]);
    }

    #[test]
    fn matches_brute_force_on_random_instances() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..200 {
            let n = 1 + next(10) as usize;
            let items: Vec<(u32, f64)> = (0..n).map(|_| (next(40) as u32, next(100) as f64)).collect();
            let cap = next(100) as u32;
            let got = best_subset(cap, &items);
            assert!(got.iter().map(|&i| items[i].0).sum::<u32>() <= cap);
            let mut brute = 0.0f64;
            for mask in 0u32..(1 << n) {
                let w: u32 = (0..n).filter(|i| mask & (1 << i) != 0).map(|i| items[i].0).sum();
                if w <= cap {
                    brute = brute.max((0..n).filter(|i| mask & (1 << i) != 0).map(|i| items[i].1).sum());
                }
            }
            assert_eq!(value(&items, &got), brute, "{items:?} cap {cap}");
        }
    }
}
