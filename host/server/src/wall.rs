//! Wall-clock time, for what the service shows and keeps (records, spans,
//! verdict ages, schedules); nothing the loop decides reads it.

use std::time::SystemTime;

/// `t` as Unix milliseconds (0 before the epoch).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Now, as Unix milliseconds.
pub fn now_unix_ms() -> u64 {
    unix_ms(SystemTime::now())
}
