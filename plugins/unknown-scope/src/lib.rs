//! A scorer that exports `reuse` from a forged copy of the contract (`wit/`,
//! identical to the real one but for an extra `score-scope` case,
//! `everything`) and declares that scope, as a plugin claiming a promise
//! the host does not know would. The runtime reads a scope by its name and
//! must refuse this one at load, naming it, rather than guess what it
//! promises.
#![cfg_attr(target_arch = "wasm32", allow(unsafe_code))]

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({ world: "reusable-scorer", path: "wit" });

    use exports::tessera::policy::reuse::{Guest as Reuse, ScoreScope};
    use exports::tessera::policy::scoring::Guest;
    use tessera::policy::types::{NodeDelta, PluginInfo, Pod, Scores};

    struct Forged;

    impl Guest for Forged {
        fn info() -> PluginInfo {
            PluginInfo {
                name: "unknown-scope".into(),
                version: "0.1.0".into(),
                description: "declares a reuse scope no contract has".into(),
                filter_reasons: vec![],
            }
        }

        fn configure(_config: String) -> Result<(), String> {
            Ok(())
        }

        fn apply(_deltas: Vec<NodeDelta>) -> Result<(), String> {
            Ok(())
        }

        fn filter(_pod: Pod, candidates: Vec<u32>) -> Result<Vec<u8>, String> {
            Ok(vec![0; candidates.len()])
        }

        fn score(_pod: Pod, candidates: Vec<u32>) -> Result<Scores, String> {
            Ok(Scores { values: vec![0; candidates.len()], gpu_hints: Vec::new() })
        }
    }

    impl Reuse for Forged {
        fn scope() -> ScoreScope {
            ScoreScope::Everything
        }
    }

    export!(Forged);
}
