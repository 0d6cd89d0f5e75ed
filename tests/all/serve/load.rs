//! 1,000 explain requests a second over loopback, for a bounded two
//! seconds, while the scheduling loop runs: every request is answered with
//! the right explanation and the loop keeps deciding. (The rate and
//! latencies are measured by `tessera bench api`, not asserted here.)

use std::time::Duration;

use super::{Running, config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_explain_requests_a_second_are_answered_while_the_loop_runs() {
    let svc = Running::start(config(None)).await;
    svc.wait("100 decisions", Duration::from_secs(60), |s| s.decisions.read().unwrap().len() >= 100).await;
    let pods: Vec<String> = svc.shared.decisions.read().unwrap().newest_first().map(|d| d.pod.clone()).collect();
    let shared = svc.shared.clone();
    let r =
        tessera::bench_api::load(svc.addr, &pods, 1000, Duration::from_secs(2), || shared.metrics.decisions_total())
            .await
            .unwrap();
    eprint!("{}", r.to_table());
    assert_eq!(r.scheduled, 2000);
    assert_eq!(r.errors, 0, "{r:?}");
    assert_eq!(r.ok + r.not_sent, 2000, "every request sent was answered correctly: {r:?}");
    assert!(r.ok >= 1000, "most of the schedule was sent: {r:?}");
    assert!(r.decisions_during > 0, "the loop kept deciding under load: {r:?}");
    svc.stop().await;
}
