//! The Movement Manager's settings: the `movement:` section of a policy
//! document, defined with the document (`tessera_policy::movement`).

pub use tessera_policy::movement::*;
