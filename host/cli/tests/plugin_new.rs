//! `tessera plugin new`, `build` and `wit` as a plugin author runs them: a
//! project made outside the workspace passes its own native tests, builds
//! with its language's toolchain, and passes `tessera plugin check`.
//!
//! Python and JavaScript need componentize-py and componentize-js (`.ci/run`
//! installs them and sets `TESSERA_COMPONENTIZE_PY` / `_JS`); without them
//! the build steps say so and pass, unless `CI` is set.

use std::path::Path;
use std::process::Command;

fn tessera(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("run tessera");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn run(dir: &Path, program: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(program).args(args).current_dir(dir).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn tool_missing(err: &str) -> bool {
    let missing = err.contains("not found (");
    assert!(!(missing && std::env::var_os("CI").is_some()), "CI must have the toolchain: {err}");
    if missing {
        eprintln!("skipped: {err}");
    }
    missing
}

/// New project, its native tests, then build and check.
fn new_build_check(lang: &str, kind: &str, native: (&str, &[&str])) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("my-policy");
    let d = dir.to_str().unwrap();
    let (ok, out, err) = tessera(&["plugin", "new", "my-policy", "--lang", lang, "--kind", kind, "--dir", d]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("wrote"), "{out}");
    let (ok, out) = run(&dir, native.0, native.1);
    assert!(ok, "{lang} {kind} native tests: {out}");

    if lang == "js" && kind == "scorer" {
        // A module in a folder of the project's own is bundled too.
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::write(dir.join("lib/scale.js"), "export const SCALE = 1_000_000;\n").unwrap();
        let app = std::fs::read_to_string(dir.join("app.js")).unwrap();
        let app = format!("import {{ SCALE }} from \"./lib/scale.js\";\n{app}").replace("* 1_000_000", "* SCALE");
        assert!(app.contains("* SCALE"), "{app}");
        std::fs::write(dir.join("app.js"), app).unwrap();
    }
    let wasm = tmp.path().join("my-policy.wasm");
    let (ok, out, err) = tessera(&["plugin", "build", d, "-o", wasm.to_str().unwrap()]);
    if !ok && tool_missing(&err) {
        return;
    }
    assert!(ok, "{lang} {kind} build: {out}{err}");
    assert!(out.contains("sha256:"), "{out}");
    let (ok, out, err) = tessera(&["plugin", "check", wasm.to_str().unwrap()]);
    assert!(ok, "{lang} {kind} check: {out}{err}");
    assert!(out.contains(&format!("world           {kind}")), "{out}");
    assert!(out.contains("plugin          my-policy 0.1.0"), "{out}");
    assert!(out.contains("contract        tessera:policy@0.2.2"), "{out}");
    if kind == "scorer" {
        // The sample filters on CPU load and scores free GPU share: the
        // canned nodes are answered, one score each.
        assert!(out.contains("canned          pod whole"), "{out}");
        // The sample's scores (the same in every language).
        assert!(out.contains("scores [7500048000, 2000064000, 4000064000, 64000]"), "{out}");
    }
    // In the simulator beside Rust plugins: every pod decided, no plugin
    // error.
    let role = if kind == "detector" { "\n    role: detector" } else { "" };
    let policy = format!(
        "name: mixed\nplugins:\n  - name: binpack\n    source: builtin:binpack\n  - name: my-policy\n    \
         source: my-policy.wasm{role}\n"
    );
    std::fs::write(tmp.path().join("mixed.yaml"), policy).unwrap();
    let yaml = tmp.path().join("mixed.yaml");
    let (ok, out, err) = tessera(&["sim", "--online", "--policy", yaml.to_str().unwrap(), "--node-count", "60"]);
    assert!(ok, "{lang} {kind} sim: {out}{err}");
    let field = |name: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.split_whitespace().next().unwrap_or("").to_string()))
            .unwrap_or_else(|| panic!("no {name:?} in {out}"))
    };
    assert!(field("binds").parse::<u64>().is_ok_and(|n| n > 0), "{out}");
    assert_eq!(field("plugin errors"), "0", "{lang} {kind}: {out}");
    // Again over the same directory: refused, nothing overwritten.
    let (ok, _, err) = tessera(&["plugin", "new", "my-policy", "--lang", lang, "--dir", d]);
    assert!(!ok && err.contains("exists and is not empty"), "{err}");
}

#[test]
fn a_python_scorer_from_plugin_new_builds_and_checks() {
    new_build_check("python", "scorer", ("python3", &["-m", "unittest", "-q"]));
}

#[test]
fn a_python_detector_from_plugin_new_builds_and_checks() {
    new_build_check("python", "detector", ("python3", &["-m", "unittest", "-q"]));
}

#[test]
fn a_js_scorer_from_plugin_new_builds_and_checks() {
    new_build_check("js", "scorer", ("node", &["--test"]));
}

#[test]
fn a_js_detector_from_plugin_new_builds_and_checks() {
    new_build_check("js", "detector", ("node", &["--test"]));
}

/// The Rust project vendors the SDK and builds with crates.io alone (in
/// a target directory kept between runs: serde and wit-bindgen once).
#[test]
fn a_rust_scorer_from_plugin_new_tests_builds_and_checks() {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"), std::path::PathBuf::from)
        .join("scaffold");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("my-policy");
    let d = dir.to_str().unwrap();
    let (ok, out, err) = tessera(&["plugin", "new", "my-policy", "--lang", "rust", "--dir", d]);
    assert!(ok, "{out}{err}");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out =
        Command::new(&cargo).args(["test", "--quiet", "--target-dir"]).arg(&target).current_dir(&dir).output().unwrap();
    assert!(out.status.success(), "cargo test: {}", String::from_utf8_lossy(&out.stderr));
    let wasm = tmp.path().join("my-policy.wasm");
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["plugin", "build", d, "-o", wasm.to_str().unwrap()])
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    assert!(out.status.success(), "build: {}", String::from_utf8_lossy(&out.stderr));
    let (ok, out, err) = tessera(&["plugin", "check", wasm.to_str().unwrap()]);
    assert!(ok && out.contains("plugin          my-policy 0.1.0"), "{out}{err}");
}

#[test]
fn plugin_wit_writes_every_contract_and_refuses_others() {
    let tmp = tempfile::tempdir().unwrap();
    for v in ["0.1.0", "0.2.0", "0.2.1", "0.2.2"] {
        let dir = tmp.path().join(v);
        let (ok, out, err) = tessera(&["plugin", "wit", dir.to_str().unwrap(), "--contract", v]);
        assert!(ok, "{out}{err}");
        let worlds = std::fs::read_to_string(dir.join("worlds.wit")).unwrap();
        assert!(worlds.contains(&format!("package tessera:policy@{v};")), "{worlds}");
        assert!(dir.join("types.wit").is_file() && dir.join("policy.wit").is_file() && dir.join("host.wit").is_file());
    }
    let (ok, _, err) = tessera(&["plugin", "wit", tmp.path().join("x").to_str().unwrap(), "--contract", "9.9.9"]);
    assert!(!ok && err.contains("contract 9.9.9 is not one this host loads (0.1.0, 0.2.0, 0.2.1, 0.2.2)"), "{err}");
}
