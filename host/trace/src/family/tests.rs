use super::*;
use crate::read_pods;

fn pod(name: &str, cpu: u64, gpus: u32, milli: u32) -> PodRow {
    PodRow { name: name.into(), cpu_milli: cpu, memory_mib: 1024, num_gpu: gpus, gpu_milli: milli, ..PodRow::default() }
}

/// A base like default's mix, small: 10 CPU-only, 40 sharing, 48 whole,
/// 2 multi-GPU pods, each class with its own values.
fn base() -> Vec<PodRow> {
    let mut v = Vec::new();
    for i in 0..10 {
        v.push(pod(&format!("c{i}"), 1000 + i, 0, 0));
    }
    for i in 0..40 {
        v.push(pod(&format!("s{i}"), 2000, 1, 100 + 20 * i as u32));
    }
    for i in 0..48 {
        v.push(pod(&format!("w{i}"), 4000 + i, 1, 1000));
    }
    v.push(pod("m0", 8000, 2, 1000));
    v.push(pod("m1", 16000, 8, 1000));
    v
}

fn nodes() -> Vec<NodeRow> {
    let node = |name: &str, gpus: u32, model: &str| NodeRow {
        name: name.into(),
        cpu_milli: 96_000,
        memory_mib: 512 * 1024,
        gpus,
        model: model.into(),
    };
    vec![node("a", 8, "V100"), node("b", 4, "T4"), node("c", 2, "T4")]
}

#[test]
fn members_parse_and_refuse_what_they_cannot_mean() {
    assert_eq!("cpu:200".parse::<Member>().unwrap(), Member { family: Family::Cpu, level: 200.0 });
    assert_eq!("multigpu:7.5".parse::<Member>().unwrap().name(), "gen-multigpu7.5");
    for (bad, says) in [
        ("cpu", "FAMILY:LEVEL"),
        ("gpu:10", "unknown family `gpu`"),
        ("gpushare:abc", "not a level"),
        ("gpushare:120", "outside 0..=100"),
        ("multigpu:-1", "outside"),
        ("cpu:NaN", "outside"),
    ] {
        let e = bad.parse::<Member>().unwrap_err().to_string();
        assert!(e.contains(bad) && e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn each_family_moves_its_own_mix_and_keeps_the_rest() {
    let b = base();
    let counts = |m: &str| class_counts(&generate(&b, &m.parse().unwrap(), 7, &[], &nodes()).unwrap());
    assert_eq!(counts("cpu:100"), [10, 40, 48, 2], "level 100 is the base's mix");
    assert_eq!(counts("cpu:300"), [30, 40, 48, 2]);
    assert_eq!(counts("cpu:0"), [0, 40, 48, 2]);
    // 90 GPU pods kept; sharing pods (0.49 GPU each) ask for 80% of the
    // demand, whole ones (1.16 GPU each) the rest: 81 × 0.49 ≈ 4 × 9 × 1.16;
    // the other 9 keep whole:multi at 48:2, which rounds to no multi.
    assert_eq!(counts("gpushare:80"), [10, 81, 9, 0]);
    assert_eq!(counts("gpushare:100"), [10, 90, 0, 0]);
    // The others ask for 40 × 0.49 + 48 = 67.6 GPUs; multi-GPU pods (5
    // GPUs each) make 40% of the demand at 67.6 × 0.4 / 0.6 / 5 ≈ 9.
    assert_eq!(counts("multigpu:40"), [10, 40, 48, 9]);
    assert_eq!(counts("multigpu:0"), [10, 40, 48, 0]);
    assert_eq!(counts("gpuspec:50"), [10, 40, 48, 2]);
}

#[test]
fn resampled_rows_come_from_their_class_and_the_seed_decides_them() {
    let b = base();
    let m: Member = "cpu:300".parse().unwrap();
    let one = generate(&b, &m, 1, &[], &nodes()).unwrap();
    assert_eq!(one, generate(&b, &m, 1, &[], &nodes()).unwrap(), "same seed, same rows");
    assert_ne!(one, generate(&b, &m, 2, &[], &nodes()).unwrap(), "another seed, another member");
    for p in &one {
        let from = b.iter().find(|r| {
            (r.cpu_milli, r.memory_mib, r.num_gpu, r.gpu_milli) == (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli)
        });
        assert!(from.is_some_and(|r| Class::of(r) == Class::of(p)), "{p:?} is no row of the base");
        assert!(p.name.starts_with("gen-pod-"));
    }
    // 30 draws from 10 distinct CPU-only rows must repeat some: resampled, not copied.
    let distinct: std::collections::BTreeSet<u64> =
        one.iter().filter(|p| p.num_gpu == 0).map(|p| p.cpu_milli).collect();
    assert!(distinct.len() < 10, "{distinct:?}");
}

#[test]
fn gpuspec_draws_models_per_class_from_the_examples_and_only_ones_that_can_hold_the_pod() {
    let b = base();
    let mut ex = vec![pod("x0", 1, 1, 300), pod("x1", 1, 1, 1000), pod("x2", 1, 8, 1000)];
    ex[0].gpu_spec = vec!["T4".into()];
    ex[1].gpu_spec = vec!["V100".into()];
    // An 8-GPU pod cannot go to T4 nodes (4 GPUs at most): drawn again,
    // and with no other example of its class, it names none.
    ex[2].gpu_spec = vec!["T4".into()];
    let pods = generate(&b, &"gpuspec:50".parse().unwrap(), 3, &ex, &nodes()).unwrap();
    let gpu = pods.iter().filter(|p| p.num_gpu > 0).count();
    assert_eq!(gpu, 90);
    assert!(pods.iter().all(|p| p.num_gpu > 0 || p.gpu_spec.is_empty()), "CPU-only pods name no model");
    let named: Vec<&PodRow> = pods.iter().filter(|p| !p.gpu_spec.is_empty()).collect();
    assert!((43..=45).contains(&named.len()), "half of 90 GPU pods, but for 8-GPU ones: {}", named.len());
    for p in named {
        match Class::of(p) {
            Class::Sharing => assert_eq!(p.gpu_spec, ["T4"]),
            Class::Whole => assert_eq!(p.gpu_spec, ["V100"]),
            Class::Multi => assert!(p.gpu_spec == ["T4"] && p.num_gpu <= 4, "{p:?}"),
            Class::CpuOnly => unreachable!(),
        }
    }
    // Without examples: single models of the cluster, by GPU count.
    let pods = generate(&b, &"gpuspec:100".parse().unwrap(), 3, &[], &nodes()).unwrap();
    let t4 = pods.iter().filter(|p| p.gpu_spec == ["T4"]).count();
    let v100 = pods.iter().filter(|p| p.gpu_spec == ["V100"]).count();
    assert_eq!(t4 + v100, 90);
    assert!(v100 > t4, "V100 has 8 of 14 GPUs: {v100} vs {t4}");
}

#[test]
fn an_inflated_order_shuffles_every_pod_then_clones_to_the_ratio() {
    let b = base();
    // 96 GPUs; the base asks for about 78.
    let n: Vec<NodeRow> = (0..12).map(|i| NodeRow { name: format!("n{i}"), gpus: 8, ..nodes()[0].clone() }).collect();
    let order = inflate(&b, &n, 1.3, 5);
    let mut first: Vec<u32> = order[..b.len()].to_vec();
    first.sort_unstable();
    assert_eq!(first, (0..b.len() as u32).collect::<Vec<_>>(), "the first N are a permutation");
    assert_ne!(&order[..b.len()], &(0..b.len() as u32).collect::<Vec<_>>()[..], "shuffled");
    let demand: u64 = order.iter().map(|&i| b[i as usize].gpu_demand_milli()).sum();
    let capacity = 96_000.0 * 1.3;
    assert!(order.len() > b.len(), "clones were added");
    // It stops at the first clone that would pass the ratio (by its per-GPU
    // share), so demand ends within one GPU of it, or past it by an
    // 8-GPU clone's other seven.
    assert!(demand as f64 > capacity - 1_000.0, "{demand}");
    assert!((demand as f64) <= capacity + 7_000.0, "{demand}");
    assert_eq!(order, inflate(&b, &n, 1.3, 5));
    assert_ne!(order, inflate(&b, &n, 1.3, 6));
}

#[test]
fn a_written_member_reads_back_identically() {
    let mut b = base();
    b[12].gpu_spec = vec!["T4".into(), "V100".into()];
    b[3].qos = Some("LS".into());
    b[3].creation_time = Some(42);
    let mut text = Vec::new();
    write_pods(&mut text, &b).unwrap();
    assert_eq!(read_pods(&text[..], "gen.csv").unwrap(), b);
}

#[test]
fn a_base_without_a_class_the_member_needs_is_refused() {
    let b: Vec<PodRow> = base().into_iter().filter(|p| p.num_gpu < 2).collect();
    let e = generate(&b, &"multigpu:10".parse().unwrap(), 1, &[], &nodes()).unwrap_err();
    assert_eq!(e.to_string(), "the base pod list has no multi-GPU pods to resample for multigpu:10");
}
