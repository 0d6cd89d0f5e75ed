//! Run limits jobs declare (`bench jobs --declared-limit`, `sim --jobs
//! --declared-limit`): what lets the loop backfill the nodes it keeps for
//! a waiting gang (`tessera_core::sched`'s reservations).

use anyhow::{Result, bail};

use super::{JobTrace, SPEC_MODELS};

/// The most `--declared-limit` may be, times a job's run.
pub const MAX_LIMIT_FACTOR: f64 = 100.0;

/// Whether `factor` may be a job's declared limit over its run: within
/// [1, [`MAX_LIMIT_FACTOR`]] (under 1, jobs would be cut short).
pub fn limit_factor_ok(factor: f64) -> bool {
    (1.0..=MAX_LIMIT_FACTOR).contains(&factor)
}

impl JobTrace {
    /// Every job declares `factor` times its longest run on the GPU models
    /// of a cluster of `gpus` (per [`SPEC_MODELS`]) as its limit, rounded
    /// up (none: no job declares one). A factor of 1 is an owner who knows
    /// the run exactly; Slurm users' estimates run several times over.
    pub fn declare_limits(&mut self, factor: Option<f64>, gpus: [u32; 3]) -> Result<()> {
        let Some(factor) = factor else {
            for j in &mut self.jobs {
                j.limit_s = None;
            }
            return Ok(());
        };
        if !limit_factor_ok(factor) {
            bail!("--declared-limit must be within [1, {MAX_LIMIT_FACTOR}] (times a job's run), not {factor}");
        }
        for j in &mut self.jobs {
            let longest = SPEC_MODELS
                .iter()
                .zip(gpus)
                .filter(|(_, g)| *g > 0)
                .filter_map(|(m, _)| j.seconds_on.get(*m).copied())
                .max();
            // No model of the cluster is one it can use (it never runs
            // there): it declares its longest run anywhere.
            let longest = longest.or_else(|| j.seconds_on.values().copied().max()).unwrap_or(0);
            j.limit_s = Some((longest as f64 * factor).ceil().min(u64::MAX as f64) as u64);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tessera_core::sim::jobs::Job;

    use super::*;

    fn trace() -> JobTrace {
        let job = |name: &str, on: &[(&str, u64)]| Job {
            name: name.into(),
            arrival_s: 0,
            gpus: 8,
            seconds_on: on.iter().map(|&(m, s)| (m.to_string(), s)).collect::<BTreeMap<_, _>>(),
            queue: "q".into(),
            checkpoint_s: None,
            limit_s: None,
        };
        JobTrace {
            jobs: vec![job("fast", &[("V100", 100), ("K80", 300)]), job("k80-only", &[("K80", 1_000)])],
            ..JobTrace::default()
        }
    }

    #[test]
    fn a_job_declares_its_longest_run_on_the_clusters_models_times_the_factor() {
        let mut t = trace();
        // V100 and P100 nodes: `fast` runs 100 s at most there; `k80-only`
        // never runs there and declares its K80 run.
        t.declare_limits(Some(1.5), [8, 8, 0]).unwrap();
        assert_eq!(t.jobs.iter().map(|j| j.limit_s).collect::<Vec<_>>(), [Some(150), Some(1_500)]);
        // With K80 nodes too, the slower model bounds it.
        t.declare_limits(Some(1.0), [8, 0, 8]).unwrap();
        assert_eq!(t.jobs.iter().map(|j| j.limit_s).collect::<Vec<_>>(), [Some(300), Some(1_000)]);
        t.declare_limits(None, [8, 0, 8]).unwrap();
        assert!(t.jobs.iter().all(|j| j.limit_s.is_none()));
        for bad in [0.5, 101.0, f64::NAN, f64::INFINITY] {
            let e = t.declare_limits(Some(bad), [8, 0, 0]).unwrap_err().to_string();
            assert!(e.contains("--declared-limit must be within [1, 100]"), "{bad}: {e}");
        }
    }
}
