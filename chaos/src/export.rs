//! A campaign's faults as Chaos Mesh experiments, for teams that also test
//! the live cluster: one `Workflow` per scenario (each fault a serial
//! branch: a `Suspend` until its start, then the experiment for its
//! duration; the branches in parallel), or a `Schedule` running that
//! workflow on a cron expression.
//!
//! Chaos Mesh has what node crashes, zone partitions and telemetry loss
//! and delay need (`PodChaos`, `NetworkChaos`); it has no GPU faults, and
//! load spikes and plugin faults are not faults of the cluster: those are
//! listed as skipped, never approximated silently.

use serde::Serialize;
use serde_json::{Value, json};

use crate::campaign::Campaign;
use crate::fault::{FaultKind, ResolvedFault, Target};

/// The label of Tessera's node agents, whose telemetry the telemetry
/// faults hit.
pub const AGENT_SELECTOR: (&str, &str) = ("app.kubernetes.io/name", "tessera-agent");

/// The node label zones are read from.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// What an export produced.
#[derive(Debug, Clone, Serialize)]
pub struct Export {
    /// The manifests, in order.
    pub manifests: Vec<Value>,
    /// Faults with no Chaos Mesh equivalent: `scenario: kind (why)`.
    pub skipped: Vec<String>,
}

/// Options of an export.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// Namespace of the experiments.
    pub namespace: String,
    /// Namespaces whose pods the experiments may hit.
    pub target_namespaces: Vec<String>,
    /// Cron expression: wrap each workflow in a `Schedule`.
    pub schedule: Option<String>,
}

fn name(s: &str) -> String {
    let n: String = s.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    n.trim_matches('-').chars().take(50).collect()
}

fn duration(s: u64) -> String {
    format!("{s}s")
}

/// The experiment for one fault, or why there is none. `nodes` names the
/// cluster's nodes by id; `interval_s` is the telemetry interval.
fn experiment(
    f: &ResolvedFault,
    target: &Target,
    nodes: &[String],
    interval_s: u64,
    opts: &ExportOptions,
) -> Result<(&'static str, Value), &'static str> {
    let pods_in = |extra: Value| {
        let mut sel = json!({ "namespaces": opts.target_namespaces });
        if let (Some(o), Some(e)) = (sel.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        sel
    };
    let on_nodes =
        || pods_in(json!({ "nodes": f.nodes.iter().map(|&n| nodes[n as usize].clone()).collect::<Vec<_>>() }));
    let agents = || {
        json!({
            "namespaces": [opts.namespace],
            "labelSelectors": { AGENT_SELECTOR.0: AGENT_SELECTOR.1 },
            "nodes": f.nodes.iter().map(|&n| nodes[n as usize].clone()).collect::<Vec<_>>(),
        })
    };
    match f.kind {
        // The pods of crashed nodes stop; Chaos Mesh restores them after
        // the duration, as the nodes coming back would.
        FaultKind::NodeCrash => {
            Ok(("PodChaos", json!({ "action": "pod-failure", "mode": "all", "selector": on_nodes() })))
        }
        FaultKind::ZonePartition => {
            let Target::Zone(zone) = target else {
                // A partition of arbitrary nodes: cut those nodes' pods off.
                return Ok((
                    "NetworkChaos",
                    json!({
                        "action": "partition", "mode": "all", "selector": on_nodes(), "direction": "both",
                        "target": { "mode": "all", "selector": pods_in(json!({})) },
                    }),
                ));
            };
            Ok((
                "NetworkChaos",
                json!({
                    "action": "partition", "mode": "all", "direction": "both",
                    "selector": pods_in(json!({ "nodeSelectors": { ZONE_LABEL: zone } })),
                    "target": { "mode": "all", "selector": pods_in(json!({})) },
                }),
            ))
        }
        FaultKind::TelemetryLoss => Ok((
            "NetworkChaos",
            json!({
                "action": "loss", "mode": "all", "selector": agents(),
                "loss": { "loss": format!("{:.0}", f.intensity * 100.0), "correlation": "0" },
            }),
        )),
        FaultKind::TelemetryDelay => {
            let intervals = ((f.intensity * crate::twin::MAX_DELAY_INTERVALS as f64).round() as u64).max(1);
            Ok((
                "NetworkChaos",
                json!({
                    "action": "delay", "mode": "all", "selector": agents(),
                    "delay": { "latency": duration(intervals * interval_s), "jitter": "0ms", "correlation": "0" },
                }),
            ))
        }
        FaultKind::GpuFailure | FaultKind::GpuDegradation => Err("Chaos Mesh has no GPU faults"),
        FaultKind::LoadSpike => Err("more pods, not a fault: replay them with a load generator"),
        FaultKind::PluginTrap | FaultKind::PluginSlow => {
            Err("a fault inside Tessera's own plugins, proven on the twin")
        }
        FaultKind::ActuatorErrors => Err("errors of the Kubernetes API itself, which Chaos Mesh does not inject"),
    }
}

/// Chaos Mesh's name for an experiment kind in a workflow template.
fn template_key(kind: &str) -> &'static str {
    match kind {
        "PodChaos" => "podChaos",
        _ => "networkChaos",
    }
}

/// The manifests of `campaign`, its faults resolved on the cluster whose
/// node names are `nodes` (by id): `resolved[s]` are scenario `s`'s faults.
pub fn export(campaign: &Campaign, resolved: &[Vec<ResolvedFault>], nodes: &[String], opts: &ExportOptions) -> Export {
    let mut out = Export { manifests: Vec::new(), skipped: Vec::new() };
    for (s, scenario) in campaign.scenarios.iter().enumerate() {
        let wf = name(&format!("{}-{}", campaign.name, scenario.name));
        let t0 = resolved[s].iter().map(|f| f.start).min().unwrap_or(0);
        let mut templates = Vec::new();
        let mut branches = Vec::new();
        for (i, (f, spec)) in resolved[s].iter().zip(&scenario.faults).enumerate() {
            match experiment(f, &spec.target, nodes, campaign.telemetry_interval_s, opts) {
                Err(why) => out.skipped.push(format!("{}: {} ({why})", scenario.name, f.kind.name())),
                Ok((kind, spec_body)) => {
                    let base = format!("{}-{i}", f.kind.name());
                    let mut steps = Vec::new();
                    if f.start > t0 {
                        templates.push(json!({
                            "name": format!("{base}-wait"), "templateType": "Suspend", "deadline": duration(f.start - t0),
                        }));
                        steps.push(format!("{base}-wait"));
                    }
                    let mut t = json!({ "name": base, "templateType": kind, "deadline": duration(f.end - f.start) });
                    t[template_key(kind)] = spec_body;
                    templates.push(t);
                    steps.push(base.clone());
                    templates
                        .push(json!({ "name": format!("{base}-branch"), "templateType": "Serial", "children": steps }));
                    branches.push(format!("{base}-branch"));
                }
            }
        }
        if branches.is_empty() {
            continue;
        }
        templates.insert(0, json!({ "name": "entry", "templateType": "Parallel", "children": branches }));
        let workflow = json!({ "entry": "entry", "templates": templates });
        let labels = json!({ "app.kubernetes.io/managed-by": "tessera", "tessera.io/campaign": name(&campaign.name) });
        out.manifests.push(match &opts.schedule {
            None => json!({
                "apiVersion": "chaos-mesh.org/v1alpha1",
                "kind": "Workflow",
                "metadata": { "name": wf, "namespace": opts.namespace, "labels": labels },
                "spec": workflow,
            }),
            Some(cron) => json!({
                "apiVersion": "chaos-mesh.org/v1alpha1",
                "kind": "Schedule",
                "metadata": { "name": wf, "namespace": opts.namespace, "labels": labels },
                "spec": {
                    "schedule": cron,
                    "type": "Workflow",
                    "historyLimit": 5,
                    "concurrencyPolicy": "Forbid",
                    "workflow": workflow,
                },
            }),
        });
    }
    out
}

/// The manifests as one multi-document YAML stream, the skipped faults
/// in a comment at its head.
pub fn to_yaml(e: &Export, campaign: &str) -> String {
    let mut s = format!("# Chaos Mesh experiments of campaign {campaign}, written by `tessera chaos export`.\n");
    for k in &e.skipped {
        s += &format!("# skipped: {k}\n");
    }
    for m in &e.manifests {
        s += "---\n";
        s += &serde_yaml_ng::to_string(m).expect("JSON values serialise as YAML");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn campaign() -> Campaign {
        Campaign::parse(
            "name: Demo\ncluster: {builtin: {nodes: 6}}\nworkload: {builtin: {pods: 5, load: 1}}\ncandidate: a\nbaseline: b\nseeds: [1]\ntelemetry_interval_s: 60\nscenarios:\n  - name: mixed\n    faults:\n      - {kind: node-crash, start: {at: 100}, duration_s: 600, target: {count: 2}}\n      - {kind: zone-partition, start: {at: 0}, duration_s: 300, target: {zone: z1}}\n      - {kind: telemetry-delay, start: {at: 0}, duration_s: 300, intensity: 0.3, target: all}\n      - {kind: gpu-failure, start: {at: 0}, duration_s: 300, target: one}\n  - name: gpu-only\n    faults:\n      - {kind: gpu-degradation, start: {at: 0}, duration_s: 300, target: one}\n",
            "demo.yaml",
        )
        .unwrap()
    }

    fn nodes() -> Vec<tessera_core::model::Node> {
        (0..6)
            .map(|i| {
                let mut n = tessera_core::model::Node::new(i, format!("node-{i}"), Default::default(), 2, "A100");
                n.zone = format!("z{}", i % 2);
                n
            })
            .collect()
    }

    #[test]
    fn scenarios_become_workflows_and_what_has_no_equivalent_is_listed() {
        let c = campaign();
        let ns = nodes();
        let resolved: Vec<Vec<ResolvedFault>> = c
            .scenarios
            .iter()
            .map(|s| {
                s.faults
                    .iter()
                    .map(|f| {
                        let crate::fault::Start::At(at) = f.start else { unreachable!("fixed starts") };
                        f.resolve(&ns, at, 1).unwrap()
                    })
                    .collect()
            })
            .collect();
        let names: Vec<String> = ns.iter().map(|n| n.name.clone()).collect();
        let opts = ExportOptions { namespace: "chaos".into(), target_namespaces: vec!["ml".into()], schedule: None };
        let e = export(&c, &resolved, &names, &opts);
        assert_eq!(e.manifests.len(), 1, "gpu-only has nothing to export");
        assert_eq!(
            e.skipped,
            [
                "mixed: gpu-failure (Chaos Mesh has no GPU faults)",
                "gpu-only: gpu-degradation (Chaos Mesh has no GPU faults)"
            ]
        );
        let w = &e.manifests[0];
        assert_eq!(w["kind"], "Workflow");
        assert_eq!(w["metadata"]["name"], "demo-mixed");
        let t = w["spec"]["templates"].as_array().unwrap();
        assert_eq!(t[0]["templateType"], "Parallel");
        assert_eq!(t[0]["children"].as_array().unwrap().len(), 3);
        let crash = t.iter().find(|x| x["name"] == "node-crash-0").unwrap();
        assert_eq!(crash["deadline"], "600s");
        assert_eq!(crash["podChaos"]["action"], "pod-failure");
        assert_eq!(crash["podChaos"]["selector"]["nodes"].as_array().unwrap().len(), 2);
        assert_eq!(crash["podChaos"]["selector"]["namespaces"][0], "ml");
        let wait = t.iter().find(|x| x["name"] == "node-crash-0-wait").unwrap();
        assert_eq!((wait["templateType"].as_str(), wait["deadline"].as_str()), (Some("Suspend"), Some("100s")));
        let part = t.iter().find(|x| x["name"] == "zone-partition-1").unwrap();
        assert_eq!(part["networkChaos"]["selector"]["nodeSelectors"][ZONE_LABEL], "z1");
        let delay = t.iter().find(|x| x["name"] == "telemetry-delay-2").unwrap();
        assert_eq!(delay["networkChaos"]["delay"]["latency"], "180s", "3 intervals of 60 s");
        assert_eq!(delay["networkChaos"]["selector"]["labelSelectors"]["app.kubernetes.io/name"], "tessera-agent");

        let sched = export(&c, &resolved, &names, &ExportOptions { schedule: Some("0 3 * * 1".into()), ..opts });
        let s = &sched.manifests[0];
        assert_eq!((s["kind"].as_str(), s["spec"]["schedule"].as_str()), (Some("Schedule"), Some("0 3 * * 1")));
        assert_eq!(s["spec"]["type"], "Workflow");
        let yaml = to_yaml(&sched, "Demo");
        assert!(yaml.contains("# skipped: gpu-only: gpu-degradation"));
        let back: Vec<serde_json::Value> =
            yaml.split("---\n").skip(1).map(|d| serde_yaml_ng::from_str(d).unwrap()).collect();
        assert_eq!(back, sched.manifests, "the YAML reads back as written");
    }
}
