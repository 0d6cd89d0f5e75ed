//! Tessera's node agent (`tessera agent`), one per node as a DaemonSet.
//!
//! It reads GPU telemetry through NVML ([`gpu::NvmlSource`]: utilisation,
//! memory, temperature, power, ECC counters, XID events), CPU and memory from
//! the kernel ([`host::HostSource`]), judges each GPU's health
//! ([`health`]), and publishes an [`AgentSample`] on `GET /v1/sample` for the
//! scheduler and OpenMetrics on `GET /metrics` ([`serve`]). Without an NVIDIA
//! driver the agent keeps going with CPU and memory only, and says why in
//! [`NvmlStatus`].
//!
//! Every IO edge is a trait or an injectable path: [`gpu::GpuSource`] has a
//! recorded implementation ([`gpu::RecordedSource`]) that replays NVML readings
//! from a JSON fixture, so everything above the NVML calls is tested without a
//! GPU.

pub mod agent;
pub mod error;
pub mod gpu;
pub mod health;
pub mod host;
pub mod metrics;
pub mod sample;
pub mod serve;
pub mod topology;

pub use agent::Agent;
pub use error::AgentError;
pub use sample::{AgentSample, CpuSample, GpuSample, Health, MemorySample, NvmlStatus, XidEvent};
pub use serve::AgentConfig;
