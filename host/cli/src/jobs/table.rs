//! `bench jobs`' table, and the notes under it.

use super::JobsBench;

impl JobsBench {
    /// The table.
    pub fn to_table(&self) -> String {
        let mut out = format!(
            "{:<8} {:<14} {:>6} {:>9} {:>10} {:>10} {:>10} {:>6} {:>6} {:>6} {:>12} {:>7}\n",
            "trace",
            "policy",
            "jobs",
            "completed",
            "jct p50 s",
            "jct p99 s",
            "delay p50",
            "util",
            "jain",
            "share",
            "partial GPU·s",
            "wall s"
        );
        for r in &self.runs {
            out += &format!(
                "{:<8} {:<14} {:>6} {:>9} {:>10} {:>10} {:>10} {:>6.3} {:>6.3} {:>6.3} {:>12} {:>7.1}\n",
                r.trace,
                r.policy,
                r.summary.jobs,
                r.summary.completed,
                r.summary.jct_p50_s,
                r.summary.jct_p99_s,
                r.summary.queue_delay_p50_s,
                r.summary.gpu_util,
                r.summary.jain_fairness,
                r.summary.jain_share,
                r.summary.partial_gang_gpu_s,
                r.wall_s
            );
        }
        out + &self.notes()
    }

    /// What the rows do not show, once per trace: jobs skipped for want of
    /// a measured throughput (by job type, so a trace with a type Gavel
    /// never measured says which) and run times extrapolated.
    fn notes(&self) -> String {
        let mut out = String::new();
        let mut seen = std::collections::BTreeSet::new();
        for r in self.runs.iter().filter(|r| seen.insert(r.trace.as_str())) {
            if r.skipped > 0 {
                const SHOWN: usize = 5;
                let mut types: Vec<String> = r
                    .skipped_job_types
                    .iter()
                    .take(SHOWN)
                    .map(|(t, n)| format!("`{}` ×{n}", tessera_input::clip(t, 64)))
                    .collect();
                if r.skipped_job_types.len() > SHOWN {
                    types.push(format!("{} more types", r.skipped_job_types.len() - SHOWN));
                }
                out += &format!(
                    "note: {}: {} of {} jobs skipped, no measured throughput on V100, P100 or K80: {}\n",
                    r.trace,
                    r.skipped,
                    r.summary.jobs,
                    types.join(", ")
                );
            }
            if r.never_fit > 0 {
                out += &format!(
                    "note: {}: {} of {} jobs can never run here, asking for more GPUs at once (up to {}) than \
                     the cluster has of any model they can use\n",
                    r.trace, r.never_fit, r.summary.jobs, r.widest_never_fit
                );
            }
            if r.interpolated > 0 {
                out += &format!(
                    "note: {}: run time interpolated between the scales Gavel measured for {} of {} jobs\n",
                    r.trace, r.interpolated, r.summary.jobs
                );
            }
            if r.extrapolated > 0 {
                out += &format!(
                    "note: {}: run time extrapolated past the largest scale Gavel measured for {} of {} jobs\n",
                    r.trace, r.extrapolated, r.summary.jobs
                );
            }
        }
        out
    }
}
