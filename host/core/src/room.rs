//! Making room by migration: when a pod fits nowhere, find the cheapest set
//! of running pods on one node whose moves to *other* nodes let it fit
//! there. Unlike preemption nobody is evicted for good: every moved pod
//! must fit elsewhere first.
//!
//! Candidates are (node, pods to move) pairs, cheapest first by number of
//! moves, then GPU share moved, then node id; hard-tier pods are never
//! moved, nor pods that no other node would take as the cluster stands. The first candidate whose pods all find a new node (the hard
//! filter on the cluster as it would stand; the caller's ranking picks
//! among the nodes that pass) wins. Deterministic; no IO.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::cluster::{Cluster, Placement, check, choose_gpus};
use crate::model::{GPU_MILLI, NodeId, Pod, Tier};
use crate::preempt::Running;

/// One migration of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// Index of the pod in the `running` slice given.
    pub running: usize,
    /// Where it goes.
    pub to: Placement,
}

/// Pods to move so that `pod` fits on `node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Room {
    /// The node made room on.
    pub node: NodeId,
    /// The moves, in order.
    pub moves: Vec<Migration>,
}

/// Most pods considered per node (the cheapest by GPU share).
const PER_NODE: usize = 24;

/// Largest set searched exhaustively; larger ones greedily.
const EXACT_SIZE: usize = 2;

/// Most (node, pods) candidates whose moves are tried per pod.
const TRIES: usize = 16;

type ShapeKey = (
    u64,
    u64,
    u32,
    u32,
    Vec<String>,
    Vec<(String, String)>,
    Vec<crate::model::Toleration>,
    Vec<Vec<crate::model::LabelRequirement>>,
);

/// Pods alike in everything that decides where they may go.
fn shape_key(p: &Pod) -> ShapeKey {
    (
        p.requests.cpu_milli,
        p.requests.memory_mib,
        p.gpu_count,
        p.gpu_milli,
        p.allowed_models.clone(),
        p.node_selector.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        p.tolerations.clone(),
        p.node_affinity.clone(),
    )
}

fn gpu_share(p: &Pod) -> u64 {
    u64::from(p.gpu_count) * u64::from(p.gpu_milli.min(GPU_MILLI))
}

/// Finds the cheapest room for `pod` moving at most `max_moves` pods.
/// `rank` orders the nodes a moved pod could go to (best first), given the
/// pod and the nodes that pass the hard filter; e.g. the placement policy.
///
/// The search binds and unbinds on `cluster` to try moves and leaves it
/// exactly as it was.
pub fn make_room(
    cluster: &mut Cluster,
    running: &[Running<'_>],
    pod: &Pod,
    max_moves: usize,
    rank: &mut dyn FnMut(&Pod, &[NodeId]) -> Vec<NodeId>,
) -> Option<Room> {
    if max_moves == 0 {
        return None;
    }
    let mut by_node: Vec<Vec<usize>> = vec![Vec::new(); cluster.nodes().len()];
    for (i, r) in running.iter().enumerate() {
        if r.pod.tier != Tier::Hard && (r.placement.node as usize) < by_node.len() {
            by_node[r.placement.node as usize].push(i);
        }
    }
    // A pod is worth considering only if some other node takes it now
    // (moves of the same plan free no room elsewhere). Pods of one shape
    // share the answer: up to two nodes that take it (one may be its own).
    let mut goes: HashMap<ShapeKey, Vec<NodeId>> = HashMap::new();
    let (mut cand, mut rejected) = (Vec::new(), [0u32; crate::cluster::FilterReason::COUNT]);
    // (moves, GPU share moved, node, pods) for every subset that makes room.
    let mut candidates: Vec<(usize, u64, NodeId, Vec<usize>)> = Vec::new();
    for node in cluster.nodes() {
        let mut movable = std::mem::take(&mut by_node[node.id as usize]);
        if movable.is_empty() || check(node, pod).is_ok() {
            continue;
        }
        let without = |set: &[usize]| crate::preempt::fits_without(node, running, set.iter().copied(), pod);
        if !without(&movable) {
            continue;
        }
        movable.retain(|&i| {
            let r = &running[i];
            let nodes = goes.entry(shape_key(&r.pod)).or_insert_with(|| {
                cluster.feasible(&r.pod, &mut cand, &mut rejected);
                cand.iter().take(2).copied().collect()
            });
            nodes.iter().any(|&n| n != r.placement.node)
        });
        if !without(&movable) {
            continue;
        }
        movable.sort_by_key(|&i| (gpu_share(&running[i].pod), i));
        movable.truncate(PER_NODE);
        let k = movable.len();
        let mut found = false;
        for size in 1..=max_moves.min(k).min(EXACT_SIZE) {
            for mask in (1u32..1 << k).filter(|m| m.count_ones() as usize == size) {
                let set: Vec<usize> = (0..k).filter(|b| mask & (1 << b) != 0).map(|b| movable[b]).collect();
                if without(&set) {
                    let moved = set.iter().map(|&i| gpu_share(&running[i].pod)).sum();
                    candidates.push((size, moved, node.id, set));
                    found = true;
                }
            }
            if found {
                break;
            }
        }
        if !found && max_moves > EXACT_SIZE {
            // Larger sets greedily: take the pods that free most of what
            // the node lacks (CPU, memory, GPU share, each relative to the
            // pod's need) until it fits, then spare whoever is not needed.
            let lack = |i: usize| {
                let p = &running[i].pod;
                let share = |have: u64, need: u64| if need == 0 { 0.0 } else { have.min(need) as f64 / need as f64 };
                share(p.requests.cpu_milli, pod.requests.cpu_milli.saturating_sub(node.free.cpu_milli))
                    + share(p.requests.memory_mib, pod.requests.memory_mib.saturating_sub(node.free.memory_mib))
                    + share(gpu_share(p), gpu_share(pod))
            };
            let mut order = movable.clone();
            order.sort_by(|&a, &b| lack(b).total_cmp(&lack(a)).then(a.cmp(&b)));
            let mut set = Vec::new();
            for &i in &order {
                set.push(i);
                if without(&set) || set.len() == max_moves {
                    break;
                }
            }
            if without(&set) {
                for j in (0..set.len()).rev() {
                    let mut fewer = set.clone();
                    fewer.remove(j);
                    if without(&fewer) {
                        set = fewer;
                    }
                }
                let moved = set.iter().map(|&i| gpu_share(&running[i].pod)).sum();
                candidates.push((set.len(), moved, node.id, set));
            }
        }
    }
    candidates.sort();
    let mut feasible = Vec::new();
    let mut rejected = [0u32; crate::cluster::FilterReason::COUNT];
    for (_, _, node, set) in candidates.into_iter().take(TRIES) {
        // Try the moves on the cluster itself, then undo them.
        for &i in &set {
            cluster.unbind(&running[i].placement, &running[i].pod);
        }
        let mut moves = Vec::with_capacity(set.len());
        for &i in &set {
            let p = &running[i].pod;
            cluster.feasible(p, &mut feasible, &mut rejected);
            feasible.retain(|&n| n != node);
            let to = rank(p, &feasible).into_iter().find_map(|n| {
                let gpus = choose_gpus(cluster.node(n)?, p, None)?;
                cluster.bind(n, p, gpus).ok()
            });
            match to {
                Some(to) => moves.push(Migration { running: i, to }),
                None => break,
            }
        }
        let fits = moves.len() == set.len() && cluster.node(node).is_some_and(|n| check(n, pod).is_ok());
        for m in moves.iter().rev() {
            cluster.unbind(&m.to, &running[m.running].pod);
        }
        for &i in &set {
            cluster
                .bind(running[i].placement.node, &running[i].pod, running[i].placement.gpus)
                .expect("a pod goes back where it ran");
        }
        if fits {
            return Some(Room { node, moves });
        }
    }
    None
}

/// `running` entries borrowed from owned pods (for callers that keep
/// `(Pod, Placement)` pairs).
pub fn borrow_running(pods: &[(Pod, Placement)]) -> Vec<Running<'_>> {
    pods.iter()
        .map(|(p, at)| Running { pod: Cow::Borrowed(p), placement: *at, started_at: 0, evicts: 1, reclaim: false })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::GpuSet;
    use crate::model::{Node, Resources};

    fn pod(name: &str, milli: u32, tier: Tier) -> Pod {
        Pod {
            name: name.into(),
            requests: Resources { cpu_milli: 1_000, memory_mib: 1_024 },
            gpu_count: 1,
            gpu_milli: milli,
            tier,
            ..Pod::default()
        }
    }

    /// `nodes` nodes of 2 GPUs; `pods` as (node, GPU index, share, tier).
    fn setup(nodes: usize, pods: &[(NodeId, usize, u32, Tier)]) -> (Cluster, Vec<(Pod, Placement)>) {
        let mut c = Cluster::new(
            (0..nodes)
                .map(|i| Node::new(0, format!("n{i}"), Resources { cpu_milli: 32_000, memory_mib: 65_536 }, 2, "A100"))
                .collect(),
        );
        let placed = pods
            .iter()
            .enumerate()
            .map(|(k, &(n, g, milli, tier))| {
                let p = pod(&format!("p{k}"), milli, tier);
                let at = c.bind(n, &p, GpuSet(1 << g)).unwrap();
                (p, at)
            })
            .collect();
        (c, placed)
    }

    fn lowest_id(_: &Pod, nodes: &[NodeId]) -> Vec<NodeId> {
        nodes.to_vec()
    }

    #[test]
    fn one_small_move_frees_a_whole_gpu() {
        // n0: both GPUs half used; n1: GPU 0 full, GPU 1 half used. A
        // whole-GPU pod fits nowhere; moving one half-GPU pod frees a GPU.
        // n0 and n1 tie on cost (one move of 0.5 GPU): the lower id wins.
        let s = Tier::Soft;
        let (c, pods) = setup(2, &[(0, 0, 500, s), (0, 1, 500, s), (1, 0, 1000, s), (1, 1, 500, s)]);
        let whole = pod("whole", 1000, s);
        assert!(c.nodes().iter().all(|n| check(n, &whole).is_err()), "fits nowhere to begin with");
        let running = borrow_running(&pods);
        let mut tried = c.clone();
        let room = make_room(&mut tried, &running, &whole, 2, &mut lowest_id).expect("room by one move");
        assert_eq!(tried, c, "the search leaves the cluster as it was");
        assert_eq!(room.node, 0);
        assert_eq!(room.moves, [Migration { running: 0, to: Placement { node: 1, gpus: GpuSet(0b10) } }]);
    }

    #[test]
    fn two_moves_when_one_is_not_enough_and_hard_pods_stay() {
        // n0: GPU 0 has a hard pod (0.3); GPU 1 two 0.3 pods. n1 is full;
        // n2 has 0.6 free on GPU 1 (next to a hard pod). A whole GPU on n0
        // needs both 0.3 pods off GPU 1, to n2.
        let (s, h) = (Tier::Soft, Tier::Hard);
        let (c, pods) = setup(
            3,
            &[
                (0, 0, 300, h),
                (0, 1, 300, s),
                (0, 1, 300, s),
                (1, 0, 1000, s),
                (1, 1, 1000, s),
                (2, 0, 1000, s),
                (2, 1, 400, h),
            ],
        );
        let whole = pod("whole", 1000, s);
        let running = borrow_running(&pods);
        assert_eq!(make_room(&mut c.clone(), &running, &whole, 1, &mut lowest_id), None, "one move is not enough");
        let room = make_room(&mut c.clone(), &running, &whole, 2, &mut lowest_id).expect("two moves");
        assert_eq!(room.node, 0);
        let moved: Vec<(usize, NodeId)> = room.moves.iter().map(|m| (m.running, m.to.node)).collect();
        assert_eq!(moved, [(1, 2), (2, 2)], "the soft pods to n2; the hard pod stays");
    }

    #[test]
    fn pods_that_fit_nowhere_else_are_not_candidates() {
        // Nodes 0..18: GPU 0 holds a 0.2 pod with 30 of the node's 32
        // cores, GPU 1 a whole-GPU pod: moving the 0.2 pod would free a GPU
        // (the cheapest candidates), but no other node has 30 cores for it.
        // Node 18: two 0.3 pods, either of which fits elsewhere. More
        // doomed candidates than the search tries come first by cost; they
        // must not hide the one that works.
        let s = Tier::Soft;
        let mut c = Cluster::new(
            (0..19)
                .map(|i| Node::new(0, format!("n{i}"), Resources { cpu_milli: 32_000, memory_mib: 65_536 }, 2, "A100"))
                .collect(),
        );
        let mut pods = Vec::new();
        for n in 0..18 {
            let mut hog = pod(&format!("hog{n}"), 200, s);
            hog.requests.cpu_milli = 30_000;
            let at = c.bind(n, &hog, GpuSet(1)).unwrap();
            pods.push((hog, at));
            let whole = pod(&format!("whole{n}"), 1000, s);
            let at = c.bind(n, &whole, GpuSet(2)).unwrap();
            pods.push((whole, at));
        }
        for g in 0..2 {
            let p = pod(&format!("small{g}"), 300, s);
            let at = c.bind(18, &p, GpuSet(1 << g)).unwrap();
            pods.push((p, at));
        }
        // Node 18's CPU is taken too (by a pod that stays), so no hog fits there.
        let mut cpu = pod("cpu", 0, Tier::Hard);
        cpu.gpu_count = 0;
        cpu.requests.cpu_milli = 29_000;
        let at = c.bind(18, &cpu, GpuSet::default()).unwrap();
        pods.push((cpu, at));
        let want = pod("want", 1000, s);
        assert!(c.nodes().iter().all(|n| check(n, &want).is_err()));
        let running = borrow_running(&pods);
        let room = make_room(&mut c.clone(), &running, &want, 2, &mut lowest_id).expect("room on node 18");
        assert_eq!(room.node, 18);
        assert_eq!(room.moves.len(), 1);
    }

    #[test]
    fn no_room_means_none() {
        let s = Tier::Soft;
        let (c, pods) = setup(2, &[(0, 0, 1000, s), (0, 1, 1000, s), (1, 0, 1000, s), (1, 1, 1000, s)]);
        let running = borrow_running(&pods);
        assert_eq!(
            make_room(&mut c.clone(), &running, &pod("x", 1000, s), 3, &mut lowest_id),
            None,
            "nowhere to move anyone"
        );
    }
}
