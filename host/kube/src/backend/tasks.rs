//! The backend's background tasks: watches on nodes, pods and disruption
//! budgets turned into cluster events, the pods budgets protect, and the
//! node agents scraped for telemetry and GPU health.

use super::*;

/// What a node agent reported that changes the node: its GPUs' health and,
/// when NVML told, their links.
pub(super) type AgentView = (String, Vec<tessera_core::model::GpuHealth>, Option<Vec<tessera_core::topology::GpuLink>>);

pub(super) async fn watch_nodes(
    api: Api<KNode>,
    mut tracker: NodeTracker,
    tx: std::sync::mpsc::Sender<ClusterEvent>,
    addresses: Arc<Mutex<HashMap<String, String>>>,
    mut health: tokio::sync::mpsc::Receiver<AgentView>,
) {
    let mut reported = 0;
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    loop {
        let events = tokio::select! {
            ev = stream.next() => match ev {
                None => return,
                Some(Ok(ev)) => {
                    if let watcher::Event::Apply(n) | watcher::Event::InitApply(n) = &ev
                        && let (Some(name), Some(a)) = (n.metadata.name.clone(), convert::node_address(n))
                    {
                        addresses.lock().unwrap_or_else(|p| p.into_inner()).insert(name, a);
                    }
                    tracker.on(ev)
                }
                Some(Err(e)) => {
                    tracing::warn!("node watch: {e}; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
            Some((node, h, links)) = health.recv() => tracker.agent_report(&node, h, links),
        };
        for e in events {
            if tx.send(e).is_err() {
                return;
            }
        }
        for r in &tracker.rejected[reported..] {
            tracing::warn!("{r}; the node is left out");
        }
        reported = tracker.rejected.len();
    }
}

/// Pods, and the PodGroups their gangs come from (one task: a member
/// waiting for its group is queued the moment the group's event arrives).
pub(super) async fn watch_pods(
    (api, groups): (Api<KPod>, Api<crate::podgroup::PodGroup>),
    mut tracker: PodTracker,
    tx: std::sync::mpsc::Sender<ClusterEvent>,
    synced: tokio::sync::mpsc::Sender<Vec<Pod>>,
    (client, reporter): (Client, String),
) {
    use kube::runtime::WatchStreamExt;
    let mut reported = 0;
    let names = tracker.names().clone();
    // The GPU pods of the first list (every namespace watched, whatever
    // their scheduler): the target workload is learnt from them.
    let mut first_list: Option<Vec<Pod>> = Some(Vec::new());
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    // Without the PodGroup CRD the watch fails; it is tried again with a
    // backoff and said once.
    let mut group_stream = watcher(groups, watcher::Config::default()).default_backoff().boxed();
    let mut group_error_said = false;
    loop {
        let ev = tokio::select! {
            ev = stream.next() => match ev {
                Some(ev) => ev,
                None => return,
            },
            Some(g) = group_stream.next() => {
                match g {
                    Ok(g) => {
                        group_error_said = false;
                        for e in tracker.on_group(g) {
                            if tx.send(e).is_err() {
                                return;
                            }
                        }
                        report_rejected(&tracker, &mut reported, &client, &reporter);
                    }
                    Err(e) if !group_error_said => {
                        tracing::warn!("PodGroup watch (scheduling.x-k8s.io/v1alpha1): {e}; pods in a PodGroup wait until it works");
                        group_error_said = true;
                    }
                    Err(e) => tracing::debug!("PodGroup watch: {e}"),
                }
                continue;
            }
        };
        match ev {
            Ok(ev) => {
                if let (Some(shapes), watcher::Event::InitApply(p)) = (&mut first_list, &ev)
                    && let Ok(pod) = convert::pod(p, &names)
                    && pod.gpu_count > 0
                {
                    shapes.push(pod);
                }
                let done = matches!(ev, watcher::Event::InitDone);
                for e in tracker.on(ev) {
                    if tx.send(e).is_err() {
                        return;
                    }
                }
                if done && let Some(shapes) = first_list.take() {
                    let _ = synced.try_send(shapes);
                }
                report_rejected(&tracker, &mut reported, &client, &reporter);
            }
            Err(e) => {
                tracing::warn!("pod watch: {e}; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Says what the tracker could not take since `reported`: a pod gets a
/// `FailedScheduling` event and condition, anything else a log line.
fn report_rejected(tracker: &PodTracker, reported: &mut usize, client: &Client, reporter: &str) {
    for r in &tracker.rejected[*reported..] {
        if r.kind != "pod" {
            tracing::warn!("{r}; its pods are not scheduled as a gang until it is fixed");
            continue;
        }
        tracing::warn!("{r}; the pod is not scheduled");
        let (namespace, name) = r.name.split_once('/').unwrap_or(("default", &r.name));
        let w = crate::report::Waiting {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: None,
            reason: "SchedulerError",
            message: format!("Tessera cannot schedule this pod: {}", r.message),
            reporter: reporter.to_string(),
        };
        tokio::spawn(crate::report::waiting(client.clone(), w));
    }
    *reported = tracker.rejected.len();
}

/// Keeps the disruption budgets in view: an eviction a budget refuses
/// (it allows no disruption now) is not even sent.
pub(super) async fn watch_budgets(
    api: Api<PodDisruptionBudget>,
    writer: kube::runtime::reflector::store::Writer<PodDisruptionBudget>,
) {
    let stream = kube::runtime::reflector(writer, watcher(api, watcher::Config::default()));
    let mut stream = stream.boxed();
    while let Some(ev) = stream.next().await {
        if let Err(e) = ev {
            tracing::debug!("budget watch: {e}");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Tells the loop which running pods a budget protects from preemption
/// now, as budgets and pods change (checked every second; only budgets
/// that allow no disruption are matched, usually none).
pub(super) async fn protect_pods(
    budgets: kube::runtime::reflector::Store<PodDisruptionBudget>,
    index: PodIndex,
    tx: std::sync::mpsc::Sender<ClusterEvent>,
) {
    use kube::core::SelectorExt;
    let mut protected: std::collections::HashSet<PodId> = std::collections::HashSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let blocking = blocking_budgets(&budgets);
        let now: std::collections::HashSet<PodId> = if blocking.is_empty() {
            std::collections::HashSet::new()
        } else {
            index
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .filter(|(_, r)| {
                    r.node.is_some() && blocking.iter().any(|(ns, _, sel)| *ns == r.namespace && sel.matches(&r.labels))
                })
                .map(|(&id, _)| id)
                .collect()
        };
        let changes =
            now.difference(&protected).map(|&id| (id, true)).chain(protected.difference(&now).map(|&id| (id, false)));
        for (id, p) in changes.collect::<Vec<_>>() {
            if tx.send(ClusterEvent::Protected { id, protected: p }).is_err() {
                return;
            }
        }
        protected = now;
    }
}

/// The budgets that allow no disruption now (as their status last said):
/// namespace, name, selector.
pub(super) fn blocking_budgets(
    budgets: &kube::runtime::reflector::Store<PodDisruptionBudget>,
) -> Vec<(String, String, kube::core::Selector)> {
    budgets
        .state()
        .iter()
        .filter(|b| b.status.as_ref().is_some_and(|s| s.disruptions_allowed <= 0))
        .filter_map(|b| {
            let sel = b.spec.as_ref()?.selector.clone()?;
            Some((b.metadata.namespace.clone()?, b.metadata.name.clone()?, kube::core::Selector::try_from(sel).ok()?))
        })
        .collect()
}

/// The budget, if any, that covers a pod of `namespace` with `labels` and
/// allows no disruption now.
pub(super) fn blocking_budget(
    budgets: &kube::runtime::reflector::Store<PodDisruptionBudget>,
    namespace: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    use kube::core::SelectorExt;
    blocking_budgets(budgets)
        .into_iter()
        .find(|(ns, _, sel)| ns == namespace && sel.matches(labels))
        .map(|(ns, name, _)| format!("{ns}/{name}"))
}

/// Scrapes every node's agent (`http://{InternalIP}:{port}/v1/sample`)
/// every `every`: utilisation for the loop's telemetry, GPU health for the
/// model (through the node task).
pub(super) async fn scrape_agents(
    port: u16,
    every: Duration,
    addresses: Arc<Mutex<HashMap<String, String>>>,
    samples: Arc<Mutex<HashMap<String, NodeSample>>>,
    health: tokio::sync::mpsc::Sender<AgentView>,
) {
    let http = match reqwest::Client::builder().timeout(Duration::from_secs(2)).build() {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!("no agent scraping: {e}");
            return;
        }
    };
    loop {
        let targets: Vec<(String, String)> =
            addresses.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(n, a)| (n.clone(), a.clone())).collect();
        for (node, addr) in targets {
            let url = format!("http://{addr}:{port}/v1/sample");
            let got = async { http.get(&url).send().await?.error_for_status()?.json::<AgentSample>().await };
            match got.await {
                Ok(s) => {
                    samples.lock().unwrap_or_else(|p| p.into_inner()).insert(node.clone(), s.to_node_sample());
                    // Links that do not parse for the GPUs the agent saw are left out.
                    let links =
                        s.gpu_topology.as_deref().and_then(|t| tessera_core::topology::parse(t, s.gpus.len()).ok());
                    if health.send((node, s.gpu_health(), links)).await.is_err() {
                        return;
                    }
                }
                Err(e) => tracing::debug!("agent on {node}: {e}"),
            }
        }
        tokio::time::sleep(every).await;
    }
}
