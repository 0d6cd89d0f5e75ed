//! A pass's decisions turned into explanations, traces and metric samples.
//!
//! Each attempt of the pass carries what came of it (its event); when the
//! pod got past the host's filter, the policy's decision about that pod
//! (found by the pod's name) joins it. One record per pod decided. The
//! trace of a decision:
//!
//! ```text
//! tessera.schedule.pod            pod, policy and versions, outcome, node, scores, runners-up
//! ├── tessera.schedule.filter     host and plugin rejections by reason
//! ├── tessera.schedule.score      one per plugin: version, weight, its score of the winner
//! ├── tessera.schedule.select     winner and its total
//! └── tessera.schedule.bind       node and GPUs
//! ```
//!
//! The host's hard filter runs inside the scheduling loop, which reads no
//! clock: its time is the pass's time outside the policy, shared equally
//! among the pass's attempts.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, SystemTime};

use opentelemetry::{Context, KeyValue};
use tessera_core::cluster::FilterReason;
use tessera_core::sched::{Attempt, Event};

use tessera_core::driver::Model;

use super::pods::Pods;
use super::recorder::{Recorded, Recorder};
use crate::observe::Tracing;
use crate::state::Shared;

/// What explaining a pass needs.
pub(super) struct Explain<'a> {
    pub shared: &'a Shared,
    pub tracing: &'a Tracing,
    pub pods: &'a mut Pods,
    pub placer: &'a Recorder,
    /// The active policy's name, and its `name: plugin@version, …` label.
    pub policy: &'a str,
    pub policy_label: &'a str,
    /// Runners-up shown per decision.
    pub top_k: usize,
}
use crate::metrics::{CodeLabel, OutcomeLabel, PluginCodeLabel, PluginLabel, TraceLabel};
use crate::observe::{self, attr};
use crate::record::{Candidate, DecisionRecord, Outcome, PluginPart, PluginRejections};

impl Explain<'_> {
    #[allow(clippy::too_many_arguments)]
    pub fn record_pass(
        &mut self,
        model: &Model,
        now: u64,
        pass_wall: SystemTime,
        pass: Duration,
        attempts: Vec<Attempt>,
        recorded: Vec<Recorded>,
    ) {
        if attempts.is_empty() {
            return;
        }
        let in_policy: Duration = recorded.iter().map(|r| r.decision.elapsed).sum();
        let host_share = pass.saturating_sub(in_policy) / attempts.len() as u32;
        // The policy's decisions by pod (a pod decided twice in a pass, a
        // preemption's victim, has its decisions in order).
        let mut by_pod: HashMap<String, VecDeque<Recorded>> = HashMap::new();
        for r in recorded {
            by_pod.entry(r.pod.clone()).or_default().push_back(r);
        }
        let mut at = pass_wall;
        for attempt in attempts {
            let rec = if attempt.candidates > 0 {
                by_pod.get_mut(&self.pods.name(attempt.pod)).and_then(VecDeque::pop_front)
            } else {
                None
            };
            let start = rec.as_ref().map_or(at, |r| r.wall.checked_sub(host_share).unwrap_or(r.wall));
            let record = self.decision(model, now, start, host_share, &attempt, rec.as_ref());
            at = start + Duration::from_micros(record.latency_us);
            self.shared.decisions.write().unwrap_or_else(|p| p.into_inner()).push(record);
        }
    }

    /// One decision: its spans, metrics and record.
    #[allow(clippy::too_many_arguments)]
    fn decision(
        &mut self,
        model: &Model,
        now: u64,
        start: SystemTime,
        host: Duration,
        attempt: &Attempt,
        rec: Option<&Recorded>,
    ) -> DecisionRecord {
        let nodes = model.cluster().nodes();
        let node_name = |id: u32| nodes.get(id as usize).map_or_else(|| id.to_string(), |n| n.name.clone());
        let (outcome, placement, reason, victims) = match &attempt.event {
            Event::Bound { placement, .. } => (Outcome::Bound, Some(*placement), None, Vec::new()),
            Event::Preempted { placement, victims, .. } => {
                (Outcome::Preempted, Some(*placement), None, victims.clone())
            }
            Event::Unschedulable { reason, .. } => {
                (Outcome::Unschedulable, None, Some(reason.code().to_string()), vec![])
            }
        };
        let meta = self.pods.get(attempt.pod);
        let pod_name = meta.map_or_else(|| format!("pod-{}", attempt.pod), |m| m.name.clone());
        let workload = meta.map(|m| m.workload.clone()).unwrap_or_default();
        let host_filter: BTreeMap<String, u32> = FilterReason::ALL
            .iter()
            .zip(attempt.host_rejected)
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| (r.code().to_string(), n))
            .collect();
        let d = rec.map(|r| &r.decision);
        // A canary decision is the candidate's.
        let (policy_name, policy_label) = match (rec.is_some_and(|r| r.by_candidate), &self.placer.candidate) {
            (true, Some(c)) => (c.doc.name.clone(), Recorder::label(&c.doc.name, &c.policy)),
            _ => (self.policy.to_string(), self.policy_label.to_string()),
        };
        let mut plugin_filter: BTreeMap<(String, String), u32> = BTreeMap::new();
        for r in d.map(|d| d.rejections.as_slice()).unwrap_or_default() {
            *plugin_filter.entry((r.plugin.clone(), r.reason.clone())).or_insert(0) += 1;
        }
        let plugin_filter: Vec<PluginRejections> = plugin_filter
            .into_iter()
            .map(|((plugin, reason), nodes)| PluginRejections { plugin, reason, nodes })
            .collect();

        // Where the winner sits among the feasible nodes, and the best others.
        let chosen = placement.map(|p| p.node);
        let winner = d.and_then(|d| chosen.and_then(|c| d.feasible.iter().position(|&n| n == c)));
        let plugins: Vec<PluginPart> = d
            .map(|d| {
                d.outcomes
                    .iter()
                    .map(|o| PluginPart {
                        plugin: o.plugin.clone(),
                        version: o.version.clone(),
                        weight: o.weight,
                        winner_score: winner.and_then(|i| o.scores.get(i).copied()),
                        latency_us: o.elapsed.as_micros() as u64,
                        error_code: o.error.as_ref().map(|e| e.kind.code().to_string()),
                        error: o.error.as_ref().map(|e| e.kind.to_string()),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let runners_up: Vec<Candidate> = d
            .map(|d| {
                let mut order: Vec<usize> = (0..d.feasible.len()).filter(|&i| Some(i) != winner).collect();
                order.sort_by(|&a, &b| d.totals[b].total_cmp(&d.totals[a]).then(a.cmp(&b)));
                order
                    .into_iter()
                    .take(self.top_k)
                    .map(|i| Candidate {
                        node: node_name(d.feasible[i]),
                        total: d.totals[i],
                        scores: d.outcomes.iter().filter_map(|o| o.scores.get(i).copied()).collect(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let winner_total = d.and_then(|d| winner.map(|i| d.totals[i]));

        // Times: host filter, then the policy's filter and scoring calls as
        // measured, then the bind.
        let policy_start = start + host;
        let decided = policy_start + d.map_or(Duration::ZERO, |d| d.elapsed);
        let end =
            rec.and_then(|r| r.bound_after).filter(|_| outcome == Outcome::Bound).map_or(decided, |b| policy_start + b);
        let latency = end.duration_since(start).unwrap_or_default();

        let tracer = self.tracing.tracer().clone();
        let scores_attr = plugins
            .iter()
            .map(|p| format!("{}={}", p.plugin, p.winner_score.map_or_else(|| "-".to_string(), |s| s.to_string())))
            .collect::<Vec<_>>()
            .join(",");
        let runners_attr =
            runners_up.iter().map(|c| format!("{}:{:.2}", c.node, c.total)).collect::<Vec<_>>().join(" ");
        let host_attr = host_filter.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
        let plugin_filter_attr = plugin_filter
            .iter()
            .map(|r| format!("{}/{}={}", r.plugin, r.reason, r.nodes))
            .collect::<Vec<_>>()
            .join(",");
        let mut attrs = vec![
            attr("tessera.pod", pod_name.clone()),
            attr("tessera.workload", workload.clone()),
            attr("tessera.queue", model.sched().pod(attempt.pod).map_or("", |p| model.sched().queue_of(p)).to_string()),
            attr("tessera.policy", policy_name.clone()),
            attr("tessera.policy.plugins", policy_label.clone()),
            KeyValue::new("tessera.candidates", attempt.candidates as i64),
            KeyValue::new("tessera.feasible", d.map_or(0, |d| d.feasible.len()) as i64),
            attr("tessera.outcome", outcome.as_str()),
            attr("tessera.filter.rejected", host_attr.clone()),
        ];
        if let Some(p) = placement {
            attrs.push(attr("tessera.node", node_name(p.node)));
            attrs.push(attr("tessera.winner.scores", scores_attr));
            attrs.push(attr("tessera.runners_up", runners_attr));
        }
        if let Some(t) = winner_total {
            attrs.push(KeyValue::new("tessera.winner.total", t));
        }
        if let Some(r) = &reason {
            attrs.push(attr("tessera.reason", r.clone()));
        }
        if !victims.is_empty() {
            attrs.push(KeyValue::new("tessera.victims", victims.len() as i64));
        }
        if let Some(n) = d.map(|d| d.host_starved).filter(|&n| n > 0) {
            // Host overload, not the plugins' fault (their calls went on).
            attrs.push(KeyValue::new("tessera.host.starved_calls", n as i64));
        }
        let root = observe::start(&tracer, "tessera.schedule.pod", &Context::new(), start, attrs, Vec::new());
        let filter_end = policy_start + d.map_or(Duration::ZERO, |d| d.filter_elapsed);
        observe::child(
            &tracer,
            "tessera.schedule.filter",
            &root,
            start,
            filter_end,
            vec![
                attr("tessera.filter.rejected", host_attr),
                attr("tessera.filter.plugin_rejected", plugin_filter_attr),
                KeyValue::new("tessera.candidates", attempt.candidates as i64),
            ],
            None,
        );
        let mut scored_until = filter_end;
        if let Some(d) = d {
            for (o, part) in d.outcomes.iter().zip(&plugins) {
                let from = policy_start + o.started;
                scored_until = scored_until.max(from + o.elapsed);
                let mut a = vec![
                    attr("tessera.plugin", o.plugin.clone()),
                    attr("tessera.plugin.version", o.version.clone()),
                    KeyValue::new("tessera.plugin.weight", o.weight),
                ];
                if let Some(s) = part.winner_score {
                    a.push(KeyValue::new("tessera.plugin.winner_score", s));
                }
                observe::child(&tracer, "tessera.schedule.score", &root, from, from + o.elapsed, a, part.error.clone());
            }
            let mut a = vec![KeyValue::new("tessera.feasible", d.feasible.len() as i64)];
            if let Some(p) = placement {
                a.push(attr("tessera.node", node_name(p.node)));
            }
            if let Some(t) = winner_total {
                a.push(KeyValue::new("tessera.winner.total", t));
            }
            observe::child(&tracer, "tessera.schedule.select", &root, scored_until, decided, a, None);
        }
        if let Some(p) = placement {
            let gpus: Vec<String> = p.gpus.indices().map(|g| g.to_string()).collect();
            observe::child(
                &tracer,
                "tessera.schedule.bind",
                &root,
                decided.min(end),
                end,
                vec![attr("tessera.node", node_name(p.node)), attr("tessera.gpus", gpus.join(","))],
                None,
            );
        }
        let sc = observe::finish(&root, end, reason.clone());
        let (trace_id, span_id, sampled) = observe::ids(&sc);
        if placement.is_some() {
            self.pods.placed(attempt.pod, sc);
        }

        // Metrics, with the trace as exemplar.
        let m = &self.shared.metrics;
        let ex = || TraceLabel::of(&trace_id, sampled);
        m.decisions.get_or_create(&OutcomeLabel { outcome: outcome.as_str().into() }).inc_by(1, ex(), None);
        if let Some(code) = &reason {
            m.failures.get_or_create(&CodeLabel { code: code.clone() }).inc_by(1, ex(), None);
        }
        m.decision_latency.observe(latency.as_secs_f64(), ex(), None);
        self.shared.heat.lock().unwrap_or_else(|p| p.into_inner()).observe(
            crate::wall::unix_ms(start),
            latency.as_secs_f64(),
            reason.as_deref(),
        );
        if let Some(d) = d {
            for o in &d.outcomes {
                m.plugin_latency.get_or_create(&PluginLabel { plugin: o.plugin.clone() }).observe(
                    o.elapsed.as_secs_f64(),
                    ex(),
                    None,
                );
            }
            for e in &d.errors {
                m.plugin_faults
                    .get_or_create(&PluginCodeLabel { plugin: e.plugin.to_string(), code: e.kind.code().into() })
                    .inc_by(1, ex(), None);
            }
        }

        DecisionRecord {
            pod: pod_name,
            workload,
            at_unix_ms: crate::wall::unix_ms(start),
            backend_time_s: now,
            policy: policy_label,
            outcome,
            node: placement.map(|p| node_name(p.node)),
            gpus: placement.map(|p| p.gpus.indices().map(|g| g as u8).collect()).unwrap_or_default(),
            reason,
            candidates: attempt.candidates,
            feasible: d.map_or(0, |d| d.feasible.len()),
            host_filter,
            plugin_filter,
            plugins,
            winner_total,
            runners_up,
            victims: victims.iter().map(|v| format!("pod-{v}")).collect(),
            latency_us: latency.as_micros() as u64,
            trace_id,
            span_id,
            sampled,
        }
    }
}
