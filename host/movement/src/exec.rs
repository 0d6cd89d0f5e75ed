//! The executor: runs a [`Dag`]'s steps in gray-release batches through an
//! [`Actuator`], journaling every intent before it acts.
//!
//! One step goes `Pending → Reserving → Reserved → Evicting → Evicted →
//! Starting → Started → Done`: room on the target is reserved (placement
//! cannot take it) before the pod is evicted from its source, and the pod
//! counts as unavailable from eviction until it is ready on the target.
//! After every batch the health gates are read; a failing gate stops the
//! plan and moves the batch's pods back.

use std::collections::BTreeMap;

use tessera_core::model::NodeId;
use tessera_core::sched::PodId;

use crate::config::MovementConfig;
use crate::dag::Dag;
use crate::journal::{Entry, Journal, JournalError};
use crate::{MovePlan, PodMove};

mod dry;

pub use crate::step::{ActError, Actuator, Dropped, Health, Location, MovementReport, StepState};
pub use dry::dry_run;

/// An executor error: the journal failed (the executor must stop and be
/// resumed from the journal).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// Writing the journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// Runs one plan.
pub struct Executor {
    cfg: MovementConfig,
    plan_id: u64,
    dag: Dag,
    states: Vec<StepState>,
    batch: Vec<usize>,
    batch_no: u32,
    pause_until: u64,
    report: MovementReport,
    /// When pods moved in earlier plans (cooldowns).
    history: BTreeMap<PodId, u64>,
    /// When pods moved in this plan.
    moved_at: BTreeMap<PodId, u64>,
    finished: bool,
}

impl Executor {
    /// Starts `plan` (already ordered into `dag`), journaling both.
    pub fn start(cfg: MovementConfig, plan: &MovePlan, dag: Dag, journal: &mut dyn Journal) -> Result<Self, ExecError> {
        journal.append(&Entry::Plan { plan: plan.clone(), dag: dag.clone() })?;
        let mut ex = Self::fresh(cfg, plan.id, dag);
        for d in ex.dag.dropped.clone() {
            ex.report.dropped.push(Dropped::Unordered { move_index: d.move_index, reason: d.reason });
        }
        Ok(ex)
    }

    fn fresh(cfg: MovementConfig, plan_id: u64, dag: Dag) -> Self {
        let n = dag.steps.len();
        Self {
            cfg,
            plan_id,
            dag,
            states: vec![StepState::Pending; n],
            batch: Vec::new(),
            batch_no: 0,
            pause_until: 0,
            report: MovementReport::default(),
            history: BTreeMap::new(),
            moved_at: BTreeMap::new(),
            finished: false,
        }
    }

    /// Rebuilds the executor of the journal's last plan after a crash, and
    /// reconciles steps caught between intent and outcome with what the
    /// actuator shows. `None` if the journal holds no plan.
    pub fn resume(
        cfg: MovementConfig,
        journal: &mut dyn Journal,
        act: &dyn Actuator,
        now: u64,
    ) -> Result<Option<Self>, ExecError> {
        let entries = journal.read_all()?;
        let Some(start) = entries.iter().rposition(|e| matches!(e, Entry::Plan { .. })) else { return Ok(None) };
        let Entry::Plan { plan, dag } = entries[start].clone() else { unreachable!("found above") };
        let mut ex = Self::fresh(cfg, plan.id, dag);
        for e in &entries[start + 1..] {
            match e {
                Entry::Step { step, state, .. } => ex.states[*step] = state.clone(),
                Entry::Batch { number, steps } => {
                    ex.batch_no = *number;
                    ex.batch = steps.clone();
                }
                Entry::BatchDone { pause_until, report } => {
                    ex.batch.clear();
                    ex.pause_until = *pause_until;
                    ex.report = report.clone();
                }
                Entry::Finished { report } => {
                    ex.report = report.clone();
                    ex.finished = true;
                }
                Entry::Plan { .. } => unreachable!("the last plan"),
                // The caller's notes (node names, replacements).
                Entry::Nodes { .. } | Entry::Replaced { .. } => {}
            }
        }
        // Steps between intent and outcome: ask the cluster.
        for i in 0..ex.states.len() {
            let mv = &ex.dag.steps[i].mv;
            let fixed = match &ex.states[i] {
                StepState::Reserving => Some(if act.reservation(mv.pod) == Some(mv.to) {
                    StepState::Reserved { at: now }
                } else {
                    StepState::Pending
                }),
                StepState::Evicting => Some(match act.locate(mv.pod, now) {
                    Location::Running { node, .. } if node == mv.from.node => StepState::Reserved { at: now },
                    _ => StepState::Evicted,
                }),
                StepState::Starting => Some(match act.locate(mv.pod, now) {
                    Location::Running { node, .. } if node == mv.to => StepState::Started { at: now },
                    _ => StepState::Evicted,
                }),
                _ => None,
            };
            if let Some(s) = fixed {
                ex.set(journal, i, s, now)?;
            }
        }
        // Counters from the steps' states (the snapshot in the last
        // BatchDone may be older); batches and peaks from the snapshot.
        let r = &mut ex.report;
        r.executed = ex.states.iter().filter(|s| **s == StepState::Done).count() as u32;
        r.failed = ex.states.iter().filter(|s| matches!(s, StepState::Failed { .. })).count() as u32;
        r.rolled_back = ex.states.iter().filter(|s| matches!(s, StepState::RolledBack { .. })).count() as u32;
        r.dropped = ex
            .dag
            .dropped
            .iter()
            .map(|d| Dropped::Unordered { move_index: d.move_index, reason: d.reason.clone() })
            .collect();
        r.dropped.extend(ex.states.iter().enumerate().filter_map(|(i, s)| match s {
            StepState::Dropped { reason } => Some(Dropped::Step { step: i, reason: reason.clone() }),
            _ => None,
        }));
        for (i, s) in ex.states.iter().enumerate() {
            if *s == StepState::Done {
                ex.moved_at.insert(ex.dag.steps[i].mv.pod, now);
            }
        }
        Ok(Some(ex))
    }

    /// When pods moved in earlier plans: a pod moved less than
    /// `cooldown_period_s` ago is left alone.
    pub fn with_history(mut self, moved_at: BTreeMap<PodId, u64>) -> Self {
        self.history = moved_at;
        self
    }

    /// When pods moved in this plan (the next plan's history).
    pub fn moved(&self) -> &BTreeMap<PodId, u64> {
        &self.moved_at
    }

    /// The ordered steps.
    pub fn dag(&self) -> &Dag {
        &self.dag
    }

    /// The plan's id.
    pub fn plan_id(&self) -> u64 {
        self.plan_id
    }

    /// Whether the plan is over: finished and no pod waits to be put back.
    pub fn finished(&self) -> bool {
        self.finished && !self.restoring()
    }

    fn restoring(&self) -> bool {
        self.states.iter().any(|s| matches!(s, StepState::Restoring { .. }))
    }

    /// Puts the pod of step `i` back on its source: done if it already runs
    /// there, else reserve and start there; on failure it stays
    /// `Restoring` for the next tick.
    fn restore(
        &mut self,
        act: &mut dyn Actuator,
        journal: &mut dyn Journal,
        i: usize,
        now: u64,
    ) -> Result<(), ExecError> {
        let StepState::Restoring { reason, rollback } = self.states[i].clone() else { return Ok(()) };
        let mv = self.dag.steps[i].mv.clone();
        let home = match act.locate(mv.pod, now) {
            Location::Running { node, .. } if node == mv.from.node => true,
            Location::Running { node, .. } => {
                // Someone started it elsewhere: not lost, not ours to move.
                let reason = format!("{reason}; runs on node {node}");
                self.report.failed += 1;
                return self.set(journal, i, StepState::Failed { reason }, now);
            }
            Location::Nowhere => {
                act.unreserve(mv.pod);
                act.reserve(mv.pod, &mv.spec, mv.from.node, mv.home_hint(), now)
                    .and_then(|()| act.start(mv.pod, now))
                    .is_ok()
            }
        };
        if !home {
            return Ok(());
        }
        let state = if rollback {
            self.report.rolled_back += 1;
            StepState::RolledBack { reason }
        } else {
            self.report.failed += 1;
            StepState::Failed { reason: format!("{reason}; put back on node {}", mv.from.node) }
        };
        self.set(journal, i, state, now)
    }

    /// The report so far.
    pub fn report(&self) -> &MovementReport {
        &self.report
    }

    /// Each step's state.
    pub fn states(&self) -> &[StepState] {
        &self.states
    }

    fn set(&mut self, journal: &mut dyn Journal, step: usize, state: StepState, now: u64) -> Result<(), ExecError> {
        journal.append(&Entry::Step { step, state: state.clone(), at: now })?;
        self.states[step] = state;
        Ok(())
    }

    fn unavailable(&self, workload: &str) -> u32 {
        self.states
            .iter()
            .zip(&self.dag.steps)
            .filter(|(s, st)| s.unavailable() && st.mv.spec.workload == workload)
            .count() as u32
    }

    /// Whether a disruption budget lets one more pod of `workload` go
    /// unavailable now: `Ok(false)` to wait, `Err` if it never will.
    fn budget_allows(&self, workload: &str, act: &dyn Actuator) -> Result<bool, String> {
        let Some(b) = self.cfg.budgets.iter().find(|b| b.workload == workload) else { return Ok(true) };
        let cap = b.allowed_unavailable(act.workload_size(workload));
        if cap == 0 {
            return Err(format!("disruption budget of `{workload}` allows no pod to be unavailable"));
        }
        Ok(self.unavailable(workload) < cap)
    }

    /// Caps per cycle, counted over steps already begun in this plan.
    fn within_caps(&self, step: usize) -> bool {
        let m = &self.dag.steps[step].mv;
        let begun: Vec<&PodMove> = self
            .states
            .iter()
            .zip(&self.dag.steps)
            .filter(|(s, _)| !matches!(s, StepState::Pending | StepState::Dropped { .. }))
            .map(|(_, st)| &st.mv)
            .collect();
        let caps = &self.cfg.caps;
        let node = begun.iter().filter(|b| [b.from.node, b.to].iter().any(|n| *n == m.from.node || *n == m.to)).count();
        let ns = begun.iter().filter(|b| b.spec.namespace == m.spec.namespace).count();
        let wl = !m.spec.workload.is_empty()
            && begun.iter().filter(|b| b.spec.workload == m.spec.workload).count() >= caps.per_workload as usize;
        node < caps.per_node as usize && ns < caps.per_namespace as usize && !wl
    }

    /// Advances the plan at time `now`.
    pub fn tick(&mut self, act: &mut dyn Actuator, journal: &mut dyn Journal, now: u64) -> Result<(), ExecError> {
        if self.finished {
            // A stopped plan may still have pods to put back.
            for i in 0..self.states.len() {
                self.restore(act, journal, i, now)?;
            }
            self.track_peaks();
            return Ok(());
        }
        if self.batch.is_empty() {
            // The pause lets the cluster settle before the next batch; with
            // no step left to start, the plan ends now.
            if now < self.pause_until && self.states.contains(&StepState::Pending) {
                return Ok(());
            }
            self.next_batch(act, journal, now)?;
            if self.batch.is_empty() {
                return self.finish(journal, None);
            }
        }
        self.advance(act, journal, now)?;
        self.track_peaks();
        let gate = self.batch_gate(act, now);
        let over = self.batch.iter().all(|&i| self.states[i].is_terminal());
        if let Some(reason) = gate {
            self.rollback_batch(act, journal, now, &reason)?;
            return self.finish(journal, Some(reason));
        }
        if over {
            self.report.batches += 1;
            self.batch.clear();
            self.pause_until = now + self.cfg.pause_duration_s;
            journal.append(&Entry::BatchDone { pause_until: self.pause_until, report: self.report.clone() })?;
        }
        Ok(())
    }

    fn next_batch(&mut self, act: &dyn Actuator, journal: &mut dyn Journal, now: u64) -> Result<(), ExecError> {
        let len = self.cfg.batch_len(self.dag.steps.len());
        let mut batch = Vec::new();
        for i in 0..self.states.len() {
            if self.states[i] != StepState::Pending {
                continue;
            }
            let step = &self.dag.steps[i];
            if let Some(&d) =
                step.deps.iter().find(|&&d| self.states[d].is_terminal() && self.states[d] != StepState::Done)
            {
                let reason = format!("depends on step {d}, which did not complete");
                self.drop_step(journal, i, reason, now)?;
                continue;
            }
            if !step.deps.iter().all(|&d| self.states[d] == StepState::Done) {
                continue;
            }
            if let Some(&t) = self.history.get(&step.mv.pod)
                && now < t + self.cfg.cooldown_period_s
            {
                self.drop_step(journal, i, format!("pod moved {} s ago (cooldown)", now - t), now)?;
                continue;
            }
            if !step.hop && self.emptied_by_plan(step.mv.to, act) {
                self.drop_step(journal, i, format!("node {} was emptied by this plan", step.mv.to), now)?;
                continue;
            }
            if let Err(reason) = self.budget_allows(&step.mv.spec.workload, act) {
                self.drop_step(journal, i, reason, now)?;
                continue;
            }
            if !self.within_caps(i) {
                self.drop_step(journal, i, "cap per node, namespace or workload reached for this cycle".into(), now)?;
                continue;
            }
            batch.push(i);
            if batch.len() == len {
                break;
            }
        }
        if !batch.is_empty() {
            self.batch_no += 1;
            journal.append(&Entry::Batch { number: self.batch_no, steps: batch.clone() })?;
        }
        self.batch = batch;
        Ok(())
    }

    /// A node this plan moved pods out of and that now runs none: not
    /// refilled by the same plan.
    fn emptied_by_plan(&self, node: NodeId, act: &dyn Actuator) -> bool {
        let moved_out = self
            .states
            .iter()
            .zip(&self.dag.steps)
            .any(|(s, st)| *s == StepState::Done && st.mv.from.node == node && !st.hop);
        moved_out && act.pods_on(node) == 0
    }

    fn drop_step(&mut self, journal: &mut dyn Journal, i: usize, reason: String, now: u64) -> Result<(), ExecError> {
        self.report.dropped.push(Dropped::Step { step: i, reason: reason.clone() });
        self.set(journal, i, StepState::Dropped { reason }, now)
    }

    fn advance(&mut self, act: &mut dyn Actuator, journal: &mut dyn Journal, now: u64) -> Result<(), ExecError> {
        for k in 0..self.batch.len() {
            let i = self.batch[k];
            loop {
                let mv = self.dag.steps[i].mv.clone();
                let in_flight = self.states.iter().filter(|s| s.in_flight()).count() as u32;
                match self.states[i].clone() {
                    StepState::Pending => {
                        if in_flight >= self.cfg.concurrency_limit {
                            break;
                        }
                        match self.budget_allows(&mv.spec.workload, act) {
                            Ok(true) => {}
                            Ok(false) => break,
                            Err(reason) => {
                                self.drop_step(journal, i, reason, now)?;
                                break;
                            }
                        }
                        self.set(journal, i, StepState::Reserving, now)?;
                        match act.reserve(mv.pod, &mv.spec, mv.to, mv.gpu_hint, now) {
                            Ok(()) => self.set(journal, i, StepState::Reserved { at: now }, now)?,
                            Err(e) => self.fail(journal, i, e.to_string(), now)?,
                        }
                    }
                    StepState::Reserved { at } => {
                        if now >= at + self.cfg.reservation_ttl_s && at != now {
                            act.unreserve(mv.pod);
                            self.fail(journal, i, "reservation expired before the eviction".into(), now)?;
                            break;
                        }
                        if !self.budget_allows(&mv.spec.workload, act).unwrap_or(false) {
                            break;
                        }
                        self.set(journal, i, StepState::Evicting, now)?;
                        match act.evict(mv.pod, now) {
                            Ok(()) => self.set(journal, i, StepState::Evicted, now)?,
                            Err(e) => {
                                act.unreserve(mv.pod);
                                self.fail(journal, i, e.to_string(), now)?;
                            }
                        }
                    }
                    StepState::Evicted => {
                        self.set(journal, i, StepState::Starting, now)?;
                        match act.start(mv.pod, now) {
                            Ok(()) => self.set(journal, i, StepState::Started { at: now }, now)?,
                            Err(e) => {
                                // Put it back where it was rather than lose
                                // it, every tick until it runs there.
                                act.unreserve(mv.pod);
                                let restoring = StepState::Restoring { reason: e.to_string(), rollback: false };
                                self.set(journal, i, restoring, now)?;
                                self.restore(act, journal, i, now)?;
                            }
                        }
                    }
                    StepState::Restoring { .. } => {
                        self.restore(act, journal, i, now)?;
                        break;
                    }
                    StepState::Started { .. } => {
                        if matches!(act.locate(mv.pod, now), Location::Running { node, ready: true } if node == mv.to) {
                            self.set(journal, i, StepState::Done, now)?;
                            self.moved_at.insert(mv.pod, now);
                            self.report.executed += 1;
                        }
                        break;
                    }
                    // Intents are reconciled on resume; terminal states rest.
                    _ => break,
                }
            }
        }
        Ok(())
    }

    fn fail(&mut self, journal: &mut dyn Journal, i: usize, reason: String, now: u64) -> Result<(), ExecError> {
        self.report.failed += 1;
        self.set(journal, i, StepState::Failed { reason }, now)
    }

    fn track_peaks(&mut self) {
        let mut now: BTreeMap<String, u32> = BTreeMap::new();
        for (s, st) in self.states.iter().zip(&self.dag.steps) {
            if s.unavailable() {
                *now.entry(st.mv.spec.workload.clone()).or_insert(0) += 1;
            }
        }
        for (w, n) in now {
            let peak = self.report.peak_unavailable.entry(w).or_insert(0);
            *peak = (*peak).max(n);
        }
    }

    /// A failing health gate for the current batch, if any.
    fn batch_gate(&self, act: &mut dyn Actuator, now: u64) -> Option<String> {
        let r = &self.cfg.rollback;
        for &i in &self.batch {
            if let StepState::Started { at } = self.states[i]
                && now.saturating_sub(at) > r.ready_timeout_s
            {
                return Some(format!(
                    "step {i}: pod {} not ready {} s after it started",
                    self.dag.steps[i].mv.pod,
                    now - at
                ));
            }
        }
        if !self.batch.iter().all(|&i| self.states[i].is_terminal()) {
            return None;
        }
        let h = act.health(now);
        if h.error_rate > r.error_rate {
            return Some(format!("error rate {:.2}% over {:.2}%", 100.0 * h.error_rate, 100.0 * r.error_rate));
        }
        if h.latency_p99_ms > r.latency_p99_ms {
            return Some(format!("p99 latency {:.0} ms over {:.0} ms", h.latency_p99_ms, r.latency_p99_ms));
        }
        None
    }

    /// Moves the batch's pods back to their sources (reserve there first).
    fn rollback_batch(
        &mut self,
        act: &mut dyn Actuator,
        journal: &mut dyn Journal,
        now: u64,
        reason: &str,
    ) -> Result<(), ExecError> {
        for &i in &self.batch.clone() {
            let mv = self.dag.steps[i].mv.clone();
            match self.states[i] {
                StepState::Done | StepState::Started { .. } => {
                    let back = act
                        .reserve(mv.pod, &mv.spec, mv.from.node, mv.home_hint(), now)
                        .and_then(|()| act.evict(mv.pod, now))
                        .and_then(|()| act.start(mv.pod, now));
                    let state = match back {
                        Ok(()) => {
                            if self.states[i] == StepState::Done {
                                self.report.executed -= 1;
                            }
                            self.report.rolled_back += 1;
                            StepState::RolledBack { reason: reason.to_string() }
                        }
                        Err(_) if matches!(act.locate(mv.pod, now), Location::Running { .. }) => {
                            // Never left the target: the move stands.
                            act.unreserve(mv.pod);
                            continue;
                        }
                        Err(e) => {
                            // Evicted from the target but not back home:
                            // put back every tick until it runs there.
                            act.unreserve(mv.pod);
                            if self.states[i] == StepState::Done {
                                self.report.executed -= 1;
                            }
                            StepState::Restoring { reason: format!("rollback ({reason}): {e}"), rollback: true }
                        }
                    };
                    self.set(journal, i, state, now)?;
                    self.restore(act, journal, i, now)?;
                }
                StepState::Reserved { .. } | StepState::Reserving => {
                    act.unreserve(mv.pod);
                    self.set(journal, i, StepState::Dropped { reason: reason.to_string() }, now)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn finish(&mut self, journal: &mut dyn Journal, stopped: Option<String>) -> Result<(), ExecError> {
        if let Some(reason) = &stopped {
            for i in 0..self.states.len() {
                if self.states[i] == StepState::Pending {
                    self.report.dropped.push(Dropped::Step { step: i, reason: format!("plan stopped: {reason}") });
                    self.states[i] = StepState::Dropped { reason: format!("plan stopped: {reason}") };
                }
            }
        }
        self.report.stopped = stopped;
        self.batch.clear();
        self.finished = true;
        journal.append(&Entry::Finished { report: self.report.clone() })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
