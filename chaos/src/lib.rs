//! `tessera-chaos`: proves a scheduling policy under faults before it is
//! rolled out. A campaign replays a workload on a simulated twin of the
//! cluster for a candidate and a baseline policy, scenario by scenario and
//! seed by seed, injects faults from the catalogue, and gates the
//! candidate's results against the baseline's: the verdict is `PROMOTE`
//! or `BLOCK` with the gates that failed.
//!
//! The crate is deterministic and does no IO beyond reading a campaign
//! file: the twin takes a placer (the binary supplies the Wasm policy) and
//! a seed.

pub mod campaign;
pub mod export;
pub mod fault;
pub mod forecast;
pub mod twin;
pub mod verdict;

pub use campaign::{Campaign, CampaignError};
pub use fault::{FaultKind, FaultSpec, ResolvedFault, Target};
pub use twin::Outcome;
pub use verdict::{GateResult, Report, Verdict};
