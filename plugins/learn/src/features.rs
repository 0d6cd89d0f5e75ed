//! What the learned policy sees of one pod on one candidate node: FGD's
//! terms ([`Parts`]) and the node's resources after placement, each scaled
//! to about −1..1, and the pod's kind and size.

use tessera_openb_policies::Parts;
use tessera_sdk::{Node, Pod};

/// The candidate features, in input order.
pub const CANDIDATE: [&str; 9] = [
    "fgd_delta",       // softsign(F before − F after, in GPUs): FGD's fragmentation change
    "fgd_score",       // FGD's published integer score / 100
    "residue_drop",    // the GPU gap's residue drop / 1000 (sharing pods)
    "fgd_tie",         // FGD's tie-break term / 1000 (CPU balance, spare GPU nodes)
    "cpu_left",        // CPU free after / capacity
    "gpu_left",        // usable GPU share free after / the node's GPUs
    "whole_gpus_left", // entirely free GPUs after / the node's GPUs
    "gpus",            // the node's GPUs / 8
    "memory_left",     // memory free after / capacity
];

/// The pod features, in input order.
pub const POD: [&str; 5] = [
    "cpu_only",   // 1 for a pod without GPUs
    "sharing",    // 1 for a pod sharing one GPU
    "whole_gpus", // 1 for a pod of whole GPUs
    "gpu_demand", // GPUs asked for / 8
    "cpu_demand", // CPU asked for / 128 cores
];

/// Candidate features.
pub type Candidate = [f64; CANDIDATE.len()];
/// Pod features.
pub type PodFeatures = [f64; POD.len()];

/// `x / (1 + |x|)`: a squashing function of basic IEEE operations only, so
/// the native build and the component compute the same bits on any
/// machine (`tanh` comes from each platform's libm).
pub fn softsign(x: f64) -> f64 {
    x / (1.0 + x.abs())
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// The pod's features.
pub fn pod(pod: &Pod) -> PodFeatures {
    let cpu_only = pod.gpu_count == 0;
    let sharing = pod.is_gpu_sharing();
    [
        f64::from(u8::from(cpu_only)),
        f64::from(u8::from(sharing)),
        f64::from(u8::from(!cpu_only && !sharing)),
        f64::from(pod.gpu_demand_milli()) / 8000.0,
        f64::from(pod.requests.cpu_milli) / 128_000.0,
    ]
}

/// The features of `pod` on `node`, FGD's terms `parts` included.
pub fn candidate(pod: &Pod, node: &Node<'_>, parts: &Parts) -> Candidate {
    let gpus = node.gpus().len() as f64;
    let memory_after = node.free.memory_mib.saturating_sub(pod.requests.memory_mib);
    [
        softsign(parts.delta / 1000.0),
        parts.fgd as f64 / 100.0,
        parts.residue_drop as f64 / 1000.0,
        parts.tie as f64 / 1000.0,
        ratio(f64::from(parts.cpu_after), f64::from(node.capacity.cpu_milli)),
        ratio(f64::from(parts.gpu_free_after), 1000.0 * gpus),
        ratio(f64::from(parts.whole_gpus_after), gpus),
        gpus / 8.0,
        ratio(f64::from(memory_after), f64::from(node.capacity.memory_mib)),
    ]
}
