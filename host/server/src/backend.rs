//! The cluster the service schedules, behind one trait ([`Backend`]): the
//! embedded simulator ([`SimBackend`], pods from an [`ArrivalStream`]) or
//! Kubernetes (`tessera-kube`).

mod contract;
mod sim;
mod stream;

pub use contract::{
    Backend, BackendError, BackendOp, ClusterEvent, ExtenderBackend, JOURNAL_ERROR, LiveBackend, Moves, Refusal,
};
pub use sim::SimBackend;
pub use stream::ArrivalStream;
