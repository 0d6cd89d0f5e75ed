//! The agent: a node's name, its GPU source (if NVML answered) and its host
//! source, sampled together into an [`AgentSample`].

use std::time::{SystemTime, UNIX_EPOCH};

use crate::AgentError;
use crate::gpu::GpuSource;
use crate::health::{Tracker, XidCounts};
use crate::host::HostSource;
use crate::sample::{AgentSample, NvmlStatus};

/// Samples one node.
pub struct Agent {
    node: String,
    gpus: Option<Box<dyn GpuSource>>,
    nvml: NvmlStatus,
    host: HostSource,
    tracker: Tracker,
    /// The GPUs' links as published, read once.
    topology: Option<String>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("node", &self.node).field("nvml", &self.nvml).finish_non_exhaustive()
    }
}

/// Milliseconds since the Unix epoch, now.
fn now_unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Agent {
    /// An agent for `node`. `gpus` is the opened GPU source or why it could not
    /// be opened (then the agent samples CPU and memory only, and the reason is
    /// kept in [`NvmlStatus::message`]). `tracker` holds the health rule's
    /// threshold.
    pub fn new(
        node: impl Into<String>,
        gpus: Result<Box<dyn GpuSource>, AgentError>,
        host: HostSource,
        tracker: Tracker,
    ) -> Self {
        let (mut gpus, nvml) = match gpus {
            Ok(g) => {
                let nvml = NvmlStatus { available: true, driver_version: g.driver_version(), message: None };
                (Some(g), nvml)
            }
            Err(e) => (None, NvmlStatus { available: false, driver_version: None, message: Some(e.to_string()) }),
        };
        // The interconnect is read once; a reading that does not add up is
        // said and left out.
        let topology = gpus.as_mut().and_then(|g| g.topology()).and_then(|t| match crate::topology::links(&t) {
            Ok(l) => Some(tessera_core::topology::format(&l)),
            Err(e) => {
                tracing::warn!("NVML topology left out: {e}");
                None
            }
        });
        Self { node: node.into(), gpus, nvml, host, tracker, topology }
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Whether NVML is there, and why not.
    pub fn nvml(&self) -> &NvmlStatus {
        &self.nvml
    }

    /// XID events seen so far, per GPU and code.
    pub fn xid_counts(&self) -> &XidCounts {
        self.tracker.xid_counts()
    }

    /// One sample of the node. A failed GPU sample leaves `gpus` empty and
    /// says why in `nvml.message`; only failing to read CPU or memory is an
    /// error.
    pub fn sample(&mut self) -> Result<AgentSample, AgentError> {
        let (cpu, memory) = self.host.sample()?;
        let taken_at_unix_ms = now_unix_ms();
        let mut nvml = self.nvml.clone();
        let mut gpus = Vec::new();
        if let Some(source) = self.gpus.as_mut() {
            match source.sample() {
                Ok(readings) => gpus = readings.iter().map(|r| self.tracker.assess(r, taken_at_unix_ms)).collect(),
                Err(e) => {
                    tracing::warn!("GPU sample failed: {e}");
                    nvml.message = Some(format!("GPU sample failed: {e}"));
                }
            }
        }
        Ok(AgentSample {
            node: self.node.clone(),
            taken_at_unix_ms,
            cpu,
            memory,
            gpus,
            nvml,
            gpu_topology: self.topology.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Health;
    use crate::gpu::{AtEnd, RecordedSource};
    use std::path::Path;
    use std::time::Duration;

    fn host() -> HostSource {
        HostSource::new().first_interval(Duration::from_millis(10))
    }

    #[test]
    fn without_nvml_cpu_and_memory_only() {
        let no = AgentError::NoDriver { reason: "libnvidia-ml.so: cannot open shared object file".into() };
        let mut a = Agent::new("n1", Err(no), host(), Tracker::default());
        let s = a.sample().unwrap();
        assert_eq!(s.node, "n1");
        assert!(s.gpus.is_empty());
        assert!(!s.nvml.available);
        assert_eq!(
            s.nvml.message.as_deref(),
            Some("no NVIDIA driver (NVML: libnvidia-ml.so: cannot open shared object file)")
        );
        assert!(s.cpu.cores > 0 && s.memory.total_mib > 0);
    }

    #[test]
    fn the_recorded_interconnect_is_published_with_every_sample() {
        let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nvml-h100x8.json");
        let mut a =
            Agent::new("h100", Ok(Box::new(RecordedSource::from_file(&f).unwrap())), host(), Tracker::default());
        let want = "0/0/0,0/0/0,0/1/0,0/1/0,0/2/1,0/2/1,0/3/1,0/3/1";
        for _ in 0..2 {
            assert_eq!(
                a.sample().unwrap().gpu_topology.as_deref(),
                Some(want),
                "one NVSwitch island, pairs, two sockets"
            );
        }
        // A reading that does not add up is left out, the samples go on.
        let json =
            r#"{"samples": [{"gpus": []}], "topology": {"bus_ids": ["a"], "ancestors": [], "nvlink_peers": []}}"#;
        let src = RecordedSource::from_json(Path::new("t.json"), json).unwrap();
        let mut a = Agent::new("n1", Ok(Box::new(src)), host(), Tracker::default());
        assert_eq!(a.sample().unwrap().gpu_topology, None);
    }

    #[test]
    fn a_failing_gpu_source_is_reported_not_fatal() {
        let json = r#"{"samples": [{"gpus": [{"index": 0, "uuid": "GPU-a", "name": "H", "temperature_c": 90}]}]}"#;
        let src = RecordedSource::from_json(Path::new("r.json"), json).unwrap().at_end(AtEnd::Error);
        let mut a = Agent::new("n1", Ok(Box::new(src)), host(), Tracker::new(88));
        let s = a.sample().unwrap();
        assert!(s.nvml.available && s.nvml.message.is_none());
        assert_eq!(s.gpus[0].health, Health::Degraded, "90 °C ≥ 88 °C");
        let s = a.sample().unwrap();
        assert!(s.gpus.is_empty());
        assert!(s.nvml.available);
        assert_eq!(
            s.nvml.message.as_deref(),
            Some("GPU sample failed: NVML fixture r.json: no more recorded samples after 1")
        );
    }
}
