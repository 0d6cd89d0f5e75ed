//! Which exports of a component do not have the contract's types.
//!
//! A component can export the right interface with a function of the wrong
//! type (built against a stale or edited WIT); wasmtime then refuses to
//! instantiate it with "type mismatch" and no name. This instantiates the
//! component without the typed bindings and checks each function of the
//! world's interface against the contract's Rust types, so the load error
//! names the culprit (`score`).

use wasmtime::Store;
use wasmtime::component::{ComponentNamedList, Instance, Lift, Lower};

use crate::bindings::types as wit;
use crate::host::HostState;
use crate::plugin::{PluginVersion, Pre};

/// The exports of `version`'s world interface whose types differ from the
/// contract's (empty if none can be told).
pub(crate) fn mismatched(version: &PluginVersion, mut store: Store<HostState>) -> Vec<&'static str> {
    let (pre, iface) = match &version.pre {
        Pre::Scorer(p) => (p.instance_pre(), "tessera:policy/scoring@0.1.0"),
        Pre::Detector(p) => (p.instance_pre(), "tessera:policy/detection@0.1.0"),
    };
    let Ok(instance) = pre.instantiate(&mut store) else { return Vec::new() };
    let mut wrong = Vec::new();
    let mut check = |name: &'static str, ok: fn(&Instance, &mut Store<HostState>, &str, &str) -> bool| {
        if !ok(&instance, &mut store, iface, name) {
            wrong.push(name);
        }
    };
    check("info", typed::<(), (wit::PluginInfo,)>);
    check("configure", typed::<(String,), (Result<(), String>,)>);
    match &version.pre {
        Pre::Scorer(_) => {
            check("apply", typed::<(Vec<wit::NodeDelta>,), (Result<(), String>,)>);
            check("filter", typed::<(wit::Pod, Vec<u32>), (Result<Vec<u8>, String>,)>);
            check("score", typed::<(wit::Pod, Vec<u32>), (Result<wit::Scores, String>,)>);
        }
        Pre::Detector(_) => {
            check("observe", typed::<(wit::TelemetryFrame,), (Result<(), String>,)>);
            check("detect", typed::<(), (Result<Vec<wit::Finding>, String>,)>);
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
