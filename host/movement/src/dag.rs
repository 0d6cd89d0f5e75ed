//! Plan → ordered steps with dependencies.
//!
//! The moves are replayed on a copy of the cluster, round after round: in
//! each round every pending move whose pod fits on its target *now* (the
//! host's hard filter and GPU choice) is applied and becomes a step. A step
//! into node X depends on every earlier step that moved a pod out of X
//! (the room it may need) and on the earlier hop of the same pod. Moves
//! that fit from the start depend on nothing and can run in parallel.
//!
//! When a round applies nothing, the pending moves wait on each other (a
//! cycle: A→X needs B out of X, B→Y needs A out of Y). The first of them
//! hops through a node Z with room: `from → Z` now, `Z → to` once its target
//! has room. With no such Z the move is dropped with its reason: a cycle is
//! never broken by overcommitting a node.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use tessera_core::cluster::{Cluster, Placement, choose_gpus};
use tessera_core::model::NodeId;

use crate::{MovePlan, PodMove};

/// One step: a pod from one node to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// Index of the plan's move this step belongs to.
    pub move_index: usize,
    /// The move (for a hop, `from`/`to` are the hop's ends).
    pub mv: PodMove,
    /// Steps that must be done first (indices into [`Dag::steps`]).
    pub deps: Vec<usize>,
    /// This is one hop of a move routed through a node with room.
    pub hop: bool,
}

/// A move left out of the plan, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// Index of the move in the plan.
    pub move_index: usize,
    /// Why.
    pub reason: String,
}

/// The ordered plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dag {
    /// Steps in a valid execution order.
    pub steps: Vec<Step>,
    /// Moves left out.
    pub dropped: Vec<Dropped>,
}

impl Dag {
    /// The steps with every node id passed through `f`.
    pub fn renumbered(mut self, f: impl Fn(NodeId) -> NodeId) -> Self {
        for s in &mut self.steps {
            s.mv.renumber(&f);
        }
        self
    }

    /// For each of a plan's `moves` moves, the moves it waits for, by
    /// index, ascending: its steps' dependencies, by the moves they belong
    /// to (a dropped move waits for none).
    pub fn waits_for(&self, moves: usize) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); moves];
        for s in &self.steps {
            for &d in &s.deps {
                let m = self.steps[d].move_index;
                if m != s.move_index && s.move_index < moves && !out[s.move_index].contains(&m) {
                    out[s.move_index].push(m);
                }
            }
        }
        for v in &mut out {
            v.sort_unstable();
        }
        out
    }
}

/// Orders `plan` on `cluster` (where every moved pod runs at its `from`).
pub fn build(cluster: &Cluster, plan: &MovePlan) -> Dag {
    let mut state = cluster.clone();
    let mut dag = Dag::default();
    // Pending: (move index, the move as it stands: `from` is where the pod
    // is now, which a hop changes).
    let mut pending: VecDeque<(usize, PodMove, bool)> = VecDeque::new();
    for (i, m) in plan.moves.iter().enumerate() {
        let valid = state.node(m.from.node).is_some() && state.node(m.to).is_some() && m.from.node != m.to;
        if valid {
            pending.push_back((i, m.clone(), false));
        } else {
            dag.dropped.push(Dropped { move_index: i, reason: "source and target must be two existing nodes".into() });
        }
    }
    let mut vacated: BTreeMap<NodeId, Vec<usize>> = BTreeMap::new();
    let mut last_step_of: BTreeMap<usize, usize> = BTreeMap::new();

    let apply = |state: &mut Cluster,
                 dag: &mut Dag,
                 vacated: &mut BTreeMap<NodeId, Vec<usize>>,
                 last_step_of: &mut BTreeMap<usize, usize>,
                 i: usize,
                 m: &PodMove,
                 to: NodeId,
                 hop: bool|
     -> Option<Placement> {
        // The planner's GPU on its target; a hop takes the best fit.
        let hint = if to == m.to { m.gpu_hint } else { None };
        let gpus = choose_gpus(state.node(to)?, &m.spec, hint)?;
        tessera_core::cluster::check(state.node(to)?, &m.spec).ok()?;
        state.unbind(&m.from, &m.spec);
        let placed = state.bind(to, &m.spec, gpus).ok()?;
        let mut deps: Vec<usize> = vacated.get(&to).cloned().unwrap_or_default();
        deps.extend(last_step_of.get(&i));
        deps.sort_unstable();
        deps.dedup();
        let step = dag.steps.len();
        dag.steps.push(Step { move_index: i, mv: PodMove { to, ..m.clone() }, deps, hop });
        vacated.entry(m.from.node).or_default().push(step);
        last_step_of.insert(i, step);
        Some(placed)
    };

    while !pending.is_empty() {
        let mut progressed = false;
        for _ in 0..pending.len() {
            let (i, m, hopped) = pending.pop_front().expect("counted");
            if apply(&mut state, &mut dag, &mut vacated, &mut last_step_of, i, &m, m.to, hopped).is_some() {
                progressed = true;
            } else {
                pending.push_back((i, m, hopped));
            }
        }
        if progressed {
            continue;
        }
        // Everything pending waits on something pending: hop the first
        // through a node with room (not one a pending move targets, which
        // the hop would fill).
        let (i, m, hopped) = pending.pop_front().expect("not empty");
        let targets: Vec<NodeId> = pending.iter().map(|(_, p, _)| p.to).chain([m.to]).collect();
        let via = (!hopped)
            .then(|| {
                state.nodes().iter().map(|n| n.id).find(|&z| {
                    z != m.from.node
                        && !targets.contains(&z)
                        && state.node(z).is_some_and(|n| tessera_core::cluster::check(n, &m.spec).is_ok())
                })
            })
            .flatten();
        match via.and_then(|z| apply(&mut state, &mut dag, &mut vacated, &mut last_step_of, i, &m, z, true)) {
            Some(placed) => pending.push_front((i, PodMove { from: placed, ..m }, true)),
            None => dag.dropped.push(Dropped {
                move_index: i,
                reason: format!(
                    "node {} has no room until moves that wait on this one run, and no node has room for a hop: \
                     not overcommitting",
                    m.to
                ),
            }),
        }
    }
    dag
}

#[cfg(test)]
mod tests;
