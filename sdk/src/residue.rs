//! The *residue* of a GPU gap: the share of it that no sum of a workload's
//! common sharing sizes fills. One rule for everything that judges gaps —
//! the `fgd` plugin's placement of sharing pods and the rescheduler's
//! re-pairing — so the two never disagree about which gap is fillable.

/// Sharing sizes with at least this share of the workload's GPU pods are
/// common: enough of them arrive to fill the gaps they fit.
pub const COMMON_SHARE: f64 = 0.015;

/// A common size fills a gap only if it is at least this fraction as
/// frequent as the most frequent common size that fits the gap: a rare
/// exact fit is not what a gap will get when a far more frequent size also
/// fits it (0.55-GPU pods are too few to fill the 0.55 left beside every
/// 0.45 one when 0.45-GPU pods are six times as many).
pub const FILLER_RATIO: f64 = 0.25;

/// The common sharing sizes `(gpu_milli, weight)`, ascending, of a workload
/// whose one-GPU sharing shapes are `sharing` (`(gpu_milli, weight)`,
/// sizes repeated as they come) and whose GPU shapes weigh `gpu_weight` in
/// all.
pub fn common_sizes(sharing: impl IntoIterator<Item = (u32, f64)>, gpu_weight: f64) -> Vec<(u32, f64)> {
    let mut by_size = std::collections::BTreeMap::new();
    for (size, w) in sharing {
        if size > 0 && size < 1000 {
            *by_size.entry(size).or_insert(0.0) += w;
        }
    }
    by_size.into_iter().filter(|&(_, w)| w >= COMMON_SHARE * gpu_weight).collect()
}

/// `residue[x]` for a gap of `x` thousandths of a GPU, x in 0..=1000: the
/// least share left once the gap is filled by `common` sizes (each a
/// filler of the gap it enters, see [`FILLER_RATIO`]); `x` itself when none
/// fits, 0 for a whole free GPU (whole-GPU pods take it).
pub fn gap_residues(common: &[(u32, f64)]) -> Vec<u16> {
    let mut residue = vec![0u16; 1001];
    for x in 1..1000u32 {
        let fitting = || common.iter().filter(move |&&(s, _)| s <= x);
        let top = fitting().map(|&(_, w)| w).fold(0.0, f64::max);
        residue[x as usize] = fitting()
            .filter(|&&(_, w)| w >= FILLER_RATIO * top)
            .map(|&(s, _)| residue[(x - s) as usize])
            .min()
            .unwrap_or(x as u16);
    }
    residue
}
