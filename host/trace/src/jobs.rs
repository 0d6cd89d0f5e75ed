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
        .flexible(false)
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
        assert_eq!(err(""), "j.trace: no jobs");
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
