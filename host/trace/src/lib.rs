//! # tessera-trace
//!
//! Loaders for the cluster traces Tessera replays: the Alibaba GPU cluster
//! trace used by the ATC'23 FGD paper (`openb_node_list_*.csv`,
//! `openb_pod_list_*.csv`) and the arrival-order files of its published
//! runs. Loading is all or nothing: the first malformed row stops it with
//! an error naming the file, the line, the column and the reason, before
//! anything is simulated.
//!
//! Multi-GPU job traces (Philly via Gavel) are read by [`jobs`].
//!
//! The parsers take text or a reader; opening files is the caller's job.

use std::collections::HashSet;
use std::fmt;
use std::io::Read;

/// Most GPUs a node may have (the plugin SDK's limit).
pub const MAX_NODE_GPUS: u32 = 16;

/// One GPU's worth of share, in milli.
pub const GPU_MILLI: u32 = 1000;

/// A node row: `sn,cpu_milli,memory_mib,gpu,model`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRow {
    /// Node name (`sn`).
    pub name: String,
    /// CPU in millicores.
    pub cpu_milli: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Number of GPUs.
    pub gpus: u32,
    /// GPU model ("" for CPU-only nodes).
    pub model: String,
}

/// A pod row. Only the first five columns are required; the others are
/// optional (the `multigpu20` list has only the first five).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodRow {
    /// Pod name.
    pub name: String,
    /// CPU request in millicores.
    pub cpu_milli: u64,
    /// Memory request in MiB.
    pub memory_mib: u64,
    /// GPUs requested.
    pub num_gpu: u32,
    /// Share of each requested GPU, 0..=1000 (0 for CPU-only pods).
    pub gpu_milli: u32,
    /// Allowed GPU models (empty = any).
    pub gpu_spec: Vec<String>,
    /// QoS class (`LS`, `BE`, `Burstable`, `Guaranteed`), if given.
    pub qos: Option<String>,
    /// Phase in the trace, if given.
    pub phase: Option<String>,
    /// Creation time (seconds), if given.
    pub creation_time: Option<u64>,
    /// Deletion time (seconds), if given.
    pub deletion_time: Option<u64>,
    /// Scheduling time (seconds), if given.
    pub scheduled_time: Option<u64>,
}

impl PodRow {
    /// Total GPU demand in milli (`num_gpu × gpu_milli`).
    pub fn gpu_demand_milli(&self) -> u64 {
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }
}

/// Where and why a trace is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct TraceError {
    /// File (as the caller named it).
    pub file: String,
    /// 1-based line; 0 when the file as a whole is at fault.
    pub line: u64,
    /// 1-based column and its name, when one field is at fault.
    pub column: Option<(usize, String)>,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if let Some((col, name)) = &self.column {
            write!(f, ":{col} ({name})")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// Reads the columns of one CSV file by header name.
struct Table<'a> {
    file: &'a str,
    columns: Vec<(&'static str, Option<usize>)>,
    names: Vec<String>,
}

impl<'a> Table<'a> {
    fn new(
        file: &'a str,
        headers: &csv::StringRecord,
        required: &[&'static str],
        optional: &[&'static str],
    ) -> Result<Self, TraceError> {
        let names: Vec<String> = headers.iter().map(|h| h.trim().to_string()).collect();
        let find = |c: &str| names.iter().position(|n| n == c);
        let mut columns = Vec::new();
        for &c in required {
            let Some(i) = find(c) else {
                return Err(TraceError {
                    file: file.into(),
                    line: 1,
                    column: None,
                    reason: format!("missing column `{c}` (header has: {})", names.join(",")),
                });
            };
            columns.push((c, Some(i)));
        }
        for &c in optional {
            columns.push((c, find(c)));
        }
        Ok(Self { file, columns, names })
    }

    fn error(&self, line: u64, index: Option<usize>, reason: String) -> TraceError {
        TraceError {
            file: self.file.into(),
            line,
            column: index.map(|i| (i + 1, self.names.get(i).cloned().unwrap_or_default())),
            reason,
        }
    }

    /// The raw text of column `name` in `record` (None if the column is absent).
    fn get<'r>(&self, record: &'r csv::StringRecord, name: &str) -> Option<(usize, &'r str)> {
        let i = self.columns.iter().find(|(c, _)| *c == name)?.1?;
        Some((i, record.get(i).unwrap_or("").trim()))
    }

    fn required_str(&self, record: &csv::StringRecord, line: u64, name: &str) -> Result<String, TraceError> {
        let (i, v) = self.get(record, name).expect("required columns are present");
        if v.is_empty() {
            return Err(self.error(line, Some(i), "is empty".into()));
        }
        Ok(v.to_string())
    }

    fn required_u64(&self, record: &csv::StringRecord, line: u64, name: &str) -> Result<u64, TraceError> {
        let (i, v) = self.get(record, name).expect("required columns are present");
        v.parse::<u64>().map_err(|_| self.error(line, Some(i), format!("`{v}` is not a non-negative integer")))
    }

    fn optional_u64(&self, record: &csv::StringRecord, line: u64, name: &str) -> Result<Option<u64>, TraceError> {
        match self.get(record, name) {
            None | Some((_, "")) => Ok(None),
            Some((i, v)) => v
                .parse::<u64>()
                .map(Some)
                .map_err(|_| self.error(line, Some(i), format!("`{v}` is not a non-negative integer"))),
        }
    }

    /// A time column: at most [`MAX_TIME_S`].
    fn time(&self, record: &csv::StringRecord, line: u64, name: &str) -> Result<Option<u64>, TraceError> {
        let v = self.optional_u64(record, line, name)?;
        if let Some(v) = v.filter(|&v| v > MAX_TIME_S) {
            return Err(self.error(
                line,
                self.index(name),
                format!("{v} s is past the latest time a trace may give ({MAX_TIME_S} s; times are seconds)"),
            ));
        }
        Ok(v)
    }

    fn optional_str(&self, record: &csv::StringRecord, name: &str) -> Option<String> {
        self.get(record, name).filter(|(_, v)| !v.is_empty()).map(|(_, v)| v.to_string())
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.columns.iter().find(|(c, _)| *c == name).and_then(|(_, i)| *i)
    }
}

fn csv_reader(reader: impl Read) -> csv::Reader<impl Read> {
    csv::ReaderBuilder::new().has_headers(true).flexible(false).from_reader(reader)
}

fn csv_error(file: &str, e: &csv::Error) -> TraceError {
    let line = e.position().map_or(0, |p| p.line());
    if let csv::ErrorKind::Io(io) = e.kind()
        && let Some(fe) = tessera_input::FileError::inside_io(io)
    {
        // A cap of the bounded reader: too large, or a line too long.
        let (reason, at) = fe.reason();
        return TraceError { file: file.into(), line: at.unwrap_or(line), column: None, reason };
    }
    let reason = match e.kind() {
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            format!("row has {len} fields, the header has {expected_len}")
        }
        csv::ErrorKind::Utf8 { .. } => "not valid UTF-8".into(),
        _ => e.to_string(),
    };
    TraceError { file: file.into(), line, column: None, reason }
}

fn check_unique(
    table: &Table<'_>,
    seen: &mut HashSet<String>,
    name: &str,
    line: u64,
    col: &str,
) -> Result<(), TraceError> {
    if !seen.insert(name.to_string()) {
        return Err(table.error(line, table.index(col), format!("duplicate name `{name}`")));
    }
    Ok(())
}

/// Reads a node list (`sn,cpu_milli,memory_mib,gpu,model`).
pub fn read_nodes(reader: impl Read, file: &str) -> Result<Vec<NodeRow>, TraceError> {
    let mut rdr = csv_reader(reader);
    let headers = rdr.headers().map_err(|e| csv_error(file, &e))?.clone();
    let t = Table::new(file, &headers, &["sn", "cpu_milli", "memory_mib", "gpu", "model"], &[])?;
    let mut rows = Vec::new();
    let mut seen = HashSet::new();
    for record in rdr.records() {
        let record = record.map_err(|e| csv_error(file, &e))?;
        let line = record.position().map_or(0, |p| p.line());
        let name = t.required_str(&record, line, "sn")?;
        check_unique(&t, &mut seen, &name, line, "sn")?;
        let cpu_milli = t.required_u64(&record, line, "cpu_milli")?;
        let memory_mib = t.required_u64(&record, line, "memory_mib")?;
        let gpus = t.required_u64(&record, line, "gpu")?;
        if gpus > u64::from(MAX_NODE_GPUS) {
            return Err(t.error(line, t.index("gpu"), format!("{gpus} GPUs; at most {MAX_NODE_GPUS} per node")));
        }
        let model = t.optional_str(&record, "model").unwrap_or_default();
        if gpus > 0 && model.is_empty() {
            return Err(t.error(line, t.index("model"), "a node with GPUs needs a GPU model".into()));
        }
        if cpu_milli == 0 {
            return Err(t.error(line, t.index("cpu_milli"), "a node needs CPU".into()));
        }
        rows.push(NodeRow { name, cpu_milli, memory_mib, gpus: gpus as u32, model });
    }
    if rows.is_empty() {
        return Err(TraceError { file: file.into(), line: 0, column: None, reason: "no nodes".into() });
    }
    Ok(rows)
}

/// Latest time a trace may give, seconds: Unix time for the next thousand
/// years (times are seconds; milliseconds would be past it, and refused).
pub const MAX_TIME_S: u64 = 33_000_000_000;

/// Longest span of a pod list's times (first creation to last creation or
/// deletion), seconds: four years, past any published cluster trace
/// (Alibaba openb spans 149 days, Philly 3 months). The online loop samples
/// telemetry at every interval of the span, so a lone far-future time
/// would otherwise mean billions of idle intervals.
pub const MAX_SPAN_S: u64 = 4 * 366 * 86_400;

/// Reads a pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli` and the
/// optional `gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time`).
pub fn read_pods(reader: impl Read, file: &str) -> Result<Vec<PodRow>, TraceError> {
    let mut rdr = csv_reader(reader);
    let headers = rdr.headers().map_err(|e| csv_error(file, &e))?.clone();
    let t = Table::new(
        file,
        &headers,
        &["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"],
        &["gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time"],
    )?;
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    let mut seen = HashSet::new();
    for record in rdr.records() {
        let record = record.map_err(|e| csv_error(file, &e))?;
        let line = record.position().map_or(0, |p| p.line());
        let name = t.required_str(&record, line, "name")?;
        check_unique(&t, &mut seen, &name, line, "name")?;
        let cpu_milli = t.required_u64(&record, line, "cpu_milli")?;
        let memory_mib = t.required_u64(&record, line, "memory_mib")?;
        let num_gpu = t.required_u64(&record, line, "num_gpu")?;
        let gpu_milli = t.required_u64(&record, line, "gpu_milli")?;
        if num_gpu > u64::from(MAX_NODE_GPUS) {
            return Err(t.error(
                line,
                t.index("num_gpu"),
                format!("{num_gpu} GPUs; no node has more than {MAX_NODE_GPUS}"),
            ));
        }
        if gpu_milli > u64::from(GPU_MILLI) {
            return Err(t.error(line, t.index("gpu_milli"), format!("{gpu_milli} is more than one GPU (1000)")));
        }
        if num_gpu > 0 && gpu_milli == 0 {
            return Err(t.error(line, t.index("gpu_milli"), "a GPU pod needs a GPU share of 1..=1000".into()));
        }
        if num_gpu == 0 && gpu_milli > 0 {
            return Err(t.error(line, t.index("gpu_milli"), "a GPU share without GPUs (num_gpu is 0)".into()));
        }
        if num_gpu > 1 && gpu_milli < u64::from(GPU_MILLI) {
            return Err(t.error(line, t.index("gpu_milli"), "only single-GPU pods may share a GPU".into()));
        }
        let gpu_spec = t
            .optional_str(&record, "gpu_spec")
            .map(|s| {
                let mut models: Vec<String> =
                    s.split('|').map(str::trim).filter(|m| !m.is_empty()).map(String::from).collect();
                models.sort();
                models.dedup();
                models
            })
            .unwrap_or_default();
        rows.push(PodRow {
            name,
            cpu_milli,
            memory_mib,
            num_gpu: num_gpu as u32,
            gpu_milli: gpu_milli as u32,
            gpu_spec,
            qos: t.optional_str(&record, "qos"),
            phase: t.optional_str(&record, "pod_phase"),
            creation_time: t.time(&record, line, "creation_time")?,
            deletion_time: t.time(&record, line, "deletion_time")?,
            scheduled_time: t.time(&record, line, "scheduled_time")?,
        });
        lines.push(line);
    }
    check_span(&t, &rows, &lines)?;
    if rows.is_empty() {
        return Err(TraceError { file: file.into(), line: 0, column: None, reason: "no pods".into() });
    }
    Ok(rows)
}

/// Refuses a pod list whose times span more than [`MAX_SPAN_S`], at the
/// row that stretches it.
fn check_span(t: &Table<'_>, rows: &[PodRow], lines: &[u64]) -> Result<(), TraceError> {
    let Some(first) = rows.iter().filter_map(|r| r.creation_time).min() else { return Ok(()) };
    let times = |r: &PodRow| {
        [
            r.creation_time.map(|c| ("creation_time", c)),
            r.deletion_time.filter(|&d| d > 0).map(|d| ("deletion_time", d)),
        ]
    };
    for (r, &line) in rows.iter().zip(lines) {
        for (col, v) in times(r).into_iter().flatten() {
            if v.saturating_sub(first) > MAX_SPAN_S {
                return Err(t.error(
                    line,
                    t.index(col),
                    format!(
                        "{v} s is {} days after the first creation ({first} s); a trace may span at most {} days",
                        (v - first) / 86_400,
                        MAX_SPAN_S / 86_400
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Reads an arrival order: one 0-based pod row index per line, each below
/// `pods`. Blank lines are not allowed (they would shift every later line).
pub fn read_order(text: &str, file: &str, pods: usize) -> Result<Vec<u32>, TraceError> {
    let mut order = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i as u64 + 1;
        let v = raw.trim();
        let err = |reason: String| TraceError { file: file.into(), line, column: Some((1, "index".into())), reason };
        let idx: u32 = v.parse().map_err(|_| err(format!("`{v}` is not a pod row index")))?;
        if idx as usize >= pods {
            return Err(err(format!("index {idx} is past the last pod row ({} rows)", pods)));
        }
        order.push(idx);
    }
    if order.is_empty() {
        return Err(TraceError { file: file.into(), line: 0, column: None, reason: "no arrivals".into() });
    }
    Ok(order)
}

pub mod jobs;
pub use jobs::{JobRow, read_jobs};

#[cfg(test)]
mod tests;
