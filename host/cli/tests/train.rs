//! `tessera train`: reproducible from its seed, and what it writes loads
//! as the `learned` plugin's model, digest checked.

use std::path::{Path, PathBuf};
use std::process::Command;

fn tessera(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("run tessera");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn shared() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/openb");
    if !dir.exists() {
        assert!(std::env::var_os("CI").is_none(), "{} is missing in CI", dir.display());
        return None;
    }
    Some(dir)
}

/// A small run: two generations of two pairs on two episodes (at 10% of
/// the cluster), with a held-out family.
fn train(traces: &Path, out: &Path, seed: &str) -> serde_json::Value {
    train_with(traces, out, seed, &[])
}

fn train_with(traces: &Path, out: &Path, seed: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "train",
        "--traces",
        traces.to_str().unwrap(),
        "--families",
        "cpu,gpushare",
        "--holdout",
        "multigpu",
        "--generations",
        "2",
        "--pairs",
        "2",
        "--episodes",
        "2",
        "--validation",
        "2",
        "--scale",
        "0.1",
        "--seed",
        seed,
        "--quiet",
        "--format",
        "json",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (ok, stdout, err) = tessera(&args);
    assert!(ok, "{stdout}\n{err}");
    serde_json::from_str(stdout.trim()).unwrap()
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Two runs with one seed write the same model, report and card, byte for
/// byte (the training runs its episodes on worker threads); another seed
/// draws other episodes and noise. The model is the one the report
/// names, and every file the card promises is there.
#[test]
fn training_is_reproducible_and_writes_a_loadable_model() {
    let Some(traces) = shared() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, c) = (tmp.path().join("a"), tmp.path().join("b"), tmp.path().join("c"));
    let report = train(&traces, &a, "5");
    train(&traces, &b, "5");
    train(&traces, &c, "6");
    for name in ["learned.json", "train.json", "card.md", "curve.svg"] {
        assert_eq!(read(&a, name), read(&b, name), "{name} differs between two runs with one seed");
    }
    assert_ne!(read(&a, "train.json"), read(&c, "train.json"), "another seed trained the same");

    let model = tessera_learned_policy::Model::from_json(&read(&a, "learned.json")).unwrap();
    assert_eq!(report["digest"], model.digest(), "{report}");
    assert_eq!(report["generations"].as_array().unwrap().len(), 2);
    // Held-out episodes are reported on, beside the trained families'.
    let text = report.to_string();
    assert!(text.contains("multigpu"), "{text}");
    assert!(read(&a, "curve.svg").starts_with("<svg"));
    assert!(read(&a, "card.md").contains(&model.digest()));
}

/// The trained weights given to the plugin in a policy document, with
/// their digest, load (the component checks them); a digest that is not
/// theirs, or a model with a field the format does not have, is refused
/// with an error naming the culprit.
#[test]
fn a_model_in_the_policy_is_digest_checked() {
    let Some(traces) = shared() else { return };
    let tmp = tempfile::tempdir().unwrap();
    train(&traces, tmp.path(), "5");
    let model: serde_json::Value = serde_json::from_str(&read(tmp.path(), "learned.json")).unwrap();
    let digest = tessera_learned_policy::Model::from_json(&model.to_string()).unwrap().digest();
    let policy = |config: serde_json::Value| {
        let path = tmp.path().join("policy.yaml");
        std::fs::write(
            &path,
            format!("name: mine\nplugins:\n  - name: learned\n    source: builtin:learned\n    config: {config}\n"),
        )
        .unwrap();
        tessera(&["policy", "check", path.to_str().unwrap()])
    };

    let (ok, stdout, err) = policy(serde_json::json!({ "model": model, "digest": digest }));
    assert!(ok && stdout.contains("is valid"), "{stdout}\n{err}");

    let wrong = format!("sha256:{}", "0".repeat(64));
    let (ok, _, err) = policy(serde_json::json!({ "model": model, "digest": wrong }));
    assert!(!ok && err.contains(&wrong) && err.contains(&digest), "{err}");

    let (ok, _, err) = policy(serde_json::json!({ "model": model }));
    assert!(!ok && err.contains("digest"), "{err}");

    let mut extra = model.clone();
    extra["temperature"] = serde_json::json!(1.0);
    let (ok, _, err) = policy(serde_json::json!({ "model": extra, "digest": digest }));
    assert!(!ok && err.contains("temperature"), "{err}");
}

/// `--with-traces` adds the trace directory's own pod lists to the
/// episodes: the record and the card say so (the card's command
/// reproduces the run), two runs with one seed agree byte for byte, and
/// the episodes differ from a run without it. `--aim` is recorded the same
/// way.
#[test]
fn with_traces_and_an_aim_are_recorded_and_reproducible() {
    let Some(traces) = shared() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, plain) = (tmp.path().join("a"), tmp.path().join("b"), tmp.path().join("plain"));
    let extra = ["--with-traces", "--aim", "0.1"];
    let report = train_with(&traces, &a, "5", &extra);
    train_with(&traces, &b, "5", &extra);
    train(&traces, &plain, "5");
    for name in ["learned.json", "train.json", "card.md", "curve.svg"] {
        assert_eq!(read(&a, name), read(&b, name), "{name} differs between two runs with one seed");
    }
    assert_eq!(report["options"]["with_traces"], true, "{report}");
    assert_eq!(report["options"]["aim"], 0.1, "{report}");
    assert_eq!(report["families"], serde_json::json!(["cpu", "gpushare"]), "{report}");
    let card = read(&a, "card.md");
    assert!(card.contains("--aim 0.1 --with-traces"), "{card}");
    assert!(card.contains("the directory's own pod lists"), "{card}");
    // Without the options, neither is in the record or the card.
    let plain_record = read(&plain, "train.json");
    assert!(!plain_record.contains("with_traces") && !plain_record.contains("\"aim\""), "{plain_record}");
    assert!(!read(&plain, "card.md").contains("--with-traces"));
    assert_ne!(read(&a, "train.json"), plain_record);
}

/// An aim outside (0, 1] is refused before anything is read or trained,
/// naming the option.
#[test]
fn an_aim_out_of_range_is_refused() {
    for aim in ["0", "-0.5", "1.5", "NaN"] {
        let aim = format!("--aim={aim}");
        let (ok, _, err) = tessera(&["train", "--traces", "/nonexistent", &aim]);
        assert!(!ok && err.contains("aim must be in (0, 1]"), "{aim}: {err}");
    }
    let (ok, _, err) = tessera(&["train", "--traces", "/nonexistent", "--aim", "0.2", "--with-traces"]);
    assert!(!ok && !err.contains("aim") && err.contains("/nonexistent"), "a valid aim passes the check: {err}");
}

/// A family that does not exist is named in the error.
#[test]
fn an_unknown_family_is_named() {
    let (ok, _, err) = tessera(&["train", "--traces", "/nonexistent", "--families", "cpu,tpu"]);
    assert!(!ok && err.contains("`tpu`"), "{err}");
}

/// Fine-tuning (what `tessera serve` runs on its record): from the model
/// the policy uses, on episodes drawn from recorded pods on the recorded
/// cluster; reproducible; a candidate only when the tuned model beats the
/// one in use, carrying its weights with their digest; a plugin that is
/// not a learned one, or a record without GPU pods, is named.
#[test]
fn fine_tuning_from_a_record_is_reproducible_and_offers_only_a_better_model() {
    use tessera::train::{FineTune, Hyper, episodes::Recorded, fine_tune};
    let record =
        Recorded { nodes: tessera::bench::synthetic_cluster(40), pods: tessera_core::synthetic::pods(400, &[], 3) };
    let active = tessera::sim::policy_document("learned", 1).unwrap();
    let hyper = Hyper {
        generations: 3,
        pairs: 2,
        episodes: 2,
        validation: 2,
        scale: 0.5,
        sigma: 0.001,
        lr: 0.0005,
        aim: None,
        seed: 9,
    };
    let job = FineTune { active: &active, plugin: "learned", record: &record, hyper };
    let a = fine_tune(&job, 0.0).unwrap();
    let b = fine_tune(&job, 0.0).unwrap();
    assert_eq!((&a.model, a.gains), (&b.model, b.gains), "two runs on one record differ");
    let embedded = tessera_learned_policy::Model::embedded();
    assert!(a.report.started_from.contains(&embedded.digest()), "{}", a.report.started_from);
    assert!(a.gains.1 >= a.gains.0, "the kept model is the best on validation: {:?}", a.gains);
    match &a.candidate {
        Some(doc) => {
            assert!(a.report.kept_generation > 0 && a.gains.1 > a.gains.0);
            let entry = doc.plugins.iter().find(|e| e.name == "learned").unwrap();
            let config: tessera_learned_policy::LearnedConfig = serde_json::from_value(entry.config.clone()).unwrap();
            assert_eq!(config.digest.as_deref(), Some(a.model.digest().as_str()));
            assert_eq!(tessera_learned_policy::model_of(&config).unwrap(), a.model);
            assert_eq!(doc.plugins.len(), active.plugins.len(), "only the model changes");
        }
        None => assert!(a.report.kept_generation == 0 || a.gains.1 <= a.gains.0, "{:?}", a.gains),
    }
    // No gain can clear 1: never a candidate.
    assert!(fine_tune(&job, 1.0).unwrap().candidate.is_none());

    let e = fine_tune(&FineTune { plugin: "topology-spread", ..job }, 0.0).err().unwrap().to_string();
    assert!(e.contains("topology-spread") && e.contains("not builtin:learned"), "{e}");
    let e = fine_tune(&FineTune { plugin: "nope", ..job }, 0.0).err().unwrap().to_string();
    assert!(e.contains("no plugin `nope`"), "{e}");
    let cpu_only = Recorded {
        nodes: record.nodes.clone(),
        pods: record.pods.iter().filter(|p| p.gpu_count == 0).cloned().collect(),
    };
    let e = format!("{:#}", fine_tune(&FineTune { record: &cpu_only, ..job }, 0.0).err().unwrap());
    assert!(e.contains("asks for a GPU"), "{e}");
}
