//! Fine-tuning on `tessera serve` (the feedback loop): the service records
//! the pods that arrive, tunes the active policy's learned plugin from
//! that record on its schedule or on demand, and offers the tuned model
//! as the rollout's candidate in shadow — never as the active policy, and
//! never over a candidate already in rollout. Over real HTTP.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tessera_server::config::{LearningConfig, TrainingConfig};
use tessera_server::learning::{FineTuneError, FineTuneJob, FineTuneOutcome, FineTuner};
use tessera_server::{Server, Shared};

use super::{Running, TOKEN, config};

async fn call(r: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let r = r.send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap())
}

fn learning(min_arrivals: usize, training: TrainingConfig) -> LearningConfig {
    LearningConfig {
        // 03:00 on the 1st of January: only runs on demand here.
        schedule: "0 3 1 1 *".into(),
        plugin: "learned".into(),
        record: 5_000,
        min_arrivals,
        min_gain: 0.0,
        training,
    }
}

/// `n` runs recorded, none running, the last one ended.
fn ran(n: usize) -> impl Fn(&Shared) -> bool {
    move |s| {
        let v = s.learning.read().unwrap();
        v.runs.len() == n && !v.running && v.runs.back().is_some_and(|r| r.outcome.is_some())
    }
}

/// A tuner that answers what the test says, and remembers what it saw.
struct Scripted {
    fail: bool,
    seen: AtomicUsize,
}

impl FineTuner for Scripted {
    fn fine_tune(&self, job: &FineTuneJob) -> Result<FineTuneOutcome, FineTuneError> {
        self.seen.store(job.arrivals.len(), Ordering::SeqCst);
        if self.fail {
            return Err(FineTuneError::Invalid(format!("policy {} has no plugin `{}`", job.active.name, job.plugin)));
        }
        let mut doc = job.active.clone();
        doc.name = "learned-tuned".into();
        Ok(FineTuneOutcome {
            candidate: Some(doc),
            current_gain: 0.10,
            tuned_gain: 0.12,
            digest: "sha256:feed".into(),
            kept_generation: 3,
        })
    }
}

async fn start_scripted(tuner: Arc<Scripted>) -> Running {
    let mut cfg = config(None);
    cfg.policy = "learned".into();
    cfg.learning = Some(learning(20, TrainingConfig::default()));
    let (backend, doc) = tessera::serve::backend(&cfg).unwrap();
    let loader = Arc::new(
        tessera::serve::CliLoader::new(tessera_server::Backend::workload(&backend).clone(), Some(crate::cache_dir()))
            .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind(cfg.listen).await.unwrap();
    let mut server = Server::start(cfg, Box::new(backend), doc, loader, None).unwrap();
    server.learn(tuner).unwrap();
    Running::serve(server, listener).await
}

/// The tuned policy lands in shadow with the figures of the run; a second
/// run while it is there is skipped (it would replace what is being
/// proven); promotion still needs canary and a verdict; a tuner's error is
/// recorded and counted, and the service goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tuned_model_becomes_the_candidate_in_shadow_and_never_the_active_policy() {
    let tuner = Arc::new(Scripted { fail: false, seen: AtomicUsize::new(0) });
    let svc = start_scripted(tuner.clone()).await;
    let http = reqwest::Client::new();
    let post = |path: &str| http.post(svc.url(path)).bearer_auth(TOKEN);

    let (s, e) = call(http.post(svc.url("/v1/learning/run"))).await;
    assert_eq!((s, e["code"].as_str()), (StatusCode::UNAUTHORIZED, Some("API-UNAUTHORIZED")), "{e}");
    let (_, v) = call(http.get(svc.url("/v1/learning"))).await;
    assert_eq!((v["schedule"].as_str(), v["plugin"].as_str()), (Some("0 3 1 1 *"), Some("learned")), "{v}");
    assert!(v["next_run_unix_ms"].as_u64().is_some(), "{v}");

    // Let pods arrive (the simulator's stream), then run.
    svc.wait("40 decisions", Duration::from_secs(60), |s| s.decisions.read().unwrap().len() >= 40).await;
    let (s, v) = call(post("/v1/learning/run")).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    svc.wait("the first run", Duration::from_secs(60), ran(1)).await;
    let run = svc.shared.learning.read().unwrap().runs[0].clone();
    assert_eq!(run.outcome, Some(tessera_server::state::LearningOutcome::Candidate), "{run:?}");
    assert!(run.arrivals >= 20 && tuner.seen.load(Ordering::SeqCst) == run.arrivals, "{run:?}");
    assert_eq!((run.current_gain, run.tuned_gain, run.kept_generation), (Some(0.10), Some(0.12), Some(3)));
    assert_eq!((run.candidate.as_deref(), run.policy.as_str()), (Some("learned-tuned"), "learned"));
    let (_, r) = call(http.get(svc.url("/v1/rollout"))).await;
    assert_eq!((r["active"].as_str(), r["candidate"].as_str()), (Some("learned"), Some("learned-tuned")), "{r}");
    assert_eq!(r["stage"]["stage"], "shadow", "{r}");
    let (s, e) = call(post("/v1/rollout/promote")).await;
    assert_eq!(s, StatusCode::CONFLICT, "promoted straight from shadow: {e}");

    // A candidate is in rollout: the next run is skipped, saying why.
    let (s, _) = call(post("/v1/learning/run")).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    svc.wait("the second run", Duration::from_secs(60), ran(2)).await;
    let run = svc.shared.learning.read().unwrap().runs[1].clone();
    assert_eq!(run.outcome, Some(tessera_server::state::LearningOutcome::Skipped), "{run:?}");
    assert!(run.reason.as_deref().is_some_and(|r| r.contains("candidate is in rollout")), "{run:?}");
    let (_, r) = call(http.get(svc.url("/v1/rollout"))).await;
    assert_eq!((r["active"].as_str(), r["candidate"].as_str()), (Some("learned"), Some("learned-tuned")), "{r}");
    let metrics = http.get(svc.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tessera_learning_runs_total{outcome=\"CANDIDATE\"} 1"), "{metrics}");
    assert!(metrics.contains("tessera_learning_runs_total{outcome=\"SKIPPED\"} 1"), "{metrics}");
    svc.stop().await;

    // A tuner that fails: recorded with its words, counted, nothing set.
    let svc = start_scripted(Arc::new(Scripted { fail: true, seen: AtomicUsize::new(0) })).await;
    svc.wait("40 decisions", Duration::from_secs(60), |s| s.decisions.read().unwrap().len() >= 40).await;
    let (s, _) = call(http.post(svc.url("/v1/learning/run")).bearer_auth(TOKEN)).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    svc.wait("the failing run", Duration::from_secs(60), ran(1)).await;
    let run = svc.shared.learning.read().unwrap().runs[0].clone();
    assert_eq!(run.outcome, Some(tessera_server::state::LearningOutcome::Error), "{run:?}");
    assert!(run.reason.as_deref().is_some_and(|r| r.contains("no plugin `learned`")), "{run:?}");
    assert!(svc.shared.rollout.read().unwrap().candidate.is_none());
    svc.stop().await;
}

/// The service as the binary starts it, with the real tuner: it learns
/// from the pods its simulator sent, on its own cluster, and whatever the
/// run finds, the active policy stays; a better model waits in shadow.
/// Too short a record is skipped; without `learning:` nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_fine_tunes_its_learned_plugin_from_what_arrived() {
    let mut cfg = config(None);
    cfg.policy = "learned".into();
    let training = TrainingConfig {
        generations: 2,
        pairs: 2,
        episodes: 2,
        validation: 2,
        scale: 0.5,
        ..TrainingConfig::default()
    };
    cfg.learning = Some(learning(5_000, training));
    let svc = Running::start(cfg.clone()).await;
    let http = reqwest::Client::new();
    let post = |path: &str| http.post(svc.url(path)).bearer_auth(TOKEN);
    // min_arrivals = record: far more than have arrived yet.
    let (s, _) = call(post("/v1/learning/run")).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    svc.wait("the skipped run", Duration::from_secs(60), ran(1)).await;
    let run = svc.shared.learning.read().unwrap().runs[0].clone();
    assert_eq!(run.outcome, Some(tessera_server::state::LearningOutcome::Skipped), "{run:?}");
    assert!(run.reason.as_deref().is_some_and(|r| r.contains("learning.min_arrivals is 5000")), "{run:?}");
    svc.stop().await;

    cfg.learning = Some(learning(100, training));
    let svc = Running::start(cfg).await;
    svc.wait("100 arrivals", Duration::from_secs(120), |s| s.decisions.read().unwrap().len() >= 150).await;
    let (s, _) = call(http.post(svc.url("/v1/learning/run")).bearer_auth(TOKEN)).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    svc.wait("the tuning run", Duration::from_secs(300), ran(1)).await;
    let run = svc.shared.learning.read().unwrap().runs[0].clone();
    let (current, tuned) = (run.current_gain.expect("figures"), run.tuned_gain.expect("figures"));
    assert!(tuned >= current, "the kept model is the best on validation: {run:?}");
    assert!(run.digest.as_deref().is_some_and(|d| d.starts_with("sha256:")), "{run:?}");
    let rollout = svc.shared.rollout.read().unwrap().clone();
    assert_eq!(rollout.active, "learned", "tuning never touches the active policy");
    match run.outcome {
        Some(tessera_server::state::LearningOutcome::Candidate) => {
            assert!(run.kept_generation.unwrap() > 0 && tuned > current, "{run:?}");
            let name = run.candidate.clone().unwrap();
            assert!(name.starts_with("learned-tuned-"), "{run:?}");
            assert_eq!(rollout.candidate.as_deref(), Some(name.as_str()));
            // Named by its digest (its document's weights carry it: the
            // loader checked it when the candidate loaded).
            assert!(run.digest.as_deref().is_some_and(|d| name.ends_with(&d[7..15])), "{run:?}");
            let (_, r) = call(http.get(svc.url("/v1/rollout"))).await;
            assert_eq!(r["stage"]["stage"], "shadow", "{r}");
        }
        Some(tessera_server::state::LearningOutcome::NoGain) => {
            assert!(rollout.candidate.is_none(), "{run:?}");
            assert!(run.reason.as_deref().is_some_and(|r| r.contains("min_gain")), "{run:?}");
        }
        other => panic!("the run ended {other:?}: {run:?}"),
    }
    svc.stop().await;

    let svc = Running::start(config(None)).await;
    let (s, e) = call(http.post(svc.url("/v1/learning/run")).bearer_auth(TOKEN)).await;
    assert_eq!((s, e["code"].as_str()), (StatusCode::CONFLICT, Some("LEARNING-NOT-SCHEDULED")), "{e}");
    svc.stop().await;
}
