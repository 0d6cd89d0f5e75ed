use super::*;
use serde_json::json;

fn id(uid: &str) -> PodId {
    pod_id(uid)
}

fn kpod(name: &str, uid: &str, scheduler: &str, node: Option<&str>, phase: &str) -> KPod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ml", "uid": uid},
        "spec": {
            "schedulerName": scheduler,
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]
        },
        "status": {"phase": phase}
    }))
    .unwrap()
}

fn tracker() -> (PodTracker, PodIndex, Arc<Mutex<HashMap<String, String>>>) {
    let index = PodIndex::default();
    let binding = Arc::new(Mutex::new(HashMap::new()));
    (PodTracker::new("tessera", index.clone(), binding.clone()), index, binding)
}

#[test]
fn pods_naming_tessera_are_queued_and_others_only_count_once_bound() {
    let (mut t, index, binding) = tracker();
    let ev = t.on(Event::Apply(kpod("a", "u-a", "tessera", None, "Pending")));
    assert!(
        matches!(&ev[..], [ClusterEvent::Submitted { id, pod }] if *id == super::pod_id("u-a") && pod.name == "ml/a" && pod.gpu_count == 1)
    );
    assert_eq!(index.lock().unwrap()[&id("u-a")].name, "a");
    assert!(t.on(Event::Apply(kpod("b", "u-b", "default-scheduler", None, "Pending"))).is_empty());
    // kube-scheduler binds b: it runs, and takes room.
    let ev = t.on(Event::Apply(kpod("b", "u-b", "default-scheduler", Some("n1"), "Running")));
    assert!(matches!(&ev[..], [ClusterEvent::Running { id, node, .. }] if *id == super::pod_id("u-b") && node == "n1"));
    // Tessera binds a: the change it expects, nothing to tell the loop.
    binding.lock().unwrap().insert("u-a".into(), "n2".into());
    assert!(t.on(Event::Apply(kpod("a", "u-a", "tessera", Some("n2"), "Running"))).is_empty());
    assert!(binding.lock().unwrap().is_empty());
    // Heartbeats and status updates of a known pod change nothing.
    assert!(t.on(Event::Apply(kpod("a", "u-a", "tessera", Some("n2"), "Running"))).is_empty());
    // It ends.
    let ev = t.on(Event::Apply(kpod("a", "u-a", "tessera", Some("n2"), "Succeeded")));
    assert_eq!(ev, [ClusterEvent::Deleted { id: id("u-a") }]);
    assert!(!index.lock().unwrap().contains_key(&id("u-a")));
    assert!(t.on(Event::Delete(kpod("a", "u-a", "tessera", Some("n2"), "Succeeded"))).is_empty(), "once only");
}

#[test]
fn a_queued_pod_someone_else_binds_is_adopted_where_it_runs() {
    let (mut t, _, _) = tracker();
    t.on(Event::Apply(kpod("a", "u-a", "tessera", None, "Pending")));
    let ev = t.on(Event::Apply(kpod("a", "u-a", "tessera", Some("n9"), "Running")));
    assert!(
        matches!(&ev[..], [ClusterEvent::Deleted { id: a }, ClusterEvent::Running { id: b, node, .. }] if a == b && *a == id("u-a") && node == "n9"),
        "{ev:?}"
    );
}

#[test]
fn a_relist_after_a_lost_watch_deletes_what_it_no_longer_lists() {
    let (mut t, _, _) = tracker();
    t.on(Event::Apply(kpod("a", "u-a", "tessera", None, "Pending")));
    t.on(Event::Apply(kpod("b", "u-b", "tessera", None, "Pending")));
    assert!(t.on(Event::Init).is_empty());
    assert!(t.on(Event::InitApply(kpod("b", "u-b", "tessera", None, "Pending"))).is_empty());
    let ev = t.on(Event::InitApply(kpod("c", "u-c", "tessera", None, "Pending")));
    assert!(matches!(&ev[..], [ClusterEvent::Submitted { id, .. }] if *id == super::pod_id("u-c")));
    assert_eq!(
        t.on(Event::InitDone),
        [ClusterEvent::Deleted { id: id("u-a") }],
        "a was deleted while the watch was down"
    );
    // A pod recreated under the same name is another pod.
    let ev = t.on(Event::Apply(kpod("b", "u-b2", "tessera", None, "Pending")));
    assert!(matches!(&ev[..], [ClusterEvent::Submitted { id, .. }] if *id == super::pod_id("u-b2")));
}

#[test]
fn a_malformed_pod_is_reported_once_and_not_queued() {
    let (mut t, _, _) = tracker();
    let mut bad = kpod("bad", "u-x", "tessera", None, "Pending");
    bad.metadata.annotations = Some([("tessera.io/gpu-milli".to_string(), "0".to_string())].into());
    assert!(t.on(Event::Apply(bad.clone())).is_empty());
    assert!(t.on(Event::Apply(bad)).is_empty());
    assert_eq!(t.rejected.len(), 1);
    assert!(t.rejected[0].to_string().contains("ml/bad"), "{}", t.rejected[0]);
}

fn knode(name: &str, ready: &str, gpus: &str) -> KNode {
    serde_json::from_value(json!({
        "metadata": {"name": name, "resourceVersion": "1"},
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": gpus},
            "conditions": [{"type": "Ready", "status": ready}]
        }
    }))
    .unwrap()
}

#[test]
fn nodes_pass_only_real_changes() {
    let first = convert::node(&knode("n1", "True", "8"), &Default::default()).unwrap();
    let mut t = NodeTracker::new(&[first]);
    assert!(t.on(Event::Apply(knode("n1", "True", "8"))).is_empty(), "a heartbeat changes nothing");
    let ev = t.on(Event::Apply(knode("n1", "False", "8")));
    assert!(matches!(&ev[..], [ClusterEvent::NodeUpsert { node }] if !node.ready));
    let ev = t.on(Event::Apply(knode("n2", "True", "4")));
    assert!(matches!(&ev[..], [ClusterEvent::NodeUpsert { node }] if node.name == "n2" && node.gpus.len() == 4));
    t.on(Event::Init);
    t.on(Event::InitApply(knode("n2", "True", "4")));
    assert_eq!(t.on(Event::InitDone), [ClusterEvent::NodeRemoved { name: "n1".into() }]);
    assert_eq!(t.on(Event::Delete(knode("n2", "True", "4"))), [ClusterEvent::NodeRemoved { name: "n2".into() }]);
    assert!(t.on(Event::Apply(knode("n3", "True", "1.5"))).is_empty());
    assert_eq!(t.rejected.len(), 1);
}

#[test]
fn agent_health_marks_gpus_until_it_recovers_and_survives_heartbeats() {
    use tessera_core::model::GpuHealth::{Degraded, Failed, Healthy};
    let first = convert::node(&knode("n1", "True", "4"), &Default::default()).unwrap();
    let mut t = NodeTracker::new(&[first]);
    let ev = t.agent_health("n1", vec![Healthy, Failed, Healthy, Degraded]);
    assert!(
        matches!(&ev[..], [ClusterEvent::NodeUpsert { node }] if node.gpus[1].health == Failed && node.gpus[3].health == Degraded)
    );
    assert!(t.agent_health("n1", vec![Healthy, Failed, Healthy, Degraded]).is_empty(), "no change, no event");
    assert!(t.on(Event::Apply(knode("n1", "True", "4"))).is_empty(), "a heartbeat keeps the agent's view");
    let ev = t.agent_health("n1", vec![Healthy, Failed, Healthy, Healthy]);
    assert!(matches!(&ev[..], [ClusterEvent::NodeUpsert { node }] if node.gpus[3].health == Healthy), "{ev:?}");
    assert!(t.agent_health("unknown", vec![Failed]).is_empty());
}

#[test]
fn ids_are_the_same_on_every_replica_and_readiness_follows_the_pod() {
    let (mut a, index, _) = tracker();
    let (mut b, _, _) = tracker();
    let ev_a = a.on(Event::Apply(kpod("x", "5f0c7a52-1f7e-4b0e-9c1a-0d8f7c7e6a01", "tessera", Some("n1"), "Running")));
    let ev_b = b.on(Event::Apply(kpod("x", "5f0c7a52-1f7e-4b0e-9c1a-0d8f7c7e6a01", "tessera", Some("n1"), "Running")));
    assert_eq!(ev_a, ev_b, "another replica names the pod alike");
    assert_ne!(id("5f0c7a52-1f7e-4b0e-9c1a-0d8f7c7e6a01"), id("5f0c7a52-1f7e-4b0e-9c1a-0d8f7c7e6a02"));
    assert!(id("u") < 1 << 62, "the loop's stand-ins use the ids above");
    let x = id("5f0c7a52-1f7e-4b0e-9c1a-0d8f7c7e6a01");
    assert!(!index.lock().unwrap()[&x].ready);
    let mut ready = kpod("x", "5f0c7a52-1f7e-4b0e-9c1a-0d8f7c7e6a01", "tessera", Some("n1"), "Running");
    ready.status.as_mut().unwrap().conditions = Some(vec![k8s_openapi::api::core::v1::PodCondition {
        type_: "Ready".into(),
        status: "True".into(),
        ..Default::default()
    }]);
    assert!(a.on(Event::Apply(ready)).is_empty(), "no event for the loop");
    assert!(index.lock().unwrap()[&x].ready);
}

fn member(name: &str, uid: &str, group: &str, node: Option<&str>) -> KPod {
    let mut p = kpod(name, uid, "tessera", node, if node.is_some() { "Running" } else { "Pending" });
    p.metadata.labels = Some([(crate::podgroup::POD_GROUP_LABEL.to_string(), group.to_string())].into());
    p
}

fn group(name: &str, min: i32) -> crate::podgroup::PodGroup {
    let mut g = crate::podgroup::PodGroup::new(
        name,
        crate::podgroup::PodGroupSpec { min_member: Some(min), schedule_timeout_seconds: Some(30) },
    );
    g.metadata.namespace = Some("ml".into());
    g
}

#[test]
fn members_carry_their_pod_groups_gang_and_wait_for_a_group_not_yet_seen() {
    let (mut t, index, _) = tracker();
    // The group exists: its members are queued as a gang named ns/name.
    assert!(t.on_group(Event::Apply(group("job", 2))).is_empty());
    let ev = t.on(Event::Apply(member("w0", "u-w0", "job", None)));
    let gang = tessera_core::model::Gang { name: "ml/job".into(), min_member: 2, timeout_s: Some(30) };
    assert!(matches!(&ev[..], [ClusterEvent::Submitted { pod, .. }] if pod.gang.as_ref() == Some(&gang)), "{ev:?}");
    // A member of a group not seen yet waits, said once; the group's
    // arrival queues it.
    assert!(t.on(Event::Apply(member("v0", "u-v0", "late", None))).is_empty());
    assert!(t.on(Event::Apply(member("v1", "u-v1", "late", None))).is_empty(), "a second member");
    assert_eq!(t.awaiting_groups(), 2);
    assert!(t.rejected.iter().any(|r| r.message.contains("PodGroup ml/late")), "{:?}", t.rejected);
    assert!(!index.lock().unwrap().contains_key(&id("u-v0")), "not queued yet");
    let ev = t.on_group(Event::Apply(group("late", 2)));
    let mut queued: Vec<&str> = ev
        .iter()
        .filter_map(|e| match e {
            ClusterEvent::Submitted { pod, .. } if pod.gang.as_ref().is_some_and(|g| g.name == "ml/late") => {
                Some(pod.name.as_str())
            }
            _ => None,
        })
        .collect();
    queued.sort();
    assert_eq!(queued, ["ml/v0", "ml/v1"], "{ev:?}");
    assert_eq!(t.awaiting_groups(), 0);
    // A member deleted while it waits is forgotten with it.
    t.on(Event::Apply(member("x0", "u-x0", "other", None)));
    t.on(Event::Delete(member("x0", "u-x0", "other", None)));
    assert_eq!(t.awaiting_groups(), 0);
    assert!(t.on_group(Event::Apply(group("other", 1))).is_empty(), "nothing left to queue");
    // A running member is adopted with its gang (preemption takes it whole).
    let ev = t.on(Event::Apply(member("w1", "u-w1", "job", Some("n1"))));
    assert!(matches!(&ev[..], [ClusterEvent::Running { pod, .. }] if pod.gang.as_ref() == Some(&gang)), "{ev:?}");
}

#[test]
fn a_malformed_pod_group_is_reported_and_its_members_keep_waiting() {
    let (mut t, _, _) = tracker();
    assert!(t.on_group(Event::Apply(group("bad", 0))).is_empty());
    assert!(t.rejected.iter().any(|r| r.kind == "podgroup" && r.message.contains("minMember = 0")), "{:?}", t.rejected);
    assert!(t.on(Event::Apply(member("w0", "u-w0", "bad", None))).is_empty());
    assert_eq!(t.awaiting_groups(), 1);
}

#[test]
fn an_agents_nvml_topology_applies_where_the_node_says_none() {
    use tessera_core::topology::GpuLink;
    let mut t = NodeTracker::default();
    t.on(Event::Apply(knode("n1", "True", "4")));
    let links: Vec<GpuLink> = (0..4u8).map(|i| GpuLink { island: i / 2, pcie: i / 2, numa: 0 }).collect();
    let ev = t.agent_topology("n1", links.clone());
    assert!(
        matches!(&ev[..], [ClusterEvent::NodeUpsert { node }] if node.gpus.iter().map(|g| g.link).collect::<Vec<_>>() == links),
        "{ev:?}"
    );
    assert!(t.agent_topology("n1", links.clone()).is_empty(), "no change, no event");
    assert!(t.agent_topology("n1", links[..2].to_vec()).is_empty(), "a count that is not the node's is left out");
}
