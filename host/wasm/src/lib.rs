//! # tessera-wasm
//!
//! The sandboxed plugin runtime. Policies are WebAssembly components of the
//! `tessera:policy` contract (0.2.2; components built against 0.2.1, 0.2.0
//! and 0.1.0 load and decide as before, see [`ContractVersion`]), run by
//! wasmtime with:
//!
//! - **compile once**: precompiled artifacts cached by component digest and
//!   engine settings ([`ArtifactCache`]), verified before use;
//! - **cheap instances**: `InstancePre` plus the pooling allocator;
//! - **hard limits** per plugin: a per-call epoch deadline, a memory cap,
//!   optional fuel; no filesystem, network, clock or entropy unless granted;
//! - **faults contained**: a trap, timeout, memory overrun or malformed
//!   result fails only that call, with an error naming the plugin and the
//!   cause; the instance is replaced, faults are counted, and a plugin over
//!   its budget is quarantined while the rest of the policy keeps deciding;
//! - **hot reload**: a new version is loaded and checked beside the running
//!   one and swapped in atomically; calls in flight finish on the old one.
//!
//! Data rule: one call per pod per plugin. Each instance mirrors the nodes,
//! fed with deltas ([`NodeFeed`]); calls pass candidate ids and get one value
//! per candidate back. A scorer that promises the `node` scope is asked
//! only about the candidates that changed since it answered for a pod of
//! the same class (`reuse`, checked now and then).

mod bindings;
pub mod budget;
mod cache;
mod check;
mod contract;
mod error;
mod feed;
mod host;
mod plugin;
mod policy;
mod reuse;
mod runtime;
mod signature;
mod slot;
mod stderr;

pub use bindings::types as wit;
pub use budget::{CallBudget, FUEL_PER_MS, SYNC_FUEL_PER_DELTA, SYNC_US_PER_DELTA};
pub use cache::{ArtifactCache, CacheOutcome, content_key, sha256_hex};
pub use check::{canned_frame, canned_nodes, canned_pods};
pub use contract::ContractVersion;
pub use error::{CallError, CallFault, LoadError, WorldKind};
pub use feed::{Deltas, NodeFeed, to_wit_node, to_wit_pod};
pub use plugin::{
    MAX_FILTER_REASONS, MAX_GUEST_ERROR, MAX_INFO_DESCRIPTION, MAX_INFO_NAME, PluginInfo, PluginVersion, ScoreOutput,
};
pub use policy::{Decision, Member, PluginOutcome, Policy, Rejection};
pub use runtime::{LoadReport, PluginSpec, Runtime, RuntimeConfig, is_wasm};
pub use slot::{PluginSlot, SlotStats};
