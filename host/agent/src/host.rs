//! CPU and memory from the Linux kernel: `/proc/stat` and `/proc/meminfo`.
//!
//! CPU utilisation is busy time over all time between two reads of
//! `/proc/stat`: the previous sample's counters and this one's. The first
//! sample has no previous counters, so it reads twice,
//! [`HostSource::first_interval`] apart (200 ms by default): it never reports
//! the average since boot.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::AgentError;
use crate::sample::{CpuSample, MemorySample, permille};

/// The CPU counters of one read of `/proc/stat`, in USER_HZ ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuCounters {
    /// user + nice + system + irq + softirq + steal.
    pub busy: u64,
    /// busy + idle + iowait.
    pub total: u64,
    /// Logical CPUs (`cpuN` lines).
    pub cores: u32,
}

/// Parses `/proc/stat`: the aggregate `cpu` line (user nice system idle
/// iowait irq softirq steal; guest time is already inside user and nice) and
/// the count of `cpuN` lines.
pub fn parse_stat(text: &str) -> Result<CpuCounters, String> {
    let mut counters = None;
    let mut cores = 0u32;
    for line in text.lines() {
        let mut fields = line.split_ascii_whitespace();
        match fields.next() {
            Some("cpu") => {
                let v: Vec<u64> = fields
                    .take(8)
                    .map(|f| f.parse::<u64>().map_err(|e| format!("`cpu` line: {f:?}: {e}")))
                    .collect::<Result<_, _>>()?;
                if v.len() < 4 {
                    return Err(format!("`cpu` line has {} fields, expected at least 4", v.len()));
                }
                let at = |i: usize| v.get(i).copied().unwrap_or(0);
                let idle = at(3) + at(4);
                let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
                counters = Some((busy, busy + idle));
            }
            Some(c) if c.starts_with("cpu") && c[3..].bytes().all(|b| b.is_ascii_digit()) => cores += 1,
            _ => {}
        }
    }
    let (busy, total) = counters.ok_or("no `cpu` line")?;
    Ok(CpuCounters { busy, total, cores: cores.max(1) })
}

/// Busy share between two reads, ‰ (0 when no time passed).
pub fn cpu_util_permille(prev: &CpuCounters, now: &CpuCounters) -> u16 {
    permille(now.busy.saturating_sub(prev.busy), now.total.saturating_sub(prev.total))
}

/// The two lines of `/proc/meminfo` the agent needs, KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemInfo {
    /// `MemTotal`.
    pub total_kib: u64,
    /// `MemAvailable` (before Linux 3.14: `MemFree + Buffers + Cached`).
    pub available_kib: u64,
}

impl MemInfo {
    /// Used = total − available.
    pub fn to_sample(self) -> MemorySample {
        let used = self.total_kib.saturating_sub(self.available_kib);
        MemorySample {
            total_mib: self.total_kib / 1024,
            used_mib: used / 1024,
            util_permille: permille(used, self.total_kib),
        }
    }
}

/// Parses `/proc/meminfo`.
pub fn parse_meminfo(text: &str) -> Result<MemInfo, String> {
    let (mut total, mut available, mut free, mut buffers, mut cached) = (None, None, 0, 0, 0);
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else { continue };
        let value = || -> Result<u64, String> {
            let v = rest.split_ascii_whitespace().next().ok_or_else(|| format!("{key}: no value"))?;
            v.parse().map_err(|e| format!("{key}: {v:?}: {e}"))
        };
        match key {
            "MemTotal" => total = Some(value()?),
            "MemAvailable" => available = Some(value()?),
            "MemFree" => free = value()?,
            "Buffers" => buffers = value()?,
            "Cached" => cached = value()?,
            _ => {}
        }
    }
    let total_kib = total.ok_or("no MemTotal line")?;
    Ok(MemInfo { total_kib, available_kib: available.unwrap_or(free + buffers + cached).min(total_kib) })
}

/// Reads the node's CPU and memory, keeping the previous CPU counters.
#[derive(Debug, Clone)]
pub struct HostSource {
    stat: PathBuf,
    meminfo: PathBuf,
    first_interval: Duration,
    prev: Option<CpuCounters>,
}

impl Default for HostSource {
    fn default() -> Self {
        Self::new()
    }
}

impl HostSource {
    /// `/proc/stat` and `/proc/meminfo`, 200 ms between the first two reads.
    pub fn new() -> Self {
        Self::with_paths("/proc/stat", "/proc/meminfo")
    }

    /// Other files in the kernel's formats (tests, a host's /proc mounted
    /// elsewhere).
    pub fn with_paths(stat: impl Into<PathBuf>, meminfo: impl Into<PathBuf>) -> Self {
        Self { stat: stat.into(), meminfo: meminfo.into(), first_interval: Duration::from_millis(200), prev: None }
    }

    /// Time between the two reads of the first sample.
    pub fn first_interval(mut self, d: Duration) -> Self {
        self.first_interval = d;
        self
    }

    fn read(path: &Path) -> Result<String, AgentError> {
        std::fs::read_to_string(path).map_err(|source| AgentError::Read { path: path.into(), source })
    }

    fn counters(&self) -> Result<CpuCounters, AgentError> {
        parse_stat(&Self::read(&self.stat)?).map_err(|what| AgentError::Parse { path: self.stat.clone(), what })
    }

    /// CPU since the previous call (the first call blocks for
    /// [`HostSource::first_interval`]) and memory now.
    pub fn sample(&mut self) -> Result<(CpuSample, MemorySample), AgentError> {
        let prev = match self.prev {
            Some(p) => p,
            None => {
                let p = self.counters()?;
                std::thread::sleep(self.first_interval);
                p
            }
        };
        let now = self.counters()?;
        self.prev = Some(now);
        let cpu = CpuSample { cores: now.cores, util_permille: cpu_util_permille(&prev, &now) };
        let mem = parse_meminfo(&Self::read(&self.meminfo)?)
            .map_err(|what| AgentError::Parse { path: self.meminfo.clone(), what })?;
        Ok((cpu, mem.to_sample()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  4705 356 584 3699 23 0 12 5 100 0
cpu0 1393 167 289 1827 11 0 6 3 50 0
cpu1 3312 189 295 1872 12 0 6 2 50 0
intr 114930548 113199788 3 0 5 263 0 4 [... 50 more]
ctxt 1990473
btime 1062191376
processes 2915
";

    const MEMINFO: &str = "MemTotal:       65815084 kB
MemFree:         1042196 kB
MemAvailable:   49361952 kB
Buffers:          123456 kB
Cached:         40000000 kB
HugePages_Total:       0
";

    #[test]
    fn stat() {
        let c = parse_stat(STAT).unwrap();
        assert_eq!(
            c,
            CpuCounters { busy: 4705 + 356 + 584 + 12 + 5, total: 4705 + 356 + 584 + 12 + 5 + 3699 + 23, cores: 2 }
        );
        let later = CpuCounters { busy: c.busy + 150, total: c.total + 200, cores: 2 };
        assert_eq!(cpu_util_permille(&c, &later), 750);
        assert_eq!(cpu_util_permille(&c, &c), 0, "no time passed");
        assert!(parse_stat("intr 1 2\n").unwrap_err().contains("no `cpu` line"));
        assert!(parse_stat("cpu 1 x 3 4\n").unwrap_err().contains("\"x\""));
        // Old kernels: four fields.
        assert_eq!(parse_stat("cpu 1 2 3 4\n").unwrap(), CpuCounters { busy: 6, total: 10, cores: 1 });
    }

    #[test]
    fn meminfo() {
        let m = parse_meminfo(MEMINFO).unwrap();
        assert_eq!(m, MemInfo { total_kib: 65_815_084, available_kib: 49_361_952 });
        let s = m.to_sample();
        assert_eq!((s.total_mib, s.used_mib, s.util_permille), (64_272, 16_067, 250));
        let old = parse_meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 100 kB\nCached: 300 kB\n").unwrap();
        assert_eq!(old.available_kib, 500);
        assert_eq!(parse_meminfo("MemFree: 1 kB\n").unwrap_err(), "no MemTotal line");
        assert!(parse_meminfo("MemTotal: lots kB\n").unwrap_err().contains("MemTotal"));
    }

    #[test]
    fn source_keeps_the_previous_counters() {
        let dir = tempfile::tempdir().unwrap();
        let (stat, mem) = (dir.path().join("stat"), dir.path().join("meminfo"));
        std::fs::write(&stat, "cpu 100 0 100 800 0 0 0 0\ncpu0 100 0 100 800\n").unwrap();
        std::fs::write(&mem, MEMINFO).unwrap();
        let mut h = HostSource::with_paths(&stat, &mem).first_interval(Duration::ZERO);
        let (cpu, m) = h.sample().unwrap();
        assert_eq!((cpu.cores, cpu.util_permille, m.util_permille), (1, 0, 250));
        std::fs::write(&stat, "cpu 190 0 100 810 0 0 0 0\ncpu0 190 0 100 810\n").unwrap();
        assert_eq!(h.sample().unwrap().0.util_permille, 900);
        std::fs::remove_file(&mem).unwrap();
        let e = h.sample().unwrap_err().to_string();
        assert!(e.starts_with(&format!("cannot read {}", mem.display())), "{e}");
    }

    #[test]
    fn this_machine() {
        if !Path::new("/proc/stat").exists() {
            return;
        }
        let (cpu, mem) = HostSource::new().first_interval(Duration::from_millis(20)).sample().unwrap();
        assert!(cpu.cores > 0 && cpu.util_permille <= 1000);
        assert!(mem.total_mib > 0 && mem.used_mib <= mem.total_mib);
    }
}
