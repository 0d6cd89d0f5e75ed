//! NVML for real, on a machine with an NVIDIA GPU and driver:
//! `cargo test -p tessera-agent --test nvml -- --ignored`.

use std::time::Duration;

use tessera_agent::gpu::{GpuSource, NvmlSource};
use tessera_agent::health::Tracker;
use tessera_agent::host::HostSource;
use tessera_agent::{Agent, Health};

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn nvml_reads_the_gpus_of_this_machine() {
    let mut src = NvmlSource::open().expect("NVML opens");
    let driver = src.driver_version().expect("driver version");
    assert!(driver.chars().next().is_some_and(|c| c.is_ascii_digit()), "{driver}");
    let readings = src.sample().expect("a sample");
    assert!(!readings.is_empty(), "at least one GPU");
    for r in &readings {
        assert!(r.uuid.starts_with("GPU-") || r.uuid.starts_with("MIG-"), "{r:?}");
        assert!(!r.name.is_empty() && !r.lost, "{r:?}");
        assert!(r.util_percent.is_none_or(|u| u <= 100), "{r:?}");
        let total = r.memory_total_bytes.expect("memory total");
        assert!(total >= 1 << 30, "{r:?}");
        assert!(r.memory_used_bytes.is_some_and(|u| u <= total), "{r:?}");
        assert!(r.temperature_c.is_none_or(|t| (1..=120).contains(&t)), "{r:?}");
        assert!(r.power_mw.is_none_or(|p| p < 2_000_000), "{r:?}");
    }
    // The interconnect: one bus id per GPU, pairwise ancestors that add up.
    let t = src.topology().expect("NVML tells the topology on Linux");
    assert_eq!(t.bus_ids.len(), readings.len(), "{t:?}");
    let links = tessera_agent::topology::links(&t).expect("a consistent reading");
    eprintln!("topology: {}", tessera_core::topology::format(&links));
    // Through the agent: published samples with health.
    let src: Box<dyn GpuSource> = Box::new(src);
    let mut a = Agent::new(
        "gpu-test",
        Ok(src),
        HostSource::new().first_interval(Duration::from_millis(50)),
        Tracker::default(),
    );
    let s = a.sample().unwrap();
    assert!(s.nvml.available);
    assert_eq!(s.gpus.len(), readings.len());
    assert!(s.gpus.iter().all(|g| g.memory_total_mib > 1000 && g.health != Health::Failed), "{s:?}");
    println!("{}", serde_json::to_string_pretty(&s).unwrap());
}
