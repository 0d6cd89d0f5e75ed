//! Contract versions: components built against the frozen
//! `tessera:policy@0.1.0` (today's plugins, built by `tessera-plugins`
//! with the SDK's `contract-0-1` feature) load beside 0.2.0 ones and decide
//! exactly as their 0.2.0 builds do on the same cluster and pods, topology
//! links and all (which 0.1.0 cannot see).

use tessera_core::topology::GpuLink;
use tessera_core::{Node, Pod, Resources, Tier};
use tessera_plugins::{Artifact, CONTRACT_0_1};
use tessera_wasm::{ContractVersion, PluginSpec, WorldKind, wit};

use crate::{cluster, load, member, policy, runtime};

fn current(old: &Artifact) -> Artifact {
    tessera_plugins::by_name(old.name).unwrap_or_else(|| panic!("{} has no 0.2.0 build", old.name))
}

#[test]
fn each_component_reports_the_contract_it_was_built_against() {
    let rt = runtime();
    for old in CONTRACT_0_1 {
        let (v, report) = rt.load(&PluginSpec::new(old.name), old.bytes).expect(old.name);
        assert_eq!((v.contract(), report.contract), (ContractVersion::V0_1, ContractVersion::V0_1), "{}", old.name);
        let world = if v.kind() == WorldKind::Scorer { "scoring" } else { "detection" };
        assert!(report.exports.contains(&format!("tessera:policy/{world}@0.1.0")), "{:?}", report.exports);
        let (v, report) = rt.load(&PluginSpec::new(old.name), current(old).bytes).expect(old.name);
        assert_eq!((v.contract(), report.contract), (ContractVersion::CURRENT, ContractVersion::V0_2_2));
        let ours = report.imports.iter().filter(|i| i.starts_with("tessera:policy/"));
        assert!(ours.clone().count() > 0 && ours.clone().all(|i| i.ends_with("@0.2.2")), "{:?}", report.imports);
    }
    for old in tessera_plugins::CONTRACT_0_2_1 {
        let (v, report) = rt.load(&PluginSpec::new(old.name), old.bytes).expect(old.name);
        assert_eq!((v.contract(), report.contract), (ContractVersion::V0_2_1, ContractVersion::V0_2_1), "{}", old.name);
        assert!(report.exports.contains(&"tessera:policy/reuse@0.2.1".to_string()), "{:?}", report.exports);
    }
    for old in tessera_plugins::CONTRACT_0_2_0 {
        let (v, report) = rt.load(&PluginSpec::new(old.name), old.bytes).expect(old.name);
        assert_eq!((v.contract(), report.contract), (ContractVersion::V0_2, ContractVersion::V0_2), "{}", old.name);
        let world = if v.kind() == WorldKind::Scorer { "scoring" } else { "detection" };
        assert!(report.exports.contains(&format!("tessera:policy/{world}@0.2.0")), "{:?}", report.exports);
        assert!(!report.exports.iter().any(|e| e.starts_with("tessera:policy/reuse")), "{:?}", report.exports);
    }
}

/// A cluster with something of everything a scorer reads: two NVLink
/// islands per node on some nodes, shared and whole GPUs taken, a failed
/// GPU, workloads, a cordoned node.
fn varied_cluster() -> Vec<Node> {
    let mut nodes = cluster(30);
    for (i, n) in nodes.iter_mut().enumerate() {
        if i % 2 == 0 {
            for (g, gpu) in n.gpus.iter_mut().enumerate() {
                gpu.link = GpuLink { island: (g / 4) as u8, pcie: (g / 2) as u8, numa: (g / 4) as u8 };
            }
        }
        if i % 5 == 1 {
            n.gpus[7].free_milli = 400;
        }
        if i % 7 == 3 {
            n.workloads.insert("web".into(), (i % 3) as u32 + 1);
        }
        n.free.cpu_milli -= (i as u64 % 6) * 8_000;
    }
    nodes[11].gpus[6].health = tessera_core::GpuHealth::Failed;
    nodes[17].ready = false;
    nodes
}

fn pods() -> Vec<Pod> {
    let shapes: [(u32, u32, Tier); 6] = [
        (0, 0, Tier::Soft),
        (1, 300, Tier::Opportunistic),
        (1, 1000, Tier::Soft),
        (2, 1000, Tier::Hard),
        (4, 1000, Tier::Soft),
        (1, 500, Tier::Soft),
    ];
    (0..60)
        .map(|i| {
            let (gpu_count, gpu_milli, tier) = shapes[i % shapes.len()];
            Pod {
                name: format!("p{i}"),
                namespace: "default".into(),
                workload: if i % 3 == 0 { "web".into() } else { format!("job-{}", i % 4) },
                requests: Resources { cpu_milli: 2_000 + (i as u64 % 4) * 1_000, memory_mib: 8_192 },
                gpu_count,
                gpu_milli,
                tier,
                ..Pod::default()
            }
        })
        .collect()
}

/// Books `pod` on `node` the simple way (enough for both policies to see
/// the same next state).
fn book(node: &mut Node, pod: &Pod, hint: Option<u8>) {
    node.free.cpu_milli = node.free.cpu_milli.saturating_sub(pod.requests.cpu_milli);
    node.free.memory_mib = node.free.memory_mib.saturating_sub(pod.requests.memory_mib);
    let need = pod.gpu_milli;
    let mut left = pod.gpu_count;
    let order: Vec<usize> = hint.map(usize::from).into_iter().chain(0..node.gpus.len()).collect();
    for g in order {
        if left > 0 && node.gpus[g].free_milli >= need {
            node.gpus[g].free_milli -= need;
            left -= 1;
        }
    }
    *node.workloads.entry(pod.workload.clone()).or_default() += 1;
}

#[test]
fn scorers_built_against_0_1_decide_as_their_0_2_builds_pod_after_pod() {
    let rt = runtime();
    for old in CONTRACT_0_1.iter().filter(|a| a.name != "overload") {
        let config = if old.name == "topology-spread" { r#"{"max_skew": 2}"# } else { "null" };
        let mut nodes = varied_cluster();
        let a = policy(vec![member(load(&rt, *old, old.name, config), 1.0)], &nodes);
        let b = policy(vec![member(load(&rt, current(old), old.name, config), 1.0)], &nodes);
        let ids: Vec<u32> = (0..nodes.len() as u32).collect();
        let mut placed = 0;
        for pod in pods() {
            let (da, db) = (a.decide(&pod, &ids), b.decide(&pod, &ids));
            assert!(da.errors.is_empty() && db.errors.is_empty(), "{}: {:?} {:?}", old.name, da.errors, db.errors);
            assert_eq!(da.outcomes[0].scores, db.outcomes[0].scores, "{} scores for {}", old.name, pod.name);
            assert_eq!((da.chosen, da.gpu_hint), (db.chosen, db.gpu_hint), "{} choice for {}", old.name, pod.name);
            assert_eq!(da.rejections, db.rejections, "{} filter for {}", old.name, pod.name);
            if let Some(n) = da.chosen {
                book(&mut nodes[n as usize], &pod, da.gpu_hint);
                a.upsert_nodes([&nodes[n as usize]]);
                b.upsert_nodes([&nodes[n as usize]]);
                placed += 1;
            }
        }
        assert!(placed > 30, "{}: only {placed} pods placed: the test must exercise decisions", old.name);
    }
}

#[test]
fn a_detector_built_against_0_1_finds_what_its_0_2_build_finds() {
    let rt = runtime();
    let old = CONTRACT_0_1.iter().find(|a| a.name == "overload").expect("overload at 0.1.0");
    let config = r#"{"gpu_intervals": 3, "memory_intervals": 2}"#;
    let (a, b) = (load(&rt, *old, "overload", config), load(&rt, current(old), "overload", config));
    assert_eq!((a.kind(), a.contract()), (WorldKind::Detector, ContractVersion::V0_1));
    let mut found = 0;
    for seq in 0..8u64 {
        let hot = (seq % 4) as u16 * 300;
        let frame = wit::TelemetryFrame {
            seq,
            nodes: vec![3, 5, 8],
            gpu_util_permille: vec![950, 400 + hot, 990],
            memory_free_permille: vec![500, 30, 20 + hot],
            cpu_util_permille: vec![100, 900, 200],
            stranded_gpu_milli: vec![0, 500, 0],
        };
        a.observe(&frame).unwrap();
        b.observe(&frame).unwrap();
        let (fa, fb) = (a.detect().unwrap(), b.detect().unwrap());
        assert_eq!(format!("{fa:?}"), format!("{fb:?}"), "interval {seq}");
        found += fa.len();
    }
    assert!(found > 4, "the frames must raise findings: {found}");
}

#[test]
fn one_policy_mixes_contract_versions() {
    let rt = runtime();
    let old = CONTRACT_0_1.iter().find(|a| a.name == "binpack").unwrap();
    let nodes = varied_cluster();
    let p = policy(
        vec![
            member(load(&rt, *old, "binpack", "null"), 1.0),
            member(load(&rt, tessera_plugins::TOPOLOGY_SPREAD, "topology-spread", "null"), 2.0),
        ],
        &nodes,
    );
    let ids: Vec<u32> = (0..nodes.len() as u32).collect();
    let d = p.decide(&pods()[3], &ids);
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    assert!(d.chosen.is_some());
    assert_eq!(d.outcomes.len(), 2);
}
