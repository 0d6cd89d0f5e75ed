//! The agent's errors.

use std::path::PathBuf;

/// What can go wrong in the agent. Each variant names the thing at fault.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// NVML could not be loaded or initialised: no NVIDIA driver on this node
    /// (library missing, driver not loaded). The agent serves CPU and memory
    /// only.
    #[error("no NVIDIA driver (NVML: {reason})")]
    NoDriver {
        /// NVML's own words.
        reason: String,
    },
    /// An NVML call failed for the whole node (not one metric of one GPU).
    #[error("NVML {call}: {reason}")]
    Nvml {
        /// The call, e.g. `nvmlDeviceGetCount`.
        call: &'static str,
        /// NVML's own words.
        reason: String,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// A kernel file did not have the expected shape.
    #[error("{}: {what}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        what: String,
    },
    /// A recorded NVML fixture is not valid JSON of the expected shape.
    #[error("NVML fixture {}: {source}", path.display())]
    Fixture {
        /// The fixture file.
        path: PathBuf,
        /// The JSON error, with its line and column.
        #[source]
        source: serde_json::Error,
    },
    /// A recorded source ran out of samples (replay set to end with an error).
    #[error("NVML fixture {}: no more recorded samples after {count}", path.display())]
    RecordingExhausted {
        /// The fixture file.
        path: PathBuf,
        /// Samples replayed.
        count: usize,
    },
    /// The listening socket could not be bound or served.
    #[error("cannot serve on {addr}: {source}")]
    Serve {
        /// The address.
        addr: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
}
