//! The `random` component: [`tessera_openb_policies::Random`] exported as a
//! `tessera:policy@0.2.2` scorer.

tessera_sdk::export_scorer!(tessera_openb_policies::Random);
