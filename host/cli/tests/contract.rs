//! Components built against the frozen contract `tessera:policy@0.1.0`
//! through the binary as a user runs it: `plugin check` says which
//! contract they speak, and a replay of the recommended policy with its
//! plugins swapped for their 0.1.0 builds is the same replay.

use std::process::Command;

use tessera_plugins::CONTRACT_0_1;

fn tessera(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("run tessera");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn plugin_check_names_the_contract_of_a_0_1_component() {
    for a in CONTRACT_0_1 {
        let (ok, out, err) = tessera(&["plugin", "check", a.path]);
        assert!(ok, "{}: {out}\n{err}", a.name);
        assert!(out.contains("contract        tessera:policy@0.1.0"), "{out}");
    }
}

#[test]
fn a_replay_with_0_1_plugins_is_the_replay_with_their_0_2_builds() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let default = std::fs::read_to_string(root.join("deploy/policies/default.yaml")).unwrap();
    // Both runs read their plugins from files (a built-in source also gets
    // the target workload filled in), so the contract is all that differs.
    let (mut current, mut frozen) = (default.clone(), default.clone());
    let mut swapped = Vec::new();
    for a in CONTRACT_0_1 {
        let builtin = format!("source: builtin:{}\n", a.name);
        if default.contains(&builtin) {
            let b = tessera_plugins::by_name(a.name).unwrap();
            std::fs::write(dir.path().join(format!("{}-0.2.wasm", a.name)), b.bytes).unwrap();
            std::fs::write(dir.path().join(format!("{}-0.1.wasm", a.name)), a.bytes).unwrap();
            current = current.replace(&builtin, &format!("source: {}-0.2.wasm\n", a.name));
            frozen = frozen.replace(&builtin, &format!("source: {}-0.1.wasm\n", a.name));
            swapped.push(a.name);
        }
    }
    assert_eq!(swapped, ["fgd", "overload", "topology-spread"], "scorers and a detector of the default policy");
    let run = |name: &str, policy: &str| {
        let (file, out) = (dir.path().join(format!("{name}.yaml")), dir.path().join(format!("{name}.json")));
        std::fs::write(&file, policy).unwrap();
        let args = ["sim", "--online", "--node-count", "60", "--seed", "11", "--policy", file.to_str().unwrap()];
        let (ok, stdout, err) = tessera(&[&args[..], &["--out", out.to_str().unwrap()]].concat());
        assert!(ok, "{name}: {stdout}\n{err}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap();
        v["report"].clone()
    };
    let (a, b) = (run("current", &current), run("frozen", &frozen));
    assert!(a["binds"].as_u64().unwrap() > 100, "{a}");
    assert_eq!(a["plugin_errors"], 0, "{a}");
    assert_eq!(a, b, "the same placements, findings and moves");
}
