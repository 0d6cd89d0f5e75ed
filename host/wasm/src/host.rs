//! Per-store host state: the empty WASI context, the memory limiter, the
//! seeded random stream, and the `tessera:policy/host` interface.

use std::sync::Arc;
use std::time::Duration;

use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use tessera_policy::Grants;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::bindings::host_iface::{self, LogLevel};
use crate::bindings::types;

/// Most log lines a plugin may write per instance; the rest are dropped.
const LOG_LINES_PER_INSTANCE: u32 = 1000;
/// Longest log line kept, in bytes.
const LOG_LINE_MAX: usize = 1024;
/// Guest stderr kept for fault reports (the last bytes written), in bytes.
const STDERR_CAPTURE: usize = 16 * 1024;

/// Caps linear memory and tables; remembers a refused growth so the fault
/// can be reported as a memory overrun rather than a generic trap.
pub(crate) struct Limiter {
    pub(crate) memory_cap: usize,
    pub(crate) denied: Option<usize>,
    /// The largest linear memory granted to this store, bytes.
    pub(crate) peak: usize,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_cap {
            self.denied = Some(desired);
            return Err(wasmtime::Error::msg(format!(
                "memory growth to {desired} bytes refused: cap is {} bytes",
                self.memory_cap
            )));
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

/// Everything a plugin's store holds.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: Limiter,
    rng: ChaCha8Rng,
    plugin: Arc<str>,
    log_budget: u32,
    stderr: Option<crate::stderr::Tail>,
    /// Zone signals as of the instance's last sync with its feed.
    pub(crate) zones: Arc<crate::feed::ZoneSignals>,
    /// Device memory in use per GPU of the nodes in the deltas being
    /// applied, in ascending node id (as the deltas come), shared with the
    /// feed.
    pub(crate) gpu_memory: Vec<(u32, Arc<[u32]>)>,
    /// When the call under way started (the service judges it by its CPU
    /// time).
    pub(crate) clock: crate::budget::CallClock,
}

/// A clock that never moves: plugins are not granted time by default.
struct Frozen;

impl HostWallClock for Frozen {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for Frozen {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

impl HostState {
    pub(crate) fn new(plugin: Arc<str>, grants: Grants, memory_cap: usize, seed: u64) -> Self {
        let mut b = WasiCtxBuilder::new();
        // No preopened directories, no sockets, no name lookup.
        b.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }));
        if !grants.random {
            b.secure_random(ChaCha8Rng::seed_from_u64(seed ^ 0x5EC0_5EC0))
                .insecure_random(ChaCha8Rng::seed_from_u64(seed ^ 0x1A5E_C0DE))
                .insecure_random_seed(u128::from(seed));
        }
        if !grants.clock {
            b.wall_clock(Frozen).monotonic_clock(Frozen);
        }
        let stderr = if grants.stdio {
            b.inherit_stdout().inherit_stderr();
            None
        } else {
            let tail = crate::stderr::Tail::new(STDERR_CAPTURE);
            b.stderr(tail.clone());
            Some(tail)
        };
        Self {
            wasi: b.build(),
            table: ResourceTable::new(),
            limiter: Limiter { memory_cap, denied: None, peak: 0 },
            rng: ChaCha8Rng::seed_from_u64(seed),
            plugin,
            log_budget: LOG_LINES_PER_INSTANCE,
            stderr,
            zones: Arc::default(),
            gpu_memory: Vec::new(),
            clock: crate::budget::CallClock::unclocked(std::time::Duration::ZERO, 0),
        }
    }

    /// The last thing the guest wrote to stderr, e.g. its panic message
    /// (Rust writes `panicked at FILE:LINE:COL:` and the message on the next
    /// line, then a `note:` on backtraces, which is skipped).
    pub(crate) fn last_stderr_line(&self) -> Option<String> {
        let bytes = self.stderr.as_ref()?.contents();
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> =
            text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("note:")).collect();
        let tail = &lines[lines.len().saturating_sub(2)..];
        (!tail.is_empty()).then(|| truncate(&tail.join(" "), LOG_LINE_MAX))
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl types::Host for HostState {}

impl host_iface::Host for HostState {
    fn log(&mut self, level: LogLevel, message: String) {
        if self.log_budget == 0 {
            return;
        }
        self.log_budget -= 1;
        let plugin = &*self.plugin;
        let message = truncate(&message, LOG_LINE_MAX);
        match level {
            LogLevel::Trace => tracing::trace!(plugin, "{message}"),
            LogLevel::Debug => tracing::debug!(plugin, "{message}"),
            LogLevel::Info => tracing::info!(plugin, "{message}"),
            LogLevel::Warn => tracing::warn!(plugin, "{message}"),
            LogLevel::Error => tracing::error!(plugin, "{message}"),
        }
        if self.log_budget == 0 {
            tracing::warn!(plugin, "log budget of {LOG_LINES_PER_INSTANCE} lines used up; further lines dropped");
        }
    }

    fn random_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    fn zone_carbon_intensity(&mut self, zone: String) -> Option<u32> {
        self.zones.carbon.get(&zone).copied()
    }

    fn gpu_memory_used(&mut self, node: u32) -> Vec<u32> {
        match self.gpu_memory.binary_search_by_key(&node, |(id, _)| *id) {
            Ok(at) => self.gpu_memory[at].1.to_vec(),
            Err(_) => Vec::new(),
        }
    }
}

impl crate::bindings::v0_1::types::Host for HostState {}

/// 0.1.0's `host` interface is 0.2.0's: the same functions, answered alike.
impl crate::bindings::v0_1::host_iface::Host for HostState {
    fn log(&mut self, level: crate::bindings::v0_1::host_iface::LogLevel, message: String) {
        use crate::bindings::v0_1::host_iface::LogLevel as Old;
        let level = match level {
            Old::Trace => LogLevel::Trace,
            Old::Debug => LogLevel::Debug,
            Old::Info => LogLevel::Info,
            Old::Warn => LogLevel::Warn,
            Old::Error => LogLevel::Error,
        };
        host_iface::Host::log(self, level, message);
    }

    fn random_u64(&mut self) -> u64 {
        host_iface::Host::random_u64(self)
    }

    fn zone_carbon_intensity(&mut self, zone: String) -> Option<u32> {
        host_iface::Host::zone_carbon_intensity(self, zone)
    }

    fn gpu_memory_used(&mut self, node: u32) -> Vec<u32> {
        host_iface::Host::gpu_memory_used(self, node)
    }
}
