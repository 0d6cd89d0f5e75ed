//! The online protocol on the loop ([`crate::driver`]): a workload's pods
//! arrive and leave at their times; telemetry comes from the
//! [`crate::telemetry`] model, zone carbon intensity too; a rescheduler,
//! if given, carries out the cycles the loop asks for.

use super::{Kind, timeline};
use crate::cluster::Placement;
use crate::driver::{Driver, DriverConfig, LoopReport, Model, World};
use crate::framework::{Cycle, Placer, Reschedule};

use crate::metrics::TargetWorkload;
use crate::model::{Arrival, Node, Pod, PodId};
use crate::telemetry::{NodeSample, TelemetryModel};

/// A workload replayed through the loop: pod ids are arrival indices.
pub struct Replay<'a, P: Placer> {
    placer: &'a mut P,
    arrivals: &'a [Arrival],
    events: Vec<(u64, Kind, usize)>,
    next: usize,
    telemetry: TelemetryModel,
    rescheduler: Option<&'a mut dyn Reschedule>,
    last_arrival: Option<u64>,
}

impl<'a, P: Placer> Replay<'a, P> {
    /// `arrivals` decided by `placer`, telemetry from a model seeded like
    /// the loop, cycles carried out by `rescheduler`.
    pub fn new(
        placer: &'a mut P,
        arrivals: &'a [Arrival],
        cfg: &DriverConfig,
        rescheduler: Option<&'a mut dyn Reschedule>,
    ) -> Self {
        Self {
            placer,
            arrivals,
            events: timeline(arrivals),
            next: 0,
            telemetry: TelemetryModel::new(cfg.telemetry, cfg.seed),
            rescheduler,
            last_arrival: arrivals.iter().map(|a| a.at).max(),
        }
    }
}

impl<P: Placer> World for Replay<'_, P> {
    fn placer(&mut self) -> &mut dyn Placer {
        self.placer
    }

    fn next_event(&mut self, until: u64) -> Option<u64> {
        self.events.get(self.next).map(|e| e.0).filter(|&t| t <= until)
    }

    fn happen(&mut self, t: u64, model: &mut Model) {
        // Every event at this second, departures first.
        while let Some(&(at, kind, i)) = self.events.get(self.next)
            && at <= t
        {
            match kind {
                Kind::Arrive => model.submit(i as PodId, self.arrivals[i].pod.clone(), t).expect("indices are unique"),
                Kind::Leave => {
                    model.depart(i as PodId);
                }
            }
            self.next += 1;
        }
    }

    fn sample(&mut self, node: &Node, pods: &[(&Pod, Placement)], t: u64) -> NodeSample {
        self.telemetry.sample(node, pods.iter().copied(), t)
    }

    fn zone_carbon(&mut self, zone: &str, t: u64) -> u32 {
        self.telemetry.carbon(zone, t)
    }

    fn reschedule(&mut self, model: &mut Model, cycle: &Cycle<'_>) -> Option<Vec<(PodId, Placement)>> {
        let rs = self.rescheduler.as_deref_mut()?;
        Some(model.reschedule_with(rs, cycle))
    }

    fn last_arrival(&self) -> Option<u64> {
        self.last_arrival
    }
}

/// Runs `arrivals` (pod ids are their indices) through the loop.
pub fn run_online(
    nodes: Vec<Node>,
    workload: &TargetWorkload,
    placer: &mut impl Placer,
    arrivals: &[Arrival],
    cfg: &DriverConfig,
) -> LoopReport {
    run_online_with(nodes, workload, placer, arrivals, cfg, None)
}

/// [`run_online`] with a rescheduler carrying out the loop's cycles.
pub fn run_online_with<'a>(
    nodes: Vec<Node>,
    workload: &TargetWorkload,
    placer: &'a mut impl Placer,
    arrivals: &'a [Arrival],
    cfg: &DriverConfig,
    rescheduler: Option<&'a mut dyn Reschedule>,
) -> LoopReport {
    let mut driver = Driver::new(nodes, workload.clone(), cfg.clone());
    let mut world = Replay::new(placer, arrivals, cfg, rescheduler);
    driver.run_to_end(&mut world);
    driver.report()
}

#[cfg(test)]
mod tests;
