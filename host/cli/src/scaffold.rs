//! `tessera plugin new`: a plugin project outside the workspace, ready to
//! build and test — the contract's WIT, the SDK for its language, a sample
//! policy, a native test, a README with the build command, and the
//! manifest `tessera plugin build` reads.
//!
//! The Rust project vendors `tessera-sdk` and `tessera-topology` (their
//! sources are embedded in this binary), so it builds with nothing but
//! crates.io; Python and JavaScript projects carry `tessera_sdk.py` /
//! `tessera_sdk.js` beside the policy.

use std::path::PathBuf;

use tessera_wasm::ContractVersion;

use crate::guest::{self, BuildError, COMPONENTIZE_JS_VERSION, COMPONENTIZE_PY_VERSION, Kind, Lang, Manifest};

/// A project file: its path in the project and its text.
type File = (&'static str, &'static str);

const PY_SCORER: File = ("app.py", include_str!("../templates/python/app_scorer.py"));
const PY_DETECTOR: File = ("app.py", include_str!("../templates/python/app_detector.py"));
const PY_TEST_SCORER: File = ("test_app.py", include_str!("../templates/python/test_scorer.py"));
const PY_TEST_DETECTOR: File = ("test_app.py", include_str!("../templates/python/test_detector.py"));

const JS_SCORER: File = ("app.js", include_str!("../templates/js/app_scorer.js"));
const JS_DETECTOR: File = ("app.js", include_str!("../templates/js/app_detector.js"));
const JS_TEST_SCORER: File = ("app_test.mjs", include_str!("../templates/js/test_scorer.mjs"));
const JS_TEST_DETECTOR: File = ("app_test.mjs", include_str!("../templates/js/test_detector.mjs"));
const JS_PACKAGE: File = ("package.json", include_str!("../templates/js/package.json"));

const RS_CARGO: File = ("Cargo.toml", include_str!("../templates/rust/Cargo.toml"));
const RS_SCORER: File = ("src/lib.rs", include_str!("../templates/rust/lib_scorer.rs"));
const RS_DETECTOR: File = ("src/lib.rs", include_str!("../templates/rust/lib_detector.rs"));

/// The Rust SDK and what it builds on, as vendored into a Rust project.
pub const RUST_SDK: &[File] = &[
    ("vendor/tessera-sdk/Cargo.toml", include_str!("../templates/rust/sdk_Cargo.toml")),
    ("vendor/tessera-sdk/README.md", include_str!("../../../sdk/README.md")),
    ("vendor/tessera-sdk/src/guest.rs", include_str!("../../../sdk/src/guest.rs")),
    ("vendor/tessera-sdk/src/harness.rs", include_str!("../../../sdk/src/harness.rs")),
    ("vendor/tessera-sdk/src/lib.rs", include_str!("../../../sdk/src/lib.rs")),
    ("vendor/tessera-sdk/src/mirror.rs", include_str!("../../../sdk/src/mirror.rs")),
    ("vendor/tessera-sdk/src/residue.rs", include_str!("../../../sdk/src/residue.rs")),
    ("vendor/tessera-sdk/src/simd.rs", include_str!("../../../sdk/src/simd.rs")),
    ("vendor/tessera-sdk/src/types.rs", include_str!("../../../sdk/src/types.rs")),
    ("vendor/tessera-topology/Cargo.toml", include_str!("../templates/rust/topology_Cargo.toml")),
    ("vendor/tessera-topology/src/lib.rs", include_str!("../../topology/src/lib.rs")),
];

/// What `tessera plugin new` is asked for.
#[derive(Debug, Clone)]
pub struct NewOptions {
    /// The plugin's name (and the project directory's).
    pub name: String,
    /// Source language.
    pub lang: Lang,
    /// Exported world.
    pub kind: Kind,
    /// Contract version to build against.
    pub contract: ContractVersion,
    /// Where the project goes (default `./NAME`).
    pub dir: Option<PathBuf>,
}

/// Writes the project; returns its directory. Refuses a directory that
/// exists and is not empty: nothing of the user's is overwritten.
pub fn new_project(o: &NewOptions) -> Result<PathBuf, BuildError> {
    let manifest =
        Manifest { name: o.name.clone(), lang: o.lang, kind: o.kind, contract: o.contract.as_str().to_string() };
    let dir = o.dir.clone().unwrap_or_else(|| PathBuf::from(&o.name));
    manifest.check().map_err(|reason| BuildError::Manifest { path: dir.join(guest::MANIFEST), reason })?;
    if dir.read_dir().is_ok_and(|mut d| d.next().is_some()) {
        return Err(BuildError::Io {
            path: dir,
            source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "exists and is not empty"),
        });
    }
    let mut files: Vec<(String, String)> = Vec::new();
    let subst = |text: &str| {
        text.replace("{{name}}", &o.name)
            .replace("{{contract}}", o.contract.as_str())
            .replace("{{world}}", o.kind.world())
            .replace("{{componentize_js}}", COMPONENTIZE_JS_VERSION)
            .replace("{{componentize_py}}", COMPONENTIZE_PY_VERSION)
    };
    let mut add = |f: File| files.push((f.0.to_string(), subst(f.1)));
    let scorer = o.kind == Kind::Scorer;
    match o.lang {
        Lang::Python => {
            add(if scorer { PY_SCORER } else { PY_DETECTOR });
            add(if scorer { PY_TEST_SCORER } else { PY_TEST_DETECTOR });
            files.push(("tessera_sdk.py".into(), guest::PYTHON_SDK.into()));
        }
        Lang::Js => {
            add(if scorer { JS_SCORER } else { JS_DETECTOR });
            add(if scorer { JS_TEST_SCORER } else { JS_TEST_DETECTOR });
            add(JS_PACKAGE);
            files.push(("tessera_sdk.js".into(), guest::JS_SDK.into()));
        }
        Lang::Rust => {
            add(RS_CARGO);
            add(if scorer { RS_SCORER } else { RS_DETECTOR });
            files.extend(RUST_SDK.iter().map(|(p, t)| (p.to_string(), t.to_string())));
        }
    }
    files.push(("README.md".into(), readme(&manifest)));
    files.push((guest::MANIFEST.into(), serde_yaml_ng::to_string(&manifest).expect("a manifest serialises")));
    files.push((".gitignore".into(), gitignore(o.lang).into()));

    for (path, text) in &files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| BuildError::Io { path: parent.into(), source })?;
        }
        std::fs::write(&path, text).map_err(|source| BuildError::Io { path: path.clone(), source })?;
    }
    // The WIT package: at `wit/` for Python and JavaScript toolchains; where
    // the vendored SDK looks for it (`vendor/wit`, and the frozen 0.1.0,
    // 0.2.0 and 0.2.1 beneath it for the SDK's `contract-0-1`,
    // `contract-0-2-0` and `contract-0-2-1` features) for Rust.
    match o.lang {
        Lang::Rust => {
            guest::write_wit(&dir.join("vendor/wit"), ContractVersion::CURRENT)?;
            guest::write_wit(&dir.join("vendor/wit/0.1.0"), ContractVersion::V0_1)?;
            guest::write_wit(&dir.join("vendor/wit/0.2.0"), ContractVersion::V0_2)?;
            guest::write_wit(&dir.join("vendor/wit/0.2.1"), ContractVersion::V0_2_1)?;
        }
        Lang::Python | Lang::Js => guest::write_wit(&dir.join("wit"), o.contract)?,
    }
    Ok(dir)
}

fn gitignore(lang: Lang) -> &'static str {
    match lang {
        Lang::Python => "*.wasm\n__pycache__/\n",
        Lang::Js => "*.wasm\nnode_modules/\n",
        Lang::Rust => "*.wasm\ntarget/\n",
    }
}

/// How to build and test, per language.
fn commands(m: &Manifest) -> (String, String, String) {
    let (name, world) = (&m.name, m.kind.world());
    match m.lang {
        Lang::Python => (
            format!("pip install componentize-py=={COMPONENTIZE_PY_VERSION}"),
            format!("componentize-py -d wit -w {world} componentize app -o {name}.wasm"),
            "python3 -m unittest".into(),
        ),
        Lang::Js => ("npm install".into(), "npm run build".into(), "npm test".into()),
        Lang::Rust => (
            "rustup target add wasm32-wasip2".into(),
            format!(
                "cargo build --release --target wasm32-wasip2 && cp target/wasm32-wasip2/release/{}.wasm {name}.wasm",
                name.replace('-', "_")
            ),
            "cargo test".into(),
        ),
    }
}

fn readme(m: &Manifest) -> String {
    let (setup, build, test) = commands(m);
    let what = match m.kind {
        Kind::Scorer => "a placement policy: it filters and scores the candidate nodes of each pod",
        Kind::Detector => "a detection policy: it reads node telemetry and reports findings",
    };
    let sdk = match m.lang {
        Lang::Python => "`tessera_sdk.py`",
        Lang::Js => "`tessera_sdk.js`",
        Lang::Rust => "`vendor/tessera-sdk` (its README documents the API)",
    };
    format!(
        "# {name}\n\n\
         A Tessera plugin, {what}, built as a WebAssembly component against the \
         contract `tessera:policy@{contract}` (its WIT is in `wit/`{vendor}).\n\n\
         The SDK, {sdk}, keeps the host's node mirror and calls your per-node \
         function once per candidate; units are the contract's (CPU in \
         millicores, memory in MiB, GPU share in thousandths of a GPU, \
         utilisation in tenths of a percent). Configuration comes from the \
         policy document as JSON; unknown fields are refused at load.\n\n\
         ## Build and test\n\n\
         ```sh\n{setup}\n{test}          # native tests, the same glue the component runs\n{build}\n```\n\n\
         or, with the `tessera` binary, `tessera plugin build .` (the manifest \
         `{manifest}` says the language, world and contract).\n\n\
         ## Check and use it\n\n\
         ```sh\ntessera plugin check {name}.wasm      # loads it, runs canned calls\n```\n\n\
         then name the file in a policy document's `plugins:` and run \
         `tessera sim --policy POLICY.yaml`. The host runs it sandboxed: a \
         deadline per call, a memory cap, no files, network or clock.\n",
        name = m.name,
        contract = m.contract,
        vendor = if m.lang == Lang::Rust { "; here `vendor/wit`" } else { "" },
        manifest = guest::MANIFEST,
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The vendored SDK is the SDK, whole: a file added to `sdk/src` must
    /// be added to [`RUST_SDK`].
    #[test]
    fn the_vendored_sdk_lists_every_source_file() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for (dir, prefix) in
            [("sdk/src", "vendor/tessera-sdk/src/"), ("host/topology/src", "vendor/tessera-topology/src/")]
        {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let name = entry.unwrap().file_name().into_string().unwrap();
                let want = format!("{prefix}{name}");
                assert!(RUST_SDK.iter().any(|(p, _)| *p == want), "{want} is not vendored");
            }
        }
    }

    #[test]
    fn projects_are_written_whole_and_never_over_a_users_files() {
        let tmp = tempfile::tempdir().unwrap();
        for (lang, kind, main) in [
            (Lang::Python, Kind::Scorer, "app.py"),
            (Lang::Js, Kind::Detector, "app.js"),
            (Lang::Rust, Kind::Scorer, "src/lib.rs"),
        ] {
            let dir = tmp.path().join(format!("{lang:?}"));
            let o = NewOptions {
                name: "my-policy".into(),
                lang,
                kind,
                contract: ContractVersion::CURRENT,
                dir: Some(dir.clone()),
            };
            new_project(&o).unwrap();
            let m = Manifest::read(&dir).unwrap();
            assert_eq!((m.lang, m.kind, m.contract.as_str()), (lang, kind, "0.2.2"));
            let text = std::fs::read_to_string(dir.join(main)).unwrap();
            assert!(text.contains("my-policy") && !text.contains("{{"), "{lang:?}: {text}");
            let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
            assert!(readme.contains("tessera plugin check my-policy.wasm"), "{readme}");
            let wit = if lang == Lang::Rust { dir.join("vendor/wit") } else { dir.join("wit") };
            assert!(std::fs::read_to_string(wit.join("worlds.wit")).unwrap().contains("tessera:policy@0.2.2"));
            // Again over it: refused, and nothing changed.
            std::fs::write(dir.join(main), "mine").unwrap();
            let e = new_project(&o).unwrap_err().to_string();
            assert!(e.contains("exists and is not empty"), "{e}");
            assert_eq!(std::fs::read_to_string(dir.join(main)).unwrap(), "mine");
        }
        let bad = NewOptions {
            name: "My_Policy".into(),
            lang: Lang::Python,
            kind: Kind::Scorer,
            contract: ContractVersion::CURRENT,
            dir: Some(tmp.path().join("bad")),
        };
        assert!(new_project(&bad).unwrap_err().to_string().contains("name: \"My_Policy\""));
    }
}
