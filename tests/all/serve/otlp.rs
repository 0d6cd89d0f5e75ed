//! Traces over OTLP into a receiver in the test: the span tree and the
//! attributes of a placement decision and of a rescheduling cycle whose
//! moves link to the moved pods' placement traces.

use std::time::Duration;

use tessera_server::config::OtlpProtocol;
use tessera_server::record::{DecisionRecord, PlanRecord};
use tessera_server::record::{MoveState, PlanState};

use super::{Received, Receiver, Running, Trace, config};

fn attr<'a>(s: &'a Received, key: &str) -> &'a str {
    s.attrs.get(key).map(String::as_str).unwrap_or_else(|| panic!("{} has no {key}: {:?}", s.name, s.attrs))
}

fn within(child: &Received, parent: &Received) {
    assert!(
        child.start_ns >= parent.start_ns && child.end_ns <= parent.end_ns && child.start_ns <= child.end_ns,
        "{} [{}, {}] lies within {} [{}, {}]",
        child.name,
        child.start_ns,
        child.end_ns,
        parent.name,
        parent.start_ns,
        parent.end_ns
    );
}

/// The decision's trace: root with the explanation, then filter, one score
/// span per scorer, select and bind.
fn check_decision(spans: &[Received], d: &DecisionRecord) {
    let t = Trace::of(spans, &d.trace_id);
    let root = t.root;
    assert_eq!(root.name, "tessera.schedule.pod");
    assert_eq!(root.span_id, d.span_id);
    assert_eq!(root.service, "tessera");
    assert_eq!(attr(root, "tessera.pod"), d.pod);
    assert_eq!(attr(root, "tessera.policy"), "default");
    assert!(attr(root, "tessera.policy.plugins").contains("fgd@0.1.0"), "{:?}", root.attrs);
    assert_eq!(attr(root, "tessera.candidates"), d.candidates.to_string());
    assert_eq!(attr(root, "tessera.feasible"), d.feasible.to_string());
    assert_eq!(attr(root, "tessera.outcome"), "bound");
    assert_eq!(attr(root, "tessera.node"), d.node.as_deref().unwrap());
    let scores = attr(root, "tessera.winner.scores");
    assert!(scores.starts_with("fgd=") && scores.contains(",topology-spread="), "{scores}");
    let runners = attr(root, "tessera.runners_up");
    assert_eq!(runners.split_whitespace().count(), d.runners_up.len(), "{runners}");
    if let Some(first) = d.runners_up.first() {
        assert!(runners.starts_with(&format!("{}:", first.node)), "{runners}");
    }
    let rejected = attr(root, "tessera.filter.rejected");
    for (code, n) in &d.host_filter {
        assert!(rejected.contains(&format!("{code}={n}")), "{rejected} lacks {code}={n}");
    }

    let filter = t.children(root, "tessera.schedule.filter");
    assert_eq!(filter.len(), 1);
    assert_eq!(attr(filter[0], "tessera.candidates"), d.candidates.to_string());
    let scored: Vec<&str> =
        t.children(root, "tessera.schedule.score").iter().map(|s| attr(s, "tessera.plugin")).collect();
    let mut scored_sorted = scored.clone();
    scored_sorted.sort();
    assert_eq!(scored_sorted, ["fgd", "topology-spread"], "one score span per scorer");
    for s in t.children(root, "tessera.schedule.score") {
        assert_eq!(attr(s, "tessera.plugin.version"), "0.1.0");
        let part = d.plugins.iter().find(|p| p.plugin == attr(s, "tessera.plugin")).unwrap();
        assert_eq!(attr(s, "tessera.plugin.winner_score"), part.winner_score.unwrap().to_string());
        within(s, root);
    }
    let select = t.children(root, "tessera.schedule.select");
    assert_eq!(select.len(), 1);
    assert_eq!(attr(select[0], "tessera.node"), d.node.as_deref().unwrap());
    let bind = t.children(root, "tessera.schedule.bind");
    assert_eq!(bind.len(), 1);
    let gpus: Vec<String> = d.gpus.iter().map(u8::to_string).collect();
    assert_eq!(attr(bind[0], "tessera.gpus"), gpus.join(","));
    for s in filter.iter().chain(&select).chain(&bind) {
        within(s, root);
    }
    assert_eq!(t.spans.len(), 1 + 1 + 2 + 1 + 1, "pod, filter, 2 × score, select, bind");
}

/// The cycle's trace: plan with its strategies, the execution with one
/// span per move, each linked to the pod's placement trace.
fn check_cycle(spans: &[Received], p: &PlanRecord) {
    let t = Trace::of(spans, &p.trace_id);
    let root = t.root;
    assert_eq!(root.name, "tessera.resched.cycle");
    assert!(p.trigger.starts_with(attr(root, "tessera.trigger")), "{} vs {:?}", p.trigger, root.attrs);
    let done = p.moves.iter().filter(|m| m.state == MoveState::Done).count();
    assert_eq!(attr(root, "tessera.moves.done"), done.to_string());
    if p.trigger.starts_with("anomalies") {
        let detect = t.children(root, "tessera.resched.detect");
        assert_eq!(detect.len(), 1, "the detection round that triggered it");
        assert!(attr(detect[0], "tessera.findings").parse::<u32>().unwrap() > 0, "{:?}", detect[0].attrs);
        assert!(attr(detect[0], "tessera.anomalies").contains('='), "{:?}", detect[0].attrs);
    }
    let plan = t.children(root, "tessera.resched.plan");
    assert_eq!(plan.len(), 1);
    assert_eq!(attr(plan[0], "tessera.solver"), p.solver);
    assert_eq!(attr(plan[0], "tessera.moves"), p.moves.len().to_string());
    let strategies = t.children(plan[0], "tessera.resched.strategy");
    assert!(!strategies.is_empty(), "each strategy run is a span");
    for s in &strategies {
        within(s, plan[0]);
        let name = attr(s, "tessera.strategy");
        assert!(["load-balance", "co-location", "fragment-merge"].contains(&name), "{name}");
    }
    let exec = t.children(root, "tessera.movement.execute");
    assert_eq!(exec.len(), 1);
    let moves = t.children(exec[0], "tessera.movement.move");
    assert_eq!(moves.len(), p.moves.len(), "one span per move");
    for m in &p.moves {
        let s = moves
            .iter()
            .find(|s| attr(s, "tessera.pod") == m.pod && attr(s, "tessera.move.from") == m.from)
            .unwrap_or_else(|| panic!("no span for the move of {} from {}", m.pod, m.from));
        assert_eq!(attr(s, "tessera.move.to"), m.to);
        assert_eq!(attr(s, "tessera.move.state"), m.state.as_str());
        assert_eq!(attr(s, "tessera.strategy"), m.strategy);
        // Linked to the trace of the decision that placed the pod there.
        assert_eq!(s.links.len(), 1, "move of {} links to its placement: {:?}", m.pod, s.links);
        let (trace, span) = &s.links[0];
        let placed = spans
            .iter()
            .find(|x| &x.trace_id == trace && &x.span_id == span)
            .unwrap_or_else(|| panic!("the linked placement trace of {} was exported", m.pod));
        assert_eq!(placed.name, "tessera.schedule.pod");
        assert_eq!(attr(placed, "tessera.pod"), m.pod);
    }
}

async fn run(protocol: OtlpProtocol) {
    let receiver = Receiver::default();
    let endpoint = match protocol {
        OtlpProtocol::Grpc => receiver.grpc().await,
        OtlpProtocol::HttpProtobuf => receiver.http().await,
    };
    let svc = Running::start(config(Some((endpoint, protocol)))).await;
    svc.wait("a plan with a move done", Duration::from_secs(120), |s| {
        s.plans.read().unwrap().newest_first().any(|p| p.moves.iter().any(|m| m.state == MoveState::Done))
    })
    .await;
    let shared = svc.shared.clone();
    // Graceful shutdown flushes every span still buffered.
    svc.stop().await;

    let spans = receiver.spans();
    let decisions = shared.decisions.read().unwrap();
    let bound: Vec<&DecisionRecord> =
        decisions.newest_first().filter(|d| d.node.is_some() && d.plugins.len() == 2).take(5).collect();
    assert!(!bound.is_empty());
    for d in bound {
        check_decision(&spans, d);
    }
    // Every decision's trace arrived.
    let traces: std::collections::HashSet<&str> = spans.iter().map(|s| s.trace_id.as_str()).collect();
    let missing = decisions.newest_first().filter(|d| !traces.contains(d.trace_id.as_str())).count();
    assert_eq!(missing, 0, "{missing} of {} decision traces were not exported", decisions.len());
    let plans = shared.plans.read().unwrap();
    // Shutdown finished the pass under way: no move is left half done.
    for p in plans.newest_first() {
        for m in &p.moves {
            let settled = [MoveState::Done, MoveState::Failed, MoveState::RolledBack, MoveState::Dropped]
                .contains(&m.state)
                || (m.state == MoveState::Planned && p.state == PlanState::Refused);
            assert!(settled, "plan {} ({:?}) left the move of {} {:?}", p.id, p.state, m.pod, m.state);
        }
    }
    let p = plans.newest_first().find(|p| p.moves.iter().any(|m| m.state == MoveState::Done)).unwrap();
    check_cycle(&spans, p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_and_cycles_are_exported_as_span_trees_over_otlp_grpc() {
    run(OtlpProtocol::Grpc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_traces_go_over_otlp_http() {
    run(OtlpProtocol::HttpProtobuf).await;
}
