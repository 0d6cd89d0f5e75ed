//! `tessera serve`: the scheduling loop, the rescheduling cycle and the
//! Movement Manager running on a backend (the embedded simulator, or
//! Kubernetes through `tessera-kube`), observed through OpenTelemetry
//! traces and OpenMetrics with exemplars, and explained by an HTTP API.
//!
//! Layered, each layer calling only down: configuration, records, metrics
//! and tracing at the bottom; the shared state ([`state`]) and the control
//! messages ([`control`]) above them; the backend ([`backend`]); the loop
//! ([`engine`], the one online loop of `tessera_core::driver` on a
//! backend) and the campaign scheduler ([`campaigns`]); the HTTP API
//! ([`api`]) on top; [`Server`] wires them, shaped like Kubewarden's
//! policy server.

pub mod api;
pub mod attribution;
pub mod backend;
pub mod campaigns;
pub mod config;
pub mod control;
pub mod cron;
pub mod engine;
pub mod extend;
pub mod heat;
pub mod http;
pub mod learning;
pub mod loader;
pub mod metrics;
pub mod observe;
pub mod record;
pub mod rollout;
pub mod server;
pub mod state;
pub mod wall;

pub use backend::{Backend, SimBackend};
pub use campaigns::CampaignRunner;
pub use config::{ConfigError, ServeConfig};
pub use control::{PolicyHandle, QueueHandle};
pub use learning::FineTuner;
pub use loader::{LoadError, Loader};
pub use observe::Tracing;
pub use server::{ServeError, Server};
pub use state::{PolicyView, Shared, Status};
