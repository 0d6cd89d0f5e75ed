//! The `bestfit` component: [`tessera_openb_policies::BestFit`] exported as a
//! `tessera:policy@0.2.0` scorer.

tessera_sdk::export_scorer!(tessera_openb_policies::BestFit);
