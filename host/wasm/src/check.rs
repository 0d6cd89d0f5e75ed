//! Canned calls run on every plugin before it may serve: a small cluster
//! with shared and whole GPUs, pods of each shape, and telemetry frames.
//! Any fault, guest error or malformed result fails the load.

use std::sync::RwLock;

use tessera_core::{Gpu, GpuHealth, Node, Pod, Resources, Tier};

use crate::bindings::types as wit;
use crate::error::{CallError, WorldKind};
use crate::feed::{NodeFeed, to_wit_pod};
use crate::plugin::PluginVersion;

/// The canned cluster: two zones, two GPU models, one CPU-only node, some
/// GPUs partly allocated, one degraded.
pub fn canned_nodes() -> Vec<Node> {
    let mut nodes = Vec::new();
    for (id, zone, model, gpus) in
        [(0, "zone-a", "V100", 8), (1, "zone-a", "T4", 2), (2, "zone-b", "V100", 4), (3, "zone-b", "", 0)]
    {
        let mut n =
            Node::new(id, format!("canned-{id}"), Resources { cpu_milli: 64_000, memory_mib: 262_144 }, gpus, model);
        n.zone = zone.into();
        nodes.push(n);
    }
    nodes[0].gpus[1] = Gpu { free_milli: 500, ..Gpu::default() };
    nodes[0].free = Resources { cpu_milli: 48_000, memory_mib: 200_000 };
    nodes[0].workloads.insert("canned-web".into(), 2);
    nodes[2].gpus[3] = Gpu { health: GpuHealth::Degraded, util_permille: 990, ..Gpu::default() };
    nodes
}

/// Pods of each shape: CPU-only, GPU-sharing, whole GPUs.
pub fn canned_pods() -> Vec<Pod> {
    let pod = |name: &str, gpu_count, gpu_milli| Pod {
        name: name.into(),
        namespace: "default".into(),
        workload: "canned-web".into(),
        requests: Resources { cpu_milli: 4_000, memory_mib: 8_192 },
        gpu_count,
        gpu_milli,
        allowed_models: Vec::new(),
        priority: 0,
        tier: Tier::Soft,
        ..Default::default()
    };
    vec![pod("cpu-only", 0, 0), pod("shared", 1, 300), pod("whole", 2, 1000)]
}

/// One canned telemetry interval of the canned cluster: node 0 hot and
/// short of memory, the others calm.
pub fn canned_frame(seq: u64) -> wit::TelemetryFrame {
    wit::TelemetryFrame {
        seq,
        nodes: vec![0, 1, 2, 3],
        gpu_util_permille: vec![950, 100, 500, 0],
        memory_free_permille: vec![50, 800, 500, 900],
        cpu_util_permille: vec![900, 100, 400, 50],
        stranded_gpu_milli: vec![500, 0, 0, 0],
    }
}

/// Runs the canned calls against a fresh mirror.
pub(crate) fn canned(version: &PluginVersion) -> Result<(), CallError> {
    match version.kind() {
        WorldKind::Scorer => {
            let feed = RwLock::new(NodeFeed::new());
            for n in canned_nodes() {
                feed.write().unwrap_or_else(|p| p.into_inner()).upsert(&n);
            }
            let ids: Vec<u32> = (0..4).collect();
            for pod in canned_pods() {
                let pod = to_wit_pod(&pod);
                version.filter(&feed, &pod, &ids)?;
                version.score(&feed, &pod, &ids)?;
            }
        }
        WorldKind::Detector => {
            for seq in 0..3u64 {
                version.observe(&canned_frame(seq))?;
            }
            version.detect()?;
        }
    }
    // The instances used here mirror the canned cluster: never reuse them.
    version.drain();
    Ok(())
}
