//! # tessera-sdk
//!
//! Write Tessera placement and detection policies as WebAssembly components
//! without touching WIT, bindings or the node mirror.
//!
//! A placement policy implements [`Scorer`]: a per-node [`Scorer::score`]
//! (and optionally [`Scorer::filter`]). The SDK keeps the node table that the
//! host feeds with deltas, runs one host call per pod over all candidates, and
//! returns one value per candidate, as the contract `tessera:policy@0.2.1`
//! demands (or 0.1.0, frozen, with the `contract-0-1` feature).
//! [`export_scorer!`] turns the type into the component's export.
//!
//! ```
//! use tessera_sdk::{Node, Pod, Score, Scorer};
//!
//! /// Prefers nodes with the most free CPU.
//! pub struct MostFreeCpu;
//!
//! impl Scorer for MostFreeCpu {
//!     type Config = ();
//!     const NAME: &'static str = "most-free-cpu";
//!     const VERSION: &'static str = "0.1.0";
//!
//!     fn new(_: ()) -> Result<Self, String> {
//!         Ok(Self)
//!     }
//!
//!     fn score(&self, _pod: &Pod, node: &Node<'_>) -> Score {
//!         Score::new(node.free.cpu_milli as i64)
//!     }
//! }
//!
//! // In the plugin crate (a `cdylib` built for wasm32-wasip2):
//! // tessera_sdk::export_scorer!(MostFreeCpu);
//!
//! // And natively, in its tests, the very same glue:
//! let mut h = tessera_sdk::ScorerHarness::<MostFreeCpu>::new("").unwrap();
//! let mut node = tessera_sdk::NodeRecord { id: 0, ..Default::default() };
//! node.free.cpu_milli = 4000;
//! h.apply([tessera_sdk::NodeDelta::Upsert(node)]).unwrap();
//! let (mut values, mut hints) = (Vec::new(), Vec::new());
//! h.score(&Pod::default(), &[0], &mut values, &mut hints).unwrap();
//! assert_eq!(values, [4000]);
//! ```
#![warn(missing_docs)]

mod harness;
mod mirror;
pub mod residue;
pub mod simd;
/// How a node's GPUs are connected: the host's own implementation
/// ([`tessera_topology`]), so a plugin rates the GPU set the host picks.
pub use tessera_topology as topology;
mod types;

pub use harness::{DetectorHarness, ScorerHarness, Window, parse_config};
pub use mirror::{NodeMeta, NodeTable};
pub use types::*;

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod guest;

/// A placement policy, written per node.
pub trait Scorer: Sized + 'static {
    /// Plugin-specific configuration, deserialised from the policy document.
    type Config: serde::de::DeserializeOwned + Default;
    /// Plugin name.
    const NAME: &'static str;
    /// Plugin version (semver).
    const VERSION: &'static str;
    /// One line on what the plugin does.
    const DESCRIPTION: &'static str = "";
    /// Stable reason codes [`Scorer::filter`] may return, by index.
    const FILTER_REASONS: &'static [&'static str] = &[];
    /// Whether [`Scorer::score`] names GPUs ([`Score::with_gpu`]) for
    /// sharing pods. If false, any GPU named is ignored and the host picks
    /// the GPU on the chosen node.
    const SUGGESTS_GPU: bool = false;

    /// Whether the plugin reads GPU device memory in use
    /// ([`NodeMeta::gpu_memory_used_mib`]); inside a component the SDK then
    /// asks the host for it with every node record.
    const GPU_MEMORY: bool = false;

    /// Whether the plugin reads zones' carbon intensity
    /// ([`NodeTable::zone_carbon`]); inside a component the SDK then asks
    /// the host for every zone's before each filter and score call (one
    /// host call per zone). Without it, `zone_carbon` holds only what was
    /// set natively ([`NodeTable::set_zone_carbon`]).
    const ZONE_CARBON: bool = false;

    /// How far the host may reuse this plugin's answers
    /// (`tessera:policy/reuse`, since contract 0.2.1). [`Reuse::Node`]
    /// promises that [`Scorer::filter`] and [`Scorer::score`] for a pod on
    /// a node depend only on the pod's fields but its name and namespace,
    /// on that node's record, on which nodes exist, on the zones' carbon
    /// intensity and on the configuration: not on other nodes' state, the
    /// other candidates of the call ([`Scorer::finish`]), earlier calls or
    /// [`random_u64`]; [`Reuse::NodeShape`] promises the same, and that
    /// the pod's workload does not matter either. The host then asks only about the candidates that
    /// changed since it asked for a pod of the same shape, and checks the
    /// promise now and then (a broken one ends reuse for the version).
    /// [`Reuse::Zone`] (contract 0.2.2) promises that within one call a
    /// node's answers depend on the node only through its `zone`: the host
    /// asks about one candidate per zone and copies the answer to the rest.
    const REUSE: Reuse = Reuse::Fresh;

    /// Builds the plugin from its configuration.
    fn new(config: Self::Config) -> Result<Self, String>;

    /// Called for each node that arrived or changed, after the mirror has
    /// it, e.g. to keep per-node terms that depend on the plugin's
    /// configuration (O(changes), not O(nodes)).
    fn on_node(&mut self, _node: &Node<'_>) {}

    /// Called for each node that left.
    fn on_remove(&mut self, _id: NodeId) {}

    /// Called after each batch of deltas, with the updated mirror.
    fn on_apply(&mut self, _nodes: &NodeTable) {}

    /// Called once per host call, before the per-node functions, with the
    /// pod and the whole mirror (e.g. to count a workload's pods per zone).
    fn prepare(&mut self, _pod: &Pod, _nodes: &NodeTable) {}

    /// The reason codes this configured plugin may return
    /// ([`Scorer::FILTER_REASONS`] unless its configuration rules some or
    /// all out). A plugin that returns none is never asked to filter: the
    /// host skips the call. What the component's `info` reports once
    /// configured.
    fn filter_reasons(&self) -> &'static [&'static str] {
        Self::FILTER_REASONS
    }

    /// Whether [`Scorer::filter`] may reject any node for this pod; called
    /// once per host call, after [`Scorer::prepare`]. `false` passes every
    /// candidate without asking `filter` node by node (e.g. a spread
    /// plugin without a hard skew limit, or a pod without a workload).
    fn filters(&self, _pod: &Pod) -> bool {
        true
    }

    /// `Ok(())` if the pod may run on the node, else the index of the reason
    /// in [`Scorer::FILTER_REASONS`]. The host has already checked resources,
    /// GPU fit, model and health.
    fn filter(&self, _pod: &Pod, _node: &Node<'_>) -> Result<(), u8> {
        Ok(())
    }

    /// Score of the node for the pod; higher is better.
    fn score(&self, pod: &Pod, node: &Node<'_>) -> Score;

    /// Called with all of one call's scores, in candidate order, before
    /// they go back to the host (e.g. to normalise them over the
    /// candidates, as some kube-scheduler plugins do).
    fn finish(&self, _pod: &Pod, _values: &mut [i64]) {}
}

/// A detection policy over a sliding window of telemetry.
pub trait Detector: Sized + 'static {
    /// Plugin-specific configuration.
    type Config: serde::de::DeserializeOwned + Default;
    /// Plugin name.
    const NAME: &'static str;
    /// Plugin version (semver).
    const VERSION: &'static str;
    /// One line on what the plugin does.
    const DESCRIPTION: &'static str = "";

    /// Builds the plugin from its configuration.
    fn new(config: Self::Config) -> Result<Self, String>;

    /// Number of frames the window keeps.
    fn window(&self) -> usize;

    /// Findings over the window.
    fn detect(&self, window: &Window) -> Vec<Finding>;
}

/// Log level for [`log`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Very detailed.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something looks wrong.
    Warn,
    /// Something failed.
    Error,
}

/// Writes a line to the host's log (natively: to standard error).
pub fn log(level: LogLevel, message: &str) {
    #[cfg(target_arch = "wasm32")]
    guest::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {message}");
}

/// Next value of the host's random stream, seeded per plugin instance so runs
/// replay exactly. Natively (in tests) a fixed-seed xorshift stands in.
pub fn random_u64() -> u64 {
    #[cfg(target_arch = "wasm32")]
    return guest::random_u64();
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::cell::Cell;
        thread_local!(static STATE: Cell<u64> = const { Cell::new(0x9E37_79B9_7F4A_7C15) });
        STATE.with(|s| {
            let mut x = s.get();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.set(x);
            x
        })
    }
}

/// Implements `tessera:policy/reuse` for the export glue of `$ty` (the
/// current contract only: 0.1.0 and 0.2.0 have no such interface).
#[cfg(not(any(feature = "contract-0-1", feature = "contract-0-2-0")))]
#[doc(hidden)]
#[macro_export]
macro_rules! __tessera_impl_reuse {
    ($glue:ty, $ty:ty) => {
        impl $crate::guest::scorer_bindings::exports::tessera::policy::reuse::Guest for $glue {
            fn scope() -> $crate::guest::scorer_bindings::exports::tessera::policy::reuse::ScoreScope {
                $crate::guest::scorer_scope::<$ty>()
            }
        }
    };
}

/// Nothing to implement: the contract built against has no `reuse`.
#[cfg(any(feature = "contract-0-1", feature = "contract-0-2-0"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __tessera_impl_reuse {
    ($glue:ty, $ty:ty) => {};
}

/// Exports a [`Scorer`] as the component's `tessera:policy/scoring` interface
/// (and, under the current contract, `tessera:policy/reuse` with
/// [`Scorer::REUSE`]).
/// Expands to nothing when not compiling for `wasm32`.
#[macro_export]
macro_rules! export_scorer {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            use $crate::guest::scorer_bindings::exports::tessera::policy::scoring as __scoring;
            use $crate::guest::scorer_bindings::tessera::policy::types as __types;
            ::std::thread_local! {
                static __STATE: ::std::cell::RefCell<::std::option::Option<$crate::ScorerHarness<$ty>>> =
                    const { ::std::cell::RefCell::new(::std::option::Option::None) };
            }
            struct __TesseraScorer;
            impl __scoring::Guest for __TesseraScorer {
                fn info() -> __types::PluginInfo {
                    $crate::guest::scorer_info(&__STATE)
                }
                fn configure(config: ::std::string::String) -> ::std::result::Result<(), ::std::string::String> {
                    $crate::guest::scorer_configure(&__STATE, &config)
                }
                fn apply(
                    deltas: ::std::vec::Vec<__types::NodeDelta>,
                ) -> ::std::result::Result<(), ::std::string::String> {
                    $crate::guest::scorer_apply(&__STATE, deltas)
                }
                fn filter(
                    pod: __types::Pod,
                    candidates: ::std::vec::Vec<u32>,
                ) -> ::std::result::Result<::std::vec::Vec<u8>, ::std::string::String> {
                    $crate::guest::scorer_filter(&__STATE, pod, candidates)
                }
                fn score(
                    pod: __types::Pod,
                    candidates: ::std::vec::Vec<u32>,
                ) -> ::std::result::Result<__types::Scores, ::std::string::String> {
                    $crate::guest::scorer_score(&__STATE, pod, candidates)
                }
            }
            $crate::__tessera_impl_reuse!(__TesseraScorer, $ty);
            $crate::guest::scorer_bindings::__tessera_export_scorer!(__TesseraScorer with_types_in $crate::guest::scorer_bindings);
        };
    };
}

/// Exports a [`Detector`] as the component's `tessera:policy/detection`
/// interface. Expands to nothing when not compiling for `wasm32`.
#[macro_export]
macro_rules! export_detector {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            use $crate::guest::detector_bindings::exports::tessera::policy::detection as __detection;
            use $crate::guest::detector_bindings::tessera::policy::types as __types;
            ::std::thread_local! {
                static __STATE: ::std::cell::RefCell<::std::option::Option<$crate::DetectorHarness<$ty>>> =
                    const { ::std::cell::RefCell::new(::std::option::Option::None) };
            }
            struct __TesseraDetector;
            impl __detection::Guest for __TesseraDetector {
                fn info() -> __types::PluginInfo {
                    $crate::guest::detector_info::<$ty>()
                }
                fn configure(config: ::std::string::String) -> ::std::result::Result<(), ::std::string::String> {
                    $crate::guest::detector_configure(&__STATE, &config)
                }
                fn observe(frame: __types::TelemetryFrame) -> ::std::result::Result<(), ::std::string::String> {
                    $crate::guest::detector_observe(&__STATE, frame)
                }
                fn detect() -> ::std::result::Result<::std::vec::Vec<__types::Finding>, ::std::string::String> {
                    $crate::guest::detector_detect(&__STATE)
                }
            }
            $crate::guest::detector_bindings::__tessera_export_detector!(__TesseraDetector with_types_in $crate::guest::detector_bindings);
        };
    };
}

/// The README's example plugin compiles (as a doctest).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
