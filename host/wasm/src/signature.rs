//! Which exports of a component do not have the contract's types.
//!
//! A component can export the right interface with a function of the wrong
//! type (built against a stale or edited WIT); wasmtime then refuses to
//! instantiate it with "type mismatch" and no name. This instantiates the
//! component without the typed bindings and checks each function of the
//! world's interface against the Rust types of the contract version it
//! claims, so the load error names the culprit (`score`).

use wasmtime::Store;
use wasmtime::component::{ComponentNamedList, Instance, Lift, Lower};

use crate::contract::Pre;
use crate::error::WorldKind;
use crate::host::HostState;
use crate::plugin::PluginVersion;

/// Checks each export of a world against one version's types (`$w`).
macro_rules! check_exports {
    ($w:ident, $kind:expr, $check:ident) => {{
        $check("info", typed::<(), ($w::PluginInfo,)>);
        $check("configure", typed::<(String,), (Result<(), String>,)>);
        match $kind {
            WorldKind::Scorer => {
                $check("apply", typed::<(Vec<$w::NodeDelta>,), (Result<(), String>,)>);
                $check("filter", typed::<($w::Pod, Vec<u32>), (Result<Vec<u8>, String>,)>);
                $check("score", typed::<($w::Pod, Vec<u32>), (Result<$w::Scores, String>,)>);
            }
            WorldKind::Detector => {
                $check("observe", typed::<($w::TelemetryFrame,), (Result<(), String>,)>);
                $check("detect", typed::<(), (Result<Vec<$w::Finding>, String>,)>);
            }
        }
    }};
}

/// The exports of `version`'s world interface whose types differ from the
/// contract's (empty if none can be told).
pub(crate) fn mismatched(version: &PluginVersion, mut store: Store<HostState>) -> Vec<&'static str> {
    let pre = &version.pre;
    let iface = pre.contract().interface(match pre.kind() {
        WorldKind::Scorer => "scoring",
        WorldKind::Detector => "detection",
    });
    let Ok(instance) = pre.instance_pre().instantiate(&mut store) else { return Vec::new() };
    let mut wrong = Vec::new();
    let mut check = |name: &'static str, ok: fn(&Instance, &mut Store<HostState>, &str, &str) -> bool| {
        if !ok(&instance, &mut store, &iface, name) {
            wrong.push(name);
        }
    };
    match pre {
        Pre::Scorer(..) | Pre::Detector(..) => {
            use crate::bindings::types as w;
            check_exports!(w, pre.kind(), check)
        }
        Pre::ScorerV0_1(_) | Pre::DetectorV0_1(_) => {
            use crate::bindings::v0_1::types as w;
            check_exports!(w, pre.kind(), check)
        }
    }
    wrong
}

/// Whether `iface`'s export `name` is a function of type `P -> R`.
fn typed<P, R>(instance: &Instance, store: &mut Store<HostState>, iface: &str, name: &str) -> bool
where
    P: ComponentNamedList + Lower + Send + Sync,
    R: ComponentNamedList + Lift + Send + Sync,
{
    let Some(i) = instance.get_export_index(&mut *store, None, iface) else { return false };
    let Some(f) = instance.get_export_index(&mut *store, Some(&i), name) else { return false };
    let Some(func) = instance.get_func(&mut *store, f) else { return false };
    func.typed::<P, R>(&*store).is_ok()
}
