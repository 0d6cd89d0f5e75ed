//! The host-side bindings of the contract versions the host speaks: the
//! only place where WIT becomes Rust in this crate. The current version
//! (`tessera:policy@0.2.2`, `wit/`) is what the rest of the crate works
//! in; components built against 0.2.0 and 0.2.1 (`wit/0.2.0/`,
//! `wit/0.2.1/`) bind to it as they are (0.2.1 only adds the optional
//! `reuse` export, 0.2.2 a case of its scope, which the host reads by name
//! without bindings, and wasmtime looks exports and imports up
//! semver-compatibly); [`v0_1`] binds the frozen
//! `tessera:policy@0.1.0` (`wit/0.1.0/`) so that components built against
//! it keep loading (`crate::contract` converts). In each version the
//! `detector` world reuses the types and
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

/// `tessera:policy@0.1.0`, frozen.
pub mod v0_1 {
    /// Bindings of its `scorer` world.
    pub mod scorer {
        wasmtime::component::bindgen!({
            world: "scorer",
            path: "../../wit/0.1.0",
        });
    }

    /// Bindings of its `detector` world.
    pub mod detector {
        wasmtime::component::bindgen!({
            world: "detector",
            path: "../../wit/0.1.0",
            with: {
                "tessera:policy/types": super::scorer::tessera::policy::types,
                "tessera:policy/host": super::scorer::tessera::policy::host,
            },
        });
    }

    pub use scorer::tessera::policy::host as host_iface;
    pub use scorer::tessera::policy::types;
}
