//! The precompiled-component cache: a hit is used; a stale, foreign,
//! truncated or altered entry is rejected, recompiled and rewritten.

use tessera_plugins::{BINPACK, TOPOLOGY_SPREAD};
use tessera_wasm::{CacheOutcome, PluginSpec, Runtime, RuntimeConfig, content_key};

fn cached(dir: &std::path::Path, fuel: bool) -> Runtime {
    Runtime::new(RuntimeConfig { cache_dir: Some(dir.to_path_buf()), fuel, ..RuntimeConfig::default() }).unwrap()
}

fn outcome(rt: &Runtime, bytes: &[u8]) -> CacheOutcome {
    rt.load(&PluginSpec::new("p"), bytes).unwrap().1.cache
}

#[test]
fn miss_then_hit_across_runtimes() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(outcome(&cached(dir.path(), false), BINPACK.bytes), CacheOutcome::Miss);
    assert_eq!(outcome(&cached(dir.path(), false), BINPACK.bytes), CacheOutcome::Hit);
    assert_eq!(outcome(&cached(dir.path(), false), TOPOLOGY_SPREAD.bytes), CacheOutcome::Miss);
}

#[test]
fn altered_truncated_foreign_and_stale_entries_are_rejected_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let rt = cached(dir.path(), false);
    assert_eq!(outcome(&rt, BINPACK.bytes), CacheOutcome::Miss);
    let cache = rt.cache().unwrap();
    let entry = cache.entry_path(&content_key(BINPACK.bytes));
    let good = std::fs::read(&entry).unwrap();

    let expect_rejected = |why: &str| match outcome(&rt, BINPACK.bytes) {
        CacheOutcome::Rejected(r) => assert!(r.contains(why), "{r}"),
        other => panic!("expected a rejection ({why}), got {other:?}"),
    };

    // One flipped byte in the body.
    let mut altered = good.clone();
    let last = altered.len() - 100;
    altered[last] ^= 0xff;
    std::fs::write(&entry, &altered).unwrap();
    expect_rejected("truncated or altered");
    assert_eq!(std::fs::read(&entry).unwrap(), good, "rewritten with a good entry");
    assert_eq!(outcome(&rt, BINPACK.bytes), CacheOutcome::Hit);

    // Truncated.
    std::fs::write(&entry, &good[..good.len() / 2]).unwrap();
    expect_rejected("truncated or altered");

    // Not ours at all.
    std::fs::write(&entry, b"hello").unwrap();
    expect_rejected("not a Tessera cache entry");

    // Another component's entry under this component's name.
    assert_eq!(outcome(&rt, TOPOLOGY_SPREAD.bytes), CacheOutcome::Miss);
    std::fs::copy(cache.entry_path(&content_key(TOPOLOGY_SPREAD.bytes)), &entry).unwrap();
    expect_rejected("entry is for component");

    // An entry compiled by another engine configuration (fuel metering on).
    let fuel_dir = tempfile::tempdir().unwrap();
    let fuel_rt = cached(fuel_dir.path(), true);
    assert_eq!(outcome(&fuel_rt, BINPACK.bytes), CacheOutcome::Miss);
    assert_ne!(fuel_rt.cache().unwrap().engine_key(), cache.engine_key());
    std::fs::copy(fuel_rt.cache().unwrap().entry_path(&content_key(BINPACK.bytes)), &entry).unwrap();
    expect_rejected("another engine configuration");
    assert_eq!(outcome(&rt, BINPACK.bytes), CacheOutcome::Hit);
}
