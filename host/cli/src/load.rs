//! From a policy document to a running [`Policy`].

use std::sync::Arc;

use tessera_policy::{PluginEntry, PolicyDocument, Role, Source};
use tessera_server::LoadError;
use tessera_wasm::{Member, PluginSlot, PluginSpec, PluginVersion, Policy, Runtime};

/// The component bytes a source names.
pub fn component_bytes(plugin: &str, source: &Source) -> Result<Vec<u8>, LoadError> {
    match source {
        Source::Builtin(name) => {
            tessera_plugins::by_name(name).map(|a| a.bytes.to_vec()).ok_or_else(|| LoadError::UnknownBuiltin {
                plugin: plugin.to_string(),
                name: name.clone(),
                known: tessera_plugins::ALL.iter().map(|a| a.name.to_string()).collect(),
            })
        }
        // Bounded: a regular file of at most 64 MiB. Its content is never
        // echoed: the runtime checks the magic before parsing.
        Source::File(path) => tessera_input::file::read(path, tessera_input::Limit::COMPONENT)
            .map_err(|e| tessera_wasm::LoadError::Read { plugin: plugin.to_string(), source: e }.into()),
    }
}

/// The runtime spec of a policy entry.
pub fn spec(entry: &PluginEntry, seed: u64) -> PluginSpec {
    PluginSpec {
        name: entry.name.clone(),
        role: Some(entry.role),
        sha256: entry.sha256.as_ref().map(|d| d.0.clone()),
        limits: entry.limits,
        grants: entry.grants,
        config_json: PolicyDocument::config_json(entry),
        seed,
    }
}

/// Loads one entry of a policy.
pub fn load_entry(rt: &Runtime, entry: &PluginEntry, seed: u64) -> Result<Arc<PluginVersion>, LoadError> {
    let bytes = component_bytes(&entry.name, &entry.source)?;
    Ok(rt.load(&spec(entry, seed), &bytes)?.0)
}

/// How a document's equal totals are decided.
pub fn tie_break(doc: &PolicyDocument) -> tessera_core::score::TieBreak {
    match doc.tie_break {
        tessera_policy::TieBreakSpec::NodeId => tessera_core::score::TieBreak::NodeId,
        tessera_policy::TieBreakSpec::SeededRank => tessera_core::score::TieBreak::SeededRank(doc.seed),
    }
}

/// Loads every plugin of a document; all or nothing.
pub fn load_policy(rt: &Runtime, doc: &PolicyDocument) -> Result<Policy, LoadError> {
    let mut members = Vec::new();
    for entry in &doc.plugins {
        let version = load_entry(rt, entry, doc.seed)?;
        let weight = if entry.role == Role::Scorer { entry.weight.0 } else { 0.0 };
        members.push(Member { name: entry.name.clone(), weight, slot: Arc::new(PluginSlot::new(version)) });
    }
    Ok(Policy::new(doc.name.clone(), members)
        .with_tie_break(tie_break(doc))
        .with_timeout(std::time::Duration::from_millis(doc.timeout_ms.0)))
}
