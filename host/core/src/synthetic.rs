//! A built-in workload and cluster, generated from a seed, so the simulator
//! runs on a fresh machine with no trace files.
//!
//! Shapes and proportions are modelled on the Alibaba openb trace (the
//! `openb_node_list_gpu_node.csv` node mix and the `default` pod list): 13%
//! CPU-only pods, 48% one whole GPU, 38% a share of one GPU (mostly 0.4 and
//! 0.8 GPU), 1% two to eight whole GPUs, 5% restricted to one GPU model.
//! Nodes are spread over three zones. Pods are submitted, as in the
//! published protocol, until their GPU demand reaches a multiple of the
//! cluster's GPU capacity.

use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

use crate::model::{GPU_MILLI, Gang, Node, Pod, Resources, Tier};

/// `(count in openb, GPUs, CPU millicores, memory MiB, model)`.
const NODE_MIX: [(u32, usize, u64, u64, &str); 12] = [
    (549, 8, 96_000, 393_216, "G2"),
    (387, 2, 104_000, 524_288, "T4"),
    (107, 2, 16_000, 122_880, "P100"),
    (39, 8, 128_000, 786_432, "G3"),
    (28, 4, 32_000, 131_072, "V100M16"),
    (22, 2, 64_000, 262_144, "P100"),
    (21, 8, 96_000, 786_432, "V100M32"),
    (19, 1, 8_000, 32_768, "V100M16"),
    (17, 4, 96_000, 393_216, "T4"),
    (9, 4, 48_000, 376_832, "V100M32"),
    (7, 8, 64_000, 262_144, "V100M16"),
    (3, 1, 8_000, 61_440, "P100"),
];

/// `(count in openb default, share of one GPU)` for GPU-sharing pods.
const SHARE_MIX: [(u32, u32); 8] =
    [(7, 50), (99, 150), (207, 250), (388, 350), (899, 450), (147, 550), (253, 650), (1078, 850)];

/// `(weight, CPU millicores)` of GPU pods.
const GPU_POD_CPU: [(u32, u64); 6] = [(20, 4_000), (25, 6_000), (25, 8_000), (15, 12_000), (10, 16_000), (5, 32_000)];

/// `(weight, members)`: how many pods of its shape a distributed training
/// job of the online workload runs, all or nothing.
const GANG_MEMBERS: [(u32, u32); 3] = [(50, 2), (30, 3), (20, 4)];

/// Share (%) of the online workload's multi-GPU pods that are one member
/// of such a job rather than a job of their own.
const GANG_SHARE_PCT: u32 = 50;

/// One value of `mix` (`(weight, value)` pairs), drawn by weight.
pub fn pick<T: Copy>(rng: &mut ChaCha8Rng, mix: &[(u32, T)]) -> T {
    let total: u32 = mix.iter().map(|(w, _)| w).sum();
    let mut x = rng.random_range(0..total);
    for &(w, v) in mix {
        if x < w {
            return v;
        }
        x -= w;
    }
    mix[mix.len() - 1].1
}

/// The GPU models of `nodes`, sorted, each once (what built-in pods may
/// ask for).
pub fn gpu_models(nodes: &[Node]) -> Vec<String> {
    let mut models: Vec<String> = nodes.iter().map(|n| n.gpu_model.clone()).filter(|m| !m.is_empty()).collect();
    models.sort();
    models.dedup();
    models
}

/// Most nodes a built-in cluster of a benchmark or `tessera sim` may have:
/// past any production cluster (Kubernetes is tested to 5,000 nodes,
/// 15,000 with tuning) while a run still fits a laptop's memory.
pub const MAX_NODES: usize = 1_000_000;

/// Most nodes the built-in cluster of a running service (`sim.node_count`)
/// or of a chaos campaign's twin (`cluster.builtin.nodes`) may have: both
/// keep the loop's state, a record of every decision and telemetry per
/// node for as long as they run, so past this they would only run out of
/// memory.
pub const MAX_LIVE_NODES: usize = 100_000;

/// `nodes` nodes drawn from the openb node mix, in three zones.
pub fn cluster(nodes: usize, seed: u64) -> Vec<Node> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mix: Vec<(u32, usize)> = NODE_MIX.iter().enumerate().map(|(i, m)| (m.0, i)).collect();
    (0..nodes)
        .map(|i| {
            let (_, gpus, cpu, mem, model) = NODE_MIX[pick(&mut rng, &mix)];
            let mut n =
                Node::new(i as u32, format!("node-{i:05}"), Resources { cpu_milli: cpu, memory_mib: mem }, gpus, model);
            n.zone = ["zone-a", "zone-b", "zone-c"][i % 3].to_string();
            for g in &mut n.gpus {
                g.memory_mib = if model.ends_with("M32") { 32_768 } else { 16_384 };
            }
            n
        })
        .collect()
}

/// The distinct pod shapes the generator draws ("the trace").
pub fn pods(count: usize, models: &[String], seed: u64) -> Vec<Pod> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9E37_79B9);
    (0..count)
        .map(|i| {
            let kind = rng.random_range(0..1000u32);
            let (gpu_count, gpu_milli, cpu) = if kind < 130 {
                (0, 0, [1_000, 2_000, 4_000, 8_000, 16_000][rng.random_range(0..5)])
            } else if kind < 610 {
                (1, GPU_MILLI, pick(&mut rng, &GPU_POD_CPU))
            } else if kind < 990 {
                (1, pick(&mut rng, &SHARE_MIX.map(|(w, m)| (w, m))), pick(&mut rng, &GPU_POD_CPU))
            } else {
                let g = [2, 4, 8][rng.random_range(0..3)];
                (g, GPU_MILLI, 8_000 * u64::from(g))
            };
            let memory = cpu / 1000 * [2_048, 4_096][rng.random_range(0..2)];
            let allowed_models = if gpu_count > 0 && !models.is_empty() && rng.random_range(0..100) < 5 {
                vec![models[rng.random_range(0..models.len())].clone()]
            } else {
                Vec::new()
            };
            Pod {
                name: format!("pod-{i:05}"),
                namespace: "default".into(),
                workload: format!("job-{}", i % 97),
                requests: Resources { cpu_milli: cpu, memory_mib: memory },
                gpu_count,
                gpu_milli,
                allowed_models,
                priority: 0,
                tier: if gpu_count == 0 { Tier::Opportunistic } else { Tier::Soft },
                ..Default::default()
            }
        })
        .collect()
}

/// Submission order in the style of the published runs: a shuffle of
/// `pods`, then clones of random pods (named `NAME-tuned-K`) until the
/// submitted GPU demand reaches `ratio` × the GPU capacity (no clones
/// when no pod asks for a GPU).
pub fn inflate(pods: &[Pod], total_gpus: u64, ratio: f64, seed: u64) -> Vec<Pod> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xC10E);
    let mut out: Vec<Pod> = pods.to_vec();
    for i in (1..out.len()).rev() {
        let j = rng.random_range(0..=i);
        out.swap(i, j);
    }
    let demand = |p: &Pod| u64::from(p.gpu_count) * u64::from(p.gpu_milli);
    let limit = (ratio * (total_gpus * u64::from(GPU_MILLI)) as f64) as u64;
    let mut arrived: u64 = out.iter().map(demand).sum();
    let mut clones = 0;
    // Pods that ask for no GPU never bring the demand to the limit.
    while arrived > 0 {
        let p = &pods[rng.random_range(0..pods.len())];
        if arrived + demand(p) > limit {
            break;
        }
        arrived += demand(p);
        let mut c = p.clone();
        c.name = format!("{}-tuned-{clones}", p.name);
        clones += 1;
        out.push(c);
    }
    out
}

/// Arrivals for the online protocol: `pods` arrive as a Poisson stream and
/// run for exponentially distributed times (mean two hours), at a rate that
/// keeps their GPU demand at about `load` × the cluster's `total_gpus`.
/// Tiers are assigned as a mixed cluster runs them: multi-GPU jobs and 3%
/// of the rest hard (exclusive, priority 100), GPU shares (inference) and
/// half the whole-GPU pods soft (online, priority 50), the other whole-GPU
/// pods and CPU-only pods opportunistic (batch, priority 0).
///
/// Half the multi-GPU pods are distributed training jobs instead: a gang
/// of 2–4 members of the pod's shape (`NAME-0`, `NAME-1`, …, gang
/// `NAME-job` with `min_member` all of them) arriving and leaving
/// together; the rate counts their GPUs, so the load holds.
pub fn arrivals(pods: &[Pod], total_gpus: u64, load: f64, seed: u64) -> Vec<crate::model::Arrival> {
    const MEAN_RUN_S: f64 = 7_200.0;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xA11E);
    // A stream of its own, so the other draws are those of a workload
    // without gangs.
    let mut gang_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6A46);
    let members: Vec<u32> = pods
        .iter()
        .map(|p| {
            if p.gpu_count >= 2 && gang_rng.random_range(0..100) < GANG_SHARE_PCT {
                pick(&mut gang_rng, &GANG_MEMBERS)
            } else {
                1
            }
        })
        .collect();
    let gpus = |p: &Pod| f64::from(p.gpu_count) * f64::from(p.gpu_milli.min(GPU_MILLI)) / f64::from(GPU_MILLI);
    let mean_gpus =
        pods.iter().zip(&members).map(|(p, &m)| gpus(p) * f64::from(m)).sum::<f64>() / pods.len().max(1) as f64;
    let rate = (load * total_gpus as f64 / (mean_gpus.max(1e-3) * MEAN_RUN_S)).max(1e-6);
    let exp = |rng: &mut ChaCha8Rng, mean: f64| -mean * (1.0 - rng.random::<f64>()).ln();
    let mut t = 0.0;
    let mut out = Vec::with_capacity(pods.len());
    for (p, &m) in pods.iter().zip(&members) {
        t += exp(&mut rng, 1.0 / rate);
        let run = exp(&mut rng, MEAN_RUN_S).max(60.0);
        let mut pod = p.clone();
        let (tier, priority) = if p.gpu_count >= 2 || rng.random_bool(0.03) {
            (Tier::Hard, 100)
        } else if p.gpu_count == 1 && (p.gpu_milli < GPU_MILLI || rng.random_bool(0.5)) {
            (Tier::Soft, 50)
        } else {
            (Tier::Opportunistic, 0)
        };
        pod.tier = tier;
        pod.priority = priority;
        let (at, leaves_at) = (t as u64, Some((t + run) as u64));
        if m == 1 {
            out.push(crate::model::Arrival { pod, at, leaves_at });
            continue;
        }
        let gang = Gang { name: format!("{}-job", p.name), min_member: m, timeout_s: None };
        for k in 0..m {
            let mut member = pod.clone();
            member.name = format!("{}-{k}", p.name);
            member.gang = Some(gang.clone());
            out.push(crate::model::Arrival { pod: member, at, leaves_at });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inflating_pods_that_ask_for_no_gpu_ends() {
        // Their demand never reaches the limit: this looped for ever,
        // cloning until memory ran out.
        let cpu_only: Vec<Pod> = pods(50, &[], 1).into_iter().filter(|p| p.gpu_count == 0).collect();
        assert!(!cpu_only.is_empty());
        let out = inflate(&cpu_only, 80, 1.3, 1);
        assert_eq!(out.len(), cpu_only.len(), "shuffled, no clones");
        assert!(inflate(&[], 80, 1.3, 1).is_empty());
        // With GPU pods it still inflates to the ratio.
        let all = pods(50, &[], 1);
        let demand = |ps: &[Pod]| ps.iter().map(|p| u64::from(p.gpu_count) * u64::from(p.gpu_milli)).sum::<u64>();
        let out = inflate(&all, 80, 1.3, 1);
        assert!(out.len() > all.len() && demand(&out) <= 80 * 1300, "{}", demand(&out));
    }

    #[test]
    fn arrivals_keep_the_load_and_mix_tiers() {
        let c = cluster(200, 3);
        let total: u64 = c.iter().map(|n| n.gpus.len() as u64).sum();
        let a = arrivals(&pods(4000, &[], 3), total, 0.8, 3);
        assert_eq!(a, arrivals(&pods(4000, &[], 3), total, 0.8, 3));
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
        // Little's law: mean GPUs running ≈ rate × mean run × mean GPUs.
        let span = a.last().unwrap().at as f64;
        let gpu_seconds: f64 = a
            .iter()
            .map(|x| {
                (x.leaves_at.unwrap() - x.at) as f64 * f64::from(x.pod.gpu_count * x.pod.gpu_milli.min(1000)) / 1e3
            })
            .sum();
        let load = gpu_seconds / span / total as f64;
        assert!((0.6..1.0).contains(&load), "{load}");
        for tier in [Tier::Hard, Tier::Soft, Tier::Opportunistic] {
            assert!(a.iter().filter(|x| x.pod.tier == tier).count() > 100, "{tier:?}");
        }
    }

    #[test]
    fn half_the_multi_gpu_pods_are_gangs_that_arrive_and_leave_together() {
        let c = cluster(500, 5);
        let total: u64 = c.iter().map(|n| n.gpus.len() as u64).sum();
        let shapes = pods(20_000, &[], 5);
        let a = arrivals(&shapes, total, 0.8, 5);
        let mut gangs: std::collections::BTreeMap<&str, Vec<&crate::model::Arrival>> = Default::default();
        for x in &a {
            if let Some(g) = &x.pod.gang {
                gangs.entry(g.name.as_str()).or_default().push(x);
            }
        }
        let multi = shapes.iter().filter(|p| p.gpu_count >= 2).count();
        assert!((multi * 3 / 10..multi * 7 / 10).contains(&gangs.len()), "{} gangs of {multi}", gangs.len());
        for (name, m) in &gangs {
            let spec = m[0].pod.gang.as_ref().unwrap();
            assert_eq!(m.len(), spec.min_member as usize, "{name}: all or nothing means every member");
            assert!((2..=4).contains(&spec.min_member), "{name}");
            assert!(m.iter().all(|x| x.at == m[0].at && x.leaves_at == m[0].leaves_at), "{name} arrives as one");
            assert!(m.iter().all(|x| x.pod.gpu_count == m[0].pod.gpu_count && x.pod.gpu_count >= 2), "{name}");
            assert!(m.iter().all(|x| x.pod.tier == Tier::Hard), "{name}");
        }
        assert!(gangs.values().any(|m| m.len() == 4) && gangs.values().any(|m| m.len() == 2));
        let mut names: Vec<&str> = a.iter().map(|x| x.pod.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), a.len(), "every pod named once");
        // One arrival per shape, a gang counted once.
        assert_eq!(a.len() - gangs.values().map(|m| m.len() - 1).sum::<usize>(), shapes.len());
    }

    #[test]
    fn same_seed_same_workload_and_shapes_like_openb() {
        let c = cluster(1000, 7);
        assert_eq!(c, cluster(1000, 7));
        assert_ne!(c, cluster(1000, 8));
        let gpus: usize = c.iter().map(|n| n.gpus.len()).sum();
        // openb: 6212 GPUs on 1213 nodes, 5.1 per node.
        let per_node = gpus as f64 / 1000.0;
        assert!((4.3..6.0).contains(&per_node), "{per_node}");
        let models: Vec<String> = vec!["G2".into(), "T4".into()];
        let p = pods(8000, &models, 7);
        assert_eq!(p, pods(8000, &models, 7));
        let share = |f: &dyn Fn(&Pod) -> bool| p.iter().filter(|x| f(x)).count() as f64 / p.len() as f64;
        assert!((0.10..0.16).contains(&share(&|x| x.gpu_count == 0)));
        assert!((0.34..0.42).contains(&share(&|x| x.gpu_count == 1 && x.gpu_milli < 1000)));
        assert!((0.44..0.52).contains(&share(&|x| x.gpu_count == 1 && x.gpu_milli == 1000)));
    }

    #[test]
    fn inflation_stops_at_the_ratio() {
        let c = cluster(100, 1);
        let total: u64 = c.iter().map(|n| n.gpus.len() as u64).sum();
        let base = pods(300, &[], 1);
        let all = inflate(&base, total, 1.3, 1);
        let demand: u64 = all.iter().map(|p| u64::from(p.gpu_count * p.gpu_milli)).sum();
        assert!(demand <= 13 * total * 100, "{demand}");
        assert!(demand > 12 * total * 100, "{demand}");
        assert!(all[300..].iter().all(|p| p.name.contains("-tuned-")));
        let mut first: Vec<&str> = all[..300].iter().map(|p| p.name.as_str()).collect();
        first.sort();
        let mut orig: Vec<&str> = base.iter().map(|p| p.name.as_str()).collect();
        orig.sort();
        assert_eq!(first, orig, "the first N submissions are a shuffle of the trace");
    }
}
