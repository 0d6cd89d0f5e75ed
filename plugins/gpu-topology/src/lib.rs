//! `gpu-topology`: choose the node by how well the GPUs a pod would get
//! there are connected, and keep NVLink islands whole for the pods that
//! need them.
//!
//! For a pod of whole GPUs, the plugin takes the set the host would bind
//! on each candidate (`tessera_sdk::topology::best_set`, the host's own
//! search: least summed pair distance, then from an island already broken
//! into, then the lowest indices) and scores the node by
//!
//! - **connectivity**: the set's cost (0 when all its GPUs share an
//!   NVLink/NVSwitch island; 1 per pair that only shares a PCIe switch, 2
//!   a NUMA node, 3 across sockets), and then
//! - **islands kept whole**: how many free GPUs of wholly free islands the
//!   placement takes out of that state (0 when it fills an island that is
//!   already broken into; a whole island's size when it cuts into one).
//!
//! Score = −(17 · cost + GPUs lost from whole islands): any gain in
//! connectivity outweighs wholeness (a node has at most 16 GPUs). A node
//! that reports no topology is one island: the plugin then prefers a node
//! already in use over a wholly free one, which keeps whole nodes for the
//! pods that need a node. CPU-only and GPU-sharing pods get no opinion
//! (every candidate 0), so the plugin only ever weighs in where topology
//! matters.
//!
//! With `max_distance` set, a multi-GPU pod is filtered out of nodes where
//! the set the host would bind spans farther than that (`nvlink`: one
//! island; `pcie-switch`, `numa`, `system`), reason `SCHED-GPU-TOPOLOGY`.
//! Needs contract 0.2.0 (GPU links); built against 0.1.0 it would see every
//! node as one island.

use serde::Deserialize;
use tessera_sdk::topology::{self, Distance};
use tessera_sdk::{Node, Pod, Score, Scorer};

/// Settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Farthest two GPUs of one multi-GPU pod may be apart; `None` = any
    /// (scoring only).
    pub max_distance: Option<Distance>,
}

/// Weight of one unit of set cost against one GPU lost from a whole
/// island: more than a node's most GPUs, so connectivity always comes
/// first.
const COST_WEIGHT: i64 = 17;

/// The plugin.
#[derive(Debug, Clone, Default)]
pub struct GpuTopology {
    cfg: Config,
}

/// What placing a pod of `k` whole GPUs on a node would give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The GPU indices the host would bind.
    pub set: Vec<usize>,
    /// Their summed pair distance.
    pub cost: u32,
    /// The farthest pair.
    pub span: Distance,
    /// Free GPUs of wholly free islands that stop being so.
    pub islands_broken: u32,
}

/// The placement of `k` whole GPUs on `node`, as the host would bind it;
/// `None` if the node lacks `k` free GPUs.
pub fn placement(node: &Node<'_>, k: usize) -> Option<Placement> {
    let links = node.meta().map(|m| m.gpu_links.as_slice()).unwrap_or_default();
    let gpus = node.gpus();
    if links.len() != gpus.len() {
        return None;
    }
    let free: Vec<usize> = gpus.iter().filter(|g| g.fits(1000)).map(|g| usize::from(g.index)).collect();
    if free.len() < k {
        return None;
    }
    if let Some(islands_broken) = one_island_broken(links, free.len(), k) {
        return Some(Placement { set: free[..k].to_vec(), cost: 0, span: Distance::Nvlink, islands_broken });
    }
    searched(links, &free, k)
}

/// For a node whose GPUs share one island (every node that reports no
/// topology does), placing `k` of its `free` GPUs without searching (this
/// runs for every candidate): every set costs nothing, and the island
/// stops being whole only if it was; `None` for a node of several islands.
fn one_island_broken(links: &[topology::GpuLink], free: usize, k: usize) -> Option<u32> {
    let one = links.iter().all(|l| l.island == links[0].island);
    one.then_some(if free == links.len() && k > 0 { free as u32 } else { 0 })
}

/// [`placement`] by the host's search (what the one-island shortcut must
/// agree with).
fn searched(links: &[topology::GpuLink], free: &[usize], k: usize) -> Option<Placement> {
    let set = topology::best_set(links, free, k)?;
    let rest: Vec<usize> = free.iter().copied().filter(|i| !set.contains(i)).collect();
    let mut span = Distance::Nvlink;
    for (n, &i) in set.iter().enumerate() {
        for &j in &set[n + 1..] {
            span = span.max(topology::distance(&links[i], &links[j]));
        }
    }
    Some(Placement {
        cost: topology::cost(links, &set),
        span,
        islands_broken: topology::in_whole_islands(links, free) - topology::in_whole_islands(links, &rest),
        set,
    })
}

/// Whether the pod asks for whole GPUs (the sets topology decides).
fn whole_gpus(pod: &Pod) -> Option<usize> {
    (pod.gpu_count > 0 && pod.gpu_milli >= 1000).then_some(pod.gpu_count as usize)
}

impl Scorer for GpuTopology {
    type Config = Config;
    const NAME: &'static str = "gpu-topology";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str =
        "prefer nodes where a pod's GPUs share an NVLink island and whole islands stay whole";
    const FILTER_REASONS: &'static [&'static str] = &["SCHED-GPU-TOPOLOGY"];

    fn new(cfg: Config) -> Result<Self, String> {
        Ok(Self { cfg })
    }

    fn filter(&self, pod: &Pod, node: &Node<'_>) -> Result<(), u8> {
        let (Some(max), Some(k)) = (self.cfg.max_distance, whole_gpus(pod)) else { return Ok(()) };
        match placement(node, k) {
            Some(p) if p.span > max => Err(0),
            // Lacking the GPUs is the host's filter's to say.
            _ => Ok(()),
        }
    }

    #[inline]
    fn score(&self, pod: &Pod, node: &Node<'_>) -> Score {
        // Inlined into the SDK's loop, so a pod of no whole GPUs costs no
        // call per node (in Wasm, a call spills every live register).
        match whole_gpus(pod) {
            Some(k) => score_whole(node, k),
            None => Score::new(0),
        }
    }
}

/// The score of a node for a pod of `k` whole GPUs.
#[inline(never)]
fn score_whole(node: &Node<'_>, k: usize) -> Score {
    // One island (the common case): counted without building the set.
    let links = node.meta().map(|m| m.gpu_links.as_slice()).unwrap_or_default();
    let gpus = node.gpus();
    if links.len() == gpus.len() {
        let free = gpus.iter().filter(|g| g.fits(1000)).count();
        if free < k {
            return Score::new(0);
        }
        if let Some(broken) = one_island_broken(links, free, k) {
            return Score::new(-i64::from(broken));
        }
    }
    let Some(p) = placement(node, k) else { return Score::new(0) };
    Score::new(-(COST_WEIGHT * i64::from(p.cost) + i64::from(p.islands_broken)))
}

tessera_sdk::export_scorer!(GpuTopology);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::{GpuLink, GpuRecord, NodeDelta, NodeRecord, Resources, ScorerHarness};

    /// A DGX-like node: two NVLink islands of four, a PCIe switch per
    /// pair, a NUMA node per island; `used` GPUs are taken.
    fn dgx(id: u32, used: &[usize]) -> NodeRecord {
        NodeRecord {
            id,
            capacity: Resources { cpu_milli: 64_000, memory_mib: 512_000 },
            free: Resources { cpu_milli: 64_000, memory_mib: 512_000 },
            gpus: (0..8)
                .map(|g| GpuRecord {
                    free_milli: if used.contains(&g) { 0 } else { 1000 },
                    link: GpuLink { island: (g / 4) as u8, pcie: (g / 2) as u8, numa: (g / 4) as u8 },
                    ..GpuRecord::default()
                })
                .collect(),
            ready: true,
            ..NodeRecord::default()
        }
    }

    fn gpus(count: u32, milli: u32) -> Pod {
        Pod { gpu_count: count, gpu_milli: milli, ..Pod::default() }
    }

    fn scores(config: &str, nodes: Vec<NodeRecord>, pod: &Pod) -> (Vec<i64>, Vec<u8>) {
        let mut h = ScorerHarness::<GpuTopology>::new(config).unwrap();
        let ids: Vec<u32> = nodes.iter().map(|n| n.id).collect();
        h.apply(nodes.into_iter().map(NodeDelta::Upsert)).unwrap();
        let (mut v, mut hints) = (Vec::new(), Vec::new());
        h.score(pod, &ids, &mut v, &mut hints).unwrap();
        let mut verdicts = Vec::new();
        h.filter(pod, &ids, &mut verdicts).unwrap();
        (v, verdicts)
    }

    #[test]
    fn a_pod_goes_where_it_breaks_no_whole_island() {
        // Node 0: island 0 broken (two taken), island 1 whole. Node 1:
        // both whole. Node 2: island 0 full, island 1 whole.
        let nodes = vec![dgx(0, &[0, 1]), dgx(1, &[]), dgx(2, &[0, 1, 2, 3])];
        let (v, _) = scores("null", nodes.clone(), &gpus(1, 1000));
        assert_eq!(v, [0, -4, -4], "one GPU from node 0's broken island costs no whole island");
        let (v, _) = scores("null", nodes, &gpus(2, 1000));
        assert_eq!(v, [0, -4, -4]);
    }

    #[test]
    fn a_whole_island_beats_the_same_count_across_islands() {
        // Node 0: two free in each island (4, across the sockets). Node 1:
        // island 1 whole, island 0 full.
        let nodes = vec![dgx(0, &[0, 1, 4, 5]), dgx(1, &[0, 1, 2, 3])];
        let (v, verdicts) = scores("null", nodes.clone(), &gpus(4, 1000));
        // Node 0's set {2, 3, 6, 7}: one NVLink pair per island, four
        // pairs across sockets: cost 12.
        assert_eq!(v, [-17 * 12, -4]);
        assert_eq!(verdicts, [0, 0], "no filter unless asked");
        let (_, verdicts) = scores(r#"{"max_distance": "nvlink"}"#, nodes.clone(), &gpus(4, 1000));
        assert_eq!(verdicts, [1, 0], "SCHED-GPU-TOPOLOGY on node 0");
        let (_, verdicts) = scores(r#"{"max_distance": "system"}"#, nodes.clone(), &gpus(4, 1000));
        assert_eq!(verdicts, [0, 0]);
        // A single GPU has no span to speak of.
        let (_, verdicts) = scores(r#"{"max_distance": "nvlink"}"#, nodes, &gpus(1, 1000));
        assert_eq!(verdicts, [0, 0]);
    }

    #[test]
    fn the_set_scored_is_the_set_the_host_binds() {
        let node = dgx(0, &[0, 5]);
        let mut h = ScorerHarness::<GpuTopology>::new("null").unwrap();
        h.apply([NodeDelta::Upsert(node)]).unwrap();
        let p = placement(&h.nodes().get(0).unwrap(), 3).unwrap();
        assert_eq!(p.set, [1, 2, 3], "island 0's three, not island 1's");
        assert_eq!((p.cost, p.span, p.islands_broken), (0, Distance::Nvlink, 0));
    }

    #[test]
    fn sharing_and_cpu_pods_get_no_opinion_and_flat_nodes_pack() {
        let nodes = vec![dgx(0, &[0]), dgx(1, &[])];
        assert_eq!(scores("null", nodes.clone(), &gpus(1, 300)).0, [0, 0]);
        assert_eq!(scores("null", nodes, &gpus(0, 0)).0, [0, 0]);
        // Without topology a node is one island: a used node before a free one.
        let flat = |id, used: &[usize]| {
            let mut n = dgx(id, used);
            n.gpus.iter_mut().for_each(|g| g.link = GpuLink::default());
            n
        };
        assert_eq!(scores("null", vec![flat(0, &[3]), flat(1, &[])], &gpus(2, 1000)).0, [0, -8]);
    }

    /// The shortcut for nodes of one island gives what the search gives,
    /// for every set of free GPUs and every request.
    #[test]
    fn one_island_needs_no_search() {
        for island in [0u8, 5] {
            let links: Vec<GpuLink> = (0..8u8).map(|g| GpuLink { island, pcie: g / 2, numa: g / 4 }).collect();
            for used in 0u32..256 {
                let node = NodeRecord {
                    gpus: (0..8usize)
                        .map(|g| GpuRecord {
                            free_milli: if used & (1 << g) == 0 { 1000 } else { 0 },
                            link: links[g],
                            ..GpuRecord::default()
                        })
                        .collect(),
                    ..dgx(1, &[])
                };
                let mut h = ScorerHarness::<GpuTopology>::new("null").unwrap();
                h.apply([NodeDelta::Upsert(node)]).unwrap();
                let free: Vec<usize> = (0..8).filter(|g| used & (1 << g) == 0).collect();
                for k in 1..=8 {
                    let node = h.nodes().get(1).unwrap();
                    let (fast, full) = (placement(&node, k), searched(&links, &free, k));
                    assert_eq!(fast, full, "island {island}, used {used:#010b}, k {k}");
                    let want = full.map_or(0, |p| -(COST_WEIGHT * i64::from(p.cost) + i64::from(p.islands_broken)));
                    assert_eq!(
                        GpuTopology::default().score(&gpus(k as u32, 1000), &node).value,
                        want,
                        "{used:#010b} {k}"
                    );
                }
            }
        }
    }

    #[test]
    fn unknown_settings_are_refused() {
        let e = ScorerHarness::<GpuTopology>::new(r#"{"max_distanse": "nvlink"}"#).err().unwrap();
        assert!(e.contains("max_distanse"), "{e}");
        assert!(ScorerHarness::<GpuTopology>::new(r#"{"max_distance": "infiniband"}"#).is_err());
    }
}
