//! Component glue, compiled only for `wasm32`: the generated bindings of both
//! worlds, conversions to the SDK's types, and the export entry points that
//! [`crate::export_scorer!`] and [`crate::export_detector!`] wire up.
#![allow(unsafe_code, missing_docs)]

use std::cell::RefCell;
use std::thread::LocalKey;

use crate::{Detector, DetectorHarness, Scorer, ScorerHarness};

// The contract the component is built against: the current one (`wit/`),
// or, with the `contract-0-1`, `contract-0-2-0` or `contract-0-2-1`
// feature, a frozen one (`wit/0.1.0/`, `wit/0.2.0/`, `wit/0.2.1/`).

/// Bindings of the `scorer` world (under the current contract, of
/// `reusable-scorer`: `scorer` and `reuse`).
pub mod scorer_bindings {
    #[cfg(not(any(feature = "contract-0-1", feature = "contract-0-2-0", feature = "contract-0-2-1")))]
    wit_bindgen::generate!({
        world: "reusable-scorer",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "__tessera_export_scorer",
        default_bindings_module: "tessera_sdk::guest::scorer_bindings",
    });
    #[cfg(feature = "contract-0-2-1")]
    wit_bindgen::generate!({
        world: "reusable-scorer",
        path: "../wit/0.2.1",
        pub_export_macro: true,
        export_macro_name: "__tessera_export_scorer",
        default_bindings_module: "tessera_sdk::guest::scorer_bindings",
    });
    #[cfg(feature = "contract-0-2-0")]
    wit_bindgen::generate!({
        world: "scorer",
        path: "../wit/0.2.0",
        pub_export_macro: true,
        export_macro_name: "__tessera_export_scorer",
        default_bindings_module: "tessera_sdk::guest::scorer_bindings",
    });
    #[cfg(feature = "contract-0-1")]
    wit_bindgen::generate!({
        world: "scorer",
        path: "../wit/0.1.0",
        pub_export_macro: true,
        export_macro_name: "__tessera_export_scorer",
        default_bindings_module: "tessera_sdk::guest::scorer_bindings",
    });
}

/// Bindings of the `detector` world.
pub mod detector_bindings {
    #[cfg(not(any(feature = "contract-0-1", feature = "contract-0-2-0", feature = "contract-0-2-1")))]
    wit_bindgen::generate!({
        world: "detector",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "__tessera_export_detector",
        default_bindings_module: "tessera_sdk::guest::detector_bindings",
    });
    #[cfg(feature = "contract-0-2-1")]
    wit_bindgen::generate!({
        world: "detector",
        path: "../wit/0.2.1",
        pub_export_macro: true,
        export_macro_name: "__tessera_export_detector",
        default_bindings_module: "tessera_sdk::guest::detector_bindings",
    });
    #[cfg(feature = "contract-0-2-0")]
    wit_bindgen::generate!({
        world: "detector",
        path: "../wit/0.2.0",
        pub_export_macro: true,
        export_macro_name: "__tessera_export_detector",
        default_bindings_module: "tessera_sdk::guest::detector_bindings",
    });
    #[cfg(feature = "contract-0-1")]
    wit_bindgen::generate!({
        world: "detector",
        path: "../wit/0.1.0",
        pub_export_macro: true,
        export_macro_name: "__tessera_export_detector",
        default_bindings_module: "tessera_sdk::guest::detector_bindings",
    });
}

use scorer_bindings::tessera::policy::types as st;

fn resources(r: st::Resources) -> crate::Resources {
    let sat = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    crate::Resources { cpu_milli: sat(r.cpu_milli), memory_mib: sat(r.memory_mib) }
}

#[cfg(not(feature = "contract-0-1"))]
fn link(g: &st::Gpu) -> crate::GpuLink {
    crate::GpuLink { island: g.link.island, pcie: g.link.pcie_switch, numa: g.link.numa_node }
}

/// 0.1.0 has no links: every GPU in one island, as on a node that reports
/// none.
#[cfg(feature = "contract-0-1")]
fn link(_: &st::Gpu) -> crate::GpuLink {
    crate::GpuLink::default()
}

fn node(n: st::Node) -> crate::NodeRecord {
    crate::NodeRecord {
        id: n.id,
        name: n.name,
        zone: n.zone,
        gpu_model: n.gpu_model,
        capacity: resources(n.capacity),
        free: resources(n.free),
        gpus: n
            .gpus
            .into_iter()
            .map(|g| crate::GpuRecord {
                free_milli: g.free_milli,
                memory_mib: g.memory_mib,
                health: match g.health {
                    st::GpuHealth::Healthy => crate::GpuHealth::Healthy,
                    st::GpuHealth::Degraded => crate::GpuHealth::Degraded,
                    st::GpuHealth::Failed => crate::GpuHealth::Failed,
                },
                util_permille: g.util_permille,
                link: link(&g),
            })
            .collect(),
        cpu_util_permille: n.cpu_util_permille,
        memory_util_permille: n.memory_util_permille,
        ready: n.ready,
        workloads: n
            .workloads
            .into_iter()
            .map(|w| crate::WorkloadCount { workload: w.workload, pods: w.pods })
            .collect(),
        gpu_classes: n
            .gpu_classes
            .into_iter()
            .map(|c| crate::WorkloadCount { workload: c.class, pods: c.pods })
            .collect(),
        // Filled from `host.gpu-memory-used` by plugins that ask for it.
        gpu_memory_used_mib: Vec::new(),
    }
}

fn pod(p: st::Pod) -> crate::Pod {
    crate::Pod {
        name: p.name,
        namespace: p.namespace,
        workload: p.workload,
        requests: resources(p.requests),
        gpu_count: p.gpu_count,
        gpu_milli: p.gpu_milli,
        allowed_models: p.allowed_models,
        priority: p.priority,
        tier: match p.tier {
            st::Tier::Hard => crate::Tier::Hard,
            st::Tier::Soft => crate::Tier::Soft,
            st::Tier::Opportunistic => crate::Tier::Opportunistic,
        },
    }
}

const NOT_CONFIGURED: &str = "plugin called before configure";

pub type ScorerState<S> = LocalKey<RefCell<Option<ScorerHarness<S>>>>;

/// The plugin's info: its reason codes as configured
/// ([`Scorer::filter_reasons`]) once `configure` ran, all it declares
/// before.
pub fn scorer_info<S: Scorer>(state: &'static ScorerState<S>) -> st::PluginInfo {
    let reasons = state.with_borrow(|s| s.as_ref().map_or(S::FILTER_REASONS, |h| h.plugin().filter_reasons()));
    st::PluginInfo {
        name: S::NAME.into(),
        version: S::VERSION.into(),
        description: S::DESCRIPTION.into(),
        filter_reasons: reasons.iter().map(|s| (*s).into()).collect(),
    }
}

#[cfg(not(any(feature = "contract-0-1", feature = "contract-0-2-0")))]
pub fn scorer_scope<S: Scorer>() -> scorer_bindings::exports::tessera::policy::reuse::ScoreScope {
    use scorer_bindings::exports::tessera::policy::reuse::ScoreScope;
    match S::REUSE {
        crate::Reuse::Fresh => ScoreScope::Fresh,
        crate::Reuse::Node => ScoreScope::Node,
        crate::Reuse::NodeShape => ScoreScope::NodeShape,
        // 0.2.1 has no `zone` scope: such a plugin is asked afresh.
        #[cfg(feature = "contract-0-2-1")]
        crate::Reuse::Zone => ScoreScope::Fresh,
        #[cfg(not(feature = "contract-0-2-1"))]
        crate::Reuse::Zone => ScoreScope::Zone,
    }
}

pub fn scorer_configure<S: Scorer>(state: &'static ScorerState<S>, config: &str) -> Result<(), String> {
    let harness = ScorerHarness::<S>::new(config)?;
    state.with_borrow_mut(|s| *s = Some(harness));
    Ok(())
}

pub fn scorer_apply<S: Scorer>(state: &'static ScorerState<S>, deltas: Vec<st::NodeDelta>) -> Result<(), String> {
    state.with_borrow_mut(|s| {
        let h = s.as_mut().ok_or(NOT_CONFIGURED)?;
        h.apply(deltas.into_iter().map(|d| match d {
            st::NodeDelta::Upsert(n) => {
                let mut rec = node(n);
                if S::GPU_MEMORY {
                    rec.gpu_memory_used_mib = scorer_bindings::tessera::policy::host::gpu_memory_used(rec.id);
                }
                crate::NodeDelta::Upsert(rec)
            }
            st::NodeDelta::Remove(id) => crate::NodeDelta::Remove(id),
        }))
    })
}

pub fn scorer_filter<S: Scorer>(
    state: &'static ScorerState<S>,
    p: st::Pod,
    candidates: Vec<u32>,
) -> Result<Vec<u8>, String> {
    state.with_borrow_mut(|s| {
        let h = s.as_mut().ok_or(NOT_CONFIGURED)?;
        let mut out = Vec::new();
        h.filter(&pod(p), &candidates, &mut out)?;
        Ok(out)
    })
}

pub fn scorer_score<S: Scorer>(
    state: &'static ScorerState<S>,
    p: st::Pod,
    candidates: Vec<u32>,
) -> Result<st::Scores, String> {
    state.with_borrow_mut(|s| {
        let h = s.as_mut().ok_or(NOT_CONFIGURED)?;
        let (mut values, mut gpu_hints) = (Vec::new(), Vec::new());
        h.score(&pod(p), &candidates, &mut values, &mut gpu_hints)?;
        Ok(st::Scores { values, gpu_hints })
    })
}

use detector_bindings::tessera::policy::types as dt;

pub type DetectorState<D> = LocalKey<RefCell<Option<DetectorHarness<D>>>>;

pub fn detector_info<D: Detector>() -> dt::PluginInfo {
    dt::PluginInfo {
        name: D::NAME.into(),
        version: D::VERSION.into(),
        description: D::DESCRIPTION.into(),
        filter_reasons: Vec::new(),
    }
}

pub fn detector_configure<D: Detector>(state: &'static DetectorState<D>, config: &str) -> Result<(), String> {
    let harness = DetectorHarness::<D>::new(config)?;
    state.with_borrow_mut(|s| *s = Some(harness));
    Ok(())
}

pub fn detector_observe<D: Detector>(state: &'static DetectorState<D>, f: dt::TelemetryFrame) -> Result<(), String> {
    let n = f.nodes.len();
    if [f.gpu_util_permille.len(), f.memory_free_permille.len(), f.cpu_util_permille.len(), f.stranded_gpu_milli.len()]
        .iter()
        .any(|&l| l != n)
    {
        return Err(format!("telemetry frame {}: columns differ in length from {n} nodes", f.seq));
    }
    let samples = (0..n)
        .map(|i| {
            (
                f.nodes[i],
                crate::Sample {
                    gpu_util_permille: f.gpu_util_permille[i],
                    memory_free_permille: f.memory_free_permille[i],
                    cpu_util_permille: f.cpu_util_permille[i],
                    stranded_gpu_milli: f.stranded_gpu_milli[i],
                },
            )
        })
        .collect();
    state.with_borrow_mut(|s| {
        let h = s.as_mut().ok_or(NOT_CONFIGURED)?;
        h.observe(crate::Frame { seq: f.seq, samples });
        Ok(())
    })
}

pub fn detector_detect<D: Detector>(state: &'static DetectorState<D>) -> Result<Vec<dt::Finding>, String> {
    state.with_borrow(|s| {
        let h = s.as_ref().ok_or(NOT_CONFIGURED)?;
        Ok(h.detect()
            .into_iter()
            .map(|f| dt::Finding {
                node: f.node,
                kind: match f.kind {
                    crate::FindingKind::Overload => dt::FindingKind::Overload,
                    crate::FindingKind::MemoryPressure => dt::FindingKind::MemoryPressure,
                    crate::FindingKind::Fragmentation => dt::FindingKind::Fragmentation,
                    crate::FindingKind::LowLoad => dt::FindingKind::LowLoad,
                    crate::FindingKind::Other(s) => dt::FindingKind::Other(s),
                },
                severity: f.severity,
                message: f.message,
            })
            .collect())
    })
}

/// Logs through the host (`tessera:policy/host.log`).
pub fn log(level: crate::LogLevel, message: &str) {
    use scorer_bindings::tessera::policy::host::{self, LogLevel as L};
    let level = match level {
        crate::LogLevel::Trace => L::Trace,
        crate::LogLevel::Debug => L::Debug,
        crate::LogLevel::Info => L::Info,
        crate::LogLevel::Warn => L::Warn,
        crate::LogLevel::Error => L::Error,
    };
    host::log(level, message);
}

/// Carbon intensity of `zone` as the host knows it.
pub fn zone_carbon_intensity(zone: &str) -> Option<u32> {
    scorer_bindings::tessera::policy::host::zone_carbon_intensity(zone)
}

/// Next value of the host's seeded random stream.
pub fn random_u64() -> u64 {
    scorer_bindings::tessera::policy::host::random_u64()
}
