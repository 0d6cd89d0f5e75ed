//! The same plugin logic compiled natively, for comparisons with the Wasm
//! path (`plugin bench`) and for differential tests: conversions from the
//! core model to the SDK's types, and the built-in plugins by name.

use tessera_core::{GpuHealth, Node, Pod, Tier};
use tessera_sdk as sdk;

/// A core node as the SDK sees it.
pub fn sdk_node(n: &Node) -> sdk::Node {
    sdk::Node {
        id: n.id,
        name: n.name.clone(),
        zone: n.zone.clone(),
        gpu_model: n.gpu_model.clone(),
        capacity: sdk::Resources { cpu_milli: n.capacity.cpu_milli, memory_mib: n.capacity.memory_mib },
        free: sdk::Resources { cpu_milli: n.free.cpu_milli, memory_mib: n.free.memory_mib },
        gpus: n
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| sdk::Gpu {
                index: i as u8,
                free_milli: g.free_milli,
                memory_mib: g.memory_mib,
                health: match g.health {
                    GpuHealth::Healthy => sdk::GpuHealth::Healthy,
                    GpuHealth::Degraded => sdk::GpuHealth::Degraded,
                    GpuHealth::Failed => sdk::GpuHealth::Failed,
                },
                util_permille: g.util_permille,
            })
            .collect(),
        cpu_util_permille: n.cpu_util_permille,
        memory_util_permille: n.memory_util_permille,
        ready: n.ready,
        workloads: n
            .workloads
            .iter()
            .map(|(w, &pods)| sdk::WorkloadCount { workload: w.clone(), pods })
            .collect(),
    }
}

/// A core pod as the SDK sees it.
pub fn sdk_pod(p: &Pod) -> sdk::Pod {
    sdk::Pod {
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        workload: p.workload.clone(),
        requests: sdk::Resources { cpu_milli: p.requests.cpu_milli, memory_mib: p.requests.memory_mib },
        gpu_count: p.gpu_count,
        gpu_milli: p.gpu_milli,
        allowed_models: p.allowed_models.clone(),
        priority: p.priority,
        tier: match p.tier {
            Tier::Hard => sdk::Tier::Hard,
            Tier::Soft => sdk::Tier::Soft,
            Tier::Opportunistic => sdk::Tier::Opportunistic,
        },
    }
}

/// A natively compiled scorer behind one interface.
pub trait NativeScorer {
    /// Applies node deltas.
    fn apply(&mut self, nodes: &[Node]);
    /// Scores candidates.
    fn score(&mut self, pod: &sdk::Pod, candidates: &[u32], values: &mut Vec<i64>, hints: &mut Vec<u8>) -> Result<(), String>;
}

impl<S: sdk::Scorer> NativeScorer for sdk::ScorerHarness<S> {
    fn apply(&mut self, nodes: &[Node]) {
        sdk::ScorerHarness::apply(self, nodes.iter().map(|n| sdk::NodeDelta::Upsert(sdk_node(n))));
    }
    fn score(&mut self, pod: &sdk::Pod, candidates: &[u32], values: &mut Vec<i64>, hints: &mut Vec<u8>) -> Result<(), String> {
        sdk::ScorerHarness::score(self, pod, candidates, values, hints)
    }
}

/// The native build of a built-in scorer, by name.
pub fn builtin(name: &str, config_json: &str) -> Option<Result<Box<dyn NativeScorer>, String>> {
    fn boxed<S: sdk::Scorer>(config: &str) -> Result<Box<dyn NativeScorer>, String> {
        Ok(Box::new(sdk::ScorerHarness::<S>::new(config)?))
    }
    Some(match name {
        "binpack" => boxed::<tessera_plugin_binpack::BinPack>(config_json),
        "spread" => boxed::<tessera_plugin_spread::Spread>(config_json),
        _ => return None,
    })
}
