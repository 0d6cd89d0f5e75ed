//! The host-side bindings of `tessera:policy@0.1.0`: the only place where
//! WIT becomes Rust in this crate. The `detector` world reuses the types and
//! the `host` interface generated for the `scorer` world.
#![allow(missing_docs, clippy::all)]

/// Bindings of the `scorer` world.
pub mod scorer {
    wasmtime::component::bindgen!({
        world: "scorer",
        path: "../../wit",
    });
}

/// Bindings of the `detector` world.
pub mod detector {
    wasmtime::component::bindgen!({
        world: "detector",
        path: "../../wit",
        with: {
            "tessera:policy/types": super::scorer::tessera::policy::types,
            "tessera:policy/host": super::scorer::tessera::policy::host,
        },
    });
}

pub use scorer::tessera::policy::host as host_iface;
pub use scorer::tessera::policy::types;
