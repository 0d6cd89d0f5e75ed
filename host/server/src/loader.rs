//! How the service turns policy documents and plugin components into
//! running code: the binary supplies it (it knows the built-in plugins and
//! owns the Wasm runtime); the service only asks.

use std::sync::Arc;

use tessera_policy::{PluginEntry, PolicyDocument};
use tessera_wasm::{PluginVersion, Policy};

/// Why a policy or a component could not be loaded. Nothing running
/// changes; every variant names the plugin at fault where there is one.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The Wasm runtime refused a component: unreadable, not a component,
    /// the wrong world, a digest that does not match, a failed load check.
    #[error(transparent)]
    Component(#[from] tessera_wasm::LoadError),
    /// The document names a built-in plugin there is none of.
    #[error("plugin {plugin}: no built-in plugin `{name}` (built in: {})", .known.join(", "))]
    UnknownBuiltin {
        /// The policy's plugin.
        plugin: String,
        /// The built-in it names.
        name: String,
        /// The built-ins there are.
        known: Vec<String>,
    },
    /// The loader itself failed (it panicked on its thread).
    #[error("the loader failed: {0}")]
    Loader(String),
}

/// Turns policy documents and plugin components into running code. The
/// binary supplies it (it knows the built-in plugins and owns the Wasm
/// runtime); the service only asks.
pub trait Loader: Send + Sync + 'static {
    /// Loads every plugin of `doc` (all or nothing).
    fn load_policy(&self, doc: &PolicyDocument) -> Result<Policy, LoadError>;
    /// Loads and checks a new component for `entry`.
    fn load_plugin(&self, entry: &PluginEntry, seed: u64, wasm: &[u8]) -> Result<Arc<PluginVersion>, LoadError>;
}
