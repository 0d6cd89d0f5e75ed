//! # tessera-topology
//!
//! How a node's GPUs are connected, and the best-connected set of free
//! GPUs for a pod that asks for several: one implementation, used by the
//! host's GPU choice (`tessera-core`) and by plugins (`tessera-sdk`,
//! the `gpu-topology` scorer), so a plugin that rates a node by the set
//! the host would pick rates the set the host does pick.
//!
//! Each GPU says which NVLink/NVSwitch island it belongs to, which PCIe
//! switch it hangs off and which NUMA node it is attached to (as NVML's
//! topology queries report them: `nvmlDeviceGetTopologyCommonAncestor`,
//! NVLink state). Two GPUs are as close as the nearest thing they share:
//! an island (NVLink, the fastest), a PCIe switch, a NUMA node (the host
//! bridge), or nothing (across sockets). A node that says nothing has
//! every GPU in island 0: all equally close, and a pod gets the lowest
//! free indices, as before topology was modelled.
//!
//! No IO, no clock, no randomness: the same links and free GPUs always
//! give the same set.
#![warn(missing_docs)]

use serde::{Deserialize, Serialize};

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

/// What a set of GPUs (indices into `links`) costs to use together: the
/// sum over its pairs of their distance (0 when all share an island).
pub fn cost(links: &[GpuLink], set: &[usize]) -> u32 {
    let mut c = 0;
    for (k, &i) in set.iter().enumerate() {
        for &j in &set[k + 1..] {
            c += distance(&links[i], &links[j]) as u32;
        }
    }
    c
}

/// How whole the islands stay when `set` is taken out of `free`: the sum,
/// over islands, of the square of the free GPUs left in each. Taking GPUs
/// from an island that is already broken into leaves this larger than
/// cutting into an intact one, so the next pod that needs a whole island
/// still finds it.
pub fn wholeness_after(links: &[GpuLink], free: &[usize], set: &[usize]) -> u32 {
    islands(links, |members| {
        let left = members.filter(|j| free.contains(j) && !set.contains(j)).count() as u32;
        left * left
    })
}

/// The sum of `f` over the islands of `links`, each given the indices of
/// its GPUs. A node has a handful of GPUs: this compares pairs rather than
/// keeping a table of every possible island (it runs once per candidate
/// node in a scorer).
fn islands(links: &[GpuLink], mut f: impl FnMut(&mut dyn Iterator<Item = usize>) -> u32) -> u32 {
    let mut sum = 0;
    for (i, l) in links.iter().enumerate() {
        // Each island counted at its first GPU.
        if links[..i].iter().any(|m| m.island == l.island) {
            continue;
        }
        let mut members = links.iter().enumerate().skip(i).filter(|(_, m)| m.island == l.island).map(|(j, _)| j);
        sum += f(&mut members);
    }
    sum
}

/// Free GPUs (indices, ascending) up to which every subset is tried.
pub const EXACT_UP_TO: usize = 12;

/// The best `k` of `free` (ascending indices into `links`): the set of
/// least [`cost`]; among those, the one that leaves the islands most
/// whole ([`wholeness_after`]); then the lowest indices. Every subset is
/// tried up to [`EXACT_UP_TO`] free GPUs; past it, the best of growing a
/// set from each free GPU by its nearest. `None` if fewer than `k` are
/// free.
pub fn best_set(links: &[GpuLink], free: &[usize], k: usize) -> Option<Vec<usize>> {
    if free.len() < k {
        return None;
    }
    // One island: every set costs 0 and leaves the island as whole as any
    // other: the lowest indices win.
    if k == 0 || free.iter().all(|&i| links[i].island == links[free[0]].island) {
        return Some(free[..k].to_vec());
    }
    let rank = |set: &[usize]| (cost(links, set), u32::MAX - wholeness_after(links, free, set));
    let mut best: Option<((u32, u32), Vec<usize>)> = None;
    if free.len() <= EXACT_UP_TO {
        let mut set = Vec::with_capacity(k);
        subsets(free, k, 0, &mut set, &mut |s| {
            let r = rank(s);
            // Subsets come in lexicographic order: a tie keeps the first.
            if best.as_ref().is_none_or(|(br, _)| r < *br) {
                best = Some((r, s.to_vec()));
            }
        });
        return best.map(|(_, s)| s);
    }
    for &seed in free {
        let mut set = vec![seed];
        while set.len() < k {
            let next = free
                .iter()
                .copied()
                .filter(|i| !set.contains(i))
                .min_by_key(|&i| (set.iter().map(|&j| distance(&links[i], &links[j]) as u32).sum::<u32>(), i))
                .expect("enough free GPUs");
            set.push(next);
        }
        set.sort_unstable();
        let r = rank(&set);
        if best.as_ref().is_none_or(|(br, bs)| (r, &set) < (*br, bs)) {
            best = Some((r, set));
        }
    }
    best.map(|(_, s)| s)
}

/// Calls `visit` with every `k`-subset of `free[from..]` added to `set`,
/// in lexicographic order.
fn subsets(free: &[usize], k: usize, from: usize, set: &mut Vec<usize>, visit: &mut impl FnMut(&[usize])) {
    if set.len() == k {
        visit(set);
        return;
    }
    for i in from..free.len() {
        if free.len() - i < k - set.len() {
            break;
        }
        set.push(free[i]);
        subsets(free, k, i + 1, set, visit);
        set.pop();
    }
}

/// Free GPUs that sit in islands none of whose GPUs is taken: what a pod
/// that needs a whole island can still get.
pub fn in_whole_islands(links: &[GpuLink], free: &[usize]) -> u32 {
    islands(links, |members| {
        let (mut size, mut left) = (0, 0);
        for j in members {
            size += 1;
            left += u32::from(free.contains(&j));
        }
        if size == left { left } else { 0 }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(l: &[(u8, u8, u8)]) -> Vec<GpuLink> {
        l.iter().map(|&(island, pcie, numa)| GpuLink { island, pcie, numa }).collect()
    }

    /// A DGX-like node: two NVLink islands of four, a PCIe switch per pair,
    /// a NUMA node per island.
    fn two_islands() -> Vec<GpuLink> {
        links(&[(0, 0, 0), (0, 0, 0), (0, 1, 0), (0, 1, 0), (1, 2, 1), (1, 2, 1), (1, 3, 1), (1, 3, 1)])
    }

    #[test]
    fn distance_is_the_nearest_thing_shared() {
        let g = two_islands();
        assert_eq!(distance(&g[0], &g[3]), Distance::Nvlink);
        assert_eq!(distance(&g[0], &g[4]), Distance::System);
        let pcie_only = links(&[(0, 0, 0), (1, 0, 0), (2, 1, 0), (3, 2, 1)]);
        assert_eq!(distance(&pcie_only[0], &pcie_only[1]), Distance::PcieSwitch);
        assert_eq!(distance(&pcie_only[0], &pcie_only[2]), Distance::Numa);
        assert_eq!(distance(&pcie_only[0], &pcie_only[3]), Distance::System);
    }

    #[test]
    fn a_set_stays_inside_an_island_when_one_has_room() {
        let g = two_islands();
        // GPUs 0 and 1 are taken: four free in island 1, two in island 0.
        assert_eq!(best_set(&g, &[2, 3, 4, 5, 6, 7], 4), Some(vec![4, 5, 6, 7]), "not 2, 3, 4, 5 across sockets");
        assert_eq!(best_set(&g, &[2, 3, 4, 5, 6, 7], 2), Some(vec![2, 3]), "the broken island's pair");
        assert_eq!(best_set(&g, &[3, 4, 6], 2), Some(vec![4, 6]), "same island beats lower indices");
        assert_eq!(best_set(&g, &[3, 4], 3), None);
    }

    #[test]
    fn a_small_pod_takes_from_a_broken_island_and_leaves_a_whole_one_whole() {
        let g = two_islands();
        // Island 0 intact, island 1 broken into (6 and 7 free): a GPU or
        // a pair comes from island 1, though island 0 has lower indices.
        assert_eq!(best_set(&g, &[0, 1, 2, 3, 6, 7], 1), Some(vec![6]), "not GPU 0 of the intact island");
        assert_eq!(best_set(&g, &[0, 1, 2, 3, 6, 7], 2), Some(vec![6, 7]));
        assert_eq!(in_whole_islands(&g, &[0, 1, 2, 3, 6, 7]), 4);
        assert_eq!(in_whole_islands(&g, &[0, 1, 2, 6, 7]), 0);
        // Both intact: the lowest indices.
        assert_eq!(best_set(&g, &[0, 1, 2, 3, 4, 5, 6, 7], 1), Some(vec![0]));
    }

    #[test]
    fn links_read_back_what_was_written_and_name_a_bad_entry() {
        let links = two_islands();
        let text = format(&links);
        assert_eq!(text, "0/0/0,0/0/0,0/1/0,0/1/0,1/2/1,1/2/1,1/3/1,1/3/1");
        assert_eq!(parse(&text, 8), Ok(links));
        assert_eq!(parse("0/0/0", 2), Err("1 entries for 2 GPUs (one `island/pcie/numa` per GPU)".into()));
        assert_eq!(parse("0/0/0, 1/x/0", 2), Err("GPU 1: `1/x/0` is not island/pcie/numa (numbers 0..=255)".into()));
        assert!(parse("0/0/0,0/0/256", 2).is_err());
    }

    #[test]
    fn a_node_that_says_nothing_gets_the_lowest_indices() {
        let flat = vec![GpuLink::default(); 8];
        assert_eq!(best_set(&flat, &[1, 3, 4, 6], 2), Some(vec![1, 3]));
        assert_eq!(best_set(&flat, &[1, 3, 4, 6], 1), Some(vec![1]));
    }

    #[test]
    fn past_the_exact_limit_the_greedy_set_is_still_one_island() {
        // 32 GPUs in islands of 8, two NUMA nodes.
        let l: Vec<(u8, u8, u8)> = (0..32u8).map(|i| (i / 8, i / 4, i / 16)).collect();
        let g = links(&l);
        let free: Vec<usize> = (0..32).filter(|i| i % 8 != 0).collect();
        let set = best_set(&g, &free, 7).unwrap();
        assert!(set.iter().all(|&i| i / 8 == set[0] / 8), "{set:?}");
        assert_eq!(cost(&g, &set), 0);
    }

    #[test]
    fn the_exact_search_is_never_beaten_by_any_subset() {
        // Every subset of every free set of a small mixed topology: none
        // ranks better than what best_set returns.
        let g = links(&[(0, 0, 0), (0, 0, 0), (1, 1, 0), (1, 1, 0), (2, 2, 1), (3, 2, 1)]);
        for mask in 0u32..64 {
            let free: Vec<usize> = (0..6).filter(|i| mask & (1 << i) != 0).collect();
            for k in 1..=free.len() {
                let best = best_set(&g, &free, k).unwrap();
                let rank = |s: &[usize]| (cost(&g, s), u32::MAX - wholeness_after(&g, &free, s));
                let mut all = Vec::new();
                subsets(&free, k, 0, &mut Vec::new(), &mut |s| all.push(s.to_vec()));
                assert!(all.iter().all(|s| rank(&best) <= rank(s)), "free {free:?} k {k}: {best:?}");
                assert!(all.contains(&best));
            }
        }
    }
}
