//! Integration tests across Tessera's crates, in one binary (wasmtime's
//! layout): real components built from `plugins/` by `tessera-plugins`.

mod cache;
mod containment;
mod contract;
mod detector;
mod kube;
mod languages;
mod load;
mod oci;
mod reload;
mod reuse;
mod scoring;
mod serve;
mod topology;

use std::sync::{Arc, OnceLock};

use tessera_core::{Node, Resources};
use tessera_plugins::Artifact;
use tessera_wasm::{Member, PluginSlot, PluginSpec, PluginVersion, Policy, Runtime, RuntimeConfig};

/// A runtime with default settings, sharing one precompiled cache across
/// the tests of this process (compiling each component once).
pub fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig { cache_dir: Some(cache_dir()), ..RuntimeConfig::default() }).expect("runtime")
}

/// The repository's root (manifests, deploy files).
pub fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The precompiled-component cache shared by the tests of this process.
pub fn cache_dir() -> std::path::PathBuf {
    static CACHE: OnceLock<tempfile::TempDir> = OnceLock::new();
    CACHE.get_or_init(|| tempfile::tempdir().expect("cache dir")).path().to_path_buf()
}

/// Loads `artifact` under `name` with JSON `config`, with a 2 s deadline:
/// tests run many threads on 2 cores, and only the tests about deadlines
/// should ever meet one.
pub fn load(rt: &Runtime, artifact: Artifact, name: &str, config: &str) -> Arc<PluginVersion> {
    let mut spec = PluginSpec::new(name);
    spec.limits.deadline_ms = tessera_policy::Bounded(2000);
    spec.config_json = config.into();
    rt.load(&spec, artifact.bytes).unwrap_or_else(|e| panic!("load {name}: {e}")).0
}

/// A member with weight `weight`.
pub fn member(version: Arc<PluginVersion>, weight: f64) -> Member {
    Member { name: version.name().to_string(), weight, slot: Arc::new(PluginSlot::new(version)) }
}

/// `n` nodes with 8 GPUs; node `i` has `i` whole GPUs allocated (mod 8).
pub fn cluster(n: u32) -> Vec<Node> {
    (0..n)
        .map(|i| {
            let mut node =
                Node::new(i, format!("node-{i}"), Resources { cpu_milli: 96_000, memory_mib: 393_216 }, 8, "V100M32");
            node.zone = format!("zone-{}", i % 3);
            for g in 0..(i % 8) as usize {
                node.gpus[g].free_milli = 0;
            }
            node
        })
        .collect()
}

/// A policy over `members` that mirrors `nodes`.
pub fn policy(members: Vec<Member>, nodes: &[Node]) -> Policy {
    let p = Policy::new("test", members);
    p.upsert_nodes(nodes);
    p
}
