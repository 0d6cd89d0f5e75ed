//! A scorer whose `score` has the wrong signature: built against a forged
//! copy of the contract (`wit/`, identical to the real one but for
//! `score`'s result type), as a plugin built against a stale or edited WIT
//! would be. The runtime must refuse it at load and say that `score` is
//! what does not match.
#![cfg_attr(target_arch = "wasm32", allow(unsafe_code))]

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({ world: "scorer", path: "wit" });

    use exports::tessera::policy::scoring::Guest;
    use tessera::policy::types::{NodeDelta, PluginInfo, Pod};

    struct Wrong;

    impl Guest for Wrong {
        fn info() -> PluginInfo {
            PluginInfo {
                name: "wrong-signature".into(),
                version: "0.1.0".into(),
                description: "score returns list<u8>".into(),
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

        fn score(_pod: Pod, candidates: Vec<u32>) -> Result<Vec<u8>, String> {
            Ok(vec![0; candidates.len()])
        }
    }

    export!(Wrong);
}
