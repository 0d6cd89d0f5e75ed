//! The contract versions a component may be built against, found at load
//! from what it exports, and the one place that speaks each: a call is made
//! in the current version's records ([`crate::wit`]) and turned into an
//! older version's on the way in and back on the way out.
//!
//! `tessera:policy@0.2.2` is the current contract. `0.2.1` differs only in
//! `reuse`'s scopes lacking `zone`, and `0.2.0` in lacking the optional
//! `reuse` interface, so components of either bind to 0.2.2's bindings as
//! they are (their scope is read by name, [`Pre::scope`]). `0.1.0` differs in having no `gpu-link` on a
//! GPU, so a 0.1.0 plugin sees every node it saw before, without links,
//! and decides as it did.

use std::fmt;

use wasmtime::Store;
use wasmtime::component::InstancePre;

use tessera_core::reuse::Scope;
use wasmtime::component::Val;

use crate::bindings::{detector, scorer, types as wit, v0_1};
use crate::error::WorldKind;
use crate::host::HostState;

/// A version of `tessera:policy` the host loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ContractVersion {
    /// The first contract: GPUs without links.
    V0_1,
    /// GPUs carry their interconnect (`gpu-link`).
    V0_2,
    /// A scorer may say how far its answers may be reused (`reuse`).
    V0_2_1,
    /// `reuse` gains the `zone` scope.
    V0_2_2,
}

impl ContractVersion {
    /// The version components are built against today (`wit/`).
    pub const CURRENT: Self = Self::V0_2_2;
    /// Every version the host loads, oldest first.
    pub const ALL: [Self; 4] = [Self::V0_1, Self::V0_2, Self::V0_2_1, Self::V0_2_2];

    /// The semver of the WIT package.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V0_1 => "0.1.0",
            Self::V0_2 => "0.2.0",
            Self::V0_2_1 => "0.2.1",
            Self::V0_2_2 => "0.2.2",
        }
    }

    /// The version named `s` (`0.2.0`, `0.1`), if the host loads it; a
    /// version without its patch number is the newest of its line.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.strip_prefix('v').unwrap_or(s);
        Self::ALL
            .into_iter()
            .rev()
            .find(|v| v.as_str() == s || v.as_str().rsplit_once('.').is_some_and(|(line, _)| line == s))
    }

    /// This version's WIT package, file by file (name, text), as the host
    /// binds it: what a component in any language is built against
    /// (`tessera plugin wit`, `tessera plugin new`).
    pub fn wit_files(self) -> [(&'static str, &'static str); 4] {
        match self {
            Self::V0_1 => [
                ("host.wit", include_str!("../../../wit/0.1.0/host.wit")),
                ("policy.wit", include_str!("../../../wit/0.1.0/policy.wit")),
                ("types.wit", include_str!("../../../wit/0.1.0/types.wit")),
                ("worlds.wit", include_str!("../../../wit/0.1.0/worlds.wit")),
            ],
            Self::V0_2 => [
                ("host.wit", include_str!("../../../wit/0.2.0/host.wit")),
                ("policy.wit", include_str!("../../../wit/0.2.0/policy.wit")),
                ("types.wit", include_str!("../../../wit/0.2.0/types.wit")),
                ("worlds.wit", include_str!("../../../wit/0.2.0/worlds.wit")),
            ],
            Self::V0_2_1 => [
                ("host.wit", include_str!("../../../wit/0.2.1/host.wit")),
                ("policy.wit", include_str!("../../../wit/0.2.1/policy.wit")),
                ("types.wit", include_str!("../../../wit/0.2.1/types.wit")),
                ("worlds.wit", include_str!("../../../wit/0.2.1/worlds.wit")),
            ],
            Self::V0_2_2 => [
                ("host.wit", include_str!("../../../wit/host.wit")),
                ("policy.wit", include_str!("../../../wit/policy.wit")),
                ("types.wit", include_str!("../../../wit/types.wit")),
                ("worlds.wit", include_str!("../../../wit/worlds.wit")),
            ],
        }
    }

    /// The name of `interface` (`scoring`, `detection`) in this version.
    pub fn interface(self, interface: &str) -> String {
        format!("tessera:policy/{interface}@{}", self.as_str())
    }

    /// Which 0.2 version a component bound through the current bindings
    /// was built against: the version its `interface` export names
    /// (wasmtime matched it semver-compatibly).
    fn of_0_2(pre: &InstancePre<HostState>, interface: &str) -> Self {
        let ty = pre.component().component_type();
        let exports: Vec<&str> = ty.exports(pre.component().engine()).map(|(name, _)| name).collect();
        [Self::V0_2, Self::V0_2_1]
            .into_iter()
            .find(|v| exports.contains(&v.interface(interface).as_str()))
            .unwrap_or(Self::CURRENT)
    }
}

impl fmt::Display for ContractVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A linked component, ready to instantiate, in the world and version it
/// was built for.
pub(crate) enum Pre {
    /// 0.2.0, 0.2.1 or 0.2.2 (which one: the version).
    Scorer(scorer::ScorerPre<HostState>, ContractVersion),
    Detector(detector::DetectorPre<HostState>, ContractVersion),
    ScorerV0_1(v0_1::scorer::ScorerPre<HostState>),
    DetectorV0_1(v0_1::detector::DetectorPre<HostState>),
}

/// A live instance's exports.
pub(crate) enum Bound {
    Scorer(scorer::Scorer),
    Detector(detector::Detector),
    ScorerV0_1(v0_1::scorer::Scorer),
    DetectorV0_1(v0_1::detector::Detector),
}

/// A call of a world's export on an instance of the other world (the
/// slot's kind is checked before any call: a bug in the host if reached).
fn other_world(call: &str) -> wasmtime::Error {
    wasmtime::Error::msg(format!("`{call}` called on a plugin of the other world"))
}

impl Pre {
    /// The world and version `pre`'s component exports, newest first;
    /// `None` if it exports no world of any version.
    pub(crate) fn find(pre: InstancePre<HostState>) -> Option<Self> {
        if let Ok(p) = scorer::ScorerPre::new(pre.clone()) {
            return Some(Self::Scorer(p, ContractVersion::of_0_2(&pre, "scoring")));
        }
        if let Ok(p) = detector::DetectorPre::new(pre.clone()) {
            return Some(Self::Detector(p, ContractVersion::of_0_2(&pre, "detection")));
        }
        if let Ok(p) = v0_1::scorer::ScorerPre::new(pre.clone()) {
            return Some(Self::ScorerV0_1(p));
        }
        v0_1::detector::DetectorPre::new(pre).ok().map(Self::DetectorV0_1)
    }

    pub(crate) fn kind(&self) -> WorldKind {
        match self {
            Self::Scorer(..) | Self::ScorerV0_1(_) => WorldKind::Scorer,
            Self::Detector(..) | Self::DetectorV0_1(_) => WorldKind::Detector,
        }
    }

    pub(crate) fn contract(&self) -> ContractVersion {
        match self {
            Self::Scorer(_, v) | Self::Detector(_, v) => *v,
            Self::ScorerV0_1(_) | Self::DetectorV0_1(_) => ContractVersion::V0_1,
        }
    }

    /// The scope a scorer built against 0.2.1 or later declares through
    /// `reuse`, asked on an instance of its own in `store`; `None`
    /// (`fresh`) for any other component (one that exports no `reuse`
    /// promises nothing). The scope is read by its case's name, so a
    /// component of 0.2.1, whose `score-scope` lacks 0.2.2's `zone`, is
    /// read as it is; a `scope` of another type is an error.
    pub(crate) fn scope(&self, store: &mut Store<HostState>) -> Result<Option<Scope>, ScopeError> {
        let Self::Scorer(p, v) = self else { return Ok(None) };
        if *v < ContractVersion::V0_2_1 {
            return Ok(None);
        }
        let component = p.instance_pre().component();
        let Some(func) = component
            .get_export_index(None, ContractVersion::CURRENT.interface("reuse").as_str())
            .and_then(|reuse| component.get_export_index(Some(&reuse), "scope"))
        else {
            return Ok(None);
        };
        let instance = p.instance_pre().instantiate(&mut *store).map_err(ScopeError::Call)?;
        let f = instance
            .get_func(&mut *store, func)
            .ok_or_else(|| ScopeError::Call(wasmtime::Error::msg("`reuse.scope` is not a function")))?;
        let mut out = [Val::Bool(false)];
        f.call(&mut *store, &[], &mut out).map_err(|e| ScopeError::Call(e.context("reuse.scope")))?;
        match &out[0] {
            Val::Enum(name) => scope_named(name).ok_or_else(|| ScopeError::Unknown(name.clone())),
            other => Err(ScopeError::Call(wasmtime::Error::msg(format!(
                "`reuse.scope` returned {other:?}, not a `score-scope`"
            )))),
        }
    }

    pub(crate) fn instance_pre(&self) -> &InstancePre<HostState> {
        match self {
            Self::Scorer(p, _) => p.instance_pre(),
            Self::Detector(p, _) => p.instance_pre(),
            Self::ScorerV0_1(p) => p.instance_pre(),
            Self::DetectorV0_1(p) => p.instance_pre(),
        }
    }

    pub(crate) fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Bound> {
        Ok(match self {
            Self::Scorer(p, _) => Bound::Scorer(p.instantiate(store)?),
            Self::Detector(p, _) => Bound::Detector(p.instantiate(store)?),
            Self::ScorerV0_1(p) => Bound::ScorerV0_1(p.instantiate(store)?),
            Self::DetectorV0_1(p) => Bound::DetectorV0_1(p.instantiate(store)?),
        })
    }
}

/// Why a scorer's scope could not be read.
#[derive(Debug)]
pub(crate) enum ScopeError {
    /// The call failed (a trap, a deadline, a function of another type).
    Call(wasmtime::Error),
    /// It named a case no contract version has.
    Unknown(String),
}

/// Every scope a contract version names (`None`: `fresh`, nothing reused).
const SCOPES: [Option<Scope>; 4] = [None, Some(Scope::Node), Some(Scope::NodeShape), Some(Scope::Zone)];

/// The scope a `score-scope` case names, or `None` outside if no version
/// has that case.
fn scope_named(name: &str) -> Option<Option<Scope>> {
    SCOPES.into_iter().find(|&s| scope_name(s) == name)
}

/// The names of every `score-scope` case, comma-separated.
pub(crate) fn scope_names() -> String {
    SCOPES.map(scope_name).join(", ")
}

/// The name of `scope`'s case in `score-scope` (`fresh` for none).
pub(crate) fn scope_name(scope: Option<Scope>) -> &'static str {
    match scope {
        None => "fresh",
        Some(Scope::Node) => "node",
        Some(Scope::NodeShape) => "node-shape",
        Some(Scope::Zone) => "zone",
    }
}

type Guest<T> = wasmtime::Result<Result<T, String>>;

impl Bound {
    pub(crate) fn info(&self, store: &mut Store<HostState>) -> wasmtime::Result<wit::PluginInfo> {
        match self {
            Self::Scorer(b) => b.tessera_policy_scoring().call_info(store),
            Self::Detector(b) => b.tessera_policy_detection().call_info(store),
            Self::ScorerV0_1(b) => b.tessera_policy_scoring().call_info(store).map(old::info),
            Self::DetectorV0_1(b) => b.tessera_policy_detection().call_info(store).map(old::info),
        }
    }

    pub(crate) fn configure(&self, store: &mut Store<HostState>, config: &str) -> Guest<()> {
        match self {
            Self::Scorer(b) => b.tessera_policy_scoring().call_configure(store, config),
            Self::Detector(b) => b.tessera_policy_detection().call_configure(store, config),
            Self::ScorerV0_1(b) => b.tessera_policy_scoring().call_configure(store, config),
            Self::DetectorV0_1(b) => b.tessera_policy_detection().call_configure(store, config),
        }
    }

    /// Whether the instance is a scorer (keeps a node mirror).
    pub(crate) fn mirrors(&self) -> bool {
        matches!(self, Self::Scorer(_) | Self::ScorerV0_1(_))
    }

    pub(crate) fn apply(&self, store: &mut Store<HostState>, deltas: &[wit::NodeDelta]) -> Guest<()> {
        match self {
            Self::Scorer(b) => b.tessera_policy_scoring().call_apply(store, deltas),
            Self::ScorerV0_1(b) => {
                let deltas: Vec<_> = deltas.iter().map(old::delta).collect();
                b.tessera_policy_scoring().call_apply(store, &deltas)
            }
            _ => Err(other_world("apply")),
        }
    }

    pub(crate) fn filter(&self, store: &mut Store<HostState>, pod: &wit::Pod, candidates: &[u32]) -> Guest<Vec<u8>> {
        match self {
            Self::Scorer(b) => b.tessera_policy_scoring().call_filter(store, pod, candidates),
            Self::ScorerV0_1(b) => b.tessera_policy_scoring().call_filter(store, &old::pod(pod), candidates),
            _ => Err(other_world("filter")),
        }
    }

    pub(crate) fn score(&self, store: &mut Store<HostState>, pod: &wit::Pod, candidates: &[u32]) -> Guest<wit::Scores> {
        match self {
            Self::Scorer(b) => b.tessera_policy_scoring().call_score(store, pod, candidates),
            Self::ScorerV0_1(b) => b
                .tessera_policy_scoring()
                .call_score(store, &old::pod(pod), candidates)
                .map(|r| r.map(|s| wit::Scores { values: s.values, gpu_hints: s.gpu_hints })),
            _ => Err(other_world("score")),
        }
    }

    pub(crate) fn observe(&self, store: &mut Store<HostState>, frame: &wit::TelemetryFrame) -> Guest<()> {
        match self {
            Self::Detector(b) => b.tessera_policy_detection().call_observe(store, frame),
            Self::DetectorV0_1(b) => b.tessera_policy_detection().call_observe(store, &old::frame(frame)),
            _ => Err(other_world("observe")),
        }
    }

    pub(crate) fn detect(&self, store: &mut Store<HostState>) -> Guest<Vec<wit::Finding>> {
        match self {
            Self::Detector(b) => b.tessera_policy_detection().call_detect(store),
            Self::DetectorV0_1(b) => b
                .tessera_policy_detection()
                .call_detect(store)
                .map(|r| r.map(|f| f.into_iter().map(old::finding).collect())),
            _ => Err(other_world("detect")),
        }
    }
}

/// Records of the current version in 0.1.0's form and back.
mod old {
    use crate::bindings::types as wit;
    use crate::bindings::v0_1::types as v1;

    fn resources(r: &wit::Resources) -> v1::Resources {
        v1::Resources { cpu_milli: r.cpu_milli, memory_mib: r.memory_mib }
    }

    fn node(n: &wit::Node) -> v1::Node {
        v1::Node {
            id: n.id,
            name: n.name.clone(),
            zone: n.zone.clone(),
            gpu_model: n.gpu_model.clone(),
            capacity: resources(&n.capacity),
            free: resources(&n.free),
            gpus: n
                .gpus
                .iter()
                .map(|g| v1::Gpu {
                    index: g.index,
                    free_milli: g.free_milli,
                    memory_mib: g.memory_mib,
                    health: match g.health {
                        wit::GpuHealth::Healthy => v1::GpuHealth::Healthy,
                        wit::GpuHealth::Degraded => v1::GpuHealth::Degraded,
                        wit::GpuHealth::Failed => v1::GpuHealth::Failed,
                    },
                    util_permille: g.util_permille,
                })
                .collect(),
            cpu_util_permille: n.cpu_util_permille,
            memory_util_permille: n.memory_util_permille,
            ready: n.ready,
            workloads: n
                .workloads
                .iter()
                .map(|w| v1::WorkloadCount { workload: w.workload.clone(), pods: w.pods })
                .collect(),
            gpu_classes: n
                .gpu_classes
                .iter()
                .map(|c| v1::ClassCount { class: c.class.clone(), pods: c.pods })
                .collect(),
        }
    }

    pub(super) fn delta(d: &wit::NodeDelta) -> v1::NodeDelta {
        match d {
            wit::NodeDelta::Upsert(n) => v1::NodeDelta::Upsert(node(n)),
            wit::NodeDelta::Remove(id) => v1::NodeDelta::Remove(*id),
        }
    }

    pub(super) fn pod(p: &wit::Pod) -> v1::Pod {
        v1::Pod {
            name: p.name.clone(),
            namespace: p.namespace.clone(),
            workload: p.workload.clone(),
            requests: resources(&p.requests),
            gpu_count: p.gpu_count,
            gpu_milli: p.gpu_milli,
            allowed_models: p.allowed_models.clone(),
            priority: p.priority,
            tier: match p.tier {
                wit::Tier::Hard => v1::Tier::Hard,
                wit::Tier::Soft => v1::Tier::Soft,
                wit::Tier::Opportunistic => v1::Tier::Opportunistic,
            },
        }
    }

    pub(super) fn frame(f: &wit::TelemetryFrame) -> v1::TelemetryFrame {
        v1::TelemetryFrame {
            seq: f.seq,
            nodes: f.nodes.clone(),
            gpu_util_permille: f.gpu_util_permille.clone(),
            memory_free_permille: f.memory_free_permille.clone(),
            cpu_util_permille: f.cpu_util_permille.clone(),
            stranded_gpu_milli: f.stranded_gpu_milli.clone(),
        }
    }

    pub(super) fn info(i: v1::PluginInfo) -> wit::PluginInfo {
        wit::PluginInfo {
            name: i.name,
            version: i.version,
            description: i.description,
            filter_reasons: i.filter_reasons,
        }
    }

    pub(super) fn finding(f: v1::Finding) -> wit::Finding {
        wit::Finding {
            node: f.node,
            kind: match f.kind {
                v1::FindingKind::Overload => wit::FindingKind::Overload,
                v1::FindingKind::MemoryPressure => wit::FindingKind::MemoryPressure,
                v1::FindingKind::Fragmentation => wit::FindingKind::Fragmentation,
                v1::FindingKind::LowLoad => wit::FindingKind::LowLoad,
                v1::FindingKind::Other(s) => wit::FindingKind::Other(s),
            },
            severity: f.severity,
            message: f.message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frozen contracts' files, as they shipped (0.1.0: commit
    /// 34783a2's `wit/`; 0.2.0: commit 6ba881e's; 0.2.1: commit 0121553's): editing them would
    /// break every component built against them while this crate still
    /// claimed to load it.
    #[test]
    fn the_frozen_contracts_are_what_shipped() {
        for (dir, digest) in [
            ("0.1.0", "5f3a5ca8747c5d3c66a85b624f2779aa07b4ca9f4532d162ec1cec88c1328711"),
            ("0.2.0", "3584a773b4516bb2533e62b2cce7d6dda14a20bdef73b954c8e98e8d1616134f"),
            ("0.2.1", "17aa32582df298e200fe29fdcbb178673746a9c09af0bb0437919e97165791af"),
        ] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit").join(dir);
            let mut all = Vec::new();
            for f in ["host.wit", "policy.wit", "types.wit", "worlds.wit"] {
                all.extend_from_slice(format!("{f}\n").as_bytes());
                all.extend(std::fs::read(dir.join(f)).unwrap());
            }
            assert_eq!(
                crate::sha256_hex(&all),
                digest,
                "{} changed: it is frozen; a change to the contract is a new version",
                dir.display()
            );
        }
    }

    /// What `wit_files` hands out is each version's directory, whole.
    #[test]
    fn wit_files_are_each_versions_package() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit");
        for (v, dir) in [
            (ContractVersion::V0_1, root.join("0.1.0")),
            (ContractVersion::V0_2, root.join("0.2.0")),
            (ContractVersion::V0_2_1, root.join("0.2.1")),
            (ContractVersion::V0_2_2, root.clone()),
        ] {
            let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|f| f.ends_with(".wit"))
                .collect();
            on_disk.sort();
            let files = v.wit_files();
            assert_eq!(files.iter().map(|f| f.0).collect::<Vec<_>>(), on_disk, "{v}");
            for (name, text) in files {
                assert_eq!(text, std::fs::read_to_string(dir.join(name)).unwrap(), "{v} {name}");
            }
            assert!(files[3].1.contains(&format!("package tessera:policy@{v};")), "{v}");
        }
        assert_eq!(ContractVersion::parse("0.1.0"), Some(ContractVersion::V0_1));
        assert_eq!(ContractVersion::parse("0.2.0"), Some(ContractVersion::V0_2));
        assert_eq!(ContractVersion::parse("v0.2.1"), Some(ContractVersion::V0_2_1));
        assert_eq!(ContractVersion::parse("0.2.2"), Some(ContractVersion::V0_2_2));
        assert_eq!(ContractVersion::parse("0.2"), Some(ContractVersion::V0_2_2), "a line means its newest");
        assert_eq!(ContractVersion::parse("0.1"), Some(ContractVersion::V0_1));
        assert_eq!(ContractVersion::parse("0.3.0"), None);
    }

    #[test]
    fn every_scope_is_read_back_by_its_name() {
        for s in SCOPES {
            assert_eq!(scope_named(scope_name(s)), Some(s));
        }
        assert_eq!(scope_names(), "fresh, node, node-shape, zone");
        assert_eq!(scope_named("everything"), None);
    }

    #[test]
    fn versions_name_their_interfaces() {
        assert_eq!(ContractVersion::CURRENT.interface("scoring"), "tessera:policy/scoring@0.2.2");
        assert_eq!(ContractVersion::V0_1.interface("detection"), "tessera:policy/detection@0.1.0");
        let wit =
            std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit/worlds.wit"))
                .unwrap();
        assert!(
            wit.contains(&format!("package tessera:policy@{};", ContractVersion::CURRENT)),
            "CURRENT must be the version in wit/"
        );
    }
}
