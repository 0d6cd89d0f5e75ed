//! Fair shares: dominant-resource share, and each queue's share of the
//! cluster by guarantee, weight (water-filling), limit and demand, down the
//! queue tree.

use super::{Amounts, Dim, QueueTree};

/// A queue's largest share of any one resource of `capacity`.
pub fn dominant_share(used: &Amounts, capacity: &Amounts) -> f64 {
    used.0
        .iter()
        .filter_map(|(d, &u)| {
            let c = capacity.get(d);
            (c > 0).then(|| u as f64 / c as f64)
        })
        .fold(0.0, f64::max)
}

/// What each queue would get of each resource of `capacity` if it asked
/// for `demand` (its use plus what waits in it, summed up the tree): its
/// guarantee (up to demand) first, then what is left divided by weight
/// among queues that want more (water-filling), capped by limit and demand;
/// down the tree, each parent's share divided among its children alike.
pub fn fair_shares(tree: &QueueTree, capacity: &Amounts, demand: &[Amounts]) -> Vec<Amounts> {
    let mut out = vec![Amounts::default(); tree.nodes.len()];
    for (d, &cap) in &capacity.0 {
        divide(tree, &tree.roots, d, cap, demand, &mut out);
    }
    out
}

/// Water-filling by weight: what is left of `total` after `got` is given,
/// round by round, to every claimant that wants more, each its weight's
/// share of what is left, capped by what it `want`s; shares rounded to
/// nothing go one unit at a time, in order.
pub fn water_fill(total: u64, want: &[u64], weights: &[f64], got: &mut [u64]) {
    let mut left = total.saturating_sub(got.iter().sum());
    loop {
        let open: Vec<usize> = (0..want.len()).filter(|&i| got[i] < want[i]).collect();
        if open.is_empty() || left == 0 {
            break;
        }
        let weight: f64 = open.iter().map(|&i| weights[i]).sum();
        let mut given = 0;
        for &i in &open {
            let share = (left as f64 * weights[i] / weight).floor() as u64;
            let g = share.min(want[i] - got[i]);
            got[i] += g;
            given += g;
        }
        if given == 0 {
            for &i in &open {
                if left == given {
                    break;
                }
                got[i] += 1;
                given += 1;
            }
        }
        left -= given;
    }
}

fn divide(tree: &QueueTree, siblings: &[usize], d: &Dim, total: u64, demand: &[Amounts], out: &mut [Amounts]) {
    let want: Vec<u64> = siblings
        .iter()
        .map(|&q| {
            let lim = tree.nodes[q].limit.get(d).copied().unwrap_or(u64::MAX);
            demand[q].get(d).min(lim)
        })
        .collect();
    let mut got: Vec<u64> = siblings.iter().zip(&want).map(|(&q, &w)| tree.nodes[q].guaranteed(d).min(w)).collect();
    let weights: Vec<f64> = siblings.iter().map(|&q| tree.nodes[q].weight).collect();
    water_fill(total, &want, &weights, &mut got);
    for (i, &q) in siblings.iter().enumerate() {
        if got[i] > 0 {
            out[q].0.insert(d.clone(), got[i]);
        }
        let children = &tree.nodes[q].children;
        if !children.is_empty() {
            divide(tree, children, d, got[i], demand, out);
        }
    }
}
