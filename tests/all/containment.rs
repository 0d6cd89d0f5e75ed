//! Hostile components are contained: each fault ends the call quickly with
//! an error naming the plugin and the cause, the rest of the policy keeps
//! deciding, the faulty instance is replaced, and a plugin over its fault
//! budget is quarantined.

use std::time::{Duration, Instant};

use tessera_core::{Pod, Resources};
use tessera_plugins::{BINPACK, HOSTILE, NOT_A_POLICY, OVERLOAD, WRONG_SIGNATURE};
use tessera_policy::{Bounded, Role};
use tessera_wasm::{CallFault, Decision, LoadError, PluginSpec, Runtime, RuntimeConfig};

use crate::{cluster, load, member, policy, runtime};

fn pod() -> Pod {
    Pod {
        name: "victim".into(),
        requests: Resources { cpu_milli: 1000, memory_mib: 512 },
        gpu_count: 1,
        gpu_milli: 1000,
        ..Pod::default()
    }
}

/// The hostile plugin behaves on calls with fewer than 5 candidates, so it
/// passes the load check (4 canned nodes) and misbehaves in service (8).
fn armed(config: &str) -> String {
    config.replacen('{', r#"{"min_candidates": 5, "#, 1)
}

/// Decides with binpack (weight 1) beside a hostile plugin configured with
/// `config` (armed); returns the decision and how long it took.
fn decide_beside_hostile(config: &str) -> (Decision, Duration) {
    decide_beside_hostile_within(config, 50)
}

/// The same with another deadline for the hostile plugin (the default of
/// 50 ms is tight for moving megabytes on a loaded 2-core machine).
fn decide_beside_hostile_within(config: &str, deadline_ms: u64) -> (Decision, Duration) {
    let rt = runtime();
    let mut spec = PluginSpec::new("hostile");
    spec.config_json = armed(config);
    spec.limits.deadline_ms = Bounded(deadline_ms);
    let (hostile, _) = rt.load(&spec, HOSTILE.bytes).unwrap();
    let nodes = cluster(8);
    let p = policy(vec![member(load(&rt, BINPACK, "binpack", "null"), 1.0), member(hostile, 5.0)], &nodes);
    let t = Instant::now();
    let d = p.decide(&pod(), &(0..8).collect::<Vec<_>>());
    (d, t.elapsed())
}

fn only_error(d: &Decision) -> &tessera_wasm::CallError {
    assert_eq!(d.errors.len(), 1, "{:?}", d.errors);
    assert_eq!(d.chosen, Some(7), "binpack still decides: {d:?}");
    let e = &d.errors[0];
    assert_eq!(&*e.plugin, "hostile");
    assert!(e.to_string().starts_with("plugin hostile@0.1.0: "), "{e}");
    e
}

#[test]
fn infinite_loop_is_stopped_by_the_deadline() {
    let (d, took) = decide_beside_hostile(r#"{"mode": "loop"}"#);
    let e = only_error(&d);
    assert_eq!(e.kind, CallFault::Timeout { deadline_ms: 50 });
    assert_eq!(e.call, "score");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(e.to_string().contains("PLUGIN-TIMEOUT"), "{e}");
}

#[test]
fn one_gib_allocation_is_refused_under_the_default_256_mib_cap() {
    let (d, took) = decide_beside_hostile(r#"{"mode": "alloc"}"#);
    let e = only_error(&d);
    match e.kind {
        CallFault::MemoryExceeded { cap_mib, requested_mib } => {
            assert_eq!(cap_mib, 256);
            assert!(requested_mib >= 1024, "{requested_mib}");
        }
        ref other => panic!("expected a memory fault, got {other}"),
    }
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

#[test]
fn allocation_within_the_cap_is_fine() {
    let (d, _) = decide_beside_hostile_within(r#"{"mode": "alloc", "bytes": 8388608}"#, 5000);
    assert!(d.errors.is_empty(), "{:?}", d.errors);
}

#[test]
fn panic_is_a_trap_with_the_guest_message() {
    let (d, _) = decide_beside_hostile(r#"{"mode": "panic"}"#);
    let e = only_error(&d);
    match &e.kind {
        CallFault::Trap { guest_said: Some(said), .. } => {
            assert!(said.contains("hostile plugin panics on purpose"), "{said}")
        }
        other => panic!("expected a trap with the panic message, got {other}"),
    }
}

#[test]
fn wrong_length_result_is_a_fault() {
    let (d, _) = decide_beside_hostile(r#"{"mode": "wrong-length"}"#);
    assert_eq!(only_error(&d).kind, CallFault::WrongLength { what: "scores", expected: 8, got: 7 });
    let (d, _) = decide_beside_hostile(r#"{"mode": "wrong-length", "on": "filter"}"#);
    assert_eq!(only_error(&d).kind, CallFault::WrongLength { what: "verdicts", expected: 8, got: 9 });
}

#[test]
fn oversized_output_is_a_fault() {
    let (d, _) = decide_beside_hostile_within(r#"{"mode": "oversized"}"#, 5000);
    assert!(matches!(only_error(&d).kind, CallFault::OversizedOutput { what: "scores", .. }), "{:?}", d.errors);
}

#[test]
fn oversized_error_message_is_clipped_and_not_a_fault() {
    let (d, _) = decide_beside_hostile_within(r#"{"mode": "oversized-error"}"#, 5000);
    let e = only_error(&d);
    assert!(!e.is_fault());
    let CallFault::Guest(msg) = &e.kind else { panic!("{e}") };
    assert!(msg.len() < tessera_wasm::MAX_GUEST_ERROR + 64, "{}", msg.len());
    assert!(msg.ends_with("(1048576 bytes, clipped)"), "{}", &msg[msg.len() - 40..]);
}

#[test]
fn fuel_limit_stops_a_loop() {
    let rt = Runtime::new(RuntimeConfig { fuel: true, ..RuntimeConfig::default() }).unwrap();
    let mut spec = PluginSpec::new("hostile");
    spec.config_json = armed(r#"{"mode": "loop"}"#);
    spec.limits.fuel = Some(Bounded(5_000_000));
    spec.limits.deadline_ms = Bounded(10_000);
    let (v, _) = rt.load(&spec, HOSTILE.bytes).unwrap();
    let p = policy(vec![member(v, 1.0)], &cluster(8));
    let d = p.decide(&pod(), &(0..8).collect::<Vec<_>>());
    assert_eq!(d.errors[0].kind, CallFault::FuelExhausted { fuel: 5_000_000 });
    // Fuel without a fuel-metering runtime is refused at load.
    let err = runtime().load(&spec, HOSTILE.bytes).unwrap_err();
    assert!(matches!(err, LoadError::Limits { .. }), "{err}");
}

#[test]
fn faulty_instance_is_replaced_and_the_plugin_keeps_serving() {
    let rt = runtime();
    // Each instance answers three score calls, then panics.
    let v = load(&rt, HOSTILE, "hostile", r#"{"mode": "panic", "after": 3}"#);
    let p = policy(vec![member(v.clone(), 1.0)], &cluster(4));
    let before = v.instances_created();
    let mut outcomes = Vec::new();
    for _ in 0..8 {
        outcomes.push(p.decide(&pod(), &[0, 1, 2, 3]).errors.is_empty());
    }
    assert_eq!(outcomes, [true, true, true, false, true, true, true, false]);
    assert_eq!(v.instances_created() - before, 2, "a fresh instance after each fault");
    let stats = p.member("hostile").unwrap().slot.stats();
    assert_eq!((stats.calls, stats.faults, stats.quarantined), (16, 2, false), "8 filters + 8 scores");
}

#[test]
fn plugin_over_its_fault_budget_is_quarantined_and_the_rest_keep_deciding() {
    let rt = runtime();
    let mut spec = PluginSpec::new("hostile");
    // Panics on every score call after the load check.
    spec.config_json = armed(r#"{"mode": "panic"}"#);
    spec.limits.fault_budget = Bounded(2);
    let (hostile, _) = rt.load(&spec, HOSTILE.bytes).unwrap();
    let p = policy(vec![member(load(&rt, BINPACK, "binpack", "null"), 1.0), member(hostile, 1.0)], &cluster(8));
    let ids: Vec<u32> = (0..8).collect();
    for i in 0..3 {
        let d = p.decide(&pod(), &ids);
        assert!(d.errors[0].is_fault(), "call {i}: {:?}", d.errors);
        assert_eq!(d.chosen, Some(7));
    }
    let slot = &p.member("hostile").unwrap().slot;
    assert!(slot.stats().quarantined);
    let d = p.decide(&pod(), &ids);
    assert_eq!(d.chosen, Some(7));
    assert!(matches!(d.errors[0].kind, CallFault::Quarantined { faults: 3 }), "{:?}", d.errors);
    assert!(d.errors[0].to_string().contains("PLUGIN-QUARANTINED"));
    // Reloading a good version releases the quarantine.
    slot.swap(load(&rt, HOSTILE, "hostile", "null"));
    assert!(p.decide(&pod(), &ids).errors.is_empty());
}

#[test]
fn components_of_another_world_are_rejected_by_name() {
    let rt = runtime();
    let err = rt.load(&PluginSpec::new("cmd"), NOT_A_POLICY.bytes).unwrap_err();
    let LoadError::WrongWorld { plugin, exports } = &err else { panic!("{err}") };
    assert_eq!(plugin, "cmd");
    assert!(exports.iter().any(|e| e.starts_with("wasi:cli/run")), "{exports:?}");
    assert!(err.to_string().contains("neither the `scorer` nor the `detector` world"), "{err}");

    let mut spec = PluginSpec::new("overload");
    spec.role = Some(Role::Scorer);
    let err = rt.load(&spec, OVERLOAD.bytes).unwrap_err();
    assert_eq!(err.to_string(), "plugin overload: is a detector plugin but the policy uses it as a scorer");

    let err = rt.load(&PluginSpec::new("junk"), b"\0asm not really").unwrap_err();
    assert!(matches!(err, LoadError::Compile { .. }), "{err}");
}

#[test]
fn a_wrong_score_signature_is_refused_naming_score_not_configure() {
    let err = runtime().load(&PluginSpec::new("forged"), WRONG_SIGNATURE.bytes).unwrap_err().to_string();
    assert!(err.starts_with("plugin forged:"), "{err}");
    assert!(err.contains("score"), "{err}");
    assert!(!err.contains("configure"), "{err}");
}

#[test]
fn a_reuse_scope_no_contract_has_is_refused_at_load_naming_it() {
    let err = runtime().load(&PluginSpec::new("forged"), tessera_plugins::UNKNOWN_SCOPE.bytes).unwrap_err().to_string();
    assert!(err.starts_with("plugin forged:"), "{err}");
    assert!(err.contains("PLUGIN-BAD-SCOPE"), "{err}");
    assert!(err.contains("declares the reuse scope `everything`, which no contract version has"), "{err}");
}

#[test]
fn bytes_that_are_not_webassembly_are_refused_without_echoing_them() {
    let err = runtime().load(&PluginSpec::new("passwd"), b"root:x:0:0:root:/root:/bin/bash\n").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("not WebAssembly (no \\0asm magic)"), "{text}");
    for leak in ["root", "0x72", "114"] {
        assert!(!text.replace("plugin passwd", "").contains(leak), "{leak}: {text}");
    }
}

#[test]
fn a_plugin_that_fails_its_load_check_is_not_loaded() {
    let rt = runtime();
    let mut spec = PluginSpec::new("hostile");
    spec.config_json = r#"{"mode": "guest-error", "on": "configure"}"#.into();
    let err = rt.load(&spec, HOSTILE.bytes).unwrap_err();
    assert!(err.to_string().contains("configure refuses"), "{err}");
    spec.config_json = r#"{"mode": "loop"}"#.into();
    let t = Instant::now();
    let err = rt.load(&spec, HOSTILE.bytes).unwrap_err();
    assert!(err.to_string().contains("PLUGIN-TIMEOUT"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(1));
    spec.config_json = r#"{"mode": "bogus-field-test", "nope": 1}"#.into();
    let err = rt.load(&spec, HOSTILE.bytes).unwrap_err();
    assert!(err.to_string().contains("unknown field `nope`"), "{err}");
}

#[test]
fn digest_pin_is_enforced() {
    let rt = runtime();
    let mut spec = PluginSpec::new("binpack");
    spec.sha256 = Some("0".repeat(64));
    let err = rt.load(&spec, BINPACK.bytes).unwrap_err();
    assert!(err.to_string().contains("does not match the pinned"), "{err}");
    spec.sha256 = Some(tessera_wasm::sha256_hex(BINPACK.bytes));
    rt.load(&spec, BINPACK.bytes).unwrap();
}

/// A plugin that writes a 200-byte line to stderr on every call is not
/// trapped when its output passes the capture size: stderr keeps the last
/// bytes and never refuses a write (it used to trap the write that
/// overflowed 16 KiB, and the plugin was quarantined for talking).
#[test]
fn a_plugin_that_writes_to_stderr_on_every_call_is_never_faulted_for_it() {
    let rt = runtime();
    let mut spec = PluginSpec::new("chatty");
    spec.config_json = r#"{"mode": "chatty"}"#.into();
    spec.limits.deadline_ms = Bounded(2000);
    let (chatty, _) = rt.load(&spec, HOSTILE.bytes).unwrap();
    let nodes = cluster(8);
    let m = member(chatty, 1.0);
    let slot = m.slot.clone();
    let p = policy(vec![m], &nodes);
    for _ in 0..300 {
        let d = p.decide(&pod(), &(0..8).collect::<Vec<_>>());
        assert!(d.errors.is_empty(), "{:?}", d.errors);
    }
    let st = slot.stats();
    assert_eq!((st.faults, st.quarantined), (0, false), "{st:?}");
}

/// A plugin whose `apply` refuses the node deltas loses its mirror: that
/// is a fault (PLUGIN-APPLY), so a plugin that always refuses is
/// quarantined instead of being re-created on every call forever.
#[test]
fn a_plugin_that_refuses_the_node_deltas_is_faulted_and_quarantined() {
    let rt = runtime();
    let mut spec = PluginSpec::new("refuser");
    // The load check's apply passes; every later one refuses.
    spec.config_json = r#"{"mode": "guest-error", "on": "apply", "after": 1}"#.into();
    spec.limits.deadline_ms = Bounded(2000);
    let (refuser, _) = rt.load(&spec, HOSTILE.bytes).unwrap();
    let mut nodes = cluster(8);
    let m = member(refuser, 1.0);
    let slot = m.slot.clone();
    let p = policy(vec![member(load(&rt, BINPACK, "binpack", "null"), 1.0), m], &nodes);
    let mut codes = Vec::new();
    for i in 0..20 {
        // The cluster changes between decisions: each brings deltas to apply.
        nodes[i % 8].free.cpu_milli -= 1;
        p.upsert_nodes(&nodes[i % 8..=i % 8]);
        let d = p.decide(&pod(), &(0..8).collect::<Vec<_>>());
        assert!(d.chosen.is_some(), "binpack still decides");
        codes.extend(d.errors.iter().map(|e| e.kind.code()));
    }
    assert!(codes.iter().take(3).all(|c| *c == "PLUGIN-APPLY"), "{codes:?}");
    assert!(slot.stats().quarantined, "always refusing its mirror: {codes:?}");
}

/// What a plugin says of itself is bounded at load: a 64 KiB filter
/// reason (copied into every decision, per rejected node: `tessera sim`
/// took 32 s instead of 0.2 s) is refused, naming the plugin and the limit.
#[test]
fn a_plugin_that_declares_an_oversized_reason_is_refused_at_load() {
    let rt = runtime();
    let mut spec = PluginSpec::new("wordy");
    spec.config_json = r#"{"reason_len": 65536}"#.into();
    let e = rt.load(&spec, HOSTILE.bytes).unwrap_err().to_string();
    assert!(e.contains("plugin wordy") && e.contains("reason codes"), "{e}");
    assert!(e.contains("65536") && e.contains("64"), "{e}");
    // A reason of ordinary length loads.
    spec.config_json = r#"{"reason_len": 20}"#.into();
    rt.load(&spec, HOSTILE.bytes).unwrap();
}
