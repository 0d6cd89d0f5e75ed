//! From the runs of a campaign to a verdict: each gate is evaluated per
//! scenario (over its seeds) against the baseline's runs of the same
//! scenario and seeds; a gate passes only if it passes in every scenario,
//! and the candidate is promoted only if every gate passes.

use serde::{Deserialize, Serialize};

use crate::campaign::{Campaign, Gate};
use crate::twin::Outcome;

/// Which policy a run used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The policy being proven.
    Candidate,
    /// The policy it is compared with.
    Baseline,
}

/// One run's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Scenario.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// Policy.
    pub side: Side,
    /// What happened.
    pub outcome: Outcome,
    /// The forecasts behind its predictive faults.
    #[serde(default)]
    pub forecasts: Vec<crate::forecast::Forecast>,
    /// Wall time of the run, seconds.
    pub wall_s: f64,
}

/// The verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    /// Every gate passed.
    Promote,
    /// At least one gate failed.
    Block,
}

/// One gate, at its worst scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    /// Gate (metric) name.
    pub name: String,
    /// The scenario where it did worst (for a pass: closest to failing).
    pub scenario: String,
    /// The candidate's value there.
    pub candidate: f64,
    /// The baseline's value there.
    pub baseline: f64,
    /// The bound the candidate had to meet there.
    pub threshold: f64,
    /// Room left to the bound (negative: by how much it failed), in the
    /// metric's direction.
    pub margin: f64,
    /// Passed in every scenario.
    pub pass: bool,
}

/// A campaign's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Campaign name.
    pub campaign: String,
    /// Candidate policy.
    pub candidate: String,
    /// Baseline policy.
    pub baseline: String,
    /// `PROMOTE` or `BLOCK`.
    pub verdict: Verdict,
    /// Every gate.
    pub gates: Vec<GateResult>,
    /// The failing gates' names.
    pub failing: Vec<String>,
    /// Every run.
    pub runs: Vec<Run>,
    /// Wall time of the campaign, seconds.
    pub wall_s: f64,
}

/// A gate's metric over some runs.
fn value(name: &str, runs: &[&Run]) -> f64 {
    let n = runs.len().max(1) as f64;
    let sum = |f: fn(&Outcome) -> f64| runs.iter().map(|r| f(&r.outcome)).sum::<f64>();
    match name {
        "pods_lost" => sum(|o| o.lost as f64),
        "pending_p99_s" => sum(|o| o.pending_p99_s as f64) / n,
        "sla_violations" => sum(|o| o.sla_violations as f64),
        "gpu_allocation_pct" => sum(|o| o.mean_allocation_pct) / n,
        "fragmentation_pct" => sum(|o| o.mean_fragmentation_pct) / n,
        "migrations" => sum(|o| o.migrations as f64),
        "recovery_s" => runs.iter().map(|r| r.outcome.recovery_s as f64).fold(0.0, f64::max),
        "plugin_faults" => sum(|o| o.plugin_faults as f64),
        other => unreachable!("unknown gate {other}"),
    }
}

/// The bound for the candidate given the baseline's value.
fn bound(g: &Gate, baseline: f64, higher_better: bool) -> f64 {
    if higher_better {
        let rel = g.max_decrease_pct.map(|p| baseline * (1.0 - p / 100.0) - g.slack);
        [g.min, rel].into_iter().flatten().fold(f64::NEG_INFINITY, f64::max)
    } else {
        let rel = g.max_increase_pct.map(|p| baseline * (1.0 + p / 100.0) + g.slack);
        [g.max, rel].into_iter().flatten().fold(f64::INFINITY, f64::min)
    }
}

/// Judges `runs` by `campaign`'s gates.
pub fn judge(campaign: &Campaign, runs: Vec<Run>, wall_s: f64) -> Report {
    let mut gates = Vec::new();
    for (name, gate, higher_better) in campaign.gates.list() {
        let mut worst: Option<GateResult> = None;
        let mut all_pass = true;
        for s in &campaign.scenarios {
            let pick = |side| runs.iter().filter(|r| r.scenario == s.name && r.side == side).collect::<Vec<_>>();
            let (cand, base) = (pick(Side::Candidate), pick(Side::Baseline));
            if cand.is_empty() {
                continue;
            }
            let (c, b) = (value(name, &cand), value(name, &base));
            let threshold = bound(gate, b, higher_better);
            let margin = if higher_better { c - threshold } else { threshold - c };
            let pass = margin >= -1e-9;
            all_pass &= pass;
            let here = GateResult {
                name: name.to_string(),
                scenario: s.name.clone(),
                candidate: c,
                baseline: b,
                threshold,
                margin,
                pass,
            };
            if worst.as_ref().is_none_or(|w| here.margin < w.margin) {
                worst = Some(here);
            }
        }
        if let Some(mut w) = worst {
            w.pass = all_pass;
            gates.push(w);
        }
    }
    if let Some(g) = exercised(campaign, &runs) {
        gates.insert(1.min(gates.len()), g);
    }
    let failing: Vec<String> = gates.iter().filter(|g| !g.pass).map(|g| g.name.clone()).collect();
    Report {
        campaign: campaign.name.clone(),
        candidate: campaign.candidate.clone(),
        baseline: campaign.baseline.clone(),
        verdict: if failing.is_empty() { Verdict::Promote } else { Verdict::Block },
        gates,
        failing,
        runs,
        wall_s,
    }
}

/// The gate every campaign with faults holds: no fault may strike an idle
/// twin (one scheduled after the workload ended tests nothing, and a
/// verdict that counted it as passed would promote on no evidence). Its
/// values are the faults that did not strike, per side, at the scenario
/// with the most.
fn exercised(campaign: &Campaign, runs: &[Run]) -> Option<GateResult> {
    if campaign.scenarios.iter().all(|s| s.faults.is_empty()) {
        return None;
    }
    let idle = |s: &str, side| {
        runs.iter()
            .filter(|r| r.scenario == s && r.side == side)
            .map(|r| r.outcome.faults.iter().filter(|f| !f.exercised).count() as f64)
            .sum::<f64>()
    };
    let worst = campaign
        .scenarios
        .iter()
        .filter(|s| !s.faults.is_empty())
        .map(|s| (s.name.clone(), idle(&s.name, Side::Candidate), idle(&s.name, Side::Baseline)))
        .max_by(|a, b| (a.1 + a.2).total_cmp(&(b.1 + b.2)))?;
    let (scenario, candidate, baseline) = worst;
    let margin = -(candidate + baseline);
    Some(GateResult {
        name: "faults_exercised".into(),
        scenario,
        candidate,
        baseline,
        threshold: 0.0,
        margin,
        pass: margin >= 0.0,
    })
}

fn num(v: f64) -> String {
    if v.is_infinite() {
        "—".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

impl Report {
    /// The verdict's word.
    pub fn word(&self) -> &'static str {
        match self.verdict {
            Verdict::Promote => "PROMOTE",
            Verdict::Block => "BLOCK",
        }
    }

    /// Markdown: the gates, the runs per scenario, the verdict.
    pub fn to_markdown(&self) -> String {
        let mut s = format!(
            "# Chaos verification: {}\n\ncandidate `{}` against baseline `{}` — {} runs in {:.1} s\n\n",
            self.campaign,
            self.candidate,
            self.baseline,
            self.runs.len(),
            self.wall_s
        );
        s += "| gate | worst scenario | candidate | baseline | threshold | margin | pass |\n|---|---|---:|---:|---:|---:|---|\n";
        for g in &self.gates {
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                g.name,
                g.scenario,
                num(g.candidate),
                num(g.baseline),
                num(g.threshold),
                num(g.margin),
                if g.pass { "yes" } else { "**no**" }
            );
        }
        s += "\n| scenario | seed | policy | lost | displaced | pending p99 s | SLA viol. | alloc % | frag % | migrations | recovery s | plugin faults |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
        for r in &self.runs {
            let o = &r.outcome;
            s += &format!(
                "| {} | {} | {:?} | {} | {} | {} | {} | {:.1} | {:.1} | {} | {} | {} |\n",
                r.scenario,
                r.seed,
                r.side,
                o.lost,
                o.displaced,
                o.pending_p99_s,
                o.sla_violations,
                o.mean_allocation_pct,
                o.mean_fragmentation_pct,
                o.migrations,
                o.recovery_s,
                o.plugin_faults
            );
        }
        let forecasts: Vec<(&Run, &crate::forecast::Forecast)> =
            self.runs.iter().flat_map(|r| r.forecasts.iter().map(move |f| (r, f))).collect();
        if !forecasts.is_empty() {
            s += "\n| scenario | seed | policy | model | predicted peak (load, s) | actual peak (load, s) | MAPE % | backtest error | intensity asked → injected |\n|---|---:|---|---|---|---|---:|---:|---|\n";
            for (r, f) in forecasts {
                s += &format!(
                    "| {} | {} | {:?} | {} | {:.2} at {} | {:.2} at {} | {:.1} | {:+.2} | {:.2} → {:.2} |\n",
                    r.scenario,
                    r.seed,
                    r.side,
                    f.model,
                    f.predicted_peak,
                    f.predicted_peak_at_s,
                    f.actual_peak,
                    f.actual_peak_at_s,
                    f.mape_pct,
                    f.backtest_error,
                    f.intensity_asked,
                    f.intensity
                );
            }
        }
        s += &format!("\n**{}**", self.word());
        if !self.failing.is_empty() {
            s += &format!(" — failing gates: {}", self.failing.join(", "));
        }
        s + "\n"
    }

    /// A self-contained HTML page of the same.
    pub fn to_html(&self) -> String {
        let esc = |t: &str| t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        let mut rows = String::new();
        for g in &self.gates {
            rows += &format!(
                "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                if g.pass { "pass" } else { "fail" },
                esc(&g.name),
                esc(&g.scenario),
                num(g.candidate),
                num(g.baseline),
                num(g.threshold),
                num(g.margin),
                if g.pass { "yes" } else { "no" }
            );
        }
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Chaos verification: {name}</title>\n<style>body{{font-family:sans-serif}}td,th{{padding:2px 8px;text-align:right}}.fail{{background:#fdd}}.pass{{background:#dfd}}</style></head>\n<body><h1>{name}: {word}</h1><p>candidate <code>{c}</code> against baseline <code>{b}</code>, {n} runs in {w:.1} s</p>\n<table><tr><th>gate</th><th>worst scenario</th><th>candidate</th><th>baseline</th><th>threshold</th><th>margin</th><th>pass</th></tr>\n{rows}</table></body></html>\n",
            name = esc(&self.campaign),
            word = self.word(),
            c = esc(&self.candidate),
            b = esc(&self.baseline),
            n = self.runs.len(),
            w = self.wall_s,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(scenario: &str, side: Side, lost: u64, p99: u64, alloc: f64) -> Run {
        Run {
            scenario: scenario.into(),
            seed: 1,
            side,
            outcome: Outcome { lost, pending_p99_s: p99, mean_allocation_pct: alloc, ..Outcome::default() },
            forecasts: Vec::new(),
            wall_s: 0.0,
        }
    }

    fn campaign() -> Campaign {
        Campaign::parse(
            "name: t\ncluster: {builtin: {nodes: 5}}\nworkload: {builtin: {pods: 5, load: 1}}\ncandidate: a\nbaseline: b\nseeds: [1]\nscenarios: [{name: x}, {name: y}]\ngates:\n  pending_p99_s: {max_increase_pct: 50, slack: 10}\n  gpu_allocation_pct: {max_decrease_pct: 10}\n",
            "t.yaml",
        )
        .unwrap()
    }

    #[test]
    fn a_candidate_within_every_bound_is_promoted() {
        let runs = vec![
            run("x", Side::Candidate, 0, 140, 80.0),
            run("x", Side::Baseline, 0, 100, 85.0),
            run("y", Side::Candidate, 0, 10, 70.0),
            run("y", Side::Baseline, 0, 10, 70.0),
        ];
        let r = judge(&campaign(), runs, 1.0);
        assert_eq!(r.verdict, Verdict::Promote, "{r:?}");
        let p99 = r.gates.iter().find(|g| g.name == "pending_p99_s").unwrap();
        // x: 140 against 100 × 1.5 + 10 = 160; y: 10 against 25 — y is
        // closer to its bound.
        assert_eq!((p99.scenario.as_str(), p99.threshold, p99.margin), ("y", 25.0, 15.0));
        assert!(r.to_markdown().contains("**PROMOTE**"));
    }

    #[test]
    fn one_failing_scenario_blocks_and_names_the_gate() {
        let runs = vec![
            run("x", Side::Candidate, 0, 100, 80.0),
            run("x", Side::Baseline, 0, 100, 80.0),
            run("y", Side::Candidate, 1, 100, 60.0),
            run("y", Side::Baseline, 0, 100, 80.0),
        ];
        let r = judge(&campaign(), runs, 1.0);
        assert_eq!(r.verdict, Verdict::Block);
        assert_eq!(r.failing, ["pods_lost", "gpu_allocation_pct"]);
        let alloc = r.gates.iter().find(|g| g.name == "gpu_allocation_pct").unwrap();
        assert_eq!((alloc.scenario.as_str(), alloc.threshold), ("y", 72.0));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["verdict"], "BLOCK");
        for k in ["name", "candidate", "baseline", "threshold", "pass"] {
            assert!(json["gates"][0].get(k).is_some(), "{k}");
        }
        assert!(r.to_html().contains("<h1>t: BLOCK</h1>"));
    }
}
