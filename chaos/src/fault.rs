//! The fault catalogue: what can go wrong, when, how hard, and where.
//!
//! A [`FaultSpec`] is what a campaign file says; [`FaultSpec::resolve`]
//! picks its targets on a given cluster with a seeded generator, so the
//! same campaign, cluster and seed always hit the same nodes and GPUs.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tessera_core::model::{Node, NodeId};

/// Kinds of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// Target nodes go down (not ready); their pods are lost to the node
    /// and resubmitted by their controllers; the nodes come back at the end.
    NodeCrash,
    /// Every node of a zone is cut off from the control plane: like a
    /// crash of the whole zone, healed at the end.
    ZonePartition,
    /// XID/ECC errors: a share (`intensity`) of each target node's GPUs
    /// fails (at least one); pods on them are resubmitted; GPUs are reset
    /// at the end.
    GpuFailure,
    /// GPUs run slower and hotter: a share (`intensity`) of each target
    /// node's GPUs is degraded and reports `intensity` × 100% more
    /// utilisation (SLA violations follow).
    GpuDegradation,
    /// Node telemetry is lost with probability `intensity` per interval:
    /// the scheduler keeps the last sample it got.
    TelemetryLoss,
    /// Node telemetry arrives `round(intensity × 10)` intervals late.
    TelemetryDelay,
    /// Extra arrivals: `intensity` × the arrivals the window already has,
    /// with the same shapes and run times.
    LoadSpike,
    /// A plugin traps: with probability `intensity` a decision's plugins
    /// fault and the host's hard filter alone decides (first candidate).
    PluginTrap,
    /// A plugin is slow: with probability `intensity` a decision runs out
    /// of its time budget before scoring and falls back likewise.
    PluginSlow,
    /// API and actuator errors during movement: each eviction or start of
    /// a rescheduling move fails with probability `intensity` (the
    /// Movement Manager retries, rolls back or drops it).
    ActuatorErrors,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 10] = [
        FaultKind::NodeCrash,
        FaultKind::ZonePartition,
        FaultKind::GpuFailure,
        FaultKind::GpuDegradation,
        FaultKind::TelemetryLoss,
        FaultKind::TelemetryDelay,
        FaultKind::LoadSpike,
        FaultKind::PluginTrap,
        FaultKind::PluginSlow,
        FaultKind::ActuatorErrors,
    ];

    /// Its name in campaign files.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::NodeCrash => "node-crash",
            FaultKind::ZonePartition => "zone-partition",
            FaultKind::GpuFailure => "gpu-failure",
            FaultKind::GpuDegradation => "gpu-degradation",
            FaultKind::TelemetryLoss => "telemetry-loss",
            FaultKind::TelemetryDelay => "telemetry-delay",
            FaultKind::LoadSpike => "load-spike",
            FaultKind::PluginTrap => "plugin-trap",
            FaultKind::PluginSlow => "plugin-slow",
            FaultKind::ActuatorErrors => "actuator-errors",
        }
    }

    /// Whether it takes pods off nodes (and so has a recovery time).
    pub fn displaces(self) -> bool {
        matches!(self, FaultKind::NodeCrash | FaultKind::ZonePartition | FaultKind::GpuFailure)
    }

    /// Whether it acts on nodes (and so needs a target).
    pub fn targets_nodes(self) -> bool {
        !matches!(
            self,
            FaultKind::LoadSpike | FaultKind::PluginTrap | FaultKind::PluginSlow | FaultKind::ActuatorErrors
        )
    }
}

/// Which nodes a fault hits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Target {
    /// One node, picked by the seed.
    One,
    /// This many distinct nodes.
    Count(usize),
    /// This share of the nodes, % (rounded up).
    Percent(f64),
    /// Every node of a zone.
    Zone(String),
    /// Every node.
    All,
}

/// When a fault starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Start {
    /// At this time, seconds after the first arrival.
    At(u64),
    /// Predictive: `lead_s` before the load peak that a model fitted on the
    /// first `history_s` of the load predicts (see [`crate::forecast`]); the
    /// intensity follows the model's error.
    BeforePeak {
        /// Seconds ahead of the predicted peak.
        lead_s: u64,
        /// Seconds of load history the model is fitted on.
        history_s: u64,
    },
}

/// One fault of a scenario, as a campaign states it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// What.
    pub kind: FaultKind,
    /// When (`start: {at: 3600}`).
    #[serde(with = "serde_yaml_ng::with::singleton_map")]
    pub start: Start,
    /// For how long, seconds.
    pub duration_s: u64,
    /// How hard, in (0, 1] (see each kind).
    #[serde(default = "one")]
    pub intensity: f64,
    /// Where (node faults; `one` by default): `one`, `all`, `{count: 3}`,
    /// `{percent: 5}`, `{zone: zone-1}`.
    #[serde(default = "one_node", with = "serde_yaml_ng::with::singleton_map")]
    pub target: Target,
}

fn one() -> f64 {
    1.0
}

fn one_node() -> Target {
    Target::One
}

/// A fault that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FaultError {
    /// Intensity outside (0, 1].
    #[error("{kind}: intensity {value} is not in (0, 1]")]
    Intensity {
        /// Kind.
        kind: &'static str,
        /// Value.
        value: f64,
    },
    /// Zero duration.
    #[error("{kind}: duration_s must be at least 1")]
    Duration {
        /// Kind.
        kind: &'static str,
    },
    /// A target share or count that cannot be meant.
    #[error("{kind}: target {target}")]
    Target {
        /// Kind.
        kind: &'static str,
        /// What is wrong with it.
        target: String,
    },
    /// The target names nothing on this cluster.
    #[error("{kind}: target {target} matches no node of the cluster")]
    NoTarget {
        /// Kind.
        kind: &'static str,
        /// The target, as written.
        target: String,
    },
}

/// A fault placed on a cluster: its window and what it hits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedFault {
    /// What.
    pub kind: FaultKind,
    /// Window start, seconds (absolute, as the workload's times).
    pub start: u64,
    /// Window end.
    pub end: u64,
    /// How hard.
    pub intensity: f64,
    /// The nodes it hits.
    pub nodes: Vec<NodeId>,
    /// The GPUs it hits (GPU faults), `(node, index)`.
    pub gpus: Vec<(NodeId, usize)>,
}

impl FaultSpec {
    /// Checks ranges.
    pub fn validate(&self) -> Result<(), FaultError> {
        let kind = self.kind.name();
        if !(self.intensity > 0.0 && self.intensity <= 1.0) {
            return Err(FaultError::Intensity { kind, value: self.intensity });
        }
        if self.duration_s == 0 {
            return Err(FaultError::Duration { kind });
        }
        match self.target {
            Target::Percent(p) if !(p > 0.0 && p <= 100.0) => {
                Err(FaultError::Target { kind, target: format!("{{percent: {p}}} is not in (0, 100]") })
            }
            Target::Count(0) => Err(FaultError::Target { kind, target: "{count: 0} hits no node".into() }),
            _ => Ok(()),
        }
    }

    /// Places the fault on `nodes` starting at `start` (seconds), choosing
    /// targets with `seed`.
    pub fn resolve(&self, nodes: &[Node], start: u64, seed: u64) -> Result<ResolvedFault, FaultError> {
        self.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xC4A0_5EED ^ (self.kind as u64).wrapping_mul(0x9E37_79B9));
        let gpu_fault = matches!(self.kind, FaultKind::GpuFailure | FaultKind::GpuDegradation);
        // GPU faults only hit nodes with GPUs.
        let pool: Vec<&Node> = nodes.iter().filter(|n| !gpu_fault || !n.gpus.is_empty()).collect();
        let mut picked: Vec<NodeId> = if !self.kind.targets_nodes() {
            Vec::new()
        } else {
            match &self.target {
                Target::Zone(z) => pool.iter().filter(|n| &n.zone == z).map(|n| n.id).collect(),
                Target::All => pool.iter().map(|n| n.id).collect(),
                t => {
                    let want = match t {
                        Target::One => 1,
                        Target::Count(c) => *c,
                        Target::Percent(p) => ((p / 100.0) * pool.len() as f64).ceil() as usize,
                        _ => unreachable!("handled above"),
                    };
                    let mut ids: Vec<NodeId> = pool.iter().map(|n| n.id).collect();
                    ids.shuffle(&mut rng);
                    ids.truncate(want.min(ids.len()));
                    ids
                }
            }
        };
        if self.kind.targets_nodes() && picked.is_empty() {
            let target = match &self.target {
                Target::Zone(z) => {
                    let mut zones: Vec<&str> = nodes.iter().map(|n| n.zone.as_str()).collect();
                    zones.sort_unstable();
                    zones.dedup();
                    format!("zone `{z}` (the cluster's zones: {})", zones.join(", "))
                }
                t => format!("{t:?}"),
            };
            return Err(FaultError::NoTarget { kind: self.kind.name(), target });
        }
        picked.sort_unstable();
        let mut gpus = Vec::new();
        if gpu_fault {
            for &id in &picked {
                let n = nodes.iter().find(|n| n.id == id).expect("picked from nodes");
                let count = ((self.intensity * n.gpus.len() as f64).round() as usize).clamp(1, n.gpus.len());
                let mut idx: Vec<usize> = (0..n.gpus.len()).collect();
                idx.shuffle(&mut rng);
                let mut chosen: Vec<usize> = idx.into_iter().take(count).collect();
                chosen.sort_unstable();
                gpus.extend(chosen.into_iter().map(|g| (id, g)));
            }
        }
        Ok(ResolvedFault {
            kind: self.kind,
            start,
            end: start + self.duration_s,
            intensity: self.intensity,
            nodes: picked,
            gpus,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::model::Resources;

    fn nodes(n: u32) -> Vec<Node> {
        (0..n)
            .map(|i| {
                let mut node =
                    Node::new(i, format!("n{i}"), Resources { cpu_milli: 8000, memory_mib: 8192 }, 4, "A100");
                node.zone = format!("zone-{}", i % 3);
                node
            })
            .collect()
    }

    fn spec(kind: FaultKind, target: Target) -> FaultSpec {
        FaultSpec { kind, start: Start::At(0), duration_s: 60, intensity: 0.5, target }
    }

    #[test]
    fn targets_resolve_deterministically_and_as_asked() {
        let ns = nodes(30);
        let a = spec(FaultKind::NodeCrash, Target::Count(4)).resolve(&ns, 100, 7).unwrap();
        let b = spec(FaultKind::NodeCrash, Target::Count(4)).resolve(&ns, 100, 7).unwrap();
        assert_eq!(a, b, "same seed, same nodes");
        assert_eq!(a.nodes.len(), 4);
        assert_eq!((a.start, a.end), (100, 160));
        let c = spec(FaultKind::NodeCrash, Target::Count(4)).resolve(&ns, 100, 8).unwrap();
        assert_ne!(a.nodes, c.nodes, "another seed, other nodes");
        let z = spec(FaultKind::ZonePartition, Target::Zone("zone-1".into())).resolve(&ns, 0, 1).unwrap();
        assert_eq!(z.nodes, (0..30).filter(|i| i % 3 == 1).collect::<Vec<_>>());
        let p = spec(FaultKind::NodeCrash, Target::Percent(10.0)).resolve(&ns, 0, 1).unwrap();
        assert_eq!(p.nodes.len(), 3);
        let g = spec(FaultKind::GpuFailure, Target::Count(2)).resolve(&ns, 0, 1).unwrap();
        assert_eq!(g.gpus.len(), 4, "half of 4 GPUs on each of 2 nodes");
        assert!(g.gpus.iter().all(|(n, _)| g.nodes.contains(n)));
        let spike = spec(FaultKind::LoadSpike, Target::One).resolve(&ns, 0, 1).unwrap();
        assert!(spike.nodes.is_empty(), "a load spike hits no node");
    }

    #[test]
    fn bad_faults_are_named() {
        let ns = nodes(3);
        let e = spec(FaultKind::ZonePartition, Target::Zone("mars".into())).resolve(&ns, 0, 1).unwrap_err();
        assert!(e.to_string().contains("zone-partition") && e.to_string().contains("mars"), "{e}");
        let mut s = spec(FaultKind::GpuDegradation, Target::One);
        s.intensity = 1.5;
        assert!(s.validate().unwrap_err().to_string().contains("1.5"));
        s.intensity = 0.5;
        s.duration_s = 0;
        assert!(s.validate().is_err());
        let y: FaultSpec =
            serde_yaml_ng::from_str("kind: node-crash\nstart: {at: 60}\nduration_s: 30\ntarget: {count: 2}\n").unwrap();
        assert_eq!(y.target, Target::Count(2));
        assert_eq!(y.intensity, 1.0);
        assert!(serde_yaml_ng::from_str::<FaultSpec>("kind: meteor\nstart: {at: 1}\nduration_s: 1\n").is_err());
    }
}
