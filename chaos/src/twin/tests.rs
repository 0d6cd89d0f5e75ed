use std::collections::BTreeSet;

use tessera_core::cluster::{Cluster, Placement};
use tessera_core::framework::{Choice, Cycle};
use tessera_core::metrics::TargetWorkload;
use tessera_core::model::{GpuHealth, NodeId, Pod};
use tessera_core::synthetic;
use tessera_core::telemetry::TelemetryConfig;

use super::*;
use crate::fault::{FaultKind, FaultSpec, Start, Target};
use tessera_core::framework::{Placer, Reschedule};

/// Binds on the first candidate, or, if `avoid_degraded`, on the first
/// candidate none of whose GPUs is degraded.
#[derive(Default)]
struct Simple {
    avoid_degraded: bool,
    degraded: BTreeSet<NodeId>,
    weights: Vec<Vec<f64>>,
}

impl Placer for Simple {
    fn nodes_changed(&mut self, nodes: &[&Node]) {
        for n in nodes {
            if n.gpus.iter().any(|g| g.health == GpuHealth::Degraded) {
                self.degraded.insert(n.id);
            } else {
                self.degraded.remove(&n.id);
            }
        }
    }
    fn set_weights(&mut self, w: &[f64]) {
        self.weights.push(w.to_vec());
    }
    fn place(&mut self, _pod: &Pod, candidates: &[NodeId]) -> Choice {
        let node = if self.avoid_degraded {
            candidates.iter().copied().find(|c| !self.degraded.contains(c)).or(candidates.first().copied())
        } else {
            candidates.first().copied()
        };
        Choice { node, gpu_hint: None, plugin_errors: 0, deadline_hit: false, filtered: None }
    }
}

fn cluster() -> Vec<Node> {
    synthetic::cluster(40, 3)
}

fn arrivals(nodes: &[Node], load: f64) -> Vec<Arrival> {
    let models = synthetic::gpu_models(nodes);
    let gpus: u64 = nodes.iter().map(|n| n.gpus.len() as u64).sum();
    synthetic::arrivals(&synthetic::pods(800, &models, 3), gpus, load, 3)
}

fn cfg() -> DriverConfig {
    DriverConfig {
        telemetry: TelemetryConfig { interval_s: 300, ..TelemetryConfig::default() },
        seed: 5,
        dead_band_permille: DEAD_BAND_PERMILLE,
        ..DriverConfig::default()
    }
}

fn fault(kind: FaultKind, at: u64, duration_s: u64, intensity: f64, target: Target) -> FaultSpec {
    FaultSpec { kind, start: Start::At(at), duration_s, intensity, target }
}

fn go(faults: &[FaultSpec], placer: &mut Simple) -> Outcome {
    let nodes = cluster();
    let arr = arrivals(&nodes, 0.9);
    let t0 = arr.iter().map(|a| a.at).min().unwrap();
    let resolved: Vec<ResolvedFault> = faults
        .iter()
        .map(|f| {
            let Start::At(at) = f.start else { unreachable!("fixed starts") };
            f.resolve(&nodes, t0 + at, 11).unwrap()
        })
        .collect();
    let workload = TargetWorkload::from_pods(arr.iter().map(|a| &a.pod), 0.95);
    run(nodes, &workload, arr, &resolved, placer, None, &cfg())
}

fn balanced(o: &Outcome) {
    assert_eq!(o.lost, 0, "{o:?}");
    assert_eq!(o.completed + o.abandoned + o.running + o.waiting, o.submitted, "{o:?}");
}

#[test]
fn without_faults_every_pod_is_accounted_for() {
    let o = go(&[], &mut Simple::default());
    balanced(&o);
    assert_eq!(o.displaced, 0);
    assert!(o.completed > 400, "{o:?}");
    assert!(o.mean_allocation_pct > 30.0, "{o:?}");
}

#[test]
fn a_node_crash_displaces_pods_that_all_run_again_and_the_run_replays_exactly() {
    let f = [fault(FaultKind::NodeCrash, 20_000, 3_600, 1.0, Target::Count(5))];
    let o = go(&f, &mut Simple::default());
    balanced(&o);
    assert!(o.displaced > 0, "{o:?}");
    assert_eq!(o.faults[0].displaced, o.displaced);
    assert_eq!(o.unrecovered, 0);
    // There is room elsewhere: the displaced pods run again well within
    // the hour the nodes are down.
    assert!(o.recovery_s < 3_600, "{o:?}");
    assert_eq!(o, go(&f, &mut Simple::default()), "deterministic");
}

#[test]
fn a_zone_partition_empties_the_zone_until_it_heals() {
    let zone = cluster()[0].zone.clone();
    let f = [fault(FaultKind::ZonePartition, 20_000, 7_200, 1.0, Target::Zone(zone.clone()))];
    let o = go(&f, &mut Simple::default());
    balanced(&o);
    let zone_nodes = cluster().iter().filter(|n| n.zone == zone).count();
    assert_eq!(o.faults[0].nodes, zone_nodes);
    assert!(o.faults[0].displaced > o.displaced / 2, "{o:?}");
    let crash = go(&[fault(FaultKind::NodeCrash, 20_000, 7_200, 1.0, Target::One)], &mut Simple::default());
    assert!(o.displaced > crash.displaced, "a zone is more than a node: {} vs {}", o.displaced, crash.displaced);
}

#[test]
fn gpu_failures_displace_only_pods_on_the_failed_gpus() {
    let f = [fault(FaultKind::GpuFailure, 20_000, 3_600, 0.5, Target::Percent(25.0))];
    let o = go(&f, &mut Simple::default());
    balanced(&o);
    assert!(o.faults[0].gpus >= o.faults[0].nodes && o.displaced > 0, "{o:?}");
    let whole_nodes =
        go(&[fault(FaultKind::NodeCrash, 20_000, 3_600, 1.0, Target::Percent(25.0))], &mut Simple::default());
    assert!(o.displaced < whole_nodes.displaced, "{} vs {}", o.displaced, whole_nodes.displaced);
}

#[test]
fn degraded_gpus_run_hot_and_a_placer_that_avoids_them_violates_fewer_slas() {
    let f = [fault(FaultKind::GpuDegradation, 0, 200_000, 1.0, Target::Percent(50.0))];
    let none = go(&[], &mut Simple::default());
    let blind = go(&f, &mut Simple::default());
    let aware = go(&f, &mut Simple { avoid_degraded: true, ..Simple::default() });
    balanced(&blind);
    assert!(blind.sla_violations > none.sla_violations, "{} vs {}", blind.sla_violations, none.sla_violations);
    assert!(aware.sla_violations < blind.sla_violations, "{} vs {}", aware.sla_violations, blind.sla_violations);
}

#[test]
fn telemetry_loss_and_delay_withhold_samples() {
    let o = go(&[fault(FaultKind::TelemetryLoss, 0, 50_000, 1.0, Target::All)], &mut Simple::default());
    let n = cluster().len() as u64;
    assert!(o.telemetry_withheld >= n * (50_000 / 300), "{}", o.telemetry_withheld);
    let d = go(&[fault(FaultKind::TelemetryDelay, 0, 50_000, 0.3, Target::All)], &mut Simple::default());
    // Three intervals late: the first three intervals of the fault have
    // nothing old enough to deliver.
    assert_eq!(d.telemetry_withheld, 3 * n);
    balanced(&d);
}

#[test]
fn a_load_spike_adds_arrivals_and_plugin_faults_are_counted() {
    let base = go(&[], &mut Simple::default());
    let o = go(&[fault(FaultKind::LoadSpike, 10_000, 20_000, 0.5, Target::One)], &mut Simple::default());
    balanced(&o);
    assert!(o.faults[0].extra_arrivals > 0);
    assert_eq!(o.submitted, base.submitted + o.faults[0].extra_arrivals);
    let t = go(&[fault(FaultKind::PluginTrap, 0, 1_000_000, 1.0, Target::One)], &mut Simple::default());
    balanced(&t);
    assert!(t.plugin_faults > 500, "every decision faulted: {t:?}");
    let slow = go(&[fault(FaultKind::PluginSlow, 0, 1_000_000, 0.5, Target::One)], &mut Simple::default());
    assert!(slow.deadline_hits > 100 && slow.plugin_faults == 0, "{slow:?}");
}

#[test]
fn overlapping_crashes_keep_a_node_down_until_both_end() {
    let nodes = cluster();
    let arr = arrivals(&nodes, 0.9);
    let t0 = arr.iter().map(|a| a.at).min().unwrap();
    let one = |at, d| {
        fault(FaultKind::NodeCrash, at, d, 1.0, Target::Zone(nodes[0].zone.clone()))
            .resolve(&nodes, t0 + at, 1)
            .unwrap()
    };
    let faults = vec![one(10_000, 10_000), one(15_000, 20_000)];
    let workload = TargetWorkload::from_pods(arr.iter().map(|a| &a.pod), 0.95);
    let o = run(nodes.clone(), &workload, arr, &faults, &mut Simple::default(), None, &cfg());
    balanced(&o);
    // Pods that arrived while the zone was down went elsewhere; none bound
    // on it before 35,000 s (the second crash found nothing new to displace).
    assert_eq!(o.faults[1].displaced, 0, "{o:?}");
}

/// Moves nothing; records the failure rates the twin sets.
#[derive(Default)]
struct Recording {
    rates: Vec<f64>,
}

impl Reschedule for Recording {
    fn reschedule(&mut self, _: &Cluster, _: &[(Pod, Placement)], _: &[u64], _: &Cycle<'_>) -> Vec<(usize, Placement)> {
        Vec::new()
    }
}

impl TwinRescheduler for Recording {
    fn set_move_failure_rate(&mut self, p: f64) {
        self.rates.push(p);
    }
    fn moves_failed(&self) -> u64 {
        7
    }
}

#[test]
fn actuator_errors_reach_the_rescheduler_for_their_window_only() {
    let nodes = cluster();
    let arr = arrivals(&nodes, 0.9);
    let t0 = arr.iter().map(|a| a.at).min().unwrap();
    let f = |at: u64, d: u64, p: f64| {
        fault(FaultKind::ActuatorErrors, at, d, p, Target::One).resolve(&nodes, t0 + at, 1).unwrap()
    };
    // Two overlapping windows: 0.5, then both (1 - 0.5 x 0.5), then 0.5, then none.
    let faults = vec![f(1_000, 10_000, 0.5), f(5_000, 2_000, 0.5)];
    let workload = TargetWorkload::from_pods(arr.iter().map(|a| &a.pod), 0.95);
    let mut rs = Recording::default();
    let o = run(nodes, &workload, arr, &faults, &mut Simple::default(), Some(&mut rs), &cfg());
    assert_eq!(rs.rates, [0.5, 0.75, 0.5, 0.0]);
    assert_eq!(o.migrations_failed, 7, "reported from the rescheduler");
    assert!(o.faults.iter().all(|f| f.nodes == 0), "no node is hit");
}

#[test]
fn adaptive_weights_are_chosen_every_interval_in_the_twin_too() {
    let nodes = cluster();
    let arr = arrivals(&nodes, 0.9);
    let workload = TargetWorkload::from_pods(arr.iter().map(|a| &a.pod), 0.95);
    let sets = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
    let c = DriverConfig { weight_sets: sets.clone(), ..cfg() };
    let mut placer = Simple::default();
    let o = run(nodes.clone(), &workload, arr.clone(), &[], &mut placer, None, &c);
    balanced(&o);
    assert!(placer.weights.len() > 100, "one choice per interval: {}", placer.weights.len());
    assert!(placer.weights.iter().all(|w| sets.contains(w)));
    assert_eq!(o.bandit.len(), 2);
    assert_eq!(o.bandit.iter().map(|a| a.pulls).sum::<u64>(), placer.weights.len() as u64);
    // Without weight sets the placer keeps its own weights.
    let mut fixed = Simple::default();
    let f = run(nodes, &workload, arr, &[], &mut fixed, None, &cfg());
    assert!(fixed.weights.is_empty() && f.bandit.is_empty());
}

#[test]
fn a_fault_after_the_workload_ended_is_not_exercised_and_blocks_the_verdict() {
    let during = fault(FaultKind::NodeCrash, 20_000, 3_600, 1.0, Target::One);
    // Far past the last departure: the twin is empty when it strikes.
    let after = fault(FaultKind::NodeCrash, 100_000_000, 3_600, 1.0, Target::One);
    let o = go(&[during.clone(), after], &mut Simple::default());
    balanced(&o);
    assert!(o.faults[0].exercised, "{:?}", o.faults[0]);
    assert!(!o.faults[1].exercised, "{:?}", o.faults[1]);

    let text = "name: t\ncluster: {builtin: {nodes: 5}}\nworkload: {builtin: {pods: 5, load: 1}}\ncandidate: a\nbaseline: b\nseeds: [1]\nscenarios:\n  - {name: late, faults: [{kind: node-crash, start: {at: 100000000}, duration_s: 60}]}\n";
    let campaign = crate::Campaign::parse(text, "t.yaml").unwrap();
    // Both sides of scenario `late` had outcome `o`.
    let judge = |o: &Outcome| {
        let run = |side| crate::verdict::Run {
            scenario: "late".into(),
            seed: 1,
            side,
            outcome: o.clone(),
            forecasts: Vec::new(),
            wall_s: 0.0,
        };
        crate::verdict::judge(
            &campaign,
            vec![run(crate::verdict::Side::Candidate), run(crate::verdict::Side::Baseline)],
            0.0,
        )
    };
    let r = judge(&o);
    assert_eq!(r.verdict, crate::verdict::Verdict::Block, "{:?}", r.gates);
    assert_eq!(r.failing, ["faults_exercised"]);
    let g = r.gates.iter().find(|g| g.name == "faults_exercised").unwrap();
    assert_eq!((g.candidate, g.baseline), (1.0, 1.0));

    // Every fault struck: the gate passes.
    let r = judge(&go(&[during], &mut Simple::default()));
    assert_eq!(r.verdict, crate::verdict::Verdict::Promote, "{:?}", r.gates);
}
