//! The subcommands of `tessera`, one module each.

pub mod bench;
pub mod chaos;
pub mod plan;
pub mod plugin;
pub mod policy;
pub mod sim;
pub mod train;
pub mod workload;

/// Most nodes a synthetic cluster of a benchmark may have
/// ([`tessera_core::synthetic::MAX_NODES`]).
pub const MAX_NODES: u64 = tessera_core::synthetic::MAX_NODES as u64;

/// Most pods a benchmark may generate.
pub const MAX_PODS: u64 = 10_000_000;

/// Most repetitions of a measurement.
pub const MAX_REPS: u64 = 1_000;

/// A clap parser for counts in `lo..=hi` (a value outside is refused,
/// naming the range, before anything is allocated for it).
pub fn count<T>(lo: u64, hi: u64) -> clap::builder::RangedU64ValueParser<T>
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
    <T as TryFrom<u64>>::Error: std::fmt::Display + Send + Sync + 'static,
{
    clap::builder::RangedU64ValueParser::<T>::new().range(lo..=hi)
}

/// `--declared-limit`: a factor of a job's run within [1, MAX_LIMIT_FACTOR].
pub fn limit_factor(s: &str) -> Result<f64, String> {
    let f: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    let max = tessera::jobs::MAX_LIMIT_FACTOR;
    if tessera::jobs::limit_factor_ok(f) { Ok(f) } else { Err(format!("{s} is not within [1, {max}]")) }
}
