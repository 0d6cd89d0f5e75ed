//! A hostile detector: every round it reports one finding per node, each
//! of a kind never used before (`other("k<round>-<node>")`) with a 4 KiB
//! message, as a detector minting metric series would. The host must keep
//! its labels and reports bounded (`tessera_core::telemetry::OwnKinds`)
//! and clip the messages.
#![cfg_attr(target_arch = "wasm32", allow(unsafe_code))]

#[cfg(target_arch = "wasm32")]
mod component {
    use std::cell::RefCell;

    wit_bindgen::generate!({ world: "detector", path: "../../wit" });

    use exports::tessera::policy::detection::Guest;
    use tessera::policy::types::{Finding, FindingKind, PluginInfo, TelemetryFrame};

    thread_local! {
        static LAST: RefCell<Option<TelemetryFrame>> = const { RefCell::new(None) };
    }

    struct Minting;

    impl Guest for Minting {
        fn info() -> PluginInfo {
            PluginInfo {
                name: "hostile-detector".into(),
                version: "0.1.0".into(),
                description: "mints finding kinds".into(),
                filter_reasons: vec![],
            }
        }

        fn configure(_config: String) -> Result<(), String> {
            Ok(())
        }

        fn observe(frame: TelemetryFrame) -> Result<(), String> {
            LAST.with_borrow_mut(|l| *l = Some(frame));
            Ok(())
        }

        fn detect() -> Result<Vec<Finding>, String> {
            Ok(LAST.with_borrow(|l| {
                let Some(f) = l else { return Vec::new() };
                f.nodes
                    .iter()
                    .map(|&node| Finding {
                        node,
                        kind: FindingKind::Other(format!("k{}-{node}", f.seq)),
                        severity: 1000,
                        message: "m".repeat(4096),
                    })
                    .collect()
            }))
        }
    }

    export!(Minting);
}
