//! The Kubernetes backend: the loop's [`Backend`] on a real API server.
//!
//! Watchers (kube-rs reflectors' watch machinery: list, then watch from
//! the list's resourceVersion with bookmarks, re-watch after a dropped
//! stream, re-list after 410 Gone) on nodes, pods and
//! PodDisruptionBudgets feed [`crate::track`]; its cluster events wait in
//! a channel for the loop's next pass. Binds go through the
//! `pods/binding` subresource (after the chosen GPU indices are written
//! to the pod), evictions through `pods/eviction` (a 429 from a
//! disruption budget is respected and reported). Only the leader of the
//! Lease acts; a standby's model follows the events. Node agents' samples
//! (`/v1/sample` on each node) are the GPU telemetry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::KubeBackendConfig;
use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node as KNode, Pod as KPod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::{Api, Client};
use tessera_agent::AgentSample;
use tessera_core::cluster::{GpuSet, Placement};
use tessera_core::metrics::TargetWorkload;
use tessera_core::model::{Node, Pod};
use tessera_core::sched::PodId;
use tessera_core::telemetry::NodeSample;
use tessera_server::backend::{Backend, BackendError, BackendOp, ClusterEvent, ExtenderBackend, LiveBackend, Moves};

use crate::calls::{self, CallError};
use crate::convert;
use crate::leader::{ElectionConfig, Elector, Leadership};
use crate::models::ModelNames;
use crate::track::{NodeTracker, PodIndex, PodTracker};

mod capabilities;
mod tasks;
use tasks::{blocking_budget, protect_pods, scrape_agents, watch_budgets, watch_nodes, watch_pods};

/// The backend could not start.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// An API call failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// Why.
        source: kube::Error,
    },
    /// The first list did not arrive in time.
    #[error("no list of nodes and pods within {0:?}")]
    SyncTimeout(Duration),
}

/// What the watchers, the elector and the scraper share with the loop.
struct Live {
    /// Cluster events for the loop's next pass.
    events: std::sync::mpsc::Receiver<ClusterEvent>,
    /// Pods by the loop's id.
    index: PodIndex,
    /// Pods being bound by this replica.
    binding: Arc<Mutex<HashMap<String, String>>>,
    /// Latest agent samples by node name.
    samples: Arc<Mutex<HashMap<String, NodeSample>>>,
    /// Node addresses by name (where agents listen).
    addresses: Arc<Mutex<HashMap<String, String>>>,
    /// The disruption budgets, as the reflector last saw them.
    budgets: kube::runtime::reflector::Store<PodDisruptionBudget>,
}

/// The Kubernetes backend.
pub struct KubeBackend {
    rt: tokio::runtime::Handle,
    client: Client,
    /// The same API without the client's retries (evictions).
    no_retry_client: Client,
    nodes: Vec<Node>,
    /// Node names by the loop's id (the order the loop learnt them in).
    node_names: Vec<String>,
    workload: TargetWorkload,
    live: Live,
    leadership: Leadership,
    /// This replica's name (lease holder, reporting instance of events).
    identity: String,
    /// How GPU feature discovery's products are named.
    names: ModelNames,
    started: Instant,
    /// Announcements after a failed eviction, for the next pass.
    requeued: Vec<ClusterEvent>,
    /// The reason last reported for each waiting pod.
    reported: HashMap<PodId, String>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The election, which releases the lease when told to stop.
    elector: Option<tokio::task::JoinHandle<()>>,
    stop: Arc<tokio::sync::Notify>,
    /// The movement journal's ConfigMap: namespace, name.
    journal_at: (String, String),
}

impl std::fmt::Debug for KubeBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeBackend").field("nodes", &self.node_names.len()).finish_non_exhaustive()
    }
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> KubeError {
    let what = what.into();
    move |source| KubeError::Api { what, source }
}

/// This replica's identity: the configured one, `POD_NAME`, or the host.
pub fn identity(cfg: &KubeBackendConfig) -> String {
    cfg.identity
        .clone()
        .or_else(|| std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string()))
        .unwrap_or_else(|| format!("tessera-{}", std::process::id()))
}

/// What Tessera's requests say they are from (`User-Agent`), as
/// client-go's do (`kube-scheduler/v1.33.0 …`): the API server's audit log
/// and its priority-and-fairness rules see `tessera/<version>`.
pub const USER_AGENT: &str = concat!("tessera/", env!("CARGO_PKG_VERSION"));

/// `config` with Tessera's [`USER_AGENT`] on every request.
pub fn with_user_agent(mut config: kube::Config) -> kube::Config {
    use axum::http::{HeaderValue, header};
    config.headers.retain(|(name, _)| name != header::USER_AGENT);
    config.headers.push((header::USER_AGENT, HeaderValue::from_static(USER_AGENT)));
    config
}

impl KubeBackend {
    /// Lists the nodes, starts the watchers (and the election and the
    /// agent scraper when configured) and waits for the first list of
    /// pods and of disruption budgets. The target workload is learnt from the pods there are (GPU
    /// pods), else `fallback`. Call inside a Tokio runtime.
    pub async fn connect(
        config: kube::Config,
        cfg: KubeBackendConfig,
        fallback: impl FnOnce(&[Node]) -> TargetWorkload,
    ) -> Result<Self, KubeError> {
        let config = with_user_agent(config);
        let client = Client::try_from(config.clone()).map_err(api_err("build a client"))?;
        // Evictions are not retried by the client: a 429 from a disruption
        // budget is an answer, handled by the caller.
        let mut no_retry = config;
        no_retry.default_retry = false;
        let no_retry_client = Client::try_from(no_retry).map_err(api_err("build a client"))?;
        let names = ModelNames::new(cfg.gpu_models.clone());
        let node_api: Api<KNode> = Api::all(client.clone());
        let listed = node_api.list(&ListParams::default()).await.map_err(api_err("list nodes"))?;
        let mut nodes = Vec::new();
        let mut addresses = HashMap::new();
        for n in &listed.items {
            match convert::node(n, &names) {
                Ok(node) => {
                    if let Some(a) = convert::node_address(n) {
                        addresses.insert(node.name.clone(), a);
                    }
                    nodes.push(node);
                }
                Err(e) => tracing::warn!("{e}; the node is left out"),
            }
        }
        let pod_api: Api<KPod> = match &cfg.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let me = identity(&cfg);
        let (tx, events) = std::sync::mpsc::channel();
        let (budgets, budget_writer) = kube::runtime::reflector::store();
        let live = Live {
            events,
            index: PodIndex::default(),
            binding: Arc::default(),
            samples: Arc::default(),
            addresses: Arc::new(Mutex::new(addresses)),
            budgets,
        };
        let stop = Arc::new(tokio::sync::Notify::new());
        let mut tasks = Vec::new();
        let (synced_tx, mut synced_rx) = tokio::sync::mpsc::channel::<Vec<Pod>>(1);
        let (health_tx, health_rx) = tokio::sync::mpsc::channel(1024);
        tasks.push(tokio::spawn(watch_nodes(
            node_api,
            NodeTracker::new(&nodes).with_names(names.clone()),
            tx.clone(),
            live.addresses.clone(),
            health_rx,
        )));
        let tracker =
            PodTracker::new(&cfg.scheduler_name, live.index.clone(), live.binding.clone()).with_names(names.clone());
        let reporter = (client.clone(), me.clone());
        let group_api: Api<crate::podgroup::PodGroup> = Api::all(client.clone());
        tasks.push(tokio::spawn(watch_pods((pod_api, group_api), tracker, tx.clone(), synced_tx, reporter)));
        let pdb_api: Api<PodDisruptionBudget> = Api::all(client.clone());
        tasks.push(tokio::spawn(watch_budgets(pdb_api, budget_writer)));
        tasks.push(tokio::spawn(protect_pods(live.budgets.clone(), live.index.clone(), tx)));
        let mut elector_task = None;
        let leadership = if cfg.leader_election {
            // No client retries: a renewal that cannot get through must fail
            // within the retry period, not hold leadership while it retries.
            let lease_api: Api<Lease> = Api::namespaced(no_retry_client.clone(), &cfg.lease_namespace);
            let (elector, leadership) = Elector::new(
                lease_api,
                ElectionConfig {
                    name: cfg.lease_name.clone(),
                    identity: me.clone(),
                    lease_duration: Duration::from_secs(cfg.lease_duration_s),
                    renew_deadline: Duration::from_secs(cfg.renew_deadline_s),
                    retry_period: Duration::from_secs(cfg.retry_period_s),
                },
            );
            let s = stop.clone();
            elector_task = Some(tokio::spawn(elector.run(async move { s.notified().await })));
            leadership
        } else {
            Leadership::always()
        };
        if let Some(port) = cfg.agent_port {
            let every = Duration::from_secs(cfg.agent_interval_s);
            tasks.push(tokio::spawn(scrape_agents(
                port,
                every,
                live.addresses.clone(),
                live.samples.clone(),
                health_tx,
            )));
        }
        let timeout = Duration::from_secs(cfg.sync_timeout_s);
        let synced = async {
            let shapes = synced_rx.recv().await.unwrap_or_default();
            let _ = live.budgets.wait_until_ready().await;
            shapes
        };
        let shapes = tokio::time::timeout(timeout, synced).await.map_err(|_| KubeError::SyncTimeout(timeout))?;
        let workload = if shapes.is_empty() { fallback(&nodes) } else { TargetWorkload::from_pods(&shapes, 0.95) };
        let node_names = nodes.iter().map(|n| n.name.clone()).collect();
        Ok(Self {
            rt: tokio::runtime::Handle::current(),
            client,
            no_retry_client,
            nodes,
            node_names,
            workload,
            live,
            leadership,
            identity: me,
            names,
            started: Instant::now(),
            requeued: Vec::new(),
            reported: HashMap::new(),
            tasks,
            elector: elector_task,
            stop,
            journal_at: (cfg.lease_namespace.clone(), cfg.journal_name.clone()),
        })
    }

    /// How it names GPU models (the extender names pods' models alike).
    pub fn model_names(&self) -> ModelNames {
        self.names.clone()
    }

    /// The API client.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Whether this replica leads.
    pub fn leadership(&self) -> Leadership {
        self.leadership.clone()
    }

    /// Stops the watchers and releases the lease (if held).
    pub async fn shutdown(mut self) {
        self.stop.notify_one();
        // The elector releases the lease on stop; the others just end.
        if let Some(e) = self.elector.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), e).await;
        }
        for t in std::mem::take(&mut self.tasks) {
            t.abort();
        }
    }

    /// Binds the pod, in one call: the API server copies the Binding's
    /// annotations (the GPU indices chosen) onto the pod.
    fn post_binding(&self, ns: &str, name: &str, uid: &str, node: &str, gpus: GpuSet) -> Result<(), CallError> {
        let (c, ns, name, uid, node) =
            (self.client.clone(), ns.to_string(), name.to_string(), uid.to_string(), node.to_string());
        calls::run(&self.rt, async move { calls::bind(c, &ns, &name, &uid, &node, gpus).await })
    }

    fn pod_ref(&self, id: PodId) -> Option<crate::track::PodRef> {
        self.live.index.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
    }
}

/// How long stopping waits for the lease to be handed over.
const HANDOVER_DEADLINE: Duration = Duration::from_secs(5);

impl Drop for KubeBackend {
    fn drop(&mut self) {
        for t in self.tasks.iter().chain(&self.elector) {
            t.abort();
        }
    }
}

impl Backend for KubeBackend {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn active(&self) -> bool {
        self.leadership.is_leader()
    }

    fn shutdown(&mut self) {
        // Hand the lease over now rather than let it expire; never wait
        // past the deadline, even if the runtime is going away.
        self.stop.notify_one();
        if let Some(e) = self.elector.take()
            && crate::wait::within(&self.rt, HANDOVER_DEADLINE, e).is_none()
        {
            tracing::warn!("the lease was not handed over within {HANDOVER_DEADLINE:?}; it expires instead");
        }
    }

    fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    fn workload(&self) -> &TargetWorkload {
        &self.workload
    }

    fn advance(&mut self, _tick: Duration) -> u64 {
        self.started.elapsed().as_secs()
    }

    fn events(&mut self, now: u64) -> Vec<(u64, ClusterEvent)> {
        let mut out = std::mem::take(&mut self.requeued);
        out.extend(self.live.events.try_iter());
        for e in &out {
            if let ClusterEvent::Deleted { id } = e {
                self.reported.remove(id);
            }
        }
        for e in &out {
            if let ClusterEvent::NodeUpsert { node } = e
                && !self.node_names.contains(&node.name)
            {
                self.node_names.push(node.name.clone());
            }
        }
        // What the watches saw since the last pass happened by now.
        out.into_iter().map(|e| (now, e)).collect()
    }

    fn sample(&mut self, node: &Node, _pods: &[(&Pod, Placement)], _t: u64) -> NodeSample {
        let samples = self.live.samples.lock().unwrap_or_else(|p| p.into_inner());
        samples.get(&node.name).cloned().unwrap_or_else(|| NodeSample {
            cpu_util_permille: node.cpu_util_permille,
            memory_util_permille: node.memory_util_permille,
            gpu_util_permille: node.gpus.iter().map(|g| g.util_permille).collect(),
            gpu_memory_used_mib: node.gpus.iter().map(|g| g.memory_used_mib).collect(),
        })
    }

    fn zone_carbon(&mut self, _zone: &str, _t: u64) -> u32 {
        // No carbon feed on Kubernetes yet: every zone alike.
        0
    }

    fn bind(&mut self, id: PodId, at: Placement) -> Result<(), BackendError> {
        self.bind_all(&[(id, at)]).pop().unwrap_or_else(|| Err(BackendError::new(BackendOp::Bind, id, "not attempted")))
    }

    fn bind_all(&mut self, binds: &[(PodId, Placement)]) -> Vec<Result<(), BackendError>> {
        let fail = |id: PodId, reason: String| BackendError::new(BackendOp::Bind, id, reason);
        if !self.leadership.is_leader() {
            return binds.iter().map(|&(id, _)| Err(fail(id, "this replica does not lead".into()))).collect();
        }
        // Who and where, or why not, in order.
        let targets: Vec<Result<(crate::track::PodRef, String), BackendError>> = binds
            .iter()
            .map(|&(id, at)| {
                let p = self.pod_ref(id).ok_or_else(|| fail(id, "unknown pod".into()))?;
                let node = self.node_names.get(at.node as usize).cloned();
                Ok((p, node.ok_or_else(|| fail(id, format!("unknown node {}", at.node)))?))
            })
            .collect();
        {
            let mut binding = self.live.binding.lock().unwrap_or_else(|e| e.into_inner());
            for (p, node) in targets.iter().flatten() {
                binding.insert(p.uid.clone(), node.clone());
            }
        }
        let calls: Vec<_> = targets
            .iter()
            .zip(binds)
            .map(|(t, &(_, at))| {
                let client = self.client.clone();
                let t = t.as_ref().ok().map(|(p, n)| (p.clone(), n.clone()));
                async move {
                    match t {
                        Some((p, node)) => {
                            Some(calls::bind(client, &p.namespace, &p.name, &p.uid, &node, at.gpus).await)
                        }
                        None => None,
                    }
                }
            })
            .collect();
        // Concurrently (kube-scheduler binds asynchronously too), results
        // in order.
        let batch = futures_util::stream::iter(calls).buffered(calls::BIND_CONCURRENCY).collect::<Vec<_>>();
        let results: Vec<Option<Result<(), CallError>>> =
            match crate::wait::within(&self.rt, calls::CALL_DEADLINE, batch) {
                Some(r) => r.into_iter().map(|r| r.map(|r| r.map_err(CallError::Api))).collect(),
                None => binds.iter().map(|_| Some(Err(CallError::NoAnswer(calls::CALL_DEADLINE)))).collect(),
            };
        let mut index = self.live.index.lock().unwrap_or_else(|e| e.into_inner());
        let mut binding = self.live.binding.lock().unwrap_or_else(|e| e.into_inner());
        let mut decided_elsewhere = Vec::new();
        let out = targets
            .into_iter()
            .zip(results)
            .zip(binds)
            .map(|((t, r), &(id, at))| {
                let (p, node) = t?;
                match r {
                    Some(Ok(())) => {
                        if let Some(r) = index.get_mut(&id) {
                            r.node = Some(node.clone());
                            r.gpus = Some(at.gpus);
                        }
                        self.rt.spawn(crate::report::event(
                            self.client.clone(),
                            crate::report::Happened {
                                message: format!("Successfully assigned {}/{} to {node}", p.namespace, p.name),
                                namespace: p.namespace,
                                name: p.name,
                                uid: Some(p.uid),
                                type_: "Normal",
                                reason: "Scheduled",
                                reporter: self.identity.clone(),
                            },
                        ));
                        Ok(())
                    }
                    Some(Err(e)) => {
                        binding.remove(&p.uid);
                        if e.status() == Some(409) {
                            decided_elsewhere.push((id, p));
                        }
                        Err(fail(id, e.to_string()))
                    }
                    None => Err(fail(id, "not attempted".into())),
                }
            })
            .collect();
        drop((index, binding));
        for (id, p) in decided_elsewhere {
            self.adopt_bound_elsewhere(id, &p);
        }
        out
    }

    fn evict(&mut self, id: PodId) -> Result<(), BackendError> {
        let fail = |reason: String| BackendError::new(BackendOp::Evict, id, reason);
        if !self.leadership.is_leader() {
            return Err(fail("this replica does not lead".into()));
        }
        let p = self.pod_ref(id).ok_or_else(|| fail("unknown pod".into()))?;
        if let Some(b) = blocking_budget(&self.live.budgets, &p.namespace, &p.labels) {
            // Not even sent: the budget allows no disruption now.
            if let Some(node) = p.node.clone() {
                self.requeued.push(ClusterEvent::Deleted { id });
                self.requeued.push(ClusterEvent::Running { id, pod: p.pod.clone(), node, gpus: p.gpus });
            }
            return Err(fail(format!("refused by the disruption budget {b}: it allows no disruption now")));
        }
        let (c, ns, name, uid) = (self.no_retry_client.clone(), p.namespace.clone(), p.name.clone(), p.uid.clone());
        match calls::run(&self.rt, async move { calls::evict(c, &ns, &name, &uid).await }) {
            Ok(()) => {
                // The loop lets it go now (it is not queued again); its
                // room stays held (`still_holds`) until the watch says it
                // is gone.
                self.requeued.push(ClusterEvent::Leaving { id });
                Ok(())
            }
            Err(e) => {
                // It still runs: the loop, which took it off its node,
                // hears so (a pod already gone is announced by its watch).
                if let (Some(node), false) = (p.node.clone(), e.status() == Some(404)) {
                    self.requeued.push(ClusterEvent::Deleted { id });
                    self.requeued.push(ClusterEvent::Running { id, pod: p.pod.clone(), node, gpus: p.gpus });
                }
                Err(fail(e.to_string()).retry_after(e.retry_after()))
            }
        }
    }

    fn unschedulable(&mut self, id: PodId, code: &str) {
        if self.reported.get(&id).is_some_and(|c| c == code) || !self.leadership.is_leader() {
            return;
        }
        let Some(p) = self.pod_ref(id) else { return };
        self.reported.insert(id, code.to_string());
        let w = crate::report::Waiting {
            namespace: p.namespace,
            name: p.name,
            uid: Some(p.uid),
            reason: "Unschedulable",
            message: format!("Tessera: no node can take the pod ({code}); it waits until the cluster changes"),
            reporter: self.identity.clone(),
        };
        self.rt.spawn(crate::report::waiting(self.client.clone(), w));
    }

    fn moves(&self) -> Moves {
        Moves::Live
    }

    fn still_holds(&self, id: PodId) -> bool {
        // Evicted pods stay in the index, on their node, until they are
        // gone (the tracker forgets them then).
        self.live.index.lock().unwrap_or_else(|p| p.into_inner()).get(&id).is_some_and(|p| p.node.is_some())
    }

    fn live(&self) -> Option<&dyn LiveBackend> {
        Some(self)
    }

    fn extender(&self) -> Option<&dyn ExtenderBackend> {
        Some(self)
    }
}
