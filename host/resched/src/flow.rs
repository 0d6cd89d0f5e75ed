//! Min-cost flow for the large instances, where equivalent things are
//! grouped: a transportation problem between groups (GPUs holding the same
//! multiset of pod shares; target packings of the same content) has a few
//! hundred nodes where the pods themselves number a hundred thousand.
//!
//! Successive shortest paths with Johnson potentials and Dijkstra: each
//! augmentation sends as much as the path allows, so the work grows with
//! the number of groups, not with the counts. Costs must be non-negative
//! (they are move counts here). Integral capacities give an integral
//! optimum, so the flow is an exact solution of the grouped assignment.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug, Clone, Copy)]
struct Arc {
    to: usize,
    cap: u64,
    cost: i64,
}

/// A flow network; arcs are added in pairs (forward, residual).
#[derive(Debug, Clone, Default)]
pub struct Network {
    arcs: Vec<Arc>,
    out: Vec<Vec<usize>>,
}

impl Network {
    /// A network of `nodes` nodes and no arcs.
    pub fn new(nodes: usize) -> Self {
        Self { arcs: Vec::new(), out: vec![Vec::new(); nodes] }
    }

    /// Adds an arc `from → to` of capacity `cap` and cost `cost ≥ 0` per
    /// unit; returns its id for [`Network::flow`].
    pub fn add_arc(&mut self, from: usize, to: usize, cap: u64, cost: i64) -> usize {
        assert!(cost >= 0, "arc costs must be non-negative, not {cost}");
        let id = self.arcs.len();
        self.arcs.push(Arc { to, cap, cost });
        self.arcs.push(Arc { to: from, cap: 0, cost: -cost });
        self.out[from].push(id);
        self.out[to].push(id + 1);
        id
    }

    /// The flow on arc `id` (after [`Network::min_cost_flow`]).
    pub fn flow(&self, id: usize) -> u64 {
        self.arcs[id ^ 1].cap
    }

    /// Sends up to `limit` units from `s` to `t` at least cost; returns
    /// (units sent, total cost). Sends less only when no more can go.
    pub fn min_cost_flow(&mut self, s: usize, t: usize, limit: u64) -> (u64, i64) {
        let n = self.out.len();
        let mut potential = vec![0i64; n];
        let (mut sent, mut cost) = (0u64, 0i64);
        let mut dist = vec![i64::MAX; n];
        let mut via = vec![usize::MAX; n];
        while sent < limit {
            dist.fill(i64::MAX);
            via.fill(usize::MAX);
            dist[s] = 0;
            let mut heap = BinaryHeap::from([Reverse((0i64, s))]);
            while let Some(Reverse((d, u))) = heap.pop() {
                if d > dist[u] {
                    continue;
                }
                for &a in &self.out[u] {
                    let arc = self.arcs[a];
                    if arc.cap == 0 {
                        continue;
                    }
                    // Reduced costs are non-negative under the potentials.
                    let nd = d + arc.cost + potential[u] - potential[arc.to];
                    if nd < dist[arc.to] {
                        dist[arc.to] = nd;
                        via[arc.to] = a;
                        heap.push(Reverse((nd, arc.to)));
                    }
                }
            }
            if dist[t] == i64::MAX {
                break;
            }
            for v in 0..n {
                if dist[v] < i64::MAX {
                    potential[v] += dist[v];
                }
            }
            // The bottleneck of the path, then push it.
            let mut push = limit - sent;
            let mut v = t;
            while v != s {
                let a = via[v];
                push = push.min(self.arcs[a].cap);
                v = self.arcs[a ^ 1].to;
            }
            let mut v = t;
            while v != s {
                let a = via[v];
                self.arcs[a].cap -= push;
                self.arcs[a ^ 1].cap += push;
                cost += self.arcs[a].cost * push as i64;
                v = self.arcs[a ^ 1].to;
            }
            sent += push;
        }
        (sent, cost)
    }
}

/// The transportation problem: `supply[i]` units at sources, `demand[j]`
/// at sinks, `cost(i, j)` per unit (`None`: no route). Returns the routes
/// used `(i, j, units)` and the total cost, moving as many units as the
/// routes allow at least cost among the flows that move that many.
pub fn transport(
    supply: &[u64],
    demand: &[u64],
    cost: impl Fn(usize, usize) -> Option<i64>,
) -> (Vec<(usize, usize, u64)>, i64) {
    let (ns, nd) = (supply.len(), demand.len());
    let (s, t) = (ns + nd, ns + nd + 1);
    let mut net = Network::new(ns + nd + 2);
    for (i, &u) in supply.iter().enumerate() {
        net.add_arc(s, i, u, 0);
    }
    for (j, &u) in demand.iter().enumerate() {
        net.add_arc(ns + j, t, u, 0);
    }
    let mut routes = Vec::new();
    for (i, &u) in supply.iter().enumerate() {
        for (j, &v) in demand.iter().enumerate() {
            if let Some(c) = cost(i, j) {
                routes.push((i, j, net.add_arc(i, ns + j, u.min(v), c)));
            }
        }
    }
    let (_, total) = net.min_cost_flow(s, t, supply.iter().sum());
    let used = routes.into_iter().map(|(i, j, a)| (i, j, net.flow(a))).filter(|r| r.2 > 0).collect();
    (used, total)
}

#[cfg(test)]
mod tests {
    use good_lp::{Expression, ProblemVariables, Solution, constraint, variable};
    use rand::{RngExt as _, SeedableRng as _};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::solver::{LpSolver, Model};

    #[test]
    fn a_cheaper_detour_wins_over_the_direct_arc() {
        // s=0 → 1 → 3=t directly costs 10 per unit; 1 → 2 → 3 costs 3,
        // but 2 → 3 takes only 2 units.
        let mut net = Network::new(4);
        net.add_arc(0, 1, 5, 0);
        let direct = net.add_arc(1, 3, 5, 10);
        let a = net.add_arc(1, 2, 5, 1);
        net.add_arc(2, 3, 2, 2);
        assert_eq!(net.min_cost_flow(0, 3, 5), (5, 2 * 3 + 3 * 10));
        assert_eq!((net.flow(direct), net.flow(a)), (3, 2));
    }

    #[test]
    fn a_flow_is_rerouted_when_a_later_path_needs_its_arc() {
        // The cheapest first path (0→1→2→3) blocks 0→2→3 style routes;
        // the optimum for two units needs the residual arc 2→1.
        let mut net = Network::new(4);
        net.add_arc(0, 1, 1, 0);
        net.add_arc(0, 2, 1, 0);
        net.add_arc(1, 2, 1, 0);
        net.add_arc(1, 3, 1, 5);
        net.add_arc(2, 3, 1, 0);
        assert_eq!(net.min_cost_flow(0, 3, 2), (2, 5));
    }

    /// The same transportation problem as an LP (totally unimodular, so the
    /// simplex optimum is integral and equals the flow's).
    fn lp_optimum(supply: &[u64], demand: &[u64], cost: &[Vec<Option<i64>>]) -> f64 {
        let mut vars = ProblemVariables::new();
        let mut x = Vec::new();
        for (i, row) in cost.iter().enumerate() {
            for (j, c) in row.iter().enumerate() {
                if let Some(c) = c {
                    x.push((i, j, *c, vars.add(variable().min(0.0))));
                }
            }
        }
        let objective: Expression = x.iter().map(|&(_, _, c, v)| c as f64 * v).sum();
        let mut m = Model::minimise(vars, objective.clone());
        for (i, &s) in supply.iter().enumerate() {
            let out: Expression = x.iter().filter(|e| e.0 == i).map(|e| Expression::from(e.3)).sum();
            m.with(constraint!(out == s as f64));
        }
        for (j, &d) in demand.iter().enumerate() {
            let inn: Expression = x.iter().filter(|e| e.1 == j).map(|e| Expression::from(e.3)).sum();
            m.with(constraint!(inn == d as f64));
        }
        m.solve(LpSolver::Auto).expect("balanced and complete: feasible").eval(&objective)
    }

    #[test]
    fn transport_matches_the_lp_optimum_on_random_instances() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for _ in 0..40 {
            let (ns, nd) = (rng.random_range(1..7), rng.random_range(1..7));
            let supply: Vec<u64> = (0..ns).map(|_| rng.random_range(0..20)).collect();
            // Balanced: demand splits the same total.
            let total: u64 = supply.iter().sum();
            let mut demand = vec![0u64; nd];
            for _ in 0..total {
                demand[rng.random_range(0..nd)] += 1;
            }
            let cost: Vec<Vec<Option<i64>>> =
                (0..ns).map(|_| (0..nd).map(|_| Some(rng.random_range(0..9))).collect()).collect();
            let (routes, total_cost) = transport(&supply, &demand, |i, j| cost[i][j]);
            // Every unit moved, within supply and demand, cost as claimed.
            let mut out = vec![0u64; ns];
            let mut inn = vec![0u64; nd];
            let mut c = 0;
            for &(i, j, u) in &routes {
                out[i] += u;
                inn[j] += u;
                c += cost[i][j].unwrap() * u as i64;
            }
            assert_eq!((out, inn), (supply.clone(), demand.clone()));
            assert_eq!(c, total_cost);
            assert_eq!(total_cost as f64, lp_optimum(&supply, &demand, &cost).round());
        }
    }

    #[test]
    fn transport_moves_what_the_routes_allow() {
        // Source 1 has no route: only source 0's units arrive.
        let (routes, cost) = transport(&[3, 4], &[5], |i, _| (i == 0).then_some(2));
        assert_eq!((routes, cost), (vec![(0, 0, 3)], 6));
    }
}
