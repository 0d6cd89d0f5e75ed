//! Multi-GPU training-job traces in the format of Gavel (OSDI'20), derived
//! from Microsoft's Philly cluster: tab-separated, no header, one job a
//! line, seven fields — `job_type`, `command`, `num_steps_arg`,
//! `needs_data_dir`, `total_steps`, `arrival_time` (seconds from the
//! trace's start, a decimal), `scale_factor` (GPUs the job needs at once:
//! a gang). The command and its step flag are kept as given, unused.

use std::io::Read;

use crate::{MAX_SPAN_S, MAX_TIME_S, TraceError, csv_error};

/// Most GPUs one job may ask for: a few racks of 8-GPU nodes (the Philly
/// traces reach 64).
pub const MAX_JOB_GPUS: u32 = 4096;

/// Longest job type name, bytes (they are like `ResNet-50 (batch size 64)`).
pub const MAX_JOB_TYPE: usize = 256;

/// The fields of a line, in order (the names errors give).
pub const JOB_FIELDS: [&str; 7] =
    ["job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time", "scale_factor"];

/// One job of the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    /// Model and batch size, e.g. `ResNet-50 (batch size 64)`.
    pub job_type: String,
    /// The training command (`%s` placeholders; unused).
    pub command: String,
    /// The command's step flag (unused).
    pub num_steps_arg: String,
    /// Whether the command reads a data directory.
    pub needs_data_dir: bool,
    /// Steps the job must run.
    pub total_steps: u64,
    /// Arrival, seconds from the trace's start.
    pub arrival_s: f64,
    /// GPUs it needs all at once.
    pub scale_factor: u32,
}

/// A value echoed in an error, clipped.
fn clip(v: &str) -> String {
    tessera_input::clip(v, 64)
}

fn field_error(file: &str, line: u64, i: usize, reason: String) -> TraceError {
    TraceError { file: file.into(), line, column: Some((i + 1, JOB_FIELDS[i].to_string())), reason }
}

/// Reads a job trace; all or nothing, the first malformed line stops it.
pub fn read_jobs(reader: impl Read, file: &str) -> Result<Vec<JobRow>, TraceError> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .delimiter(b'\t')
        .quoting(false)
        // Lines are counted here, so that a line of the wrong length is
        // named as a job line's, not against a header this format has not.
        .flexible(true)
        .from_reader(reader);
    let mut rows = Vec::new();
    let mut first = None::<f64>;
    for record in rdr.records() {
        let record = record.map_err(|e| csv_error(file, &e))?;
        let line = record.position().map_or(0, |p| p.line());
        if record.len() != JOB_FIELDS.len() {
            return Err(TraceError {
                file: file.into(),
                line,
                column: None,
                reason: format!(
                    "{} fields; a job line has {} ({})",
                    record.len(),
                    JOB_FIELDS.len(),
                    JOB_FIELDS.join(", ")
                ),
            });
        }
        let err = |i: usize, reason: String| field_error(file, line, i, reason);
        let job_type = record[0].trim().to_string();
        if job_type.is_empty() {
            return Err(err(0, "is empty".into()));
        }
        if job_type.len() > MAX_JOB_TYPE {
            return Err(err(0, format!("{} bytes; a job type has at most {MAX_JOB_TYPE}", job_type.len())));
        }
        let needs_data_dir = match record[3].trim() {
            "0" => false,
            "1" => true,
            v => return Err(err(3, format!("`{}` is neither 0 nor 1", clip(v)))),
        };
        let v = record[4].trim();
        let total_steps: u64 = v.parse().map_err(|_| err(4, format!("`{}` is not a non-negative integer", clip(v))))?;
        if total_steps == 0 {
            return Err(err(4, "a job runs at least one step".into()));
        }
        let v = record[5].trim();
        let arrival_s: f64 = v.parse().map_err(|_| err(5, format!("`{}` is not a number of seconds", clip(v))))?;
        if !arrival_s.is_finite() || arrival_s < 0.0 {
            return Err(err(5, format!("{v} is not a time: seconds from the trace's start, at least 0")));
        }
        if arrival_s > MAX_TIME_S as f64 {
            return Err(err(5, format!("{v} s is past the latest time a trace may give ({MAX_TIME_S} s)")));
        }
        // The run samples every telemetry interval of the span: bound it.
        let first = *first.get_or_insert(arrival_s);
        if (arrival_s - first).abs() > MAX_SPAN_S as f64 {
            let days = MAX_SPAN_S / 86_400;
            return Err(err(5, format!("{v} s is more than {days} days from the first arrival ({first} s)")));
        }
        let v = record[6].trim();
        let scale_factor: u32 = v.parse().map_err(|_| err(6, format!("`{}` is not a number of GPUs", clip(v))))?;
        if scale_factor == 0 || scale_factor > MAX_JOB_GPUS {
            return Err(err(6, format!("{scale_factor} GPUs; a job needs 1..={MAX_JOB_GPUS}")));
        }
        rows.push(JobRow {
            job_type,
            command: record[1].to_string(),
            num_steps_arg: record[2].to_string(),
            needs_data_dir,
            total_steps,
            arrival_s,
            scale_factor,
        });
    }
    if rows.is_empty() {
        return Err(TraceError { file: file.into(), line: 0, column: None, reason: "no jobs".into() });
    }
    Ok(rows)
}

/// Measured throughputs, steps per second, by GPU model, job type and
/// scale factor: a job's run time is `total_steps / throughput` on the
/// model it runs on. [`Throughputs::gavel`] is the table Gavel publishes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Throughputs {
    by: std::collections::BTreeMap<(String, String, u32), f64>,
}

/// Gavel's isolated ("null") throughputs from
/// `scheduler/oracle_throughputs_v2.json` of stanford-futuredata/gavel (see
/// `data/SOURCE.md` for the commit), one row per GPU model, job type and
/// scale factor.
pub const GAVEL_THROUGHPUTS: &str = include_str!("../data/gavel-throughputs.tsv");

impl Throughputs {
    /// The table Gavel publishes ([`GAVEL_THROUGHPUTS`]).
    pub fn gavel() -> Self {
        Self::parse(GAVEL_THROUGHPUTS, "gavel-throughputs.tsv").expect("the shipped table parses")
    }

    /// Reads a table: a header `gpu, job_type, scale_factor, steps_per_s`
    /// and tab-separated rows. GPU models are compared without case.
    pub fn parse(text: &str, file: &str) -> Result<Self, TraceError> {
        let mut lines = text.lines().enumerate();
        let header = ["gpu", "job_type", "scale_factor", "steps_per_s"];
        match lines.next() {
            Some((_, h)) if h.split('\t').map(str::trim).eq(header) => {}
            _ => {
                let reason = format!("the header must be `{}`", header.join("\t"));
                return Err(TraceError { file: file.into(), line: 1, column: None, reason });
            }
        }
        let mut by = std::collections::BTreeMap::new();
        for (i, raw) in lines {
            let line = i as u64 + 1;
            let f: Vec<&str> = raw.split('\t').map(str::trim).collect();
            let at = |c: usize, reason: String| TraceError {
                file: file.into(),
                line,
                column: Some((c + 1, header[c].to_string())),
                reason,
            };
            if f.len() != 4 {
                let reason = format!("{} fields; a row has 4", f.len());
                return Err(TraceError { file: file.into(), line, column: None, reason });
            }
            let scale: u32 = f[2].parse().map_err(|_| at(2, format!("`{}` is not a number of GPUs", clip(f[2]))))?;
            let tput: f64 = f[3].parse().map_err(|_| at(3, format!("`{}` is not a number", clip(f[3]))))?;
            if !tput.is_finite() || tput < 0.0 {
                return Err(at(3, format!("{tput} is not a throughput (steps per second, at least 0)")));
            }
            if by.insert((f[0].to_ascii_lowercase(), f[1].to_string(), scale), tput).is_some() {
                return Err(at(1, format!("`{}` at scale {scale} on {} is given twice", clip(f[1]), clip(f[0]))));
            }
        }
        Ok(Self { by })
    }

    /// Steps per second of `job_type` on `scale` GPUs of `gpu`, if measured
    /// and not zero (Gavel writes 0 where a job does not fit the GPU).
    pub fn get(&self, gpu: &str, job_type: &str, scale: u32) -> Option<f64> {
        self.by.get(&(gpu.to_ascii_lowercase(), job_type.to_string(), scale)).copied().filter(|&t| t > 0.0)
    }

    /// Steps per second of `job_type` on `scale` GPUs of `gpu`: measured;
    /// or between two measured scales, interpolated linearly in the scale
    /// (Gavel measured 1, 2, 4 and 8 GPUs; Philly's jobs also ask for 3, 6,
    /// …); or past the largest scale measured for it there (Gavel's table
    /// stops at 8 GPUs, and at 1 for A3C, CycleGAN and Recommendation;
    /// Philly's jobs reach 64), extrapolated from that scale at the same
    /// rate per GPU (linear scaling). Both are assumptions, so they are
    /// flagged ([`Rate::source`]). Nothing below the smallest scale
    /// measured, nor past a largest scale where the job does not fit.
    pub fn rate(&self, gpu: &str, job_type: &str, scale: u32) -> Option<Rate> {
        if let Some(steps_per_s) = self.get(gpu, job_type, scale) {
            return Some(Rate { steps_per_s, source: RateSource::Measured });
        }
        let gpu = gpu.to_ascii_lowercase();
        if self.by.contains_key(&(gpu.clone(), job_type.to_string(), scale)) {
            // Measured as 0: it does not fit there.
            return None;
        }
        let measured =
            || self.by.range((gpu.clone(), job_type.to_string(), 0)..=(gpu.clone(), job_type.to_string(), u32::MAX));
        let below = measured().rev().find(|((.., s), _)| *s < scale).map(|((.., s), &t)| (*s, t));
        let above = measured().find(|((.., s), _)| *s > scale).map(|((.., s), &t)| (*s, t));
        match (below, above) {
            (Some((a, ta)), Some((b, tb))) if ta > 0.0 && tb > 0.0 => Some(Rate {
                steps_per_s: ta + (tb - ta) * f64::from(scale - a) / f64::from(b - a),
                source: RateSource::Interpolated { below: a, above: b },
            }),
            (Some((largest, t)), None) if t > 0.0 => Some(Rate {
                steps_per_s: t * f64::from(scale) / f64::from(largest),
                source: RateSource::Extrapolated { from: largest },
            }),
            _ => None,
        }
    }

    /// Seconds `job` runs on `gpu`, if its rate there is known
    /// ([`Throughputs::rate`]), and how that rate was had.
    pub fn seconds(&self, job: &JobRow, gpu: &str) -> Option<(u64, RateSource)> {
        let r = self.rate(gpu, &job.job_type, job.scale_factor)?;
        let s = (job.total_steps as f64 / r.steps_per_s).ceil().min(MAX_TIME_S as f64) as u64;
        Some((s, r.source))
    }

    /// GPU models with a measurement, lower case.
    pub fn models(&self) -> std::collections::BTreeSet<&str> {
        self.by.keys().map(|(g, ..)| g.as_str()).collect()
    }
}

/// A job's training rate on some GPUs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Steps per second.
    pub steps_per_s: f64,
    /// Measured, or estimated from which measured scales.
    pub source: RateSource,
}

/// How a [`Rate`] was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RateSource {
    /// Measured at the job's scale.
    Measured,
    /// Between two measured scales, linearly.
    Interpolated {
        /// The measured scale below.
        below: u32,
        /// The measured scale above.
        above: u32,
    },
    /// Past the largest measured scale, at its rate per GPU.
    Extrapolated {
        /// The largest measured scale.
        from: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str =
        "ResNet-50 (batch size 64)\tcd %s && python3 main.py -b 64 %s\t--num_minibatches\t1\t47442\t10.000000\t4";

    fn err(text: &str) -> String {
        read_jobs(text.as_bytes(), "j.trace").unwrap_err().to_string()
    }

    #[test]
    fn reads_the_seven_fields() {
        let jobs = read_jobs(format!("{LINE}\n{LINE}\n").as_bytes(), "j.trace").unwrap();
        assert_eq!(jobs.len(), 2);
        let j = &jobs[0];
        assert_eq!(
            (j.job_type.as_str(), j.needs_data_dir, j.total_steps, j.arrival_s, j.scale_factor),
            ("ResNet-50 (batch size 64)", true, 47442, 10.0, 4)
        );
        assert_eq!(j.num_steps_arg, "--num_minibatches");
    }

    #[test]
    fn malformed_fields_name_line_and_field() {
        let with = |i: usize, v: &str| {
            let mut f: Vec<&str> = LINE.split('\t').collect();
            f[i] = v;
            format!("{LINE}\n{}\n", f.join("\t"))
        };
        assert_eq!(err(&with(4, "lots")), "j.trace:2:5 (total_steps): `lots` is not a non-negative integer");
        assert_eq!(err(&with(4, "0")), "j.trace:2:5 (total_steps): a job runs at least one step");
        assert_eq!(
            err(&with(5, "-1")),
            "j.trace:2:6 (arrival_time): -1 is not a time: seconds from the trace's start, at least 0"
        );
        assert!(err(&with(5, "NaN")).starts_with("j.trace:2:6 (arrival_time): NaN is not a time"));
        assert!(err(&with(5, "1e300")).contains("past the latest time"));
        assert!(err(&with(5, "200000000")).contains("days from the first arrival"), "{}", err(&with(5, "200000000")));
        assert_eq!(err(&with(6, "0")), "j.trace:2:7 (scale_factor): 0 GPUs; a job needs 1..=4096");
        assert_eq!(err(&with(6, "two")), "j.trace:2:7 (scale_factor): `two` is not a number of GPUs");
        assert_eq!(err(&with(3, "yes")), "j.trace:2:4 (needs_data_dir): `yes` is neither 0 nor 1");
        assert_eq!(err(&with(0, " ")), "j.trace:2:1 (job_type): is empty");
        let long = "9".repeat(10 << 20);
        let e = err(&with(4, &long));
        assert!(e.len() < 300, "a 10 MB value is clipped, not echoed: {} bytes", e.len());
        assert!(err("a\tb\tc\n").contains("3 fields; a job line has 7"), "{}", err("a\tb\tc\n"));
        assert!(
            err(&format!("{LINE}\n{LINE}\textra\n")).starts_with("j.trace:2: 8 fields; a job line has 7 (job_type,"),
            "a later line too long is named as a job line: {}",
            err(&format!("{LINE}\n{LINE}\textra\n"))
        );
        assert_eq!(err(""), "j.trace: no jobs");
    }

    #[test]
    fn a_throughput_table_is_checked_row_by_row() {
        let head = "gpu\tjob_type\tscale_factor\tsteps_per_s\n";
        let t = Throughputs::parse(&format!("{head}v100\tA3C\t1\t2.5\nV100\tA3C\t2\t0.0\n"), "t.tsv").unwrap();
        assert_eq!(t.get("V100", "A3C", 1), Some(2.5), "models compare without case");
        assert_eq!(t.get("v100", "A3C", 2), None, "0 is Gavel's 'does not fit'");
        let row =
            JobRow { job_type: "A3C".into(), total_steps: 11, ..read_jobs(LINE.as_bytes(), "x").unwrap()[0].clone() };
        let row = JobRow { scale_factor: 1, ..row };
        assert_eq!(t.seconds(&row, "V100"), Some((5, RateSource::Measured)), "11 steps at 2.5/s, rounded up");
        let big = "v100\tLM\t1\t1\nv100\tLM\t2\t1.5\nv100\tLM\t8\t4\nv100\tA3C\t1\t3\n";
        let t = Throughputs::parse(&format!("{head}{big}"), "t.tsv").unwrap();
        assert_eq!(t.rate("v100", "LM", 8), Some(Rate { steps_per_s: 4.0, source: RateSource::Measured }));
        assert_eq!(
            t.rate("V100", "LM", 32),
            Some(Rate { steps_per_s: 16.0, source: RateSource::Extrapolated { from: 8 } }),
            "past 8 GPUs: the 8-GPU rate per GPU"
        );
        assert_eq!(
            t.rate("v100", "LM", 5),
            Some(Rate { steps_per_s: 2.75, source: RateSource::Interpolated { below: 2, above: 8 } }),
            "between measured scales (2 and 8 here), linearly: 1.5 + 2.5 × 3/6"
        );
        assert_eq!(
            t.rate("v100", "A3C", 4),
            Some(Rate { steps_per_s: 12.0, source: RateSource::Extrapolated { from: 1 } }),
            "measured on one GPU only (Gavel has A3C, CycleGAN, Recommendation so), scaled from it"
        );
        assert_eq!(t.rate("p100", "LM", 1), None);
        // Where Gavel wrote 0 (the job does not fit that GPU) nothing is
        // estimated across it or past it.
        let zeros = "k80\tLM\t1\t1\nk80\tLM\t4\t0\nk80\tLM\t8\t0\nk80\tBig\t2\t1\n\
                     k80\tMid\t1\t1\nk80\tMid\t2\t0\nk80\tMid\t4\t1\n";
        let t = Throughputs::parse(&format!("{head}{zeros}"), "t.tsv").unwrap();
        assert_eq!((t.rate("k80", "LM", 2), t.rate("k80", "LM", 16)), (None, None));
        assert_eq!(t.rate("k80", "Mid", 2), None, "measured as 0 is no gap to fill");
        assert_eq!(t.rate("k80", "Mid", 3), None, "nor next to a 0");
        assert_eq!(t.rate("k80", "Big", 1), None, "nothing below the smallest scale measured");
        let e = |text: &str| Throughputs::parse(text, "t.tsv").unwrap_err().to_string();
        assert_eq!(e("gpu,job\n"), "t.tsv:1: the header must be `gpu\tjob_type\tscale_factor\tsteps_per_s`");
        assert_eq!(e(&format!("{head}v100\tA3C\tone\t1\n")), "t.tsv:2:3 (scale_factor): `one` is not a number of GPUs");
        assert_eq!(
            e(&format!("{head}v100\tA3C\t1\t-1\n")),
            "t.tsv:2:4 (steps_per_s): -1 is not a throughput (steps per second, at least 0)"
        );
        assert!(e(&format!("{head}v100\tA3C\t1\t1\nv100\tA3C\t1\t2\n")).contains("given twice"));
    }

    /// The real Philly/Gavel traces parse, with the counts their README
    /// states.
    #[test]
    fn shared_philly_traces_load() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/philly-gavel");
        if !dir.exists() {
            assert!(std::env::var_os("CI").is_none(), "{} is missing in CI", dir.display());
            eprintln!("skipping: {} not found", dir.display());
            return;
        }
        for (f, jobs, multi, largest) in [
            ("0e4a51", 1181, 745, 8),
            ("11cb48", 2000, 441, 64),
            ("2869ce", 533, 468, 32),
            ("6214e9", 2000, 72, 8),
            ("7f04ca", 972, 578, 32),
            ("23dbec", 9, 7, 8),
            ("795a4c", 3, 0, 1),
        ] {
            let path = dir.join(format!("{f}.trace"));
            let r = tessera_input::file::open(&path, tessera_input::Limit::TRACE).unwrap();
            let rows = read_jobs(r, f).unwrap();
            assert_eq!(rows.len(), jobs, "{f}");
            assert_eq!(rows.iter().filter(|j| j.scale_factor > 1).count(), multi, "{f}");
            assert_eq!(rows.iter().map(|j| j.scale_factor).max(), Some(largest), "{f}");
        }
    }
}
