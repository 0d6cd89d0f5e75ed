//! The LP/MILP backends behind every model the core solves (the MILP of
//! [`crate::milp`], the offline bounds of [`crate::bound`] and of the
//! planning bench), all written once with `good_lp` and handed to one of
//! two solvers:
//!
//! - **microlp**: pure Rust, always built; fine for small instances and
//!   what the tests use by default.
//! - **HiGHS**: the C++ solver (built from source with cmake when the
//!   crate's `highs` feature is on); much faster on the bound's LPs and
//!   the larger MILPs. It runs single-threaded so that results do not
//!   depend on the machine's load.
//!
//! [`LpSolver::Auto`] takes HiGHS when it is built in, microlp otherwise.

use std::time::Duration;

use good_lp::solvers::microlp::MicroLpSolution;
use good_lp::{
    Constraint, Expression, ProblemVariables, ResolutionError, Solution, SolutionStatus, SolverModel, Variable,
    WithInitialSolution, WithTimeLimit, microlp,
};
pub use tessera_policy::rescheduling::LpSolver;

/// A model ready to solve: variables, objective, constraints, and the
/// options every backend understands.
pub(crate) struct Model {
    vars: ProblemVariables,
    objective: Expression,
    maximise: bool,
    constraints: Vec<Constraint>,
    time_limit: Option<Duration>,
    initial: Vec<(Variable, f64)>,
}

impl Model {
    pub(crate) fn maximise(vars: ProblemVariables, objective: Expression) -> Self {
        Self { vars, objective, maximise: true, constraints: Vec::new(), time_limit: None, initial: Vec::new() }
    }

    pub(crate) fn minimise(vars: ProblemVariables, objective: Expression) -> Self {
        Self { maximise: false, ..Self::maximise(vars, objective) }
    }

    pub(crate) fn with(&mut self, c: Constraint) -> &mut Self {
        self.constraints.push(c);
        self
    }

    pub(crate) fn time_limit(mut self, limit: Duration) -> Self {
        self.time_limit = Some(limit);
        self
    }

    /// A starting point for branch-and-bound (a warm start).
    pub(crate) fn initial(mut self, start: Vec<(Variable, f64)>) -> Self {
        self.initial = start;
        self
    }

    /// Solves with `backend` (resolved first).
    pub(crate) fn solve(self, backend: LpSolver) -> Result<Values, ResolutionError> {
        let Model { vars, objective, maximise, constraints, time_limit, initial } = self;
        // HiGHS calls a model without variables an error (`ModelEmpty`);
        // its optimum is the objective's constant, which microlp returns.
        let backend = if vars.is_empty() { LpSolver::Microlp } else { backend.resolved() };
        let problem = if maximise { vars.maximise(objective) } else { vars.minimise(objective) };
        let opts = (time_limit, initial, constraints);
        match backend {
            #[cfg(feature = "highs")]
            LpSolver::Highs => finish(problem.using(good_lp::highs).set_threads(1), opts).map(Values::Highs),
            _ => finish(problem.using(microlp), opts).map(Values::Microlp),
        }
    }
}

/// Gives `m` the time limit, the starting point and the constraints, and
/// solves it.
fn finish<M>(
    mut m: M,
    (time_limit, initial, constraints): (Option<Duration>, Vec<(Variable, f64)>, Vec<Constraint>),
) -> Result<M::Solution, ResolutionError>
where
    M: SolverModel<Error = ResolutionError> + WithTimeLimit + WithInitialSolution,
{
    if let Some(t) = time_limit {
        m = m.with_time_limit(t.as_secs_f64());
    }
    if !initial.is_empty() {
        m = m.with_initial_solution(initial);
    }
    constraints.into_iter().fold(m, |m, c| m.with(c)).solve()
}

/// A solution from either backend.
pub(crate) enum Values {
    Microlp(MicroLpSolution),
    #[cfg(feature = "highs")]
    Highs(good_lp::solvers::highs::HighsSolution),
}

impl Solution for Values {
    fn status(&self) -> SolutionStatus {
        match self {
            Values::Microlp(s) => s.status(),
            #[cfg(feature = "highs")]
            Values::Highs(s) => s.status(),
        }
    }

    fn value(&self, v: Variable) -> f64 {
        match self {
            Values::Microlp(s) => s.value(v),
            #[cfg(feature = "highs")]
            Values::Highs(s) => s.value(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use good_lp::{constraint, variable};

    use super::*;

    /// A small MILP whose LP relaxation is fractional: both backends must
    /// find the integer optimum.
    fn knapsack(backend: LpSolver) -> f64 {
        let mut vars = ProblemVariables::new();
        let x: Vec<Variable> = (0..4).map(|_| vars.add(variable().binary())).collect();
        let (w, v) = ([5.0, 4.0, 6.0, 3.0], [10.0, 40.0, 30.0, 50.0]);
        let value: Expression = x.iter().zip(v).map(|(&x, v)| v * x).sum();
        let weight: Expression = x.iter().zip(w).map(|(&x, w)| w * x).sum();
        let mut m = Model::maximise(vars, value.clone());
        m.with(constraint!(weight <= 10.0));
        let sol = m.solve(backend).expect("solves");
        x.iter().zip(v).map(|(&x, v)| v * sol.value(x).round()).sum()
    }

    #[test]
    fn every_built_backend_finds_the_integer_optimum() {
        assert_eq!(knapsack(LpSolver::Microlp), 90.0);
        assert_eq!(knapsack(LpSolver::Auto), 90.0);
        if LpSolver::HIGHS_BUILT_IN {
            assert_eq!(knapsack(LpSolver::Highs), 90.0);
            assert_eq!(LpSolver::Auto.resolved(), LpSolver::Highs);
        } else {
            assert_eq!(LpSolver::Auto.resolved(), LpSolver::Microlp);
            assert!(LpSolver::Highs.validate().unwrap_err().contains("--features highs"));
        }
    }
}
