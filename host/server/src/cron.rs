//! Cron schedules of the service's chaos campaigns and fine-tuning:
//! POSIX/Vixie cron with optional seconds (like Kubernetes CronJobs),
//! evaluated in UTC.

/// A cron expression (5 fields, or 6 with seconds first; `@daily` and the
/// other aliases), evaluated in UTC.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: croner::Cron,
}

/// A text that is not a cron expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{expr}` is not a cron expression: {reason}")]
pub struct ScheduleError {
    /// The text.
    pub expr: String,
    /// What the parser said.
    pub reason: String,
}

impl Schedule {
    /// Parses `expr`, or says why it is not a cron expression.
    pub fn parse(expr: &str) -> Result<Self, ScheduleError> {
        croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .build()
            .parse(expr)
            .map(|cron| Self { cron })
            .map_err(|e| ScheduleError { expr: expr.into(), reason: e.to_string() })
    }

    /// The first time strictly after `after_unix_ms` it fires, Unix ms
    /// (none: never again).
    pub fn next_after(&self, after_unix_ms: u64) -> Option<u64> {
        let t = jiff::Timestamp::from_millisecond(i64::try_from(after_unix_ms).ok()?).ok()?;
        let next = self.cron.find_next_occurrence(&t.to_zoned(jiff::tz::TimeZone::UTC), false).ok()?;
        u64::try_from(next.timestamp().as_millisecond()).ok()
    }

    /// Waits until it fires next (told to `next` first, Unix ms; none:
    /// never) or `manual` is notified, whichever comes first; true for
    /// `manual`.
    pub async fn wait(&self, manual: &tokio::sync::Notify, next: impl FnOnce(Option<u64>)) -> bool {
        let now = crate::wall::now_unix_ms();
        let at = self.next_after(now);
        next(at);
        let sleep = at.map_or(std::time::Duration::from_secs(86_400 * 365), |n| {
            std::time::Duration::from_millis(n.saturating_sub(now))
        });
        tokio::select! {
            () = tokio::time::sleep(sleep) => false,
            () = manual.notified() => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    #[test]
    fn five_and_six_field_expressions_fire_when_they_say_in_utc() {
        // 2026-12-01T05:27:00Z.
        let t0 = jiff::Timestamp::from_second(1_796_102_820).unwrap().as_millisecond() as u64;
        let nightly = Schedule::parse("0 3 * * *").unwrap();
        let next = nightly.next_after(t0).unwrap();
        let z = jiff::Timestamp::from_millisecond(next as i64).unwrap().to_zoned(jiff::tz::TimeZone::UTC);
        assert_eq!((z.day(), z.hour(), z.minute()), (2, 3, 0), "{z}");
        let every_15 = Schedule::parse("*/15 * * * *").unwrap();
        assert_eq!(every_15.next_after(t0), Some(t0 - 12 * MIN + 15 * MIN));
        let every_second = Schedule::parse("* * * * * *").unwrap();
        assert_eq!(every_second.next_after(t0), Some(t0 + 1000));
        assert!(Schedule::parse("@daily").is_ok());
        for bad in ["", "61 * * * *", "* * *", "every night"] {
            let e = Schedule::parse(bad).unwrap_err().to_string();
            assert!(e.contains("not a cron expression"), "{e}");
        }
    }
}
