//! The offline bound: an upper limit on how much GPU share *any* placement
//! of a set of pods could allocate on a cluster, against which placement
//! and rescheduling results are judged.
//!
//! A fluid LP relaxation over node *types* (model, CPU, memory, GPU count)
//! and pod *shapes* (requests, GPUs, allowed models): `y[s][t]` pods of
//! shape `s` on nodes of type `t`, at most the number of pods of that shape,
//! with each type's total CPU, memory and GPU share (and whole GPUs, for
//! whole-GPU pods) within the capacity of all its nodes; a shape may only use
//! a type one of its pods fits on when the node is empty. Every real
//! placement is a solution of this LP, so its optimum bounds every policy
//! with or without migrations; it ignores how pods split across the nodes
//! of a type and across GPUs, so it may be above what is reachable.

use std::collections::BTreeMap;

use good_lp::{Expression, ProblemVariables, Solution, SolverModel, constraint, microlp, variable};
use tessera_core::model::{GPU_MILLI, Node, Pod};

/// The bound could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum BoundError {
    /// The solver failed.
    #[error("LP solver: {0}")]
    Solver(#[from] good_lp::ResolutionError),
}

/// An upper bound on GPU allocation.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    /// GPU share that could at most be allocated, in thousandths of a GPU.
    pub gpu_milli: f64,
    /// The same as a percentage of the cluster's GPUs.
    pub allocation_pct: f64,
    /// Node types and pod shapes the LP had.
    pub node_types: usize,
    /// Pod shapes.
    pub pod_shapes: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct NodeType {
    model: String,
    cpu: u64,
    memory: u64,
    gpus: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Shape {
    cpu: u64,
    memory: u64,
    gpu_count: u32,
    gpu_milli: u32,
    models: Vec<String>,
}

impl Shape {
    fn gpu(&self) -> f64 {
        f64::from(self.gpu_count) * f64::from(self.gpu_milli.min(GPU_MILLI))
    }

    fn fits_empty(&self, t: &NodeType) -> bool {
        self.cpu <= t.cpu
            && self.memory <= t.memory
            && (self.gpu_count == 0
                || ((self.models.is_empty() || self.models.contains(&t.model)) && self.gpu_count as usize <= t.gpus))
    }
}

/// The LP bound on GPU share allocated when `pods` are placed on `nodes`.
pub fn gpu_allocation_bound(nodes: &[Node], pods: &[Pod]) -> Result<Bound, BoundError> {
    let mut types: BTreeMap<NodeType, u64> = BTreeMap::new();
    for n in nodes.iter().filter(|n| n.ready) {
        let t = NodeType {
            model: n.gpu_model.clone(),
            cpu: n.capacity.cpu_milli,
            memory: n.capacity.memory_mib,
            gpus: n.gpus.len(),
        };
        *types.entry(t).or_insert(0) += 1;
    }
    let mut shapes: BTreeMap<Shape, u64> = BTreeMap::new();
    for p in pods {
        let mut models = p.allowed_models.clone();
        models.sort();
        let s = Shape {
            cpu: p.requests.cpu_milli,
            memory: p.requests.memory_mib,
            gpu_count: p.gpu_count,
            gpu_milli: p.gpu_milli,
            models,
        };
        *shapes.entry(s).or_insert(0) += 1;
    }
    let total_gpu_milli: f64 = nodes.iter().map(|n| n.gpus.len() as f64 * f64::from(GPU_MILLI)).sum();

    let mut vars = ProblemVariables::new();
    // y[(s, t)] for every shape that fits an empty node of the type.
    let mut y: Vec<(usize, usize, good_lp::Variable)> = Vec::new();
    let shape_list: Vec<(&Shape, u64)> = shapes.iter().map(|(s, &c)| (s, c)).collect();
    let type_list: Vec<(&NodeType, u64)> = types.iter().map(|(t, &c)| (t, c)).collect();
    for (si, (s, count)) in shape_list.iter().enumerate() {
        for (ti, (t, _)) in type_list.iter().enumerate() {
            if s.fits_empty(t) {
                y.push((si, ti, vars.add(variable().min(0.0).max(*count as f64))));
            }
        }
    }
    let objective: Expression = y.iter().map(|&(si, _, v)| shape_list[si].0.gpu() * v).sum();
    let mut model = vars.maximise(objective.clone()).using(microlp);
    for (si, (_, count)) in shape_list.iter().enumerate() {
        let placed: Expression = y.iter().filter(|e| e.0 == si).map(|e| Expression::from(e.2)).sum();
        model = model.with(constraint!(placed <= *count as f64));
    }
    for (ti, (t, count)) in type_list.iter().enumerate() {
        let on = || y.iter().filter(move |e| e.1 == ti);
        let c = *count as f64;
        let cpu: Expression = on().map(|&(si, _, v)| shape_list[si].0.cpu as f64 * v).sum();
        let mem: Expression = on().map(|&(si, _, v)| shape_list[si].0.memory as f64 * v).sum();
        let gpu: Expression = on().map(|&(si, _, v)| shape_list[si].0.gpu() * v).sum();
        let whole: Expression = on()
            .filter(|&&(si, _, _)| shape_list[si].0.gpu_milli >= GPU_MILLI)
            .map(|&(si, _, v)| f64::from(shape_list[si].0.gpu_count) * v)
            .sum();
        model = model
            .with(constraint!(cpu <= c * t.cpu as f64))
            .with(constraint!(mem <= c * t.memory as f64))
            .with(constraint!(gpu <= c * t.gpus as f64 * f64::from(GPU_MILLI)))
            .with(constraint!(whole <= c * t.gpus as f64));
    }
    let solution = model.solve()?;
    let gpu_milli = solution.eval(&objective);
    Ok(Bound {
        gpu_milli,
        allocation_pct: if total_gpu_milli > 0.0 { 100.0 * gpu_milli / total_gpu_milli } else { 0.0 },
        node_types: type_list.len(),
        pod_shapes: shape_list.len(),
    })
}

#[cfg(test)]
mod tests {
    use tessera_core::model::Resources;

    use super::*;

    fn node(cpu: u64, gpus: usize, model: &str) -> Node {
        Node::new(0, "n", Resources { cpu_milli: cpu, memory_mib: 1 << 20 }, gpus, model)
    }

    fn pod(cpu: u64, gpus: u32, milli: u32) -> Pod {
        Pod {
            requests: Resources { cpu_milli: cpu, memory_mib: 1024 },
            gpu_count: gpus,
            gpu_milli: milli,
            ..Pod::default()
        }
    }

    #[test]
    fn gpu_bound_when_gpus_run_out() {
        // 2 nodes × 4 GPUs; 10 one-GPU pods: at most 8 GPUs' worth.
        let b = gpu_allocation_bound(&[node(64_000, 4, "A"), node(64_000, 4, "A")], &vec![pod(1_000, 1, 1000); 10])
            .unwrap();
        assert!((b.gpu_milli - 8_000.0).abs() < 1e-6, "{b:?}");
        assert!((b.allocation_pct - 100.0).abs() < 1e-6);
    }

    #[test]
    fn cpu_bound_when_cpu_runs_out() {
        // 4 GPUs but 10 cores; pods want 4 cores and one GPU: 2.5 pods' CPU.
        let b = gpu_allocation_bound(&[node(10_000, 4, "A")], &vec![pod(4_000, 1, 1000); 4]).unwrap();
        assert!((b.gpu_milli - 2_500.0).abs() < 1e-6, "{b:?}");
    }

    #[test]
    fn model_constraints_are_kept() {
        let mut want_b = pod(1_000, 1, 1000);
        want_b.allowed_models = vec!["B".into()];
        let b = gpu_allocation_bound(&[node(64_000, 4, "A")], &vec![want_b; 3]).unwrap();
        assert_eq!(b.gpu_milli, 0.0, "no B node: nothing can be placed");
        let b = gpu_allocation_bound(&[node(64_000, 4, "A"), node(64_000, 1, "B")], &[pod(1_000, 1, 1000)]).unwrap();
        assert!((b.gpu_milli - 1_000.0).abs() < 1e-6);
    }

    /// No placement beats the bound: first-fit placements of random pods on
    /// random clusters never allocate more GPU share than it.
    #[test]
    fn the_bound_bounds_real_placements() {
        use tessera_core::cluster::{Cluster, choose_gpus};
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..30 {
            let nodes: Vec<Node> = (0..1 + next(6))
                .map(|_| node(8_000 * (1 + next(8)), 1 + next(8) as usize, ["A", "B"][next(2) as usize]))
                .collect();
            let pods: Vec<Pod> = (0..next(40))
                .map(|_| {
                    let whole = next(2) == 0;
                    let mut p = pod(
                        1_000 * (1 + next(16)),
                        if whole { 1 + next(3) as u32 } else { 1 },
                        if whole { 1000 } else { 100 * (1 + next(9) as u32) },
                    );
                    if next(4) == 0 {
                        p.allowed_models = vec!["B".into()];
                    }
                    p
                })
                .collect();
            let mut c = Cluster::new(nodes.clone());
            let mut placed = 0.0;
            let (mut cand, mut rej) = (Vec::new(), [0; 5]);
            for p in &pods {
                c.feasible(p, &mut cand, &mut rej);
                if let Some(&n) = cand.first() {
                    let gpus = choose_gpus(c.node(n).unwrap(), p, None).unwrap();
                    c.bind(n, p, gpus).unwrap();
                    placed += f64::from(p.gpu_count) * f64::from(p.gpu_milli);
                }
            }
            let b = gpu_allocation_bound(&nodes, &pods).unwrap();
            assert!(placed <= b.gpu_milli + 1e-6, "placed {placed} > bound {}", b.gpu_milli);
        }
    }
}
