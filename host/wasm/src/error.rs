//! Errors of the plugin runtime. Every error names the plugin at fault.

use std::fmt;
use std::sync::Arc;

/// Why a plugin could not be loaded. Nothing already running is affected.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The runtime itself could not be set up.
    #[error("plugin runtime: {0}")]
    Runtime(String),
    /// The component file could not be read.
    #[error("plugin {plugin}: cannot read {source}")]
    Read {
        /// Plugin name.
        plugin: String,
        /// Why (names the file).
        source: tessera_input::FileError,
    },
    /// The digest pinned in the policy does not match the component.
    #[error("plugin {plugin}: digest sha256:{actual} does not match the pinned sha256:{expected}")]
    DigestMismatch {
        /// Plugin name.
        plugin: String,
        /// Pinned digest.
        expected: String,
        /// Digest of the bytes.
        actual: String,
    },
    /// The bytes are not a valid component for this engine.
    #[error("plugin {plugin}: not a valid WebAssembly component: {reason}")]
    Compile {
        /// Plugin name.
        plugin: String,
        /// Cause.
        reason: String,
    },
    /// The component exports neither world of the contract.
    #[error(
        "plugin {plugin}: exports [{}], which is neither the `scorer` nor the `detector` world of tessera:policy \
         (0.2.2, 0.2.1, 0.2.0 or 0.1.0)",
        .exports.join(", ")
    )]
    WrongWorld {
        /// Plugin name.
        plugin: String,
        /// What it exports.
        exports: Vec<String>,
    },
    /// The component is of the other world than the policy expects.
    #[error("plugin {plugin}: is a {found} plugin but the policy uses it as a {expected}")]
    RoleMismatch {
        /// Plugin name.
        plugin: String,
        /// What the policy wanted.
        expected: WorldKind,
        /// What the component is.
        found: WorldKind,
    },
    /// The component imports something the host does not provide.
    #[error("plugin {plugin}: cannot be linked: {reason}")]
    Link {
        /// Plugin name.
        plugin: String,
        /// Cause (names the import).
        reason: String,
    },
    /// Limits in the policy are invalid for this runtime.
    #[error("plugin {plugin}: {reason}")]
    Limits {
        /// Plugin name.
        plugin: String,
        /// Cause.
        reason: String,
    },
    /// Instantiation or the canned calls failed.
    #[error("plugin {plugin}: failed its load check: {error}")]
    Check {
        /// Plugin name.
        plugin: String,
        /// The failing call.
        error: Box<CallError>,
    },
}

/// The two worlds of `tessera:policy` (every version has both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorldKind {
    /// `scorer`: filter and score.
    Scorer,
    /// `detector`: telemetry window to findings.
    Detector,
}

impl fmt::Display for WorldKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WorldKind::Scorer => "scorer",
            WorldKind::Detector => "detector",
        })
    }
}

/// A failed call into a plugin.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("plugin {plugin}@{version}: {kind} (in `{call}`)")]
pub struct CallError {
    /// Plugin name.
    pub plugin: Arc<str>,
    /// Plugin version.
    pub version: Arc<str>,
    /// The WIT function called.
    pub call: &'static str,
    /// What went wrong.
    pub kind: CallFault,
}

impl CallError {
    /// Whether this counts against the plugin's fault budget.
    pub fn is_fault(&self) -> bool {
        self.kind.is_fault()
    }
}

/// What went wrong in a call.
#[derive(Debug, Clone, PartialEq)]
pub enum CallFault {
    /// The epoch deadline passed.
    Timeout {
        /// The deadline.
        deadline_ms: u64,
    },
    /// The guest tried to grow memory past its cap.
    MemoryExceeded {
        /// The cap.
        cap_mib: u64,
        /// What it asked for.
        requested_mib: u64,
    },
    /// The fuel budget ran out.
    FuelExhausted {
        /// The budget.
        fuel: u64,
    },
    /// Any other trap (panic, unreachable, out-of-bounds access, …).
    Trap {
        /// Wasmtime's description.
        trap: String,
        /// Last line the guest wrote to stderr (e.g. its panic message).
        guest_said: Option<String>,
    },
    /// The result does not have one value per candidate.
    WrongLength {
        /// What
        what: &'static str,
        /// Candidates.
        expected: usize,
        /// Values returned.
        got: usize,
    },
    /// The result exceeds the host's size limit for this call.
    OversizedOutput {
        /// What
        what: &'static str,
        /// Size in bytes.
        bytes: usize,
        /// Limit in bytes.
        limit: usize,
    },
    /// A filter verdict names a reason the plugin never declared.
    UnknownReason {
        /// The verdict.
        verdict: u8,
        /// Declared reasons.
        declared: usize,
    },
    /// A scorer's `reuse.scope` names a scope no contract version has (a
    /// component built against a forged or future contract): refused at
    /// load rather than guessing what it promises.
    UnknownScope(String),
    /// The plugin returned an error value (not a fault: its instance stays).
    Guest(String),
    /// The plugin is quarantined after exceeding its fault budget.
    Quarantined {
        /// Faults in the window that tripped the budget.
        faults: u32,
    },
    /// A fresh instance could not be created.
    Instantiate(String),
    /// The plugin refused the node deltas (`apply` returned an error): its
    /// mirror of the cluster is lost, so the instance is replaced; counted
    /// as a fault, or a plugin that always refuses would be re-created on
    /// every call and never quarantined.
    MirrorRefused(String),
    /// The host starved the call past its wall-clock safety net while the
    /// plugin used less than its deadline of CPU: host overload, not the
    /// plugin's fault (not counted against its fault budget).
    HostOverloaded {
        /// The deadline.
        deadline_ms: u64,
        /// CPU time the plugin used.
        cpu_ms: u64,
        /// Wall time that passed.
        wall_ms: u64,
    },
    /// A scorer of the `node` scope (`tessera:policy/reuse`) answered
    /// differently for a node that had not changed, or one of the `zone`
    /// scope differently for two nodes of one zone in one call: its
    /// promise is broken, so its answers are no longer reused (the
    /// decision took the fresh ones). Not counted against the fault
    /// budget: the call itself answered.
    BrokenPromise {
        /// The scope it declared (`node`, `node-shape`, `zone`).
        scope: &'static str,
        /// The node.
        node: u32,
        /// What it answered before, for a pod of the same class.
        reused: i64,
        /// What it answered now.
        fresh: i64,
    },
}

impl CallFault {
    /// Every code [`CallFault::code`] gives, in declaration order (metrics
    /// create a series for each).
    pub const CODES: [&'static str; 14] = [
        "PLUGIN-TIMEOUT",
        "PLUGIN-MEMORY",
        "PLUGIN-FUEL",
        "PLUGIN-TRAP",
        "PLUGIN-WRONG-LENGTH",
        "PLUGIN-OVERSIZED",
        "PLUGIN-BAD-REASON",
        "PLUGIN-BAD-SCOPE",
        "PLUGIN-ERROR",
        "PLUGIN-QUARANTINED",
        "PLUGIN-INSTANTIATE",
        "PLUGIN-APPLY",
        "HOST-OVERLOADED",
        "PLUGIN-REUSE-BROKEN",
    ];

    /// Whether this counts against the fault budget and replaces the instance.
    pub fn is_fault(&self) -> bool {
        !matches!(
            self,
            CallFault::Guest(_)
                | CallFault::Quarantined { .. }
                | CallFault::HostOverloaded { .. }
                | CallFault::BrokenPromise { .. }
        )
    }

    /// Stable reason code.
    pub fn code(&self) -> &'static str {
        match self {
            CallFault::Timeout { .. } => "PLUGIN-TIMEOUT",
            CallFault::MemoryExceeded { .. } => "PLUGIN-MEMORY",
            CallFault::FuelExhausted { .. } => "PLUGIN-FUEL",
            CallFault::Trap { .. } => "PLUGIN-TRAP",
            CallFault::WrongLength { .. } => "PLUGIN-WRONG-LENGTH",
            CallFault::OversizedOutput { .. } => "PLUGIN-OVERSIZED",
            CallFault::UnknownReason { .. } => "PLUGIN-BAD-REASON",
            CallFault::UnknownScope(_) => "PLUGIN-BAD-SCOPE",
            CallFault::Guest(_) => "PLUGIN-ERROR",
            CallFault::Quarantined { .. } => "PLUGIN-QUARANTINED",
            CallFault::Instantiate(_) => "PLUGIN-INSTANTIATE",
            CallFault::MirrorRefused(_) => "PLUGIN-APPLY",
            CallFault::HostOverloaded { .. } => "HOST-OVERLOADED",
            CallFault::BrokenPromise { .. } => "PLUGIN-REUSE-BROKEN",
        }
    }
}

impl fmt::Display for CallFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.code())?;
        match self {
            CallFault::Timeout { deadline_ms } => {
                write!(f, "ran past its {deadline_ms} ms deadline")
            }
            CallFault::MemoryExceeded { cap_mib, requested_mib } => {
                write!(f, "tried to grow memory to {requested_mib} MiB, over its {cap_mib} MiB cap")
            }
            CallFault::FuelExhausted { fuel } => write!(f, "used up its fuel budget of {fuel}"),
            CallFault::Trap { trap, guest_said: None } => write!(f, "trapped: {trap}"),
            CallFault::Trap { trap, guest_said: Some(said) } => write!(f, "trapped: {trap}; guest said: {said}"),
            CallFault::WrongLength { what, expected, got } => {
                write!(f, "returned {got} {what} for {expected} candidates")
            }
            CallFault::OversizedOutput { what, bytes, limit } => {
                write!(f, "returned {bytes} bytes of {what}, over the {limit}-byte limit")
            }
            CallFault::UnknownReason { verdict, declared } => {
                write!(f, "filter verdict {verdict} names no reason (it declares {declared})")
            }
            CallFault::UnknownScope(name) => write!(
                f,
                "declares the reuse scope `{name}`, which no contract version has ({})",
                crate::contract::scope_names()
            ),
            CallFault::Guest(msg) => write!(f, "returned an error: {msg}"),
            CallFault::Quarantined { faults } => {
                write!(f, "quarantined after {faults} faults; reload it to release")
            }
            CallFault::Instantiate(msg) => write!(f, "could not be instantiated: {msg}"),
            CallFault::MirrorRefused(msg) => write!(f, "refused the node deltas (apply): {msg}"),
            CallFault::HostOverloaded { deadline_ms, cpu_ms, wall_ms } => write!(
                f,
                "the host gave the call {cpu_ms} ms of CPU in {wall_ms} ms (its deadline is {deadline_ms} ms of CPU): host overload, not the plugin's fault"
            ),
            CallFault::BrokenPromise { scope: "zone", node, reused, fresh } => write!(
                f,
                "declares the `zone` reuse scope but answered {fresh} for node {node}, where it answered {reused} for another node of that zone in the same call; its answers are no longer reused"
            ),
            CallFault::BrokenPromise { scope, node, reused, fresh } => write!(
                f,
                "declares the `{scope}` reuse scope but answered {fresh} for node {node}, which had not changed since it answered {reused} for a pod of the same class; its answers are no longer reused"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CallFault;

    #[test]
    fn every_fault_kind_has_one_of_the_listed_codes_and_each_code_one_kind() {
        let kinds = [
            CallFault::Timeout { deadline_ms: 1 },
            CallFault::MemoryExceeded { cap_mib: 1, requested_mib: 2 },
            CallFault::FuelExhausted { fuel: 1 },
            CallFault::Trap { trap: String::new(), guest_said: None },
            CallFault::WrongLength { what: "scores", expected: 1, got: 2 },
            CallFault::OversizedOutput { what: "hints", bytes: 2, limit: 1 },
            CallFault::UnknownReason { verdict: 3, declared: 1 },
            CallFault::UnknownScope(String::new()),
            CallFault::Guest(String::new()),
            CallFault::Quarantined { faults: 3 },
            CallFault::Instantiate(String::new()),
            CallFault::MirrorRefused(String::new()),
            CallFault::HostOverloaded { deadline_ms: 1, cpu_ms: 0, wall_ms: 10 },
            CallFault::BrokenPromise { scope: "node", node: 1, reused: 2, fresh: 3 },
        ];
        let codes: Vec<&str> = kinds.iter().map(CallFault::code).collect();
        assert_eq!(codes, CallFault::CODES);
    }
}
