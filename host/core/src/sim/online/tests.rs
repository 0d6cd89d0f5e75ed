use std::collections::BTreeMap;

use super::*;
use crate::framework::Choice;
use crate::model::{NodeId, Resources, Tier};
use crate::telemetry::TelemetryConfig;

/// Chooses by a per-zone preference, learned from the carbon signals.
#[derive(Default)]
struct ZonePicker {
    /// Prefer the cleanest zone (else the dirtiest).
    clean: bool,
    zone_of: Vec<String>,
    carbon: BTreeMap<String, u32>,
    weights_seen: Vec<Vec<f64>>,
}

impl Placer for ZonePicker {
    fn nodes_changed(&mut self, nodes: &[&Node]) {
        for n in nodes {
            if self.zone_of.len() <= n.id as usize {
                self.zone_of.resize(n.id as usize + 1, String::new());
            }
            self.zone_of[n.id as usize] = n.zone.clone();
        }
    }
    fn zone_carbon(&mut self, zone: &str, g: u32) {
        self.carbon.insert(zone.to_string(), g);
    }
    fn set_weights(&mut self, w: &[f64]) {
        self.weights_seen.push(w.to_vec());
    }
    fn detect(&mut self, frame: &crate::telemetry::DetectionFrame) -> Vec<crate::telemetry::Detection> {
        // Every node with any GPU utilisation: one finding, its severity
        // the utilisation itself.
        frame
            .nodes
            .iter()
            .zip(&frame.gpu_util_permille)
            .filter(|(_, u)| **u > 0)
            .map(|(&node, &u)| crate::telemetry::Detection {
                detector: "test".into(),
                node,
                kind: "busy".into(),
                severity: u,
                message: String::new(),
            })
            .collect()
    }
    fn place(&mut self, _pod: &Pod, candidates: &[NodeId]) -> Choice {
        let key = |n: &NodeId| {
            let g = i64::from(self.carbon.get(&self.zone_of[*n as usize]).copied().unwrap_or(0));
            if self.clean { g } else { -g }
        };
        Choice { node: candidates.iter().min_by_key(|n| key(n)).copied(), ..Choice::default() }
    }
}

fn cluster() -> Vec<Node> {
    (0..6)
        .map(|i| {
            let mut n = Node::new(0, format!("n{i}"), Resources { cpu_milli: 64_000, memory_mib: 262_144 }, 4, "A100");
            n.zone = format!("zone-{}", i % 3);
            n
        })
        .collect()
}

fn arrivals(n: usize) -> Vec<Arrival> {
    (0..n)
        .map(|i| Arrival {
            pod: Pod {
                name: format!("p{i}"),
                requests: Resources { cpu_milli: 4_000, memory_mib: 8_192 },
                gpu_count: 1,
                gpu_milli: if i % 3 == 0 { 500 } else { 1000 },
                tier: [Tier::Soft, Tier::Opportunistic, Tier::Soft, Tier::Hard][i % 4],
                priority: (i % 5) as i32,
                ..Pod::default()
            },
            at: (i as u64) * 300,
            leaves_at: Some((i as u64) * 300 + 3_600 * (1 + (i as u64 % 7))),
        })
        .collect()
}

#[test]
fn every_pod_is_accounted_for_and_runs_replay() {
    let workload = TargetWorkload::from_pods(&arrivals(40).iter().map(|a| a.pod.clone()).collect::<Vec<_>>(), 0.95);
    let cfg = DriverConfig { seed: 3, ..DriverConfig::default() };
    let run = |clean| {
        let mut p = ZonePicker { clean, ..ZonePicker::default() };
        run_online(cluster(), &workload, &mut p, &arrivals(200), &cfg)
    };
    let r = run(true);
    assert_eq!(r, run(true), "same inputs, same report");
    let waiting: u64 = r.waiting_by_reason.values().sum();
    assert_eq!(r.submitted, 200);
    // Every pod left after running, left before running, or still waits
    // or runs at the end (the last ones do not leave before the end).
    assert!(r.departed + r.abandoned + waiting <= r.submitted);
    assert!(r.binds >= r.departed);
    assert!(r.intervals > 100, "telemetry every minute over ~17 h: {}", r.intervals);
    assert!(r.waits.contains_key("soft") && r.waits.contains_key("hard"), "{:?}", r.waits);
    assert!(r.nodes_scored_per_decision > 0.0);
}

#[test]
fn carbon_signals_reach_the_placer_and_show_in_the_report() {
    let workload = TargetWorkload::from_pods(&arrivals(40).iter().map(|a| a.pod.clone()).collect::<Vec<_>>(), 0.95);
    let cfg = DriverConfig { seed: 1, ..DriverConfig::default() };
    let mut clean = ZonePicker { clean: true, ..ZonePicker::default() };
    let mut dirty = ZonePicker::default();
    // Short pods: the cluster never fills, each placer gets its way.
    let light: Vec<Arrival> = arrivals(60).into_iter().map(|a| Arrival { leaves_at: Some(a.at + 900), ..a }).collect();
    let c = run_online(cluster(), &workload, &mut clean, &light, &cfg);
    let d = run_online(cluster(), &workload, &mut dirty, &light, &cfg);
    assert_eq!(clean.carbon.len(), 3, "every zone's intensity was told");
    assert!(c.mean_bind_carbon * 2.0 < d.mean_bind_carbon, "{} vs {}", c.mean_bind_carbon, d.mean_bind_carbon);
}

#[test]
fn adaptive_weights_are_chosen_every_interval_and_reported() {
    let workload = TargetWorkload::from_pods(&arrivals(40).iter().map(|a| a.pod.clone()).collect::<Vec<_>>(), 0.95);
    let cfg = DriverConfig { seed: 9, weight_sets: vec![vec![1.0, 0.0], vec![0.0, 1.0]], ..DriverConfig::default() };
    let mut p = ZonePicker::default();
    let r = run_online(cluster(), &workload, &mut p, &arrivals(50), &cfg);
    assert_eq!(p.weights_seen.len() as u64, r.intervals);
    assert_eq!(r.bandit.len(), 2);
    assert_eq!(r.bandit.iter().map(|a| a.pulls).sum::<u64>(), r.intervals);
}

#[test]
fn soft_pods_on_hot_nodes_count_as_sla_violations() {
    // One node, packed with soft pods: it runs hot, so violations appear;
    // with a low threshold even more.
    let mut n = Node::new(0, "n", Resources { cpu_milli: 16_000, memory_mib: 65_536 }, 4, "A100");
    n.zone = "zone-0".into();
    let pods: Vec<Arrival> = (0..4)
        .map(|i| Arrival {
            pod: Pod {
                name: format!("web-{i}"),
                requests: Resources { cpu_milli: 4_000, memory_mib: 8_192 },
                gpu_count: 1,
                gpu_milli: 1000,
                tier: Tier::Soft,
                ..Pod::default()
            },
            at: 0,
            leaves_at: Some(86_400),
        })
        .collect();
    let workload = TargetWorkload::from_pods(&pods.iter().map(|a| a.pod.clone()).collect::<Vec<_>>(), 0.95);
    let strict = DriverConfig {
        telemetry: TelemetryConfig { sla_hot_permille: 300, ..TelemetryConfig::default() },
        ..DriverConfig::default()
    };
    let lax = DriverConfig {
        telemetry: TelemetryConfig { sla_hot_permille: 1000, ..TelemetryConfig::default() },
        ..DriverConfig::default()
    };
    let s = run_online(vec![n.clone()], &workload, &mut ZonePicker::default(), &pods, &strict);
    let l = run_online(vec![n], &workload, &mut ZonePicker::default(), &pods, &lax);
    assert!(s.sla_violations > 100, "{}", s.sla_violations);
    assert!(l.sla_violations < s.sla_violations);
}

#[test]
fn detection_rounds_follow_the_interval_and_the_threshold() {
    let workload = TargetWorkload::from_pods(&arrivals(40).iter().map(|a| a.pod.clone()).collect::<Vec<_>>(), 0.95);
    let run = |interval, threshold| {
        let cfg = DriverConfig {
            detection: crate::telemetry::DetectionConfig { detection_interval: interval, anomaly_threshold: threshold },
            ..DriverConfig::default()
        };
        run_online(cluster(), &workload, &mut ZonePicker::default(), &arrivals(60), &cfg)
    };
    let every = run(1, 0);
    let third = run(3, 0);
    assert_eq!(every.detection_rounds, every.intervals);
    assert_eq!(third.detection_rounds, every.intervals.div_ceil(3));
    let all = every.anomalies["busy"];
    assert!(all > 0);
    let strict = run(1, 900).anomalies.get("busy").copied().unwrap_or(0);
    assert!(strict < all, "a higher threshold counts fewer anomalies: {strict} vs {all}");
}
