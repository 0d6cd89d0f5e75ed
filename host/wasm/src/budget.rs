//! How long a plugin call may run: the rule that judges the plugin, not
//! the machine.
//!
//! - **What must replay** (the simulator, the chaos twin, the quality and
//!   fidelity benches): no clock at all. A call may execute
//!   [`FUEL_PER_MS`] × `deadline_ms` units of fuel (wasmtime counts about
//!   one per Wasm instruction), or the policy's `limits.fuel` when set.
//!   The same call stops at the same instruction on every machine, idle
//!   or loaded, so a replay is byte-identical.
//! - **The service**: the policy's `deadline_ms` of the plugin's own CPU
//!   time, the calling thread's, checked at the first epoch tick after
//!   the call starts and then whenever its CPU time could have reached the
//!   deadline (`CallClock` says what the first check charges). A call
//!   that ran past its deadline on the wall clock while its CPU time
//!   stayed under it was starved by the host: it goes on, and
//!   the starvation is counted as host overload, never as the plugin's
//!   fault. A wall-clock safety net (`wall_cap` × the deadline) stops a
//!   call the host starves for good; that too is host overload
//!   ([`crate::CallFault::HostOverloaded`]), which neither counts against
//!   the plugin's fault budget nor quarantines it.
//! - **A mirror sync** (`apply`) is sized by its input, not by one
//!   decision: on top of the deadline it may spend [`SYNC_US_PER_DELTA`]
//!   of CPU (service) or [`SYNC_FUEL_PER_DELTA`] of fuel (replays) per node
//!   delta. A fresh instance mirrors the whole cluster once; with a fixed
//!   deadline a large enough cluster could never be mirrored (each fault
//!   drops the instance and the next one starts over), so every plugin
//!   would fault on every call however well it behaved.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wasmtime::{StoreContextMut, Trap, UpdateDeadline};

use crate::host::HostState;

/// Fuel per millisecond of deadline in replays: about what one core of a
/// current server executes in a millisecond of compiled Wasm (2 × 10⁶
/// instructions), so a plugin that meets its deadline in the service meets
/// its budget in a replay.
pub const FUEL_PER_MS: u64 = 2_000_000;

/// CPU a mirror sync may spend per node delta beyond the deadline, µs. A
/// fresh instance of the Rust SDK's mirror takes 2–4 µs of wall time per
/// node in a release build, the host's copy and lowering included, and
/// about 10 µs in a debug build; the Python SDK's takes 75 µs and the
/// JavaScript SDK's 118 µs (`tessera plugin bench --component`, `sync
/// ms` over 10,000 nodes; docs/BENCHMARKS.md §13): 250 is room for those
/// interpreters twice over, not for a loop.
pub const SYNC_US_PER_DELTA: u64 = 250;

/// Fuel a mirror sync may spend per node delta beyond the deadline's, in a
/// replay: [`SYNC_US_PER_DELTA`] at [`FUEL_PER_MS`].
pub const SYNC_FUEL_PER_DELTA: u64 = SYNC_US_PER_DELTA * FUEL_PER_MS / 1000;

/// How a call's time is bounded (engine-wide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallBudget {
    /// The plugin's own CPU time, with a wall-clock safety net of
    /// `wall_cap` × the deadline (the service).
    CpuTime {
        /// The safety net, in deadlines.
        wall_cap: u32,
    },
    /// Fuel only, `per_ms` × the deadline (replays: no clock).
    Fuel {
        /// Fuel per millisecond of deadline.
        per_ms: u64,
    },
}

impl CallBudget {
    /// What the service runs with.
    pub const SERVICE: Self = Self::CpuTime { wall_cap: 10 };
    /// What must replay runs with.
    pub const REPLAY: Self = Self::Fuel { per_ms: FUEL_PER_MS };

    /// Whether the engine meters fuel.
    pub fn meters_fuel(self) -> bool {
        matches!(self, Self::Fuel { .. })
    }
}

impl Default for CallBudget {
    fn default() -> Self {
        Self::SERVICE
    }
}

/// A call's start on the wall clock, the calling thread's CPU clock at the
/// call's first check (read again on the same thread: a call runs on the
/// thread that armed it), whether the host has starved it so far, and what
/// it was granted.
///
/// The CPU clock is not read when a call starts: reading a thread's CPU
/// clock is a system call (about 1 µs on a VM, 0.2–0.4 µs on bare metal),
/// as long as many calls take, and most calls end before the next epoch
/// tick. A call is checked first at the tick after it starts, and charged
/// for the CPU before that check as the wall time up to it, at most one
/// tick (and half its deadline): a call the host starved before its first
/// tick is charged at most one tick it did not use, a call that ran all
/// along at most the ticker's lateness too little. After the first check
/// its CPU is read, not estimated.
#[derive(Debug)]
pub(crate) struct CallClock {
    /// Wall clock at the start (none in a replay).
    started: Option<Instant>,
    /// At the first check: the thread's CPU clock, and the CPU charged for
    /// the time before it.
    first_check: Option<(Duration, Duration)>,
    starved: bool,
    /// This call's deadline (the plugin's, plus a sync's allowance).
    pub(crate) deadline: Duration,
    /// This call's fuel, when metered.
    pub(crate) fuel: u64,
}

fn thread_cpu() -> Duration {
    cpu_time::ThreadTime::try_now().map(|t| t.as_duration()).unwrap_or_default()
}

impl CallClock {
    /// Starts now, on the calling thread (reads the wall clock only).
    pub(crate) fn start(deadline: Duration, fuel: u64) -> Self {
        Self { started: Some(Instant::now()), first_check: None, starved: false, deadline, fuel }
    }

    /// What a replay's call was granted; reads no clock.
    pub(crate) fn unclocked(deadline: Duration, fuel: u64) -> Self {
        Self { started: None, first_check: None, starved: false, deadline, fuel }
    }

    /// The call's CPU time and wall time so far, at a check on the calling
    /// thread (see the type's documentation for the first check).
    fn spent(&mut self, tick: Duration) -> (Duration, Duration) {
        let Some(started) = self.started else { return (Duration::ZERO, Duration::ZERO) };
        let wall = started.elapsed();
        let cpu = match self.first_check {
            Some((cpu_then, before)) => before + thread_cpu().saturating_sub(cpu_then),
            None => {
                let before = charged_before_first_check(wall, tick, self.deadline);
                self.first_check = Some((thread_cpu(), before));
                before
            }
        };
        (cpu, wall)
    }
}

/// The CPU a call is charged for before its first check, `wall` after it
/// started: the wall time, at most one tick and half the deadline.
pub(crate) fn charged_before_first_check(wall: Duration, tick: Duration, deadline: Duration) -> Duration {
    wall.min(tick).min(deadline / 2)
}

/// What a call may spend: the plugin's deadline (and fuel), plus a sync's
/// allowance for `deltas` node deltas.
pub(crate) fn grant(deadline_ms: u64, fuel: Option<u64>, per_ms: u64, deltas: usize) -> (Duration, u64) {
    let deltas = deltas as u64;
    let deadline = Duration::from_millis(deadline_ms)
        .saturating_add(Duration::from_micros(deltas.saturating_mul(SYNC_US_PER_DELTA)));
    let fuel =
        fuel.unwrap_or(per_ms.saturating_mul(deadline_ms)).saturating_add(deltas.saturating_mul(SYNC_FUEL_PER_DELTA));
    (deadline, fuel)
}

/// The host starved a call past the wall-clock safety net.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the host starved the call: {cpu_ms} ms of CPU in {wall_ms} ms")]
pub(crate) struct HostStarved {
    pub(crate) cpu_ms: u64,
    pub(crate) wall_ms: u64,
}

/// What the service's epoch callback decides at a tick past the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The plugin used its deadline of CPU: a timeout.
    Timeout,
    /// The host starved it past the safety net.
    Starved(HostStarved),
    /// Not the plugin's fault yet: check again after this many ticks.
    Continue(u64),
}

/// The rule, on its own (tested without a runtime).
pub(crate) fn judge(cpu: Duration, wall: Duration, deadline: Duration, wall_cap: u32, tick: Duration) -> Verdict {
    if cpu >= deadline {
        return Verdict::Timeout;
    }
    if wall >= deadline.saturating_mul(wall_cap.max(1)) {
        return Verdict::Starved(HostStarved { cpu_ms: cpu.as_millis() as u64, wall_ms: wall.as_millis() as u64 });
    }
    let left = deadline - cpu;
    Verdict::Continue((left.as_nanos().div_ceil(tick.as_nanos().max(1)) as u64).max(1))
}

/// The service's epoch callback for one instance: judges the running call
/// by its CPU time; counts the first extension of each call in `starved`.
pub(crate) fn cpu_time_callback(
    wall_cap: u32,
    tick: Duration,
    starved: Arc<AtomicU64>,
) -> impl FnMut(StoreContextMut<'_, HostState>) -> wasmtime::Result<UpdateDeadline> + Send + Sync + 'static {
    move |mut ctx| {
        let clock = &mut ctx.data_mut().clock;
        let (cpu, wall) = clock.spent(tick);
        let deadline = clock.deadline;
        match judge(cpu, wall, deadline, wall_cap, tick) {
            Verdict::Timeout => Err(Trap::Interrupt.into()),
            Verdict::Starved(s) => Err(s.into()),
            Verdict::Continue(ticks) => {
                // Starved, not merely a tick short of its deadline: the
                // host took more than a tenth of it.
                if wall > cpu + deadline / 10 && !std::mem::replace(&mut clock.starved, true) {
                    starved.fetch_add(1, Ordering::Relaxed);
                }
                Ok(UpdateDeadline::Continue(ticks))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_judged_by_its_own_cpu_time_not_by_the_wall_clock() {
        let ms = Duration::from_millis;
        let (deadline, tick) = (ms(50), ms(1));
        // Used its 50 ms of CPU: a timeout, however long the wall says.
        assert_eq!(judge(ms(50), ms(50), deadline, 10, tick), Verdict::Timeout);
        assert_eq!(judge(ms(60), ms(400), deadline, 10, tick), Verdict::Timeout);
        // 50 ms on the wall but 5 ms of CPU: the host was busy; 45 ms left.
        assert_eq!(judge(ms(5), ms(50), deadline, 10, tick), Verdict::Continue(45));
        // Starved past the safety net (10 deadlines): host overload.
        assert_eq!(
            judge(ms(5), ms(500), deadline, 10, tick),
            Verdict::Starved(HostStarved { cpu_ms: 5, wall_ms: 500 })
        );
        assert_eq!(judge(ms(49), ms(51), deadline, 10, ms(3)), Verdict::Continue(1));
    }

    #[test]
    fn a_calls_cpu_before_its_first_check_is_charged_at_most_one_tick() {
        let (ms, us) = (Duration::from_millis, Duration::from_micros);
        let tick = ms(1);
        // A call checked 300 µs in ran all along: charged what it ran.
        assert_eq!(charged_before_first_check(us(300), tick, ms(50)), us(300));
        // The host kept it waiting 40 ms before its first tick: charged one
        // tick, so a plugin with a 5 ms deadline is not timed out for it.
        let before = charged_before_first_check(ms(40), tick, ms(5));
        assert_eq!(before, tick);
        assert_eq!(judge(before, ms(40), ms(5), 10, tick), Verdict::Continue(4));
        // A tick longer than the deadline charges at most half of it.
        assert_eq!(charged_before_first_check(ms(40), ms(10), ms(4)), ms(2));
        // A replay reads no clock and is never charged.
        let mut replay = CallClock::unclocked(ms(50), 7);
        assert_eq!(replay.spent(tick), (Duration::ZERO, Duration::ZERO));
    }

    #[test]
    fn a_sync_is_granted_the_deadline_and_an_allowance_per_delta() {
        // One decision: the deadline, and its fuel.
        assert_eq!(grant(50, None, FUEL_PER_MS, 0), (Duration::from_millis(50), 50 * FUEL_PER_MS));
        // A fresh instance on 10,000 nodes: 2.5 s more, and its fuel.
        assert_eq!(
            grant(50, None, FUEL_PER_MS, 10_000),
            (Duration::from_millis(2550), 50 * FUEL_PER_MS + 10_000 * SYNC_FUEL_PER_DELTA)
        );
        // A policy's own fuel limit gets the same allowance on top.
        assert_eq!(grant(50, Some(7), FUEL_PER_MS, 2).1, 7 + 2 * SYNC_FUEL_PER_DELTA);
        // Nothing overflows.
        assert_eq!(grant(10_000, Some(u64::MAX), FUEL_PER_MS, usize::MAX).1, u64::MAX);
    }
}
