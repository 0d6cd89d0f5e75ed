//! A loaded plugin version (compiled component, linked, checked) with its
//! pool of live instances, and the slot that holds the current version of a
//! plugin, swaps in new versions atomically and counts faults.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tessera_policy::{Grants, Limits};
use wasmtime::{Engine, Store, Trap};

use crate::bindings::types as wit;
use crate::budget::{self, CallBudget, CallClock, HostStarved};
use crate::contract::{Bound, ContractVersion, Pre};
use crate::error::{CallError, CallFault, WorldKind};
use crate::feed::NodeFeed;
use crate::host::HostState;

/// Largest error message a guest may return, in bytes.
pub const MAX_GUEST_ERROR: usize = 4096;

/// Longest name, version or filter reason code a plugin may declare, bytes.
pub const MAX_INFO_NAME: usize = 64;
/// Longest description a plugin may declare, bytes.
pub const MAX_INFO_DESCRIPTION: usize = 1024;
/// Most filter reasons a plugin may declare (a verdict is a `u8`).
pub const MAX_FILTER_REASONS: usize = 64;

/// An epoch deadline no call reaches (replays: fuel decides).
const NEVER: u64 = 1 << 40;

/// What a plugin says about itself (`info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    /// Name the plugin reports.
    pub name: String,
    /// Version the plugin reports.
    pub version: String,
    /// Description.
    pub description: String,
    /// Filter reason codes, by verdict `k - 1`.
    pub filter_reasons: Vec<String>,
}

/// A live instance, the feed its mirror follows and the generation of that
/// feed it reflects. A version may serve several policies (each with its
/// own feed); an instance only ever serves the feed it first synced from.
struct Instance {
    store: Store<HostState>,
    bound: Bound,
    feed: Option<u64>,
    synced: u64,
}

/// Scores returned by a scorer, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScoreOutput {
    /// One per candidate.
    pub values: Vec<i64>,
    /// Empty or one per candidate (255 = none).
    pub gpu_hints: Vec<u8>,
}

/// One compiled, linked and checked version of a plugin.
pub struct PluginVersion {
    pub(crate) name: Arc<str>,
    pub(crate) version: Arc<str>,
    pub(crate) info: PluginInfo,
    pub(crate) key: String,
    pub(crate) kind: WorldKind,
    pub(crate) pre: Pre,
    pub(crate) engine: Engine,
    pub(crate) epoch_tick_ms: u64,
    pub(crate) fuel_enabled: bool,
    pub(crate) budget: CallBudget,
    /// Calls the host starved (ran past the deadline on the wall clock
    /// with less than the deadline of CPU).
    starved: Arc<AtomicU64>,
    pub(crate) limits: Limits,
    pub(crate) grants: Grants,
    pub(crate) config_json: String,
    pub(crate) seed: u64,
    pool: Mutex<Vec<Instance>>,
    instances_created: AtomicU64,
    /// Largest linear memory of an instance after a call, bytes.
    peak_memory: AtomicU64,
    /// What the scorer promised about its answers (`reuse.scope`).
    scope: Option<tessera_core::reuse::Scope>,
    /// Unique in the process: whose answers a reuse cache holds.
    pub(crate) uid: u64,
    /// Set once the host found it breaking that promise: no more reuse.
    promise_broken: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for PluginVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginVersion")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("key", &self.key)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl PluginVersion {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        name: &str,
        key: String,
        kind: WorldKind,
        pre: Pre,
        engine: Engine,
        epoch_tick_ms: u64,
        fuel_enabled: bool,
        budget: CallBudget,
        limits: Limits,
        grants: Grants,
        config_json: String,
        seed: u64,
    ) -> Self {
        Self {
            name: name.into(),
            version: "?".into(),
            info: PluginInfo {
                name: name.into(),
                version: "?".into(),
                description: String::new(),
                filter_reasons: Vec::new(),
            },
            key,
            kind,
            pre,
            engine,
            epoch_tick_ms,
            fuel_enabled,
            budget,
            starved: Arc::default(),
            limits,
            grants,
            config_json,
            seed,
            pool: Mutex::new(Vec::new()),
            instances_created: AtomicU64::new(0),
            peak_memory: AtomicU64::new(0),
            scope: None,
            uid: {
                static NEXT: AtomicU64 = AtomicU64::new(1);
                NEXT.fetch_add(1, Ordering::Relaxed)
            },
            promise_broken: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Plugin name (from the policy).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Version the plugin reports.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// What the plugin reports about itself.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    /// Content key of the component (hex XXH3-128 of its bytes).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The world the component implements.
    pub fn kind(&self) -> WorldKind {
        self.kind
    }

    /// The contract version the component was built against.
    pub fn contract(&self) -> ContractVersion {
        self.pre.contract()
    }

    /// The limits it runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// What the host may reuse this scorer's answers by, for nodes that
    /// did not change (or, for `zone`, within a call): the scope it
    /// declares (`node`, `node-shape`, `zone`), while
    /// it has not been found breaking it; none for `fresh`.
    pub fn reuse_scope(&self) -> Option<tessera_core::reuse::Scope> {
        if self.promise_broken.load(Ordering::Relaxed) {
            return None;
        }
        self.scope
    }

    /// The scope the plugin declared (`fresh`, `node`, `node-shape`,
    /// `zone`).
    pub fn declared_scope(&self) -> &'static str {
        crate::contract::scope_name(self.scope)
    }

    /// Whether the host found this version breaking its reuse promise.
    pub fn promise_broken(&self) -> bool {
        self.promise_broken.load(Ordering::Relaxed)
    }

    /// Records that an answer asked afresh differed from the one reused:
    /// this version is asked about every candidate from now on.
    pub(crate) fn break_promise(&self) {
        self.promise_broken.store(true, Ordering::Relaxed);
    }

    /// Calls the host starved so far: past the deadline on the wall clock
    /// with less than the deadline of CPU (host overload, not the
    /// plugin's fault).
    pub fn starved_calls(&self) -> u64 {
        self.starved.load(Ordering::Relaxed)
    }

    /// Instances created so far (the first, and each replacement).
    pub fn instances_created(&self) -> u64 {
        self.instances_created.load(Ordering::Relaxed)
    }

    /// The largest linear memory any instance of this version has held,
    /// bytes (what its `limits.memory_mib` must allow).
    pub fn peak_memory_bytes(&self) -> u64 {
        self.peak_memory.load(Ordering::Relaxed)
    }

    fn err(&self, call: &'static str, kind: CallFault) -> CallError {
        CallError { plugin: self.name.clone(), version: self.version.clone(), call, kind }
    }

    /// Arms the budget for the next guest call (see [`crate::budget`]).
    fn arm(&self, store: &mut Store<HostState>) {
        self.arm_sync(store, 0);
    }

    /// Arms the budget for a call that mirrors `deltas` node deltas (the
    /// deadline plus a sync's allowance, see [`crate::budget`]).
    fn arm_sync(&self, store: &mut Store<HostState>, deltas: usize) {
        let fuel_limit = self.limits.fuel.map(|f| f.0);
        match self.budget {
            CallBudget::Fuel { per_ms } => {
                let (deadline, fuel) = budget::grant(self.limits.deadline_ms.0, fuel_limit, per_ms, deltas);
                // No clock: the epoch never interrupts; fuel decides.
                store.set_epoch_deadline(NEVER);
                let _ = store.set_fuel(fuel);
                store.data_mut().clock = CallClock::unclocked(deadline, fuel);
            }
            CallBudget::CpuTime { .. } => {
                // A plugin without a fuel limit on a metering runtime runs
                // unmetered in effect.
                let (deadline, fuel) =
                    budget::grant(self.limits.deadline_ms.0, Some(fuel_limit.unwrap_or(u64::MAX)), 0, deltas);
                // First checked at the next tick, where the call's CPU
                // clock is first read (see `CallClock`): most calls end
                // before it and never read it.
                store.set_epoch_deadline(1);
                if self.fuel_enabled {
                    // `set_fuel` cannot fail when metering is on.
                    let _ = store.set_fuel(fuel);
                }
                store.data_mut().clock = CallClock::start(deadline, fuel);
            }
        }
        store.data_mut().limiter.denied = None;
    }

    fn classify(&self, store: &Store<HostState>, error: wasmtime::Error) -> CallFault {
        if let Some(requested) = store.data().limiter.denied {
            return CallFault::MemoryExceeded {
                cap_mib: self.limits.memory_mib.0,
                requested_mib: (requested as u64).div_ceil(1 << 20),
            };
        }
        // What this call was granted (a sync's allowance included).
        let granted = &store.data().clock;
        let deadline_ms = u64::try_from(granted.deadline.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
        if let Some(s) = error.downcast_ref::<HostStarved>() {
            return CallFault::HostOverloaded { deadline_ms, cpu_ms: s.cpu_ms, wall_ms: s.wall_ms };
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => CallFault::Timeout { deadline_ms },
            // A replay's deadline is its fuel: running out of it is the
            // timeout the service would have seen.
            Some(Trap::OutOfFuel) if self.limits.fuel.is_none() => CallFault::Timeout { deadline_ms },
            Some(Trap::OutOfFuel) => CallFault::FuelExhausted { fuel: granted.fuel },
            Some(trap) => CallFault::Trap { trap: trap.to_string(), guest_said: store.data().last_stderr_line() },
            None => CallFault::Trap {
                trap: format!("{error:#}").lines().next().unwrap_or_default().to_string(),
                guest_said: store.data().last_stderr_line(),
            },
        }
    }

    /// A store with this plugin's limits and budget, armed.
    fn store(&self) -> Store<HostState> {
        let n = self.instances_created.fetch_add(1, Ordering::Relaxed);
        let seed = self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let cap = (self.limits.memory_mib.0 as usize) << 20;
        let mut store = Store::new(&self.engine, HostState::new(self.name.clone(), self.grants, cap, seed));
        store.limiter(|s| &mut s.limiter);
        match self.budget {
            CallBudget::Fuel { .. } => store.epoch_deadline_trap(),
            CallBudget::CpuTime { wall_cap } => store.epoch_deadline_callback(budget::cpu_time_callback(
                wall_cap,
                Duration::from_millis(self.epoch_tick_ms),
                self.starved.clone(),
            )),
        }
        self.arm(&mut store);
        store
    }

    /// A fresh, configured instance.
    fn instantiate(&self) -> Result<Instance, CallFault> {
        let mut store = self.store();
        let bound = self.pre.instantiate(&mut store).map_err(|e| match self.classify(&store, e) {
            CallFault::Trap { trap, .. } if trap.contains("type mismatch") => {
                // wasmtime does not say which export: find it.
                let wrong = crate::signature::mismatched(self, self.store());
                CallFault::Instantiate(format!("{trap}; exports not of the contract's type: {}", wrong.join(", ")))
            }
            CallFault::Trap { trap, .. } => CallFault::Instantiate(trap),
            other => other,
        })?;
        self.arm(&mut store);
        match bound.configure(&mut store, &self.config_json) {
            Ok(Ok(())) => Ok(Instance { store, bound, feed: None, synced: 0 }),
            Ok(Err(msg)) => Err(CallFault::Guest(format!("configure: {}", clip(msg)))),
            Err(e) => Err(self.classify(&store, e)),
        }
    }

    /// Runs `f` on a pooled instance that follows `feed` (or a fresh one),
    /// its mirror brought up to date first (a fault there is the `apply`
    /// call's); a fault drops the instance so the next call gets a fresh one.
    fn with_instance<R>(
        &self,
        call: &'static str,
        feed: Option<&RwLock<NodeFeed>>,
        f: impl FnOnce(&Self, &mut Instance) -> Result<R, (CallFault, bool)>,
    ) -> Result<R, CallError> {
        let id = feed.map(|f| f.read().unwrap_or_else(|p| p.into_inner()).id());
        let pooled = {
            let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
            pool.iter().rposition(|i| i.feed.is_none() || i.feed == id).map(|at| pool.swap_remove(at))
        };
        let mut inst = match pooled {
            Some(i) => i,
            None => self.instantiate().map_err(|k| self.err(call, k))?,
        };
        let done = match feed {
            Some(feed) => self.sync(&mut inst, feed).map_err(|(kind, keep)| ("apply", kind, keep)),
            None => Ok(()),
        }
        .and_then(|()| f(self, &mut inst).map_err(|(kind, keep)| (call, kind, keep)));
        self.peak_memory.fetch_max(inst.store.data().limiter.peak as u64, Ordering::Relaxed);
        match done {
            Ok(r) => {
                self.pool.lock().unwrap_or_else(|p| p.into_inner()).push(inst);
                Ok(r)
            }
            Err((call, kind, keep)) => {
                if keep {
                    self.pool.lock().unwrap_or_else(|p| p.into_inner()).push(inst);
                }
                Err(self.err(call, kind))
            }
        }
    }

    /// Brings the instance's mirror up to date with `feed`. The feed stays
    /// read-locked through the guest's `apply`, which may then be lent the
    /// one record that changed rather than a copy (no guest call writes
    /// the feed; writers come between decisions).
    fn sync(&self, inst: &mut Instance, feed: &RwLock<NodeFeed>) -> Result<(), (CallFault, bool)> {
        let feed = feed.read().unwrap_or_else(|p| p.into_inner());
        debug_assert!(inst.feed.is_none_or(|f| f == feed.id()), "instance of another feed");
        if inst.store.data().zones.version != feed.zones().version {
            inst.store.data_mut().zones = feed.zones().clone();
        }
        if inst.feed.is_some() && feed.generation() == inst.synced {
            return Ok(());
        }
        let deltas = feed.deltas_since(inst.synced);
        let deltas = deltas.as_slice();
        let memory = &mut inst.store.data_mut().gpu_memory;
        memory.clear();
        // Deltas come in ascending node id: the host call finds a node's by
        // binary search.
        for d in deltas {
            if let wit::NodeDelta::Upsert(n) = d
                && let Some(used) = feed.gpu_memory_shared(n.id)
            {
                debug_assert!(memory.last().is_none_or(|(last, _)| *last < n.id), "deltas out of node order");
                memory.push((n.id, used.clone()));
            }
        }
        let (generation, id) = (feed.generation(), feed.id());
        if !inst.bound.mirrors() {
            return Ok(());
        }
        self.arm_sync(&mut inst.store, deltas.len());
        match inst.bound.apply(&mut inst.store, deltas) {
            Ok(Ok(())) => {
                inst.synced = generation;
                inst.feed = Some(id);
                Ok(())
            }
            // The mirror may be half-applied: do not reuse this instance.
            Ok(Err(msg)) => Err((CallFault::MirrorRefused(clip(msg)), false)),
            Err(e) => Err((self.classify(&inst.store, e), false)),
        }
    }

    /// Brings a pooled instance's mirror (a new one if none is pooled) up to
    /// date with `feed` now, so the next call does not pay for it.
    pub fn prime(&self, feed: &RwLock<NodeFeed>) -> Result<(), CallError> {
        if self.kind() != WorldKind::Scorer {
            return Ok(());
        }
        self.with_instance("apply", Some(feed), |_, _| Ok(()))
    }

    /// Filters `candidates` for `pod`: one verdict per candidate.
    pub fn filter(&self, feed: &RwLock<NodeFeed>, pod: &wit::Pod, candidates: &[u32]) -> Result<Vec<u8>, CallError> {
        self.with_instance("filter", Some(feed), |this, inst| {
            this.arm(&mut inst.store);
            match inst.bound.filter(&mut inst.store, pod, candidates) {
                Ok(Ok(v)) => {
                    if v.len() != candidates.len() {
                        return Err((wrong_len("verdicts", candidates.len(), v.len(), 1), false));
                    }
                    let declared = this.info.filter_reasons.len();
                    if let Some(&bad) = v.iter().find(|&&k| k as usize > declared) {
                        return Err((CallFault::UnknownReason { verdict: bad, declared }, false));
                    }
                    Ok(v)
                }
                Ok(Err(msg)) => Err((CallFault::Guest(clip(msg)), true)),
                Err(e) => Err((this.classify(&inst.store, e), false)),
            }
        })
    }

    /// Scores `candidates` for `pod`: one value per candidate.
    pub fn score(&self, feed: &RwLock<NodeFeed>, pod: &wit::Pod, candidates: &[u32]) -> Result<ScoreOutput, CallError> {
        self.with_instance("score", Some(feed), |this, inst| {
            this.arm(&mut inst.store);
            match inst.bound.score(&mut inst.store, pod, candidates) {
                Ok(Ok(s)) => {
                    let n = candidates.len();
                    if s.values.len() != n {
                        return Err((wrong_len("scores", n, s.values.len(), 8), false));
                    }
                    if !s.gpu_hints.is_empty() && s.gpu_hints.len() != n {
                        return Err((wrong_len("GPU hints", n, s.gpu_hints.len(), 1), false));
                    }
                    Ok(ScoreOutput { values: s.values, gpu_hints: s.gpu_hints })
                }
                Ok(Err(msg)) => Err((CallFault::Guest(clip(msg)), true)),
                Err(e) => Err((this.classify(&inst.store, e), false)),
            }
        })
    }

    /// Appends a telemetry frame to a detector's window. Every pooled
    /// instance keeps its own window, so frames go to one instance that is
    /// kept for detection (detectors are called from one loop).
    pub fn observe(&self, frame: &wit::TelemetryFrame) -> Result<(), CallError> {
        self.with_instance("observe", None, |this, inst| {
            this.arm(&mut inst.store);
            match inst.bound.observe(&mut inst.store, frame) {
                Ok(Ok(())) => Ok(()),
                Ok(Err(msg)) => Err((CallFault::Guest(clip(msg)), true)),
                Err(e) => Err((this.classify(&inst.store, e), false)),
            }
        })
    }

    /// Findings over the detector's window.
    pub fn detect(&self) -> Result<Vec<wit::Finding>, CallError> {
        self.with_instance("detect", None, |this, inst| {
            this.arm(&mut inst.store);
            match inst.bound.detect(&mut inst.store) {
                Ok(Ok(f)) => {
                    let bytes: usize = f.iter().map(|x| 16 + x.message.len()).sum();
                    if bytes > 16 << 20 {
                        return Err((CallFault::OversizedOutput { what: "findings", bytes, limit: 16 << 20 }, false));
                    }
                    Ok(f)
                }
                Ok(Err(msg)) => Err((CallFault::Guest(clip(msg)), true)),
                Err(e) => Err((this.classify(&inst.store, e), false)),
            }
        })
    }

    /// Calls `info` on a fresh instance (used once at load).
    pub(crate) fn fetch_info(&mut self) -> Result<(), CallError> {
        // A component whose exports do not type-check against the world
        // fails here, before `configure`: say so, not "configure".
        let mut inst = self.instantiate().map_err(|k| {
            let call = if matches!(k, CallFault::Instantiate(_)) { "instantiate" } else { "configure" };
            self.err(call, k)
        })?;
        self.arm(&mut inst.store);
        let info = inst.bound.info(&mut inst.store).map_err(|e| self.err("info", self.classify(&inst.store, e)))?;
        // What the plugin says of itself is copied into every decision it
        // filters (its reasons, per rejected node) and every report: bounded.
        let sizes =
            [info.name.len(), info.version.len(), info.filter_reasons.iter().map(String::len).max().unwrap_or(0)];
        let oversized = |what, bytes, limit| Err(self.err("info", CallFault::OversizedOutput { what, bytes, limit }));
        if let Some(&bytes) = sizes.iter().find(|&&b| b > MAX_INFO_NAME) {
            return oversized("names or reason codes in its info", bytes, MAX_INFO_NAME);
        }
        if info.description.len() > MAX_INFO_DESCRIPTION {
            return oversized("description in its info", info.description.len(), MAX_INFO_DESCRIPTION);
        }
        if info.filter_reasons.len() > MAX_FILTER_REASONS {
            return oversized("filter reasons in its info", info.filter_reasons.len(), MAX_FILTER_REASONS);
        }
        if self.kind == WorldKind::Scorer {
            let mut store = self.store();
            self.scope = self.pre.scope(&mut store).map_err(|e| {
                let kind = match e {
                    crate::contract::ScopeError::Call(e) => self.classify(&store, e),
                    crate::contract::ScopeError::Unknown(name) => CallFault::UnknownScope(clip(name)),
                };
                self.err("scope", kind)
            })?;
        }
        self.version = Arc::from(info.version.as_str());
        self.info = PluginInfo {
            name: info.name,
            version: info.version,
            description: info.description,
            filter_reasons: info.filter_reasons,
        };
        self.pool.get_mut().unwrap_or_else(|p| p.into_inner()).push(inst);
        Ok(())
    }

    /// Drops pooled instances (their mirrors are rebuilt on demand).
    pub(crate) fn drain(&self) {
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

fn wrong_len(what: &'static str, expected: usize, got: usize, elem: usize) -> CallFault {
    let bytes = got * elem;
    // Far more than asked for is an attempt to flood the host.
    if got > expected.saturating_mul(4).max(1 << 16) {
        CallFault::OversizedOutput { what, bytes, limit: expected * elem }
    } else {
        CallFault::WrongLength { what, expected, got }
    }
}

fn clip(msg: String) -> String {
    if msg.len() <= MAX_GUEST_ERROR {
        return msg;
    }
    let mut end = MAX_GUEST_ERROR;
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes, clipped)", &msg[..end], msg.len())
}
