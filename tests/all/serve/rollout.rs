//! Rollout end to end on `tessera serve`: a candidate in shadow decides
//! beside the active policy without acting; as a canary it acts for its
//! share of pods; a BLOCK verdict stops its promotion; a PROMOTE verdict
//! lets it become the active policy; rollback drops a candidate.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Running, TOKEN, config};

const PACKER: &str = "name: packer\nplugins:\n  - name: binpack\n    source: builtin:binpack\n";

async fn call(r: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let r = r.send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_then_canary_then_promotion_only_with_a_passing_verdict() {
    let svc = Running::start(config(None)).await;
    let http = reqwest::Client::new();
    let post = |path: &str| http.post(svc.url(path)).bearer_auth(TOKEN);

    let (s, v) = call(http.get(svc.url("/v1/rollout"))).await;
    assert_eq!((s, v["active"].as_str(), &v["candidate"]), (StatusCode::OK, Some("default"), &Value::Null));
    let (s, e) = call(post("/v1/rollout/promote")).await;
    assert_eq!((s, e["code"].as_str()), (StatusCode::CONFLICT, Some("ROLLOUT-NO-CANDIDATE")));
    let (s, _) = call(http.post(svc.url("/v1/rollout/candidate")).body(PACKER)).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "rollout mutations need the token");

    // Shadow: the candidate decides every pod, acts on none.
    let (s, v) = call(post("/v1/rollout/candidate").header("content-type", "application/yaml").body(PACKER)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!((v["candidate"].as_str(), v["stage"]["stage"].as_str()), (Some("packer"), Some("shadow")));
    svc.wait("30 shadow decisions", Duration::from_secs(60), |s| s.rollout.read().unwrap().compared >= 30).await;
    {
        let r = svc.shared.rollout.read().unwrap().clone();
        assert_eq!(r.candidate_acted, 0, "a shadow never acts");
        assert!(r.disagreements > 0, "binpack and FGD place differently: {r:?}");
        let d = r.recent.back().unwrap();
        assert_ne!(d.active, d.candidate);
        assert_eq!(d.acted, "active");
        // The disagreement's pod is explained, and by the active policy.
        let log = svc.shared.decisions.read().unwrap();
        let rec = log.get(&d.pod).unwrap();
        assert!(rec.policy.starts_with("default: "), "{rec:?}");
        assert_eq!(rec.node, d.active, "the active policy's choice was carried out");
    }
    let (s, e) = call(post("/v1/rollout/promote")).await;
    assert_eq!((s, e["code"].as_str()), (StatusCode::CONFLICT, Some("ROLLOUT-STAGE")), "{e}");

    // Canary: it acts for its share.
    let (s, e) = call(post("/v1/rollout/stage?stage=canary&share=1.5")).await;
    assert_eq!((s, e["code"].as_str()), (StatusCode::BAD_REQUEST, Some("API-BAD-QUERY")));
    let (s, v) = call(post("/v1/rollout/stage?stage=canary&share=0.5")).await;
    assert_eq!(
        (s, v["stage"]["stage"].as_str(), v["stage"]["share"].as_f64()),
        (StatusCode::OK, Some("canary"), Some(0.5))
    );
    svc.wait("canary decisions", Duration::from_secs(60), |s| s.rollout.read().unwrap().candidate_acted >= 5).await;
    {
        let r = svc.shared.rollout.read().unwrap().clone();
        assert!(r.candidate_acted < r.compared, "half the pods, not all: {r:?}");
        let log = svc.shared.decisions.read().unwrap();
        let by_candidate = log.newest_first().take(200).filter(|d| d.policy.starts_with("packer: ")).count();
        assert!(by_candidate > 0, "canary decisions are explained as the candidate's");
    }

    // No verdict, then a BLOCK verdict: promotion refused.
    let (s, e) = call(post("/v1/rollout/promote")).await;
    assert_eq!((s, e["code"].as_str()), (StatusCode::CONFLICT, Some("ROLLOUT-NO-VERDICT")));
    let (s, e) = call(post("/v1/rollout/verdict").json(&json!({"verdict": "MAYBE", "campaign": "c"}))).await;
    assert_eq!((s, e["code"].as_str()), (StatusCode::BAD_REQUEST, Some("API-BAD-BODY")));
    let block = json!({"campaign": "bad-candidate", "verdict": "BLOCK", "failing": ["sla_violations"], "gates": [], "runs": [], "wall_s": 1.0});
    let (s, v) = call(post("/v1/rollout/verdict").json(&block)).await;
    assert_eq!((s, v["verdict"]["verdict"].as_str()), (StatusCode::OK, Some("BLOCK")));
    let (s, e) = call(post("/v1/rollout/promote")).await;
    assert_eq!((s, e["code"].as_str()), (StatusCode::CONFLICT, Some("ROLLOUT-BLOCKED")), "{e}");
    assert!(e["message"].as_str().unwrap().contains("sla_violations"), "{e}");
    assert_eq!(svc.shared.rollout.read().unwrap().active, "default", "a failed verdict stops the promotion");

    // PROMOTE: the candidate becomes the active policy.
    let pass = json!({"campaign": "sound-candidate", "verdict": "PROMOTE", "failing": []});
    call(post("/v1/rollout/verdict").json(&pass)).await;
    let (s, v) = call(post("/v1/rollout/promote")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (v["active"].as_str(), &v["candidate"], v["promotions"].as_u64()),
        (Some("packer"), &Value::Null, Some(1))
    );
    svc.wait("a decision by the promoted policy", Duration::from_secs(60), |s| {
        s.decisions.read().unwrap().last().is_some_and(|d| d.policy.starts_with("packer: "))
    })
    .await;

    // Rollback drops a candidate.
    let (s, _) =
        call(post("/v1/rollout/candidate").body("name: again\nplugins:\n  - name: fgd\n    source: builtin:fgd\n"))
            .await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = call(post("/v1/rollout/rollback")).await;
    assert_eq!((s, &v["candidate"], v["active"].as_str()), (StatusCode::OK, &Value::Null, Some("packer")));

    let text = http.get(svc.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("tessera_rollout_decisions_total{stage=\"shadow\",agreed=\"false\"}"), "{text}");
    assert!(text.contains("tessera_rollout_decisions_total{stage=\"canary\""), "{text}");
    svc.stop().await;
}
