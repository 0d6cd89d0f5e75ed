//! The `learned` component: [`tessera_learned_policy::Learned`] exported as
//! a `tessera:policy@0.2.2` scorer.

tessera_sdk::export_scorer!(tessera_learned_policy::Learned);
