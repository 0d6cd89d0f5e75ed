//! How the service turns policy documents and plugin components into
//! running code: the binary supplies it (it knows the built-in plugins and
//! owns the Wasm runtime); the service only asks.

use std::sync::Arc;

use tessera_policy::{PluginEntry, PolicyDocument};
use tessera_wasm::{PluginVersion, Policy};

/// Turns policy documents and plugin components into running code. The
/// binary supplies it (it knows the built-in plugins and owns the Wasm
/// runtime); the service only asks.
pub trait Loader: Send + Sync + 'static {
    /// Loads every plugin of `doc` (all or nothing).
    fn load_policy(&self, doc: &PolicyDocument) -> Result<Policy, String>;
    /// Loads and checks a new component for `entry`.
    fn load_plugin(&self, entry: &PluginEntry, seed: u64, wasm: &[u8]) -> Result<Arc<PluginVersion>, String>;
}
