//! Tessera on Kubernetes, the distributed engine it runs in: the backend
//! behind the same [`tessera_server::Backend`] trait as the simulator
//! (reflectors on nodes, pods, PodDisruptionBudgets; binding through
//! `pods/binding`, eviction through `pods/eviction`), leader election on a
//! `coordination.k8s.io` Lease, the scheduler-extender endpoints for
//! clusters that keep kube-scheduler, the `TesseraPolicy` resource, and
//! gangs from scheduler-plugins' `PodGroup`, queues as `TesseraQueue`
//! objects.

pub mod backend;
pub mod calls;
pub mod config;
pub mod convert;
pub mod crd;
pub mod extender;
pub mod journal;
pub mod leader;
pub mod models;
pub mod oci;
pub mod podgroup;
pub mod policies;
pub mod queues;
pub mod report;
pub mod track;
pub mod wait;

pub use backend::{KubeBackend, KubeError};
pub use config::KubeBackendConfig;
