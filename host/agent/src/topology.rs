//! A node's GPU interconnect from what NVML reports: for every pair of
//! GPUs their common ancestor (`nvmlDeviceGetTopologyCommonAncestor`, as
//! `nvidia-smi topo -m` prints it), and for every GPU the PCI bus id at the
//! far end of each active NVLink (`nvmlDeviceGetNvLinkRemotePciInfo_v2`).
//! Turned into `tessera_core::topology::GpuLink`s:
//! - GPUs joined by NVLink — directly, or through the same NVSwitch (a far
//!   end that is no GPU) — share an **island**;
//! - GPUs whose common ancestor is at most a PCIe switch tree (`Internal`,
//!   `Single`, `Multiple`: no host bridge crossed) share a **PCIe switch**;
//! - GPUs whose common ancestor is at most a NUMA node share a **NUMA
//!   node**.
//!
//! Groups are numbered in the order of their lowest GPU index, so the same
//! machine gives the same text whatever order NVML lists links in.

use serde::{Deserialize, Serialize};
use tessera_core::topology::GpuLink;

/// The common ancestor of two GPUs (NVML's `nvmlGpuTopologyLevel_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ancestor {
    /// One board (a dual-GPU card).
    Internal,
    /// One PCIe switch.
    Single,
    /// Several PCIe switches, no host bridge.
    Multiple,
    /// One host bridge.
    HostBridge,
    /// One NUMA node.
    Node,
    /// Across NUMA nodes (sockets).
    System,
}

/// What NVML said of a node's interconnect (recorded in fixtures).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyReading {
    /// Each GPU's PCI bus id, by NVML index.
    pub bus_ids: Vec<String>,
    /// `ancestors[i][j]` for `j > i` (the upper triangle, row `i` holding
    /// `n − 1 − i` entries); `None` where NVML could not tell.
    pub ancestors: Vec<Vec<Option<Ancestor>>>,
    /// Per GPU, the far ends' PCI bus ids of its active NVLinks.
    pub nvlink_peers: Vec<Vec<String>>,
}

/// Union-find over `n` items.
struct Groups(Vec<usize>);

impl Groups {
    fn new(n: usize) -> Self {
        Self((0..n).collect())
    }
    fn find(&mut self, i: usize) -> usize {
        let mut r = i;
        while self.0[r] != r {
            r = self.0[r];
        }
        self.0[i] = r;
        r
    }
    fn join(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        // The lower index leads, so numbering follows GPU order.
        let (lo, hi) = (a.min(b), a.max(b));
        self.0[hi] = lo;
    }
    /// Each of the first `gpus` items' group, numbered 0, 1, … in order of
    /// each group's lowest GPU.
    fn numbered(&mut self, gpus: usize) -> Vec<u8> {
        let mut ids: Vec<usize> = Vec::new();
        (0..gpus)
            .map(|i| {
                let r = self.find(i);
                let k = ids.iter().position(|&x| x == r).unwrap_or_else(|| {
                    ids.push(r);
                    ids.len() - 1
                });
                k.min(usize::from(u8::MAX)) as u8
            })
            .collect()
    }
}

/// The links of a node's GPUs, by NVML index; `Err` says what is
/// inconsistent in the reading.
pub fn links(t: &TopologyReading) -> Result<Vec<GpuLink>, String> {
    let n = t.bus_ids.len();
    if t.nvlink_peers.len() != n || t.ancestors.len() != n {
        return Err(format!(
            "{n} GPUs but {} rows of ancestors and {} of NVLink peers",
            t.ancestors.len(),
            t.nvlink_peers.len()
        ));
    }
    if let Some(i) = (0..n).find(|&i| t.ancestors[i].len() != n - 1 - i) {
        return Err(format!("ancestors row {i} has {} entries, not {}", t.ancestors[i].len(), n - 1 - i));
    }
    // Islands: GPUs and NVLink far ends (switches) in one union-find.
    let mut ends: Vec<&str> = t.bus_ids.iter().map(String::as_str).collect();
    let mut islands = Groups::new(n + t.nvlink_peers.iter().map(Vec::len).sum::<usize>());
    for (i, peers) in t.nvlink_peers.iter().enumerate() {
        for p in peers {
            let j = match ends.iter().position(|e| e.eq_ignore_ascii_case(p)) {
                Some(j) => j,
                None => {
                    ends.push(p);
                    ends.len() - 1
                }
            };
            islands.join(i, j);
        }
    }
    let (mut pcie, mut numa) = (Groups::new(n), Groups::new(n));
    for i in 0..n {
        for (k, a) in t.ancestors[i].iter().enumerate() {
            let j = i + 1 + k;
            match a {
                Some(Ancestor::Internal | Ancestor::Single | Ancestor::Multiple) => {
                    pcie.join(i, j);
                    numa.join(i, j);
                }
                Some(Ancestor::HostBridge | Ancestor::Node) => numa.join(i, j),
                Some(Ancestor::System) | None => {}
            }
        }
    }
    let (island, pcie, numa) = (islands.numbered(n), pcie.numbered(n), numa.numbered(n));
    Ok((0..n).map(|i| GpuLink { island: island[i], pcie: pcie[i], numa: numa[i] }).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Ancestor::*;

    /// `ancestors` from a full matrix's upper triangle.
    fn upper(m: &[&[Ancestor]]) -> Vec<Vec<Option<Ancestor>>> {
        (0..m.len()).map(|i| m[i][i + 1..].iter().map(|&a| Some(a)).collect()).collect()
    }

    fn bus(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("00000000:{:02X}:00.0", 0x10 + i)).collect()
    }

    #[test]
    fn an_nvswitch_node_is_one_island_on_two_sockets() {
        // DGX-like: 8 GPUs, each NVLinked to the same four NVSwitches; a
        // PCIe switch per pair, sockets 0-3 and 4-7.
        let level = |i: usize, j: usize| match (i / 2 == j / 2, i / 4 == j / 4) {
            (true, _) => Single,
            (false, true) => Node,
            _ => System,
        };
        let rows: Vec<Vec<Ancestor>> = (0..8).map(|i| (0..8).map(|j| level(i, j)).collect()).collect();
        let m: Vec<&[Ancestor]> = rows.iter().map(Vec::as_slice).collect();
        let switches: Vec<String> = (0..4).map(|s| format!("00000000:{:02X}:00.0", 0xC0 + s)).collect();
        let t = TopologyReading { bus_ids: bus(8), ancestors: upper(&m), nvlink_peers: vec![switches; 8] };
        let l = links(&t).unwrap();
        assert!(l.iter().all(|g| g.island == 0), "{l:?}");
        assert_eq!(l.iter().map(|g| g.pcie).collect::<Vec<_>>(), [0, 0, 1, 1, 2, 2, 3, 3]);
        assert_eq!(l.iter().map(|g| g.numa).collect::<Vec<_>>(), [0, 0, 0, 0, 1, 1, 1, 1]);
    }

    #[test]
    fn nvlink_pairs_without_a_switch_are_islands_of_two() {
        // Four PCIe GPUs with NVLink bridges 0-1 and 2-3, one host bridge.
        let rows = [
            [Single, Single, HostBridge, HostBridge],
            [Single, Single, HostBridge, HostBridge],
            [HostBridge; 4],
            [HostBridge; 4],
        ];
        let m: Vec<&[Ancestor]> = rows.iter().map(|r| r.as_slice()).collect();
        let b = bus(4);
        let peers = vec![vec![b[1].to_lowercase()], vec![b[0].clone()], vec![b[3].clone()], vec![b[2].clone()]];
        let t = TopologyReading { bus_ids: b, ancestors: upper(&m), nvlink_peers: peers };
        let l = links(&t).unwrap();
        assert_eq!(l.iter().map(|g| g.island).collect::<Vec<_>>(), [0, 0, 1, 1], "bus ids compare without case");
        assert_eq!(l.iter().map(|g| g.pcie).collect::<Vec<_>>(), [0, 0, 1, 2]);
        assert!(l.iter().all(|g| g.numa == 0));
        assert_eq!(tessera_core::topology::format(&l), "0/0/0,0/0/0,1/1/0,1/2/0", "what the agent publishes");
    }

    #[test]
    fn an_inconsistent_reading_says_what() {
        let t =
            TopologyReading { bus_ids: bus(2), ancestors: vec![vec![], vec![]], nvlink_peers: vec![vec![], vec![]] };
        assert_eq!(links(&t).unwrap_err(), "ancestors row 0 has 0 entries, not 1");
        let t = TopologyReading { bus_ids: bus(2), ancestors: vec![], nvlink_peers: vec![] };
        assert!(links(&t).unwrap_err().starts_with("2 GPUs but 0 rows"));
    }
}
