//! NVML through `nvml-wrapper`: the real [`GpuSource`].

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::event::EventSet;

use super::{GpuReading, GpuSource};
use crate::AgentError;

/// Most XID events drained from one GPU per sample.
const MAX_EVENTS_PER_SAMPLE: usize = 64;

/// Hardware reasons that make a GPU degraded (a software power cap is the
/// normal state of a busy GPU and is not among them).
const HARDWARE_THROTTLE: ThrottleReasons = ThrottleReasons::HW_SLOWDOWN
    .union(ThrottleReasons::HW_THERMAL_SLOWDOWN)
    .union(ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN)
    .union(ThrottleReasons::SW_THERMAL_SLOWDOWN);

/// What NVML told about a GPU when the source opened.
struct Known {
    uuid: String,
    name: String,
    /// Critical-XID events of this GPU (one set per GPU, so that a GPU without
    /// event support does not cost the others theirs); `None` when the GPU
    /// does not support them.
    events: Option<EventSet<'static>>,
}

/// Reads every GPU of the node through NVML.
///
/// The NVML handle lives as long as the process (it is leaked on open: event
/// sets borrow it, and an agent opens NVML once).
pub struct NvmlSource {
    nvml: &'static Nvml,
    driver_version: Option<String>,
    known: Vec<Known>,
}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSource")
            .field("driver_version", &self.driver_version)
            .field("gpus", &self.known.len())
            .finish()
    }
}

/// Whether NVML's error means there is no usable driver on this node.
fn is_no_driver(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::LibloadingError(_)
            | NvmlError::FailedToLoadSymbol(_)
            | NvmlError::DriverNotLoaded
            | NvmlError::LibraryNotFound
            | NvmlError::FunctionNotFound
    )
}

fn nvml_error(call: &'static str, e: &NvmlError) -> AgentError {
    AgentError::Nvml { call, reason: e.to_string() }
}

/// A measurement: `None` when the GPU does not support it (or it failed; a
/// lost GPU is noted in `lost`).
fn opt<T>(r: Result<T, NvmlError>, what: &str, index: u32, lost: &mut bool) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(NvmlError::NotSupported) => None,
        Err(NvmlError::GpuLost) => {
            *lost = true;
            None
        }
        Err(e) => {
            tracing::debug!(gpu = index, "NVML {what}: {e}");
            None
        }
    }
}

impl NvmlSource {
    /// Loads and initialises NVML and lists the GPUs. Without a driver:
    /// [`AgentError::NoDriver`] ("no NVIDIA driver (NVML: …)").
    pub fn open() -> Result<Self, AgentError> {
        let nvml = Nvml::init().map_err(|e| {
            if is_no_driver(&e) { AgentError::NoDriver { reason: e.to_string() } } else { nvml_error("nvmlInit", &e) }
        })?;
        let nvml: &'static Nvml = Box::leak(Box::new(nvml));
        let driver_version = nvml.sys_driver_version().ok();
        let count = nvml.device_count().map_err(|e| nvml_error("nvmlDeviceGetCount", &e))?;
        let mut me = Self { nvml, driver_version, known: Vec::new() };
        for index in 0..count {
            let k = me.discover(index);
            me.known.push(k);
        }
        Ok(me)
    }

    /// The UUID, name and event set of GPU `index`.
    fn discover(&self, index: u32) -> Known {
        let unknown = || Known { uuid: format!("GPU-unknown-{index}"), name: "unknown".into(), events: None };
        let Ok(d) = self.nvml.device_by_index(index) else { return unknown() };
        let uuid = d.uuid().unwrap_or_else(|_| unknown().uuid);
        let name = d.name().unwrap_or_else(|_| unknown().name);
        Known { uuid, name, events: self.register_xid_events(index) }
    }

    #[cfg(target_os = "linux")]
    fn register_xid_events(&self, index: u32) -> Option<EventSet<'static>> {
        use nvml_wrapper::bitmasks::event::EventTypes;
        let d = self.nvml.device_by_index(index).ok()?;
        if !d.supported_event_types().ok()?.contains(EventTypes::CRITICAL_XID_ERROR) {
            return None;
        }
        let set = self.nvml.create_event_set().ok()?;
        match d.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
            Ok(set) => Some(set),
            Err(e) => {
                tracing::warn!(gpu = index, "NVML: no XID events for this GPU: {e}");
                None
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn register_xid_events(&self, _index: u32) -> Option<EventSet<'static>> {
        None
    }

    /// Critical XIDs waiting in GPU `i`'s event set, without blocking.
    fn drain_xids(&self, i: usize) -> Vec<u64> {
        use nvml_wrapper::enums::event::XidError;
        let Some(set) = self.known.get(i).and_then(|k| k.events.as_ref()) else { return Vec::new() };
        let mut xids = Vec::new();
        while xids.len() < MAX_EVENTS_PER_SAMPLE {
            match set.wait(0) {
                Ok(ev) => xids.push(match ev.event_data {
                    Some(XidError::Value(x)) => x,
                    Some(XidError::Unknown) | None => 0,
                }),
                Err(NvmlError::Timeout) => break,
                Err(e) => {
                    tracing::debug!(gpu = i, "NVML event wait: {e}");
                    break;
                }
            }
        }
        xids
    }

    /// The readings of GPU `index`.
    fn read(&self, index: u32) -> GpuReading {
        let i = index as usize;
        let (uuid, name) = self.known.get(i).map_or_else(
            || (format!("GPU-unknown-{index}"), "unknown".to_string()),
            |k| (k.uuid.clone(), k.name.clone()),
        );
        let xids = self.drain_xids(i);
        let mut r = GpuReading { index, uuid, name, xids, ..GpuReading::default() };
        let d = match self.nvml.device_by_index(index) {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(gpu = index, "NVML device: {e}");
                r.lost = matches!(e, NvmlError::GpuLost);
                return r;
            }
        };
        let lost = &mut r.lost;
        r.util_percent = opt(d.utilization_rates(), "utilization", index, lost).map(|u| u.gpu);
        if let Some(m) = opt(d.memory_info(), "memory", index, lost) {
            r.memory_total_bytes = Some(m.total);
            r.memory_used_bytes = Some(m.used);
        }
        r.temperature_c = opt(d.temperature(TemperatureSensor::Gpu), "temperature", index, lost);
        r.power_mw = opt(d.power_usage(), "power", index, lost);
        let ecc = |t| d.total_ecc_errors(t, EccCounter::Volatile);
        r.ecc_uncorrected = opt(ecc(MemoryError::Uncorrected), "ECC", index, lost);
        r.ecc_corrected = opt(ecc(MemoryError::Corrected), "ECC", index, lost);
        r.throttled = opt(d.current_throttle_reasons(), "throttle reasons", index, lost)
            .is_some_and(|t| t.intersects(HARDWARE_THROTTLE));
        r
    }
}

impl GpuSource for NvmlSource {
    fn driver_version(&self) -> Option<String> {
        self.driver_version.clone()
    }

    fn sample(&mut self) -> Result<Vec<GpuReading>, AgentError> {
        let count = self.nvml.device_count().map_err(|e| nvml_error("nvmlDeviceGetCount", &e))?;
        while self.known.len() < count as usize {
            let k = self.discover(self.known.len() as u32);
            self.known.push(k);
        }
        Ok((0..count).map(|i| self.read(i)).collect())
    }

    fn topology(&mut self) -> Option<crate::topology::TopologyReading> {
        read_topology(self.nvml)
    }
}

/// Most NVLinks of one GPU NVML knows (`NVML_NVLINK_MAX_LINKS`).
const MAX_NVLINKS: u32 = 18;

/// The interconnect as NVML tells it: bus ids, pairwise common ancestors
/// and the far ends of active NVLinks. `None` if a GPU cannot even be
/// named by its bus id.
#[cfg(target_os = "linux")]
fn read_topology(nvml: &Nvml) -> Option<crate::topology::TopologyReading> {
    use crate::topology::{Ancestor, TopologyReading};
    use nvml_wrapper::enum_wrappers::device::TopologyLevel;
    let n = nvml.device_count().ok()?;
    let bus_ids: Vec<String> = (0..n)
        .map(|i| nvml.device_by_index(i).and_then(|d| d.pci_info()).map(|p| p.bus_id))
        .collect::<Result<_, _>>()
        .ok()?;
    let ancestors = (0..n)
        .map(|i| {
            (i + 1..n)
                .map(|j| {
                    let (a, b) = (nvml.device_by_index(i).ok()?, nvml.device_by_index(j).ok()?);
                    Some(match a.topology_common_ancestor(b).ok()? {
                        TopologyLevel::Internal => Ancestor::Internal,
                        TopologyLevel::Single => Ancestor::Single,
                        TopologyLevel::Multiple => Ancestor::Multiple,
                        TopologyLevel::HostBridge => Ancestor::HostBridge,
                        TopologyLevel::Node => Ancestor::Node,
                        TopologyLevel::System => Ancestor::System,
                    })
                })
                .collect()
        })
        .collect();
    let nvlink_peers = (0..n)
        .map(|i| {
            let Ok(d) = nvml.device_by_index(i) else { return Vec::new() };
            (0..MAX_NVLINKS)
                .filter_map(|l| {
                    let link = d.link_wrapper_for(l);
                    // A link past the GPU's last answers an error: not active.
                    link.is_active().ok().filter(|&on| on)?;
                    link.remote_pci_info().ok().map(|p| p.bus_id)
                })
                .collect()
        })
        .collect();
    Some(TopologyReading { bus_ids, ancestors, nvlink_peers })
}

/// Topology queries are Linux-only in NVML.
#[cfg(not(target_os = "linux"))]
fn read_topology(_nvml: &Nvml) -> Option<crate::topology::TopologyReading> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine has no NVIDIA driver: opening NVML fails cleanly, saying
    /// so. (On a GPU machine the ignored test in tests/nvml.rs runs instead.)
    #[test]
    fn without_a_driver_open_says_so() {
        if std::path::Path::new("/proc/driver/nvidia/version").exists() {
            eprintln!("skipped: an NVIDIA driver is loaded here");
            return;
        }
        let e = NvmlSource::open().unwrap_err();
        assert!(matches!(e, AgentError::NoDriver { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.starts_with("no NVIDIA driver (NVML: "), "{msg}");
    }

    #[test]
    fn no_driver_errors() {
        assert!(is_no_driver(&NvmlError::DriverNotLoaded));
        assert!(is_no_driver(&NvmlError::LibraryNotFound));
        assert!(!is_no_driver(&NvmlError::NoPermission));
        assert!(!is_no_driver(&NvmlError::NotSupported));
    }
}
