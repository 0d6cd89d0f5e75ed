//! Preemption: when a pod fits nowhere, find the cheapest set of running
//! pods on one node whose eviction lets it fit.
//!
//! Who may be evicted: pods of a lower tier than the preemptor (hard >
//! soft > opportunistic), or of its tier with a lower priority; hard-tier
//! pods never. The pod must then pass the full hard filter (model, health,
//! GPU share, CPU, memory) on the node: preemption never bends a
//! constraint, it only frees capacity.
//!
//! Cost, compared in this order: fewest pods evicted, then the lowest
//! highest tier among them, then the least work lost (sum of their run
//! times). A victim in a gang takes its gang with it: it counts as every
//! running member ([`Running::evicts`]), so one member of a big job is
//! never taken for a cheap victim.
//! Per node with up to [`EXACT_LIMIT`] eligible victims every subset is
//! considered, cheapest first, so the answer is the cheapest; with more,
//! victims are added cheapest first until the pod fits and then any victim
//! not needed after all is spared (kube-scheduler's "reprieve"). Ties
//! between nodes go to the lowest node id.

use std::cmp::Reverse;

use crate::cluster::{Placement, check, release};
use crate::model::{GPU_MILLI, GpuHealth, Node, NodeId, Pod, Tier};

/// A pod running on the cluster (borrowed from the caller's records, or
/// owned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running<'a> {
    /// The pod.
    pub pod: std::borrow::Cow<'a, Pod>,
    /// Where it runs.
    pub placement: Placement,
    /// When it started (caller's clock).
    pub started_at: u64,
    /// Pods evicted if it is: 1, or its gang's running members.
    pub evicts: u32,
    /// A victim whatever its priority (not of the hard tier): its queue
    /// gives back what it borrowed (`tessera_core::quota`'s reclaim).
    pub reclaim: bool,
}

/// The victims chosen on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preemption {
    /// The node.
    pub node: NodeId,
    /// Indices of the victims in the `running` slice given.
    pub victims: Vec<usize>,
    /// Their total run time, the work lost (a gang member's counted for
    /// each of its gang's running members).
    pub work_lost: u64,
}

/// Whether `preemptor` may evict `victim`.
pub fn may_preempt(preemptor: &Pod, victim: &Pod) -> bool {
    if victim.tier == Tier::Hard {
        return false;
    }
    let (p, v) = (Tier::rank(preemptor.tier), Tier::rank(victim.tier));
    p > v || (p == v && preemptor.priority > victim.priority)
}

/// Whether `pod` passes the hard filter on `node` once `victims` are gone:
/// [`check`] on the node after [`release`] of each victim, computed on a
/// copy of the few numbers involved (this runs for many subsets).
pub(crate) fn fits_without(
    node: &Node,
    running: &[Running<'_>],
    victims: impl IntoIterator<Item = usize>,
    pod: &Pod,
) -> bool {
    const MAX: usize = 32;
    if node.gpus.len() > MAX {
        let mut n = node.clone();
        for v in victims {
            release(&mut n, running[v].placement.gpus, &running[v].pod);
        }
        return check(&n, pod).is_ok();
    }
    let (mut cpu, mut mem) = (node.free.cpu_milli, node.free.memory_mib);
    let mut free = [0u32; MAX];
    for (f, g) in free.iter_mut().zip(&node.gpus) {
        *f = g.free_milli;
    }
    for v in victims {
        let r = &running[v];
        for i in r.placement.gpus.indices().filter(|&i| i < node.gpus.len()) {
            free[i] = (free[i] + r.pod.gpu_milli.min(GPU_MILLI)).min(GPU_MILLI);
        }
        cpu = (cpu + r.pod.requests.cpu_milli).min(node.capacity.cpu_milli);
        mem = (mem + r.pod.requests.memory_mib).min(node.capacity.memory_mib);
    }
    if !node.ready || !node.admits(pod) || pod.requests.cpu_milli > cpu || pod.requests.memory_mib > mem {
        return false;
    }
    if pod.gpu_count == 0 {
        return true;
    }
    if !pod.allowed_models.is_empty() && !pod.allowed_models.contains(&node.gpu_model) {
        return false;
    }
    let usable = node.gpus.iter().zip(free).filter(|(g, _)| g.health != GpuHealth::Failed).map(|(_, f)| f);
    if pod.gpu_milli < GPU_MILLI {
        usable.clone().any(|f| f >= pod.gpu_milli)
    } else {
        usable.filter(|&f| f == GPU_MILLI).count() as u32 >= pod.gpu_count
    }
}

type Cost = (usize, u8, u64);

/// Most eligible victims on one node for which every subset is tried.
pub const EXACT_LIMIT: usize = 12;

/// The cheapest subset of `eligible` that lets `pod` fit (ties: the
/// smallest index list). Subsets are tried by size, smallest first; a
/// subset's first cost is at least its size, so the search stops at the
/// first size past the best cost found (or `max_cost`). No allocation per
/// subset that does not fit.
fn exact(
    node: &Node,
    running: &[Running<'_>],
    eligible: &[usize],
    pod: &Pod,
    cost: impl Fn(&[usize]) -> Cost,
    max_cost: usize,
) -> Option<Vec<usize>> {
    let members = |mask: u32| (0..eligible.len()).filter(move |b| mask & (1 << b) != 0).map(|b| eligible[b]);
    let mut best: Option<(Cost, Vec<usize>)> = None;
    for size in 0..=eligible.len() as u32 {
        let bound = best.as_ref().map_or(max_cost, |(c, _)| c.0.min(max_cost));
        if size as usize > bound {
            break;
        }
        for mask in (0u32..1 << eligible.len()).filter(|m| m.count_ones() == size) {
            if !fits_without(node, running, members(mask), pod) {
                continue;
            }
            let set: Vec<usize> = members(mask).collect();
            let c = cost(&set);
            if best.as_ref().is_none_or(|(bc, bs)| (c, &set) < (*bc, bs)) {
                best = Some((c, set));
            }
        }
    }
    best.map(|(_, set)| set)
}

/// The cheapest preemption that lets `pod` run, if any (no victims at all
/// if it already fits somewhere).
pub fn plan(nodes: &[Node], running: &[Running<'_>], pod: &Pod, now: u64) -> Option<Preemption> {
    let mut best: Option<(Cost, Preemption)> = None;
    // Eligible victims by node, in `running` order: one pass over the
    // running pods, not one per node.
    let mut by_node: std::collections::HashMap<NodeId, Vec<usize>> = std::collections::HashMap::new();
    for (i, r) in running.iter().enumerate() {
        if may_preempt(pod, &r.pod) || (r.reclaim && r.pod.tier != Tier::Hard) {
            by_node.entry(r.placement.node).or_default().push(i);
        }
    }
    for node in nodes {
        let Some(mut eligible) = by_node.remove(&node.id) else { continue };
        if eligible.is_empty() || !fits_without(node, running, eligible.iter().copied(), pod) {
            continue;
        }
        let work = |i: usize| now.saturating_sub(running[i].started_at);
        let cost = |set: &[usize]| -> Cost {
            let top_tier = set.iter().map(|&v| Tier::rank(running[v].pod.tier)).max().unwrap_or(0);
            let evicts = |v: usize| u64::from(running[v].evicts.max(1));
            (
                set.iter().map(|&v| evicts(v) as usize).sum(),
                top_tier,
                set.iter().map(|&v| work(v).saturating_mul(evicts(v))).sum(),
            )
        };
        let mut chosen = if eligible.len() <= EXACT_LIMIT {
            // A node that needs more victims than the best so far cannot win.
            let bound = best.as_ref().map_or(usize::MAX, |(c, _)| c.0);
            match exact(node, running, &eligible, pod, cost, bound) {
                Some(set) => set,
                None => continue,
            }
        } else {
            eligible.sort_by_key(|&i| {
                let r = &running[i];
                (Tier::rank(r.pod.tier), r.evicts, r.pod.priority, work(i), Reverse(i))
            });
            let mut chosen = Vec::new();
            for &v in &eligible {
                chosen.push(v);
                if fits_without(node, running, chosen.iter().copied(), pod) {
                    break;
                }
            }
            // Reprieve: spare, most important first, whoever is not needed.
            for k in (0..chosen.len()).rev() {
                let mut without = chosen.clone();
                without.remove(k);
                if fits_without(node, running, without.iter().copied(), pod) {
                    chosen = without;
                }
            }
            chosen
        };
        chosen.sort_unstable();
        let cost = cost(&chosen);
        let work_lost = cost.2;
        if best.as_ref().is_none_or(|(c, _)| cost < *c) {
            best = Some((cost, Preemption { node: node.id, victims: chosen, work_lost }));
        }
    }
    best.map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Cluster, choose_gpus};
    use crate::model::Resources;

    fn pod(name: &str, tier: Tier, priority: i32, gpus: u32, milli: u32) -> Pod {
        Pod {
            name: name.into(),
            requests: Resources { cpu_milli: 1_000, memory_mib: 1_024 },
            gpu_count: gpus,
            gpu_milli: milli,
            priority,
            tier,
            ..Pod::default()
        }
    }

    /// Binds `pods` in order on `node` of `cluster`, started at the given times.
    fn run(cluster: &mut Cluster, node: NodeId, pods: Vec<(Pod, u64)>) -> Vec<Running<'static>> {
        pods.into_iter()
            .map(|(p, started_at)| {
                let gpus = choose_gpus(cluster.node(node).unwrap(), &p, None).unwrap();
                let placement = cluster.bind(node, &p, gpus).unwrap();
                Running { pod: std::borrow::Cow::Owned(p), placement, started_at, evicts: 1, reclaim: false }
            })
            .collect()
    }

    fn cluster(nodes: usize, gpus: usize, model: &str) -> Cluster {
        Cluster::new(
            (0..nodes)
                .map(|i| {
                    Node::new(
                        i as u32,
                        format!("n{i}"),
                        Resources { cpu_milli: 64_000, memory_mib: 262_144 },
                        gpus,
                        model,
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn fewest_victims_then_lowest_tier_then_least_work() {
        let mut c = cluster(2, 2, "V100");
        let mut running = run(
            &mut c,
            0,
            vec![
                (pod("batch-old", Tier::Opportunistic, 0, 1, 1000), 0),
                (pod("batch-new", Tier::Opportunistic, 0, 1, 1000), 90),
            ],
        );
        running.extend(run(&mut c, 1, vec![(pod("svc", Tier::Soft, 0, 2, 1000), 50)]));
        let hard = pod("trainer", Tier::Hard, 0, 1, 1000);
        let p = plan(c.nodes(), &running, &hard, 100).unwrap();
        // One victim suffices on node 0 (a batch pod) and on node 1 (svc);
        // the batch tier is cheaper; of the two batch pods, the newer loses
        // less work.
        assert_eq!((p.node, p.victims.clone(), p.work_lost), (0, vec![1], 10));
        // Needing both GPUs of a node: two batch pods cost more than one
        // soft pod (fewest victims first).
        let big = pod("big", Tier::Hard, 0, 2, 1000);
        let p = plan(c.nodes(), &running, &big, 100).unwrap();
        assert_eq!((p.node, p.victims), (1, vec![2]));
    }

    #[test]
    fn no_victim_is_taken_on_a_node_the_pod_may_not_use() {
        let mut c = cluster(2, 1, "V100");
        let mut running = run(&mut c, 0, vec![(pod("batch-0", Tier::Opportunistic, 0, 1, 1000), 0)]);
        running.extend(run(&mut c, 1, vec![(pod("batch-1", Tier::Opportunistic, 0, 1, 1000), 90)]));
        c.update_node(0, |n| {
            n.taints.push(crate::model::Taint { key: "team".into(), value: "a".into(), effect: "NoSchedule".into() })
        });
        let want = pod("urgent", Tier::Hard, 0, 1, 1000);
        // batch-0 would cost less work, but its node is tainted.
        let p = plan(c.nodes(), &running, &want, 100).unwrap();
        assert_eq!((p.node, p.victims), (1, vec![1]));
        c.update_node(1, |n| n.labels.insert("pool".into(), "b".into()));
        let picky = Pod { node_selector: [("pool".into(), "a".into())].into(), ..want };
        assert_eq!(plan(c.nodes(), &running, &picky, 100), None, "no node it may use");
    }

    #[test]
    fn never_hard_never_higher_and_reprieve() {
        let mut c = cluster(1, 5, "V100");
        let running = run(
            &mut c,
            0,
            vec![
                (pod("exclusive", Tier::Hard, 0, 1, 1000), 0),
                (pod("svc", Tier::Soft, 5, 1, 1000), 0),
                (pod("batch-a", Tier::Opportunistic, 0, 1, 400), 0),
                (pod("batch-b", Tier::Opportunistic, 0, 1, 1000), 0),
                (pod("batch-c", Tier::Opportunistic, 0, 1, 1000), 0),
            ],
        );
        // A soft pod of priority 1 may evict batch pods but not svc (same
        // tier, higher priority) or the hard pod.
        let want = pod("svc-2", Tier::Soft, 1, 2, 1000);
        assert_eq!(check(c.node(0).unwrap(), &want), Err(crate::cluster::FilterReason::GpuInsufficient));
        let p = plan(c.nodes(), &running, &want, 10).unwrap();
        // Two of the three batch pods, each freeing a whole GPU.
        assert_eq!(p.victims.len(), 2);
        assert!(p.victims.iter().all(|&v| running[v].pod.tier == Tier::Opportunistic), "{p:?}");
        // Four whole GPUs are impossible without the hard pod or svc.
        assert_eq!(plan(c.nodes(), &running, &pod("x", Tier::Soft, 1, 4, 1000), 10), None);
        // A pod that already fits costs nothing: no victims.
        let small = pod("small", Tier::Soft, 1, 1, 500);
        assert_eq!(plan(c.nodes(), &running, &small, 10).unwrap().victims, Vec::<usize>::new(), "GPU 2 has 600 free");
        // One whole GPU: one victim, and the reprieve keeps it at one.
        let p = plan(c.nodes(), &running, &pod("w", Tier::Soft, 1, 1, 1000), 10).unwrap();
        assert_eq!(p.victims.len(), 1, "{p:?}");
        // An opportunistic pod preempts nobody of its tier and priority.
        assert_eq!(plan(c.nodes(), &running, &pod("y", Tier::Opportunistic, 0, 4, 1000), 10), None);
        assert!(!may_preempt(&pod("z", Tier::Hard, 100, 0, 0), &running[0].pod), "hard pods are never victims");
    }

    #[test]
    fn the_cheapest_set_not_the_first_greedy_one() {
        let mut c = cluster(1, 2, "V100");
        // GPU 0 holds two recent 0.3-GPU batch pods, GPU 1 an old whole one.
        let running = run(
            &mut c,
            0,
            vec![
                (pod("whole", Tier::Opportunistic, 0, 1, 1000), 0),
                (pod("share-1", Tier::Opportunistic, 0, 1, 300), 95),
                (pod("share-2", Tier::Opportunistic, 0, 1, 300), 96),
            ],
        );
        assert_eq!(running[1].placement.gpus, running[2].placement.gpus);
        // The least work lost would take both sharing pods (9 s); one victim
        // (the whole pod, 100 s) is cheaper by the first criterion.
        let p = plan(c.nodes(), &running, &pod("w", Tier::Soft, 0, 1, 1000), 100).unwrap();
        assert_eq!((p.victims, p.work_lost), (vec![0], 100));
    }

    #[test]
    fn many_victims_take_the_greedy_path_with_reprieve() {
        let mut c = cluster(1, 16, "V100");
        // 16 whole-GPU batch pods (more than EXACT_LIMIT eligible), started
        // at 0..16: the latest lose the least work.
        let running =
            run(&mut c, 0, (0..16).map(|i| (pod(&format!("b{i}"), Tier::Opportunistic, 0, 1, 1000), i)).collect());
        let p = plan(c.nodes(), &running, &pod("w", Tier::Soft, 0, 2, 1000), 100).unwrap();
        assert_eq!(p.victims, vec![14, 15], "the two newest: 86 + 85 s lost");
        assert_eq!(p.work_lost, 86 + 85);
    }

    #[test]
    fn constraints_hold_after_preemption() {
        let mut c = cluster(1, 1, "T4");
        let running = run(&mut c, 0, vec![(pod("batch", Tier::Opportunistic, 0, 1, 1000), 0)]);
        let mut p = pod("needs-v100", Tier::Hard, 0, 1, 1000);
        p.allowed_models = vec!["V100".into()];
        assert_eq!(plan(c.nodes(), &running, &p, 5), None, "evicting does not change the GPU model");
    }

    /// The arithmetic fit check answers like [`check`] on a node with the
    /// victims released, over random nodes, pods and victim sets.
    #[test]
    fn fits_without_agrees_with_check_after_release() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for _ in 0..300 {
            let mut c = cluster(1, rng.random_range(1..9), "A100");
            let mut running = Vec::new();
            for k in 0..rng.random_range(1..10) {
                let milli = if rng.random_bool(0.5) { rng.random_range(100..1000) } else { 1000 };
                let p = pod(&format!("r{k}"), Tier::Opportunistic, 0, 1, milli);
                if let Some(gpus) = choose_gpus(c.node(0).unwrap(), &p, None)
                    && let Ok(placement) = c.bind(0, &p, gpus)
                {
                    running.push(Running {
                        pod: std::borrow::Cow::Owned(p),
                        placement,
                        started_at: 0,
                        evicts: 1,
                        reclaim: false,
                    });
                }
            }
            c.update_node(0, |n| {
                if rng.random_bool(0.2) {
                    n.gpus[0].health = GpuHealth::Failed;
                }
                n.ready = rng.random_bool(0.95);
            });
            let want = pod("w", Tier::Soft, 1, rng.random_range(0..4), if rng.random_bool(0.5) { 500 } else { 1000 });
            let victims: Vec<usize> = (0..running.len()).filter(|_| rng.random_bool(0.5)).collect();
            let mut n = c.node(0).unwrap().clone();
            for &v in &victims {
                release(&mut n, running[v].placement.gpus, &running[v].pod);
            }
            assert_eq!(
                fits_without(c.node(0).unwrap(), &running, victims.iter().copied(), &want),
                check(&n, &want).is_ok()
            );
        }
    }
}
