//! The policy plugins of `plugins/`, built for `wasm32-wasip2` by this
//! crate's build script and embedded, so the binary and the tests always
//! carry components that match the source tree.

/// One built plugin component.
#[derive(Debug, Clone, Copy)]
pub struct Artifact {
    /// Short name (`binpack`, `topology-spread`, …).
    pub name: &'static str,
    /// Where the component lies on disk after the build.
    pub path: &'static str,
    /// The component's bytes.
    pub bytes: &'static [u8],
    /// Its configuration takes the target workload (`workload:`), which
    /// the host fills in when a policy gives none.
    pub takes_workload: bool,
}

include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));

/// The artifact with this short name.
pub fn by_name(name: &str) -> Option<Artifact> {
    ALL.iter().copied().find(|a| a.name == name)
}
