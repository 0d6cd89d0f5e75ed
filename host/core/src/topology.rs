//! How a node's GPUs are connected, and the best-connected set of free
//! GPUs for a pod that asks for several.
//!
//! Each GPU says which NVLink/NVSwitch island it belongs to, which PCIe
//! switch it hangs off and which NUMA node it is attached to (as NVML's
//! topology queries report them: `nvmlDeviceGetTopologyCommonAncestor`,
//! NVLink state). Two GPUs are as close as the nearest thing they share:
//! an island (NVLink, the fastest), a PCIe switch, a NUMA node (the host
//! bridge), or nothing (across sockets). A node that says nothing has
//! every GPU in island 0: all equally close, and a pod gets the lowest
//! free indices, as before topology was modelled.

use serde::{Deserialize, Serialize};

use crate::model::Gpu;

/// Where one GPU sits in its node's interconnect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GpuLink {
    /// NVLink/NVSwitch island: GPUs of one island reach each other over
    /// NVLink. A GPU without NVLink is alone in its island.
    pub island: u8,
    /// PCIe switch.
    pub pcie: u8,
    /// NUMA node.
    pub numa: u8,
}

/// A node's GPU links as text, one `island/pcie/numa` per GPU index,
/// comma-separated (`0/0/0,0/0/0,1/1/1,1/1/1`): what a node agent
/// publishes (the Kubernetes annotation `tessera.io/gpu-topology`).
pub fn format(links: &[GpuLink]) -> String {
    links.iter().map(|l| format!("{}/{}/{}", l.island, l.pcie, l.numa)).collect::<Vec<_>>().join(",")
}

/// Reads [`format()`]'s text for a node of `gpus` GPUs; `Err` says which
/// GPU's entry is wrong.
pub fn parse(text: &str, gpus: usize) -> Result<Vec<GpuLink>, String> {
    let entries: Vec<&str> = text.split(',').map(str::trim).collect();
    if entries.len() != gpus {
        return Err(format!("{} entries for {gpus} GPUs (one `island/pcie/numa` per GPU)", entries.len()));
    }
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let n: Vec<Option<u8>> = e.split('/').map(|x| x.trim().parse().ok()).collect();
            match n[..] {
                [Some(island), Some(pcie), Some(numa)] => Ok(GpuLink { island, pcie, numa }),
                _ => {
                    let shown: String = e.chars().take(32).collect();
                    Err(format!("GPU {i}: `{shown}` is not island/pcie/numa (numbers 0..=255)"))
                }
            }
        })
        .collect()
}

/// How far apart two GPUs are, by the nearest thing they share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Distance {
    /// The same NVLink/NVSwitch island.
    Nvlink = 0,
    /// The same PCIe switch.
    PcieSwitch = 1,
    /// The same NUMA node (host bridge).
    Numa = 2,
    /// Across sockets.
    System = 3,
}

/// How far apart `a` and `b` are.
pub fn distance(a: &GpuLink, b: &GpuLink) -> Distance {
    if a.island == b.island {
        Distance::Nvlink
    } else if a.pcie == b.pcie {
        Distance::PcieSwitch
    } else if a.numa == b.numa {
        Distance::Numa
    } else {
        Distance::System
    }
}

/// What a set of GPUs costs to use together: the sum over its pairs of
/// their distance (0 when all share an island).
pub fn cost(gpus: &[Gpu], set: &[usize]) -> u32 {
    let mut c = 0;
    for (k, &i) in set.iter().enumerate() {
        for &j in &set[k + 1..] {
            c += distance(&gpus[i].link, &gpus[j].link) as u32;
        }
    }
    c
}

/// Free GPUs (indices, ascending) up to which every subset is tried.
pub const EXACT_UP_TO: usize = 12;

/// The best-connected `k` of `free` (indices into `gpus`, ascending): the
/// set of least [`cost`], ties to the lowest indices. Every subset is
/// tried up to [`EXACT_UP_TO`] free GPUs; past it, the best of growing a
/// set from each free GPU by its nearest. `None` if fewer than `k` are
/// free.
pub fn best_set(gpus: &[Gpu], free: &[usize], k: usize) -> Option<Vec<usize>> {
    if free.len() < k {
        return None;
    }
    // One island: every set costs 0, the lowest indices win.
    let flat = free.iter().all(|&i| gpus[i].link.island == gpus[free[0]].link.island);
    if k <= 1 || flat {
        return Some(free[..k].to_vec());
    }
    if free.len() <= EXACT_UP_TO {
        let mut best: Option<(u32, Vec<usize>)> = None;
        let mut set = Vec::with_capacity(k);
        subsets(gpus, free, k, 0, &mut set, &mut best);
        return best.map(|(_, s)| s);
    }
    let mut best: Option<(u32, Vec<usize>)> = None;
    for &seed in free {
        let mut set = vec![seed];
        while set.len() < k {
            let next = free
                .iter()
                .copied()
                .filter(|i| !set.contains(i))
                .min_by_key(|&i| (set.iter().map(|&j| distance(&gpus[i].link, &gpus[j].link) as u32).sum::<u32>(), i))
                .expect("enough free GPUs");
            set.push(next);
        }
        set.sort_unstable();
        let c = cost(gpus, &set);
        if best.as_ref().is_none_or(|(bc, bs)| (c, &set) < (*bc, bs)) {
            best = Some((c, set));
        }
    }
    best.map(|(_, s)| s)
}

/// Every `k`-subset of `free[from..]` added to `set`, keeping the best.
fn subsets(
    gpus: &[Gpu],
    free: &[usize],
    k: usize,
    from: usize,
    set: &mut Vec<usize>,
    best: &mut Option<(u32, Vec<usize>)>,
) {
    if set.len() == k {
        let c = cost(gpus, set);
        // Subsets come in lexicographic order: a tie keeps the first.
        if best.as_ref().is_none_or(|(bc, _)| c < *bc) {
            *best = Some((c, set.clone()));
        }
        return;
    }
    for i in from..free.len() {
        if free.len() - i < k - set.len() {
            break;
        }
        set.push(free[i]);
        subsets(gpus, free, k, i + 1, set, best);
        set.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(links: &[(u8, u8, u8)]) -> Vec<Gpu> {
        links
            .iter()
            .map(|&(island, pcie, numa)| Gpu { link: GpuLink { island, pcie, numa }, ..Gpu::default() })
            .collect()
    }

    /// A DGX-like node: two NVLink islands of four, a PCIe switch per pair,
    /// a NUMA node per island.
    fn two_islands() -> Vec<Gpu> {
        gpus(&[(0, 0, 0), (0, 0, 0), (0, 1, 0), (0, 1, 0), (1, 2, 1), (1, 2, 1), (1, 3, 1), (1, 3, 1)])
    }

    #[test]
    fn distance_is_the_nearest_thing_shared() {
        let g = two_islands();
        assert_eq!(distance(&g[0].link, &g[3].link), Distance::Nvlink);
        assert_eq!(distance(&g[0].link, &g[4].link), Distance::System);
        let pcie_only = gpus(&[(0, 0, 0), (1, 0, 0), (2, 1, 0), (3, 2, 1)]);
        assert_eq!(distance(&pcie_only[0].link, &pcie_only[1].link), Distance::PcieSwitch);
        assert_eq!(distance(&pcie_only[0].link, &pcie_only[2].link), Distance::Numa);
        assert_eq!(distance(&pcie_only[0].link, &pcie_only[3].link), Distance::System);
    }

    #[test]
    fn a_set_stays_inside_an_island_when_one_has_room() {
        let g = two_islands();
        // GPUs 0 and 1 are taken: four free in island 1, two in island 0.
        assert_eq!(best_set(&g, &[2, 3, 4, 5, 6, 7], 4), Some(vec![4, 5, 6, 7]), "not 2, 3, 4, 5 across sockets");
        assert_eq!(best_set(&g, &[2, 3, 4, 5, 6, 7], 2), Some(vec![2, 3]), "a pair on one switch, lowest first");
        assert_eq!(best_set(&g, &[3, 4, 6], 2), Some(vec![4, 6]), "same island beats lower indices");
        assert_eq!(best_set(&g, &[3, 4], 3), None);
    }

    #[test]
    fn links_read_back_what_was_written_and_name_a_bad_entry() {
        let links: Vec<GpuLink> = two_islands().iter().map(|g| g.link).collect();
        let text = format(&links);
        assert_eq!(text, "0/0/0,0/0/0,0/1/0,0/1/0,1/2/1,1/2/1,1/3/1,1/3/1");
        assert_eq!(parse(&text, 8), Ok(links));
        assert_eq!(parse("0/0/0", 2), Err("1 entries for 2 GPUs (one `island/pcie/numa` per GPU)".into()));
        assert_eq!(parse("0/0/0, 1/x/0", 2), Err("GPU 1: `1/x/0` is not island/pcie/numa (numbers 0..=255)".into()));
        assert!(parse("0/0/0,0/0/256", 2).is_err());
    }

    #[test]
    fn a_node_that_says_nothing_gets_the_lowest_indices() {
        let flat = vec![Gpu::default(); 8];
        assert_eq!(best_set(&flat, &[1, 3, 4, 6], 2), Some(vec![1, 3]));
    }

    #[test]
    fn past_the_exact_limit_the_greedy_set_is_still_one_island() {
        // 32 GPUs in islands of 8, two NUMA nodes.
        let links: Vec<(u8, u8, u8)> = (0..32u8).map(|i| (i / 8, i / 4, i / 16)).collect();
        let g = gpus(&links);
        let free: Vec<usize> = (0..32).filter(|i| i % 8 != 0).collect();
        let set = best_set(&g, &free, 7).unwrap();
        assert!(set.iter().all(|&i| i / 8 == set[0] / 8), "{set:?}");
        assert_eq!(cost(&g, &set), 0);
    }
}
