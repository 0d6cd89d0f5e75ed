//! GPU telemetry sources: the [`GpuSource`] trait, NVML behind it
//! ([`NvmlSource`]) and a recorded replay for tests and CI
//! ([`RecordedSource`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::AgentError;

mod nvml;

pub use nvml::NvmlSource;

/// One GPU's raw readings, as NVML gives them (before the health rule and
/// unit conversions of [`crate::health::Tracker`]). `None` means NVML does not
/// support the measurement on this GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuReading {
    /// NVML index.
    pub index: u32,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// NVML lost the device (`GpuLost`): nothing else could be read.
    #[serde(default)]
    pub lost: bool,
    /// Kernel time over NVML's sample period, % (`nvmlDeviceGetUtilizationRates`).
    pub util_percent: Option<u32>,
    /// Device memory, bytes.
    pub memory_total_bytes: Option<u64>,
    /// Device memory in use, bytes.
    pub memory_used_bytes: Option<u64>,
    /// Die temperature, °C.
    pub temperature_c: Option<u32>,
    /// Power draw, mW.
    pub power_mw: Option<u32>,
    /// Volatile uncorrected ECC errors.
    pub ecc_uncorrected: Option<u64>,
    /// Volatile corrected ECC errors.
    pub ecc_corrected: Option<u64>,
    /// Clocks held down by hardware (hardware or thermal slowdown, power
    /// brake).
    #[serde(default)]
    pub throttled: bool,
    /// Critical XID events since the previous reading.
    #[serde(default)]
    pub xids: Vec<u64>,
}

/// Where GPU readings come from.
pub trait GpuSource: Send {
    /// The driver's version, when known.
    fn driver_version(&self) -> Option<String>;

    /// One reading of every GPU. A measurement a GPU does not support is
    /// `None` in its reading; only a failure for the whole node is an error.
    fn sample(&mut self) -> Result<Vec<GpuReading>, AgentError>;

    /// How the GPUs are connected (read once: it does not change while
    /// the node runs); `None` when the source cannot tell.
    fn topology(&mut self) -> Option<crate::topology::TopologyReading> {
        None
    }
}

/// What a [`RecordedSource`] does after its last recorded sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AtEnd {
    /// Repeat the last sample, without its XID events (they happened once).
    #[default]
    Hold,
    /// Start again from the first sample.
    Cycle,
    /// Fail with [`AgentError::RecordingExhausted`].
    Error,
}

/// A recorded NVML session, the JSON of a fixture file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recording {
    /// What the node was (free text).
    #[serde(default)]
    pub description: String,
    /// The driver's version.
    pub driver_version: Option<String>,
    /// One entry per call of [`GpuSource::sample`].
    pub samples: Vec<RecordedSample>,
    /// The interconnect, as NVML reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<crate::topology::TopologyReading>,
}

/// One recorded sample of every GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedSample {
    /// The readings.
    pub gpus: Vec<GpuReading>,
}

/// Replays a [`Recording`]: one recorded sample per call.
#[derive(Debug, Clone)]
pub struct RecordedSource {
    path: PathBuf,
    recording: Recording,
    next: usize,
    at_end: AtEnd,
}

impl RecordedSource {
    /// Reads a fixture file (JSON [`Recording`]); holds the last sample at
    /// the end.
    pub fn from_file(path: &Path) -> Result<Self, AgentError> {
        let text = std::fs::read_to_string(path).map_err(|source| AgentError::Read { path: path.into(), source })?;
        Self::from_json(path, &text)
    }

    /// Parses a recording; `path` names it in errors.
    pub fn from_json(path: &Path, text: &str) -> Result<Self, AgentError> {
        let recording: Recording =
            serde_json::from_str(text).map_err(|source| AgentError::Fixture { path: path.into(), source })?;
        if recording.samples.is_empty() {
            return Err(AgentError::Parse { path: path.into(), what: "no recorded samples".into() });
        }
        Ok(Self { path: path.into(), recording, next: 0, at_end: AtEnd::Hold })
    }

    /// What to do after the last sample.
    pub fn at_end(mut self, at_end: AtEnd) -> Self {
        self.at_end = at_end;
        self
    }

    /// The recording.
    pub fn recording(&self) -> &Recording {
        &self.recording
    }
}

impl GpuSource for RecordedSource {
    fn driver_version(&self) -> Option<String> {
        self.recording.driver_version.clone()
    }

    fn topology(&mut self) -> Option<crate::topology::TopologyReading> {
        self.recording.topology.clone()
    }

    fn sample(&mut self) -> Result<Vec<GpuReading>, AgentError> {
        let samples = &self.recording.samples;
        let i = self.next;
        self.next += 1;
        if let Some(s) = samples.get(i) {
            return Ok(s.gpus.clone());
        }
        match self.at_end {
            AtEnd::Hold => {
                let mut gpus = samples[samples.len() - 1].gpus.clone();
                gpus.iter_mut().for_each(|g| g.xids.clear());
                Ok(gpus)
            }
            AtEnd::Cycle => Ok(samples[i % samples.len()].gpus.clone()),
            AtEnd::Error => Err(AgentError::RecordingExhausted { path: self.path.clone(), count: samples.len() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = r#"{"driver_version": "550.90.07", "samples": [
        {"gpus": [{"index": 0, "uuid": "GPU-a", "name": "H", "util_percent": 10, "xids": [79]}]},
        {"gpus": [{"index": 0, "uuid": "GPU-a", "name": "H", "util_percent": 20, "xids": [13]}]}
    ]}"#;

    type Replayed = Result<(Option<u32>, Vec<u64>), String>;

    fn utils(s: &mut RecordedSource, n: usize) -> Vec<Replayed> {
        (0..n).map(|_| s.sample().map(|g| (g[0].util_percent, g[0].xids.clone())).map_err(|e| e.to_string())).collect()
    }

    #[test]
    fn replays_then_holds_cycles_or_fails() {
        let p = Path::new("two.json");
        let mut s = RecordedSource::from_json(p, TWO).unwrap();
        assert_eq!(s.driver_version().as_deref(), Some("550.90.07"));
        assert_eq!(
            utils(&mut s, 3),
            vec![Ok((Some(10), vec![79])), Ok((Some(20), vec![13])), Ok((Some(20), vec![]))],
            "held without its events"
        );
        let mut s = RecordedSource::from_json(p, TWO).unwrap().at_end(AtEnd::Cycle);
        assert_eq!(utils(&mut s, 3)[2], Ok((Some(10), vec![79])));
        let mut s = RecordedSource::from_json(p, TWO).unwrap().at_end(AtEnd::Error);
        assert_eq!(utils(&mut s, 3)[2], Err("NVML fixture two.json: no more recorded samples after 2".into()));
    }

    #[test]
    fn bad_fixtures_say_where() {
        let e = RecordedSource::from_json(Path::new("f.json"), r#"{"samples": [{"gpus": [{"index": 0, "uid": 1}]}]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("NVML fixture f.json: unknown field `uid`"), "{e}");
        assert!(e.contains("line 1 column"), "{e}");
        let e = RecordedSource::from_json(Path::new("f.json"), r#"{"samples": []}"#).unwrap_err().to_string();
        assert_eq!(e, "f.json: no recorded samples");
    }
}
