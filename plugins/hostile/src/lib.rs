//! A hostile scorer. Configured by JSON:
//! `{"mode": "loop|alloc|panic|spin|chatty|wrong-length|oversized|oversized-error|guest-error|none",
//!   "on": "score|filter|apply|configure", "after": N, "every": K}`.
//! The misbehaviour fires on the chosen call once `after` such calls have
//! succeeded, and then on every `every`-th call (default: every call);
//! `min_candidates` restricts it to calls with that many candidates or more.
//! Until then the plugin behaves: it scores every candidate 0.
#![cfg_attr(target_arch = "wasm32", allow(unsafe_code))]

#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub mode: String,
    pub on: Option<String>,
    pub after: u64,
    pub every: Option<u64>,
    /// Bytes the `alloc` mode tries to allocate (default 1 GiB).
    pub bytes: Option<usize>,
    /// Iterations of busy work the `spin` mode does before answering.
    pub spin: u64,
    /// Misbehave only in filter/score calls with at least this many
    /// candidates (the load check uses 4).
    pub min_candidates: usize,
    /// Version reported by `info` (default 0.1.0).
    pub version: Option<String>,
    /// Length of the filter reason `info` declares (default: `HOSTILE`).
    pub reason_len: Option<usize>,
}

#[cfg(target_arch = "wasm32")]
mod component {
    use super::Config;
    use std::cell::RefCell;

    wit_bindgen::generate!({ world: "scorer", path: "../../wit" });

    use exports::tessera::policy::scoring::Guest;
    use tessera::policy::types::{NodeDelta, PluginInfo, Pod, Scores};

    thread_local! {
        static CFG: RefCell<Config> = RefCell::new(Config::default());
        static CALLS: RefCell<u64> = const { RefCell::new(0) };
    }

    fn misbehave(call: &str, candidates: usize) -> Option<String> {
        let cfg = CFG.with_borrow(|c| c.clone());
        if cfg.on.as_deref().unwrap_or("score") != call
            || cfg.mode.is_empty()
            || cfg.mode == "none"
            || candidates < cfg.min_candidates
        {
            return None;
        }
        let n = CALLS.with_borrow_mut(|c| {
            *c += 1;
            *c
        });
        if n <= cfg.after || !(n - cfg.after - 1).is_multiple_of(cfg.every.unwrap_or(1).max(1)) {
            return None;
        }
        match cfg.mode.as_str() {
            "loop" => {
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "alloc" => {
                let v = vec![7u8; cfg.bytes.unwrap_or(1 << 30)];
                Some(format!("allocated {} bytes", std::hint::black_box(v).len()))
            }
            "panic" => panic!("hostile plugin panics on purpose"),
            "chatty" => {
                // One 200-byte line to stderr, then a normal answer.
                eprintln!("hostile chatter {}", "x".repeat(185));
                None
            }
            "spin" => {
                let mut x = 0u64;
                for i in 0..cfg.spin {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                }
                Some(format!("spun {x}"))
            }
            other => Some(other.to_string()),
        }
    }

    struct Hostile;

    impl Guest for Hostile {
        fn info() -> PluginInfo {
            PluginInfo {
                name: "hostile".into(),
                version: CFG.with_borrow(|c| c.version.clone()).unwrap_or_else(|| "0.1.0".into()),
                description: "misbehaves on purpose".into(),
                // Declared so that the host calls its filter at all.
                filter_reasons: vec![
                    CFG.with_borrow(|c| c.reason_len).map_or_else(|| "HOSTILE".into(), |n| "R".repeat(n)),
                ],
            }
        }

        fn configure(config: String) -> Result<(), String> {
            let cfg: Config = if config.trim().is_empty() || config.trim() == "null" {
                Config::default()
            } else {
                serde_json::from_str(&config).map_err(|e| e.to_string())?
            };
            CFG.with_borrow_mut(|c| *c = cfg);
            match misbehave("configure", usize::MAX).as_deref() {
                Some("guest-error") => Err("hostile: configure refuses".into()),
                _ => Ok(()),
            }
        }

        fn apply(_deltas: Vec<NodeDelta>) -> Result<(), String> {
            match misbehave("apply", usize::MAX).as_deref() {
                Some("guest-error") => Err("hostile: apply refuses".into()),
                _ => Ok(()),
            }
        }

        fn filter(_pod: Pod, candidates: Vec<u32>) -> Result<Vec<u8>, String> {
            let n = candidates.len();
            match misbehave("filter", n).as_deref() {
                Some("wrong-length") => Ok(vec![0; n + 1]),
                Some("guest-error") => Err("hostile: filter refuses".into()),
                _ => Ok(vec![0; n]),
            }
        }

        fn score(_pod: Pod, candidates: Vec<u32>) -> Result<Scores, String> {
            let n = candidates.len();
            match misbehave("score", n).as_deref() {
                Some("wrong-length") => Ok(Scores { values: vec![1; n.saturating_sub(1)], gpu_hints: vec![] }),
                Some("oversized") => Ok(Scores { values: vec![1; 200_000], gpu_hints: vec![] }),
                Some("oversized-error") => Err("x".repeat(1 << 20)),
                Some("guest-error") => Err("hostile: score refuses".into()),
                _ => Ok(Scores { values: vec![0; n], gpu_hints: vec![] }),
            }
        }
    }

    export!(Hostile);
}
