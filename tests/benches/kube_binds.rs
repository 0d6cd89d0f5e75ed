//! Binds per second of the Kubernetes backend against the in-process API
//! server (loopback HTTP/1.1, JSON): one at a time (`Backend::bind`, one
//! round trip after another) and a pass's binds together
//! (`Backend::bind_all`, up to 32 in flight). Both on the same machine in
//! one run, so compare the ratio; on a real API server each round trip is
//! milliseconds, not a fraction of one, and the ratio grows.
//!
//! `cargo bench -p tessera-tests --bench kube_binds [-- PODS]`

#[path = "../all/kube/apiserver.rs"]
mod apiserver;

use std::time::Instant;

use serde_json::json;
use tessera_core::cluster::{GpuSet, Placement};
use tessera_core::metrics::TargetWorkload;
use tessera_core::model::Pod;
use tessera_kube::KubeBackend;
use tessera_kube::KubeBackendConfig;
use tessera_server::backend::{Backend, ClusterEvent};

fn main() {
    let pods: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(2000);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!("| mode | pods | seconds | binds/s |");
    println!("| --- | --- | --- | --- |");
    let mut rates = Vec::new();
    for batch in [false, true] {
        let srv = rt.block_on(apiserver::ApiServer::start());
        let nodes = pods.div_ceil(8);
        for n in 0..nodes {
            srv.put(json!({
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("n{n}")},
                "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8"},
                           "conditions": [{"type": "Ready", "status": "True"}]}
            }));
        }
        for i in 0..pods {
            srv.put(json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p{i}"), "namespace": "bench"},
                "spec": {"schedulerName": "tessera", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
            }));
        }
        let cfg = KubeBackendConfig { leader_election: false, agent_port: None, ..KubeBackendConfig::default() };
        let workload = |_: &[tessera_core::model::Node]| {
            TargetWorkload::from_pods(&[Pod { gpu_count: 1, gpu_milli: 1000, ..Pod::default() }], 0.95)
        };
        let mut b = rt.block_on(KubeBackend::connect(srv.config(), cfg, workload)).unwrap();
        let mut ids = Vec::new();
        while ids.len() < pods {
            for (_, e) in b.events(0) {
                if let ClusterEvent::Submitted { id, .. } = e {
                    ids.push(id);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let binds: Vec<(u64, Placement)> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| (id, Placement { node: (i / 8) as u32, gpus: GpuSet(1 << (i % 8)) }))
            .collect();
        let t0 = Instant::now();
        let ok = if batch {
            // A pass's worth at a time, as the loop hands them over.
            binds.chunks(256).flat_map(|c| b.bind_all(c)).filter(Result::is_ok).count()
        } else {
            binds.iter().map(|&(id, at)| b.bind(id, at)).filter(Result::is_ok).count()
        };
        let s = t0.elapsed().as_secs_f64();
        assert_eq!(ok, pods, "every bind succeeds");
        let mode = if batch { "bind_all (32 in flight)" } else { "bind, one at a time" };
        println!("| {mode} | {pods} | {s:.3} | {:.0} |", pods as f64 / s);
        rates.push(pods as f64 / s);
        rt.block_on(b.shutdown());
    }
    println!("\nratio bind_all / bind: {:.2}", rates[1] / rates[0]);
}
