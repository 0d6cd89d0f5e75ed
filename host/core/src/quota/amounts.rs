//! What queues are accounted in: resources ([`Dim`]), amounts of them
//! ([`Amounts`]: what a pod uses, what a queue holds) and a quota as
//! amounts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Quota;
use crate::model::{GPU_MILLI, Pod};

/// One resource a queue is accounted in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Dim {
    /// CPU, millicores.
    Cpu,
    /// Memory, MiB.
    Memory,
    /// GPUs of any model, thousandths.
    Gpu,
    /// GPUs of this model, thousandths.
    Model(String),
}

impl Dim {
    /// As metrics and messages name it: `cpu_milli`, `memory_mib`, `gpus`,
    /// `gpus/V100`.
    pub fn name(&self) -> String {
        match self {
            Dim::Cpu => "cpu_milli".into(),
            Dim::Memory => "memory_mib".into(),
            Dim::Gpu => "gpus".into(),
            Dim::Model(m) => format!("gpus/{m}"),
        }
    }

    /// `v` of this resource in its own unit (GPUs, not thousandths).
    pub fn show(&self, v: u64) -> String {
        match self {
            Dim::Gpu | Dim::Model(_) if v.is_multiple_of(u64::from(GPU_MILLI)) => {
                (v / u64::from(GPU_MILLI)).to_string()
            }
            Dim::Gpu | Dim::Model(_) => format!("{:.3}", v as f64 / f64::from(GPU_MILLI)),
            _ => v.to_string(),
        }
    }
}

/// An amount per resource (GPUs in thousandths); absent = 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amounts(pub BTreeMap<Dim, u64>);

impl Amounts {
    /// What `pod` uses on a node whose GPUs are `model`.
    pub fn of(pod: &Pod, model: &str) -> Self {
        let mut a = BTreeMap::new();
        if pod.requests.cpu_milli > 0 {
            a.insert(Dim::Cpu, pod.requests.cpu_milli);
        }
        if pod.requests.memory_mib > 0 {
            a.insert(Dim::Memory, pod.requests.memory_mib);
        }
        let gpu = u64::from(pod.gpu_count) * u64::from(pod.gpu_milli.min(GPU_MILLI));
        if gpu > 0 {
            a.insert(Dim::Gpu, gpu);
            a.insert(Dim::Model(model.to_string()), gpu);
        }
        Self(a)
    }

    /// What `pod` uses wherever it runs: CPU, memory and GPUs of any model.
    pub fn anywhere(pod: &Pod) -> Self {
        Self::from_parts(Self::anywhere_parts(pod))
    }

    /// [`Amounts::anywhere`] as (CPU, memory, GPU): what sums without a map.
    pub fn anywhere_parts(pod: &Pod) -> [u64; 3] {
        let gpu = u64::from(pod.gpu_count) * u64::from(pod.gpu_milli.min(GPU_MILLI));
        [pod.requests.cpu_milli, pod.requests.memory_mib, gpu]
    }

    /// CPU, memory and GPU amounts (those above 0).
    pub fn from_parts([cpu, memory, gpu]: [u64; 3]) -> Self {
        let dims = [(Dim::Cpu, cpu), (Dim::Memory, memory), (Dim::Gpu, gpu)];
        Self(dims.into_iter().filter(|&(_, v)| v > 0).collect())
    }

    /// Of one resource.
    pub fn get(&self, d: &Dim) -> u64 {
        self.0.get(d).copied().unwrap_or(0)
    }

    /// Adds `other`.
    pub fn add(&mut self, other: &Amounts) {
        for (d, v) in &other.0 {
            *self.0.entry(d.clone()).or_insert(0) += v;
        }
    }

    /// Takes away `other` (never below 0); resources left at 0 go.
    pub fn sub(&mut self, other: &Amounts) {
        for (d, v) in &other.0 {
            if let Some(x) = self.0.get_mut(d) {
                *x = x.saturating_sub(*v);
            }
        }
        self.0.retain(|_, v| *v > 0);
    }

    /// Whether nothing is used.
    pub fn is_empty(&self) -> bool {
        self.0.values().all(|&v| v == 0)
    }
}

/// A quota as amounts: each set resource, GPUs in thousandths.
pub(super) fn amounts(q: &Quota) -> BTreeMap<Dim, u64> {
    let mut a = BTreeMap::new();
    if let Some(v) = q.cpu_milli {
        a.insert(Dim::Cpu, v);
    }
    if let Some(v) = q.memory_mib {
        a.insert(Dim::Memory, v);
    }
    if let Some(v) = q.gpus {
        a.insert(Dim::Gpu, u64::from(v) * u64::from(GPU_MILLI));
    }
    for (m, &v) in &q.gpus_by_model {
        a.insert(Dim::Model(m.clone()), u64::from(v) * u64::from(GPU_MILLI));
    }
    a
}

/// A resource's field in a quota (`gpus_by_model.V100`).
pub(super) fn field_name(d: &Dim) -> String {
    match d {
        Dim::Model(m) => format!("gpus_by_model.{m}"),
        d => d.name(),
    }
}
