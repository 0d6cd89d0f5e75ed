use std::path::Path;

use super::*;

const GOOD: &str = r#"
name: default
seed: 7
plugins:
  - name: binpack
    source: builtin:binpack
    weight: 2
    limits: { deadline_ms: 20, memory_mib: 32 }
    config: { gpu_weight: 3 }
  - name: spread
    source: plugins/topology-spread.wasm
    sha256: sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff
"#;

fn invalid(text: &str) -> (usize, usize, String) {
    match PolicyDocument::parse(text, "p.yaml") {
        Err(PolicyError::Invalid { file, line, column, reason }) => {
            assert_eq!(file, "p.yaml");
            (line, column, reason)
        }
        other => panic!("expected an invalid document, got {other:?}"),
    }
}

#[test]
fn parses_a_good_document_with_defaults() {
    let doc = PolicyDocument::parse(GOOD, "p.yaml").unwrap();
    assert_eq!(doc.seed, 7);
    assert_eq!(doc.timeout_ms.0, 120, "the default decision budget");
    let b = &doc.plugins[0];
    assert_eq!(b.source, Source::Builtin("binpack".into()));
    assert_eq!(b.weight.0, 2.0);
    assert_eq!(b.limits.deadline_ms.0, 20);
    assert_eq!(b.limits.fault_budget.0, 3, "defaults fill unspecified limits");
    assert_eq!(PolicyDocument::config_json(b), r#"{"gpu_weight":3}"#);
    let s = &doc.plugins[1];
    assert_eq!(s.weight.0, 1.0);
    assert_eq!(s.sha256.as_ref().unwrap().0.len(), 64);
    assert_eq!(PolicyDocument::config_json(s), "null");
}

#[test]
fn unknown_field_is_reported_with_its_line() {
    let text = GOOD.replace("    weight: 2\n", "    weight: 2\n    wieght: 3\n");
    let (line, column, reason) = invalid(&text);
    assert_eq!(line, 8, "{reason}");
    assert!(column > 0);
    assert!(reason.contains("unknown field `wieght`"), "{reason}");
}

#[test]
fn out_of_range_limit_is_reported_with_its_line() {
    let text = GOOD.replace("deadline_ms: 20", "deadline_ms: 0");
    let (line, _, reason) = invalid(&text);
    assert_eq!(line, 8);
    assert!(reason.contains("0 is out of range 1..=10000"), "{reason}");
}

#[test]
fn negative_weight_and_bad_digest_and_bad_source() {
    let (_, _, r) = invalid(&GOOD.replace("weight: 2", "weight: -1"));
    assert!(r.contains("weight -1 must be within 0..=1000000"), "{r}");
    let (line, _, r) = invalid(&GOOD.replace("sha256:0011", "sha256:zz11"));
    // At the field itself, not at the entry that holds it.
    assert_eq!(line, 12);
    assert!(r.contains("not a SHA-256 digest"), "{r}");
    let (_, _, r) = invalid(&GOOD.replace("builtin:binpack", "https://evil/x.wasm"));
    assert!(r.contains("only `builtin:NAME` and file paths"), "{r}");
}

#[test]
fn duplicate_plugin_names_point_at_the_second() {
    let text = GOOD.replace("name: spread", "name: binpack");
    let (line, _, reason) = invalid(&text);
    assert_eq!(line, 10);
    assert!(reason.contains("listed twice"), "{reason}");
}

#[test]
fn semantic_checks() {
    let (_, _, r) = invalid("name: x\nplugins: []\n");
    assert!(r.contains("at least one plugin"), "{r}");
    let (_, _, r) = invalid("name: x\nplugins:\n  - name: a\n    source: builtin:a\n    weight: 0\n");
    assert!(r.contains("weight 0"), "{r}");
    let (_, _, r) = invalid("name: x\ntimeout_ms: 0\nplugins:\n  - name: a\n    source: builtin:a\n");
    assert!(r.contains("0 is out of range 1..=60000"), "{r}");
    let (line, _, r) = invalid("name: x\nplugins:\n  - name: Bad Name\n    source: builtin:a\n");
    assert_eq!(line, 3);
    assert!(r.contains("must be 1-63"), "{r}");
    let (_, _, r) = invalid("name: x\nplugins:\n  - name: a\n    source: builtin:a\n    config: [1]\n");
    assert!(r.contains("must be a mapping"), "{r}");
}

#[test]
fn file_errors_name_the_file_and_sources_resolve_inside_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.yaml");
    let e = PolicyDocument::load(&missing).unwrap_err().to_string();
    assert!(e.contains("nope.yaml"), "{e}");
    let file = dir.path().join("p.yaml");
    std::fs::write(&file, GOOD).unwrap();
    std::fs::create_dir(dir.path().join("plugins")).unwrap();
    std::fs::write(dir.path().join("plugins/topology-spread.wasm"), b"\0asm").unwrap();
    let mut doc = PolicyDocument::load(&file).unwrap();
    doc.resolve_paths(&file).unwrap();
    let want = dir.path().canonicalize().unwrap().join("plugins/topology-spread.wasm");
    assert_eq!(doc.plugins[1].source, Source::File(want));

    // Out of the policy's directory: refused, naming the plugin, and the
    // file is never read (its content cannot show up in the error).
    std::fs::write(dir.path().join("secret"), "root:x:0:0").unwrap();
    let inner = dir.path().join("inner");
    std::fs::create_dir(&inner).unwrap();
    for source in ["../secret", dir.path().join("secret").to_str().unwrap()] {
        let f = inner.join("p.yaml");
        std::fs::write(&f, format!("name: x\nplugins:\n  - name: sneaky\n    source: {source}\n")).unwrap();
        let mut doc = PolicyDocument::load(&f).unwrap();
        let e = doc.resolve_paths(&f).unwrap_err().to_string();
        assert!(e.contains("plugin sneaky: source") && e.contains("outside"), "{e}");
        assert!(e.starts_with(&format!("{}:4:", f.display())), "the line of the source: {e}");
        assert!(!e.contains("root:x"), "{e}");
    }
    // A document with no directory (posted to the service without a
    // `sources_dir`) names only built-in plugins.
    let mut doc = PolicyDocument::parse(GOOD, "request body").unwrap();
    let e = doc.resolve_sources(None).unwrap_err().to_string();
    assert!(e.contains("plugin spread") && e.contains("only `builtin:`"), "{e}");
}

#[cfg(unix)]
#[test]
fn a_policy_that_never_ends_is_refused_before_it_is_read() {
    let e = PolicyDocument::load(Path::new("/dev/zero")).unwrap_err().to_string();
    assert_eq!(e, "/dev/zero: is a character device, not a regular file");
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, "#".repeat((1 << 20) + 1)).unwrap();
    let e = PolicyDocument::load(&big).unwrap_err().to_string();
    assert!(e.contains("larger than 1 MiB (the most a policy document may be)"), "{e}");
}

#[test]
fn errors_name_the_field_at_its_line() {
    // `timeout_ms` was reported at 1:1 and `deadline_ms` not named.
    let (line, col, r) = invalid("name: x\ntimeout_ms: 0\nplugins:\n  - name: a\n    source: builtin:a\n");
    assert_eq!((line, col), (2, 1), "{r}");
    assert_eq!(r, "timeout_ms: 0 is out of range 1..=60000");
    let (line, _, r) = invalid(&GOOD.replace("deadline_ms: 20", "deadline_ms: 0"));
    assert_eq!(line, 8);
    assert_eq!(r, "plugins[0].limits.deadline_ms: 0 is out of range 1..=10000");
    // Flow-style duplicates were placed at 0:0.
    let (line, col, r) = invalid(&GOOD.replace("{ deadline_ms: 20,", "{ deadline_ms: 20, deadline_ms: 30,"));
    assert_eq!((line, col), (8, 32), "{r}");
    assert!(r.contains("plugins[0].limits.deadline_ms: duplicate key"), "{r}");
    // A `name:` inside `config` is not the plugin's.
    let text = "name: x\nplugins:\n  - config:\n      name: inner\n    source: builtin:a\n    name: Bad\n";
    let (line, _, r) = invalid(text);
    assert_eq!(line, 6, "{r}");
    // A 10 MB bad number is not echoed whole.
    let long = "9".repeat(10 << 20);
    let (_, _, r) = invalid(&GOOD.replace("weight: 2", &format!("weight: x{long}")));
    assert!(r.len() < 300 && r.starts_with("plugins[0].weight: invalid type"), "{} bytes", r.len());
}

#[test]
fn a_byte_order_mark_and_deep_nesting() {
    let doc = PolicyDocument::parse(&format!("\u{feff}{}", GOOD.trim_start()), "p.yaml").unwrap();
    assert_eq!(doc.name, "default");
    let deep = format!("{GOOD}x: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let (line, _, r) = invalid(&deep);
    assert_eq!(line, GOOD.lines().count() + 1);
    assert!(r.ends_with("nested deeper than 64 levels"), "{r}");
}

#[test]
fn weights_are_bounded_so_totals_stay_finite() {
    let (line, _, r) = invalid(&GOOD.replace("weight: 2", "weight: 1e308"));
    assert_eq!(line, 7);
    assert!(r.contains("within 0..=1000000"), "{r}");
    let bad = format!("{GOOD}adaptive:\n  weight_sets: [[1, 1], [1e308, 1]]\n");
    let (_, _, r) = invalid(&bad);
    assert!(r.starts_with("adaptive.weight_sets[1]:"), "{r}");
    let bad = format!("{GOOD}rescheduling:\n  cost: {{ alpha: 1e308 }}\n");
    assert!(invalid(&bad).2.contains("rescheduling.cost.alpha"));
}

#[test]
fn scheduling_and_adaptive_sections_are_typed_and_checked() {
    let text = format!(
        "{GOOD}scheduling:\n  queue: {{ levels: 3, base_quantum: 4, aging_after: 600 }}\n  sampling: {{ percentage: 20 }}\n  preemption: false\nadaptive:\n  weight_sets: [[1, 1], [2, 0.5]]\n"
    );
    let doc = PolicyDocument::parse(&text, "p.yaml").unwrap();
    assert_eq!(doc.scheduling.queue.levels, 3);
    assert_eq!(doc.scheduling.sampling.percentage, Some(20));
    assert!(!doc.scheduling.preemption);
    assert_eq!(doc.adaptive.unwrap().weight_sets.len(), 2);
    let bad = format!("{GOOD}adaptive:\n  weight_sets: [[1, 1, 1]]\n");
    let e = PolicyDocument::parse(&bad, "p.yaml").unwrap_err().to_string();
    assert!(e.contains("adaptive.weight_sets[0]: has 3 weights, the policy has 2 scorers"), "{e}");
    let bad = format!("{GOOD}scheduling:\n  sampling: {{ percentage: 0 }}\n");
    assert!(PolicyDocument::parse(&bad, "p.yaml").unwrap_err().to_string().contains("1..=100"));
    let bad = format!("{GOOD}scheduling:\n  queue: {{ levels: 2, speed: 9 }}\n");
    let e = PolicyDocument::parse(&bad, "p.yaml").unwrap_err().to_string();
    assert!(e.contains("unknown field `speed`"), "{e}");
}

#[test]
fn movement_section_is_typed_and_checked() {
    let text = format!(
        "{GOOD}movement:\n  batch_size: 10%\n  pause_duration_s: 60\n  concurrency_limit: 2\n  budgets:\n    - {{ workload: web, max_unavailable: 1 }}\n  rollback: {{ error_rate: 0.02, latency_p99_ms: 400, ready_timeout_s: 120 }}\n"
    );
    let doc = PolicyDocument::parse(&text, "p.yaml").unwrap();
    assert_eq!(doc.movement.concurrency_limit, 2);
    assert_eq!(doc.movement.batch_len(100), 10);
    assert_eq!(doc.movement.budgets[0].max_unavailable, Some(1));
    let d = PolicyDocument::parse(
        &format!("{GOOD}detection: {{ detection_interval: 3, anomaly_threshold: 700 }}\n"),
        "p.yaml",
    )
    .unwrap();
    assert_eq!((d.detection.detection_interval, d.detection.anomaly_threshold), (3, 700));
    assert!(invalid(&format!("{GOOD}detection: {{ detection_interval: 0 }}\n")).2.contains("at least 1"));
    let bad = format!("{GOOD}movement:\n  concurrency_limit: 0\n");
    let (line, _, reason) = invalid(&bad);
    assert!(reason.contains("concurrency_limit must be at least 1"), "{reason}");
    assert_eq!(line, GOOD.lines().count() + 2, "at the field, not at `movement:`");
    let bad = format!("{GOOD}movement:\n  budgets: [{{ workload: web }}]\n");
    assert!(invalid(&bad).2.contains("set max_unavailable or min_available"));
    let bad = format!("{GOOD}movement:\n  batch_size: 3\n  speed: 3\n");
    assert!(invalid(&bad).2.contains("unknown field `speed`"));
    let bad = format!("{GOOD}movement:\n  batch_size: lots\n");
    assert!(invalid(&bad).2.contains("`lots` is neither a count nor a percentage"), "{:?}", invalid(&bad));
}

#[test]
fn rescheduling_section_is_typed_and_checked() {
    let text = format!(
        "{GOOD}rescheduling:\n  strategy_weights: {{ load_balance: 1, fragment_merge: 3, co_location: 0 }}\n  cost: {{ alpha: 0.01, beta: 0.5, gamma: 2, min_net_gain: 0.1 }}\n  time_limit_ms: 500\n  max_moves: 50\n"
    );
    let doc = PolicyDocument::parse(&text, "p.yaml").unwrap();
    let r = &doc.rescheduling;
    assert_eq!((r.strategy_weights.fragment_merge, r.strategy_weights.co_location), (3.0, 0.0));
    assert_eq!((r.cost.gamma, r.cost.min_net_gain, r.time_limit_ms, r.max_moves), (2.0, 0.1, 500, 50));
    let bad = format!("{GOOD}rescheduling:\n  strategy_weights: {{ load_balance: -1 }}\n");
    let (line, _, reason) = invalid(&bad);
    assert!(reason.contains("strategy_weights.load_balance"), "{reason}");
    assert_eq!(line, GOOD.lines().count() + 2, "at the field, not at `rescheduling:`");
    assert!(invalid(&format!("{GOOD}rescheduling:\n  cost: {{ beta: -2 }}\n")).2.contains("cost.beta"));
    assert!(invalid(&format!("{GOOD}rescheduling:\n  load_threshold: 1.5\n")).2.contains("load_threshold"));
    assert!(invalid(&format!("{GOOD}rescheduling:\n  defrag: 1\n")).2.contains("unknown field `defrag`"));
    // The solver: a known name, and HiGHS only where it is built in.
    let solver = |name: &str| format!("{GOOD}rescheduling:\n  solver: {name}\n");
    assert!(PolicyDocument::parse(&solver("microlp"), "p.yaml").is_ok());
    assert!(invalid(&solver("cplex")).2.contains("unknown variant `cplex`"), "{:?}", invalid(&solver("cplex")));
    match PolicyDocument::parse(&solver("highs"), "p.yaml") {
        Ok(doc) => assert!(
            crate::rescheduling::LpSolver::HIGHS_BUILT_IN
                && doc.rescheduling.solver == crate::rescheduling::LpSolver::Highs
        ),
        Err(_) => assert!(invalid(&solver("highs")).2.contains("--features highs")),
    }
}

#[test]
fn queues_section_is_typed_and_checked_at_the_queue_it_names() {
    let section = r#"
queues:
  default_queue: research
  list:
    - name: org
      guarantee: { gpus: 16, cpu_milli: 64000 }
      limit: { gpus: 32, gpus_by_model: { V100: 8 } }
    - name: research
      parent: org
      weight: 2
      guarantee: { gpus: 8 }
    - name: prod
      parent: org
      guarantee: { gpus: 8 }
"#;
    let doc = PolicyDocument::parse(&format!("{GOOD}{section}"), "p.yaml").unwrap();
    let tree = doc.queue_tree();
    assert_eq!(tree.nodes().len(), 3, "the default is listed: no implicit one");
    let research = tree.index("research").unwrap();
    assert_eq!(tree.leaf_of(&tessera_core::Pod::default()), Ok(research));
    assert!(tree.reclaim(), "reclaim is on by default");
    assert!(!tree.fair_share_gate(), "the fair-share gate is off by default");
    let gated = section.replace("  default_queue: research\n", "  default_queue: research\n  fair_share_gate: true\n");
    assert!(PolicyDocument::parse(&format!("{GOOD}{gated}"), "p.yaml").unwrap().queue_tree().fair_share_gate());
    assert_eq!(PolicyDocument::parse(GOOD, "p.yaml").unwrap().queue_tree(), tessera_core::quota::QueueTree::default());

    let (line, _, reason) = invalid(&format!(
        "{GOOD}{}",
        section.replace(
            "      guarantee: { gpus: 8 }\n    - name: prod",
            "      guarantee: { gpus: 9 }\n    - name: prod"
        )
    ));
    assert_eq!(line, 18, "at org's guarantee: {reason}");
    assert!(reason.starts_with("queues.list[0].guarantee.gpus: queue `org` guarantees 16"), "{reason}");
    let (line, _, reason) =
        invalid(&format!("{GOOD}{}", section.replace("parent: org\n      weight: 2", "parent: orgg\n      weight: 2")));
    assert_eq!(line, 21, "at research's parent: {reason}");
    assert!(reason.contains("queue `research`: no queue `orgg`"), "{reason}");
    let (_, _, reason) =
        invalid(&format!("{GOOD}{}", section.replace("{ gpus: 16, cpu_milli", "{ gpu: 16, cpu_milli")));
    assert!(reason.contains("unknown field `gpu`"), "{reason}");
    let (_, _, reason) = invalid(&format!("{GOOD}{}", section.replace("weight: 2", "weight: -1")));
    assert!(reason.starts_with("queues.list[1].weight: -1 must be within (0, 1000000]"), "{reason}");
}
