//! The `load-aware` component: [`tessera_placement_policies::LoadAware`] exported as a
//! `tessera:policy@0.2.2` scorer.

tessera_sdk::export_scorer!(tessera_placement_policies::LoadAware);
