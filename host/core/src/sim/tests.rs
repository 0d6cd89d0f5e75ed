use super::*;
use crate::framework::Choice;
use crate::model::Resources;

/// Picks the candidate with the least free GPU share (ties: lowest id).
struct Tightest<'a> {
    nodes: Vec<Node>,
    seen: &'a mut Vec<NodeId>,
    answer_garbage: bool,
}

impl Placer for Tightest<'_> {
    fn nodes_changed(&mut self, nodes: &[&Node]) {
        for n in nodes {
            self.seen.push(n.id);
            if n.id as usize >= self.nodes.len() {
                self.nodes.resize(n.id as usize + 1, Node::default());
            }
            self.nodes[n.id as usize] = (*n).clone();
        }
    }

    fn place(&mut self, _pod: &Pod, candidates: &[NodeId]) -> Choice {
        if self.answer_garbage {
            return Choice {
                node: Some(999),
                gpu_hint: Some(200),
                plugin_errors: 1,
                deadline_hit: false,
                filtered: None,
            };
        }
        let node =
            candidates.iter().copied().min_by_key(|&c| (crate::metrics::free_gpu_milli(&self.nodes[c as usize]), c));
        Choice { node, gpu_hint: None, plugin_errors: 0, deadline_hit: false, filtered: None }
    }
}

fn node(gpus: usize) -> Node {
    Node::new(0, "n", Resources { cpu_milli: 32_000, memory_mib: 65_536 }, gpus, "V100")
}

fn pod(name: &str, gpus: u32, milli: u32) -> Pod {
    Pod {
        name: name.into(),
        requests: Resources { cpu_milli: 1000, memory_mib: 1024 },
        gpu_count: gpus,
        gpu_milli: milli,
        ..Pod::default()
    }
}

fn workload() -> TargetWorkload {
    TargetWorkload::from_pods(&[pod("a", 1, 1000), pod("b", 1, 500)], 1.0)
}

#[test]
fn submissions_protocol_by_hand() {
    let mut seen = Vec::new();
    let mut placer = Tightest { nodes: Vec::new(), seen: &mut seen, answer_garbage: false };
    let sim = Simulator::new(vec![node(2), node(2)], workload(), &mut placer);
    let pods = [pod("w1", 1, 1000), pod("s1", 1, 500), pod("s2", 1, 600), pod("w2", 2, 1000), pod("c", 0, 0)];
    let r = sim.run_submissions(&pods);
    // w1 -> node 0 (tie, lowest id), GPU 0. s1 -> node 0 (tighter), GPU 1.
    // s2 -> node 1 (node 0 has only 500 free). w2 needs 2 whole GPUs: none.
    assert_eq!((r.submitted, r.placed, r.failed), (5, 4, 1));
    assert_eq!(r.failures_by_reason.get("SCHED-GPU-INSUFFICIENT"), Some(&1));
    assert_eq!(r.total_gpus, 4);
    // Arrived demand after each submission: 25%, 37.5%, 52.5%, 102.5%,
    // 102.5%, in buckets rounded half to even (25, 38, 52, 102, 102); a
    // bucket with no reading takes its neighbours' (24, 26, 37, 39, ...).
    let pcts: Vec<u32> = r.buckets.iter().map(|b| b.arrived_pct).collect();
    assert_eq!(pcts, [24, 25, 26, 37, 38, 39, 51, 52, 53, 101, 102]);
    let at = |p| r.allocation_at(p).unwrap();
    assert_eq!(at(25), 25.0);
    assert_eq!(at(24), 25.0);
    assert_eq!(at(38), 37.5);
    assert_eq!(at(52), 52.5);
    assert_eq!(at(53), 52.5);
    let b102 = r.buckets.iter().find(|b| b.arrived_pct == 102).unwrap();
    assert_eq!((b102.samples, b102.allocation), (2, 52.5), "two submissions landed in the 102% bucket");
    // Fragmentation at the end: node 0 has GPU 1 with 500 free: a fragment
    // for whole-GPU pods (p = 0.5) and not for 500-milli pods; node 1 has
    // GPU 0 with 400 free (fragment for both) and GPU 1 whole.
    // F = 0.5*500 + (0.5*400 + 0.5*400) = 650 of 4000 milli; free 1900.
    assert!((r.last.fragmentation - 100.0 * 650.0 / 4000.0).abs() < 1e-9, "{:?}", r.last);
    assert!((r.last.fragmentation_rate - 100.0 * 650.0 / 1900.0).abs() < 1e-9);
    assert_eq!(seen[..2], [0, 1], "the placer first sees every node");
}

#[test]
fn a_placer_cannot_break_the_hard_filter() {
    let mut seen = Vec::new();
    let mut placer = Tightest { nodes: Vec::new(), seen: &mut seen, answer_garbage: true };
    let sim = Simulator::new(vec![node(1), node(1)], workload(), &mut placer);
    let r = sim.run_submissions(&[pod("a", 1, 300), pod("b", 1, 300)]);
    assert_eq!((r.placed, r.failed, r.plugin_errors), (2, 0, 2));
}

#[test]
fn time_replay_waits_and_retries_after_departures() {
    let mut seen = Vec::new();
    let mut placer = Tightest { nodes: Vec::new(), seen: &mut seen, answer_garbage: false };
    let sim = Simulator::new(vec![node(2)], workload(), &mut placer);
    let arr = |p: Pod, at, leaves_at| Arrival { pod: p, at, leaves_at };
    let r = sim.run_time_replay(&[
        arr(pod("big", 2, 1000), 0, Some(10)),
        arr(pod("waits", 1, 1000), 1, Some(20)),
        arr(pod("gives-up", 2, 1000), 2, Some(5)),
        arr(pod("never-fits", 3, 1000), 3, None),
    ]);
    assert_eq!((r.submitted, r.placed, r.departed, r.pending), (4, 2, 2, 1));
}

#[test]
fn runs_are_deterministic() {
    let run = || {
        let mut seen = Vec::new();
        let mut placer = Tightest { nodes: Vec::new(), seen: &mut seen, answer_garbage: false };
        let sim = Simulator::new(vec![node(8), node(4), node(2)], workload(), &mut placer);
        let pods: Vec<Pod> = (0..40)
            .map(|i| pod(&format!("p{i}"), 1 + (i % 3 == 0) as u32, if i % 3 == 0 { 1000 } else { 100 + 50 * (i % 7) }))
            .collect();
        serde_json::to_string(&sim.run_submissions(&pods)).unwrap()
    };
    assert_eq!(run(), run());
}
