//! The same plugin logic compiled natively, for comparisons with the Wasm
//! path (`plugin bench`) and for differential tests: conversions from the
//! core model to the SDK's types, and the built-in plugins by name.

use tessera_core::{GpuHealth, Node, Pod, Tier};
use tessera_sdk as sdk;

fn sat(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn resources(r: &tessera_core::Resources) -> sdk::Resources {
    sdk::Resources { cpu_milli: sat(r.cpu_milli), memory_mib: sat(r.memory_mib) }
}

/// A core node as the SDK's mirror receives it.
pub fn sdk_node(n: &Node) -> sdk::NodeRecord {
    sdk::NodeRecord {
        id: n.id,
        name: n.name.clone(),
        zone: n.zone.clone(),
        gpu_model: n.gpu_model.clone(),
        capacity: resources(&n.capacity),
        free: resources(&n.free),
        gpus: n
            .gpus
            .iter()
            .map(|g| sdk::GpuRecord {
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
        workloads: n.workloads.iter().map(|(w, &pods)| sdk::WorkloadCount { workload: w.clone(), pods }).collect(),
        gpu_classes: n.gpu_classes.iter().map(|(c, &pods)| sdk::WorkloadCount { workload: c.clone(), pods }).collect(),
    }
}

/// A core pod as the SDK sees it.
pub fn sdk_pod(p: &Pod) -> sdk::Pod {
    sdk::Pod {
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        workload: p.workload.clone(),
        requests: resources(&p.requests),
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
    fn apply(&mut self, nodes: &[Node]) -> Result<(), String>;
    /// Scores candidates.
    fn score(
        &mut self,
        pod: &sdk::Pod,
        candidates: &[u32],
        values: &mut Vec<i64>,
        hints: &mut Vec<u8>,
    ) -> Result<(), String>;
}

impl<S: sdk::Scorer> NativeScorer for sdk::ScorerHarness<S> {
    fn apply(&mut self, nodes: &[Node]) -> Result<(), String> {
        sdk::ScorerHarness::apply(self, nodes.iter().map(|n| sdk::NodeDelta::Upsert(sdk_node(n))))
    }
    fn score(
        &mut self,
        pod: &sdk::Pod,
        candidates: &[u32],
        values: &mut Vec<i64>,
        hints: &mut Vec<u8>,
    ) -> Result<(), String> {
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
