//! Policies as projects in any guest language: the manifest a project
//! carries (`tessera-plugin.yaml`), the SDKs shipped for Python and
//! JavaScript, and building a project into a component with its
//! language's own toolchain — componentize-py, componentize-js, cargo —
//! against the contract's WIT as this binary speaks it.
//!
//! `tessera plugin new` writes such projects (`crate::scaffold`);
//! `tessera plugin build` builds them; the test suite builds the Python and
//! JavaScript ports in `plugins/python` and `plugins/js` the same way.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use tessera_wasm::ContractVersion;

/// The manifest's file name, at a project's root.
pub const MANIFEST: &str = "tessera-plugin.yaml";

/// The Python SDK (`tessera_sdk.py`).
pub const PYTHON_SDK: &str = include_str!("../templates/python/tessera_sdk.py");
/// The JavaScript SDK (`tessera_sdk.js`).
pub const JS_SDK: &str = include_str!("../templates/js/tessera_sdk.js");

/// The componentize-py release the Python SDK is tested with.
pub const COMPONENTIZE_PY_VERSION: &str = "0.25.1";
/// The componentize-js release the JavaScript SDK is tested with.
pub const COMPONENTIZE_JS_VERSION: &str = "0.23.0";

/// A plugin's source language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    /// Rust with `tessera-sdk`, built by cargo for `wasm32-wasip2`.
    Rust,
    /// Python with `tessera_sdk.py`, built by componentize-py.
    Python,
    /// JavaScript with `tessera_sdk.js`, built by componentize-js.
    Js,
}

impl Lang {
    /// As the manifest and `--lang` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
        }
    }
}

/// Which world a plugin exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Placement: filter and score (`scorer` world).
    Scorer,
    /// Detection over telemetry (`detector` world).
    Detector,
}

impl Kind {
    /// The WIT world's name.
    pub fn world(self) -> &'static str {
        match self {
            Kind::Scorer => "scorer",
            Kind::Detector => "detector",
        }
    }
}

/// `tessera-plugin.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The plugin's name (the output is `NAME.wasm`).
    pub name: String,
    /// Source language.
    pub lang: Lang,
    /// Exported world.
    pub kind: Kind,
    /// Contract version it is built against (`0.2.2`).
    pub contract: String,
}

impl Manifest {
    /// Reads and checks `dir/tessera-plugin.yaml`.
    pub fn read(dir: &Path) -> Result<Self, BuildError> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|source| BuildError::Io { path: path.clone(), source })?;
        let m: Manifest = serde_yaml_ng::from_str(&text)
            .map_err(|e| BuildError::Manifest { path: path.clone(), reason: e.to_string() })?;
        m.check().map_err(|reason| BuildError::Manifest { path, reason })?;
        Ok(m)
    }

    /// Name and contract are usable.
    pub fn check(&self) -> Result<(), String> {
        check_name(&self.name)?;
        self.contract_version()?;
        Ok(())
    }

    /// The contract version, if the host loads it.
    pub fn contract_version(&self) -> Result<ContractVersion, String> {
        contract_version(&self.contract).map_err(|e| format!("contract: {e}"))
    }
}

/// The contract version `v` names, or why the host cannot build against
/// it ("0.9.0 is not one this host loads (0.1.0, 0.2.0, 0.2.1, 0.2.2)").
pub fn contract_version(v: &str) -> Result<ContractVersion, String> {
    ContractVersion::parse(v).ok_or_else(|| {
        let known: Vec<_> = ContractVersion::ALL.iter().map(|v| v.as_str()).collect();
        format!("{v} is not one this host loads ({})", known.join(", "))
    })
}

/// A plugin name: 1–63 of `[a-z0-9-]`, starting with a letter.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok { Ok(()) } else { Err(format!("name: {name:?} must be 1-63 of [a-z0-9-], starting with a letter")) }
}

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The manifest is missing a field, has an unknown one, or a bad value.
    #[error("{}: {reason}", path.display())]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong, led by the field.
        reason: String,
    },
    /// The language's toolchain is not installed.
    #[error("{tool} not found ({hint})")]
    ToolMissing {
        /// The program looked for.
        tool: &'static str,
        /// How to install it.
        hint: String,
    },
    /// The toolchain ran and failed.
    #[error("{tool} failed ({status}) building {}:\n{output}", dir.display())]
    ToolFailed {
        /// The program.
        tool: String,
        /// Its exit status.
        status: String,
        /// The project.
        dir: PathBuf,
        /// The tail of what it printed.
        output: String,
    },
    /// Reading or writing a file.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io { path: path.to_path_buf(), source }
}

/// Writes the WIT package of `version` into `dir` (created).
pub fn write_wit(dir: &Path, version: ContractVersion) -> Result<(), BuildError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    for (name, text) in version.wit_files() {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(io(&path))?;
    }
    Ok(())
}

/// Where each language's toolchain is.
#[derive(Debug, Clone, Default)]
pub struct Tools {
    /// componentize-py; `None`: not installed.
    pub componentize_py: Option<PathBuf>,
    /// componentize-js; `None`: look in the project's `node_modules`.
    pub componentize_js: Option<PathBuf>,
}

impl Tools {
    /// `$TESSERA_COMPONENTIZE_PY` / `$TESSERA_COMPONENTIZE_JS`, else the
    /// programs on the `PATH`.
    pub fn from_env() -> Self {
        Self {
            componentize_py: find_tool("TESSERA_COMPONENTIZE_PY", "componentize-py"),
            componentize_js: find_tool("TESSERA_COMPONENTIZE_JS", "componentize-js"),
        }
    }
}

/// Builds the project in `dir` (its manifest says how) into `out` (a
/// `.wasm` path; default `dir/NAME.wasm`) with `tools`; returns the
/// manifest and the output's path.
pub fn build(dir: &Path, out: Option<&Path>, tools: &Tools) -> Result<(Manifest, PathBuf), BuildError> {
    let m = Manifest::read(dir)?;
    let out = out.map_or_else(|| dir.join(format!("{}.wasm", m.name)), Path::to_path_buf);
    let out = std::path::absolute(&out).map_err(io(&out))?;
    let version = m.contract_version().expect("checked at read");
    let stage = tempfile::tempdir().map_err(io(Path::new("(temporary directory)")))?;
    match m.lang {
        Lang::Python => build_python(dir, stage.path(), m.kind, version, &out, tools)?,
        Lang::Js => build_js(dir, stage.path(), m.kind, version, &out, tools)?,
        Lang::Rust => build_rust(dir, &m, &out)?,
    }
    Ok((m, out))
}

/// Writes the contract's WIT to `stage/wit` and the SDK `file` to
/// `stage/sdk`; returns both directories.
fn stage_sdk(stage: &Path, version: ContractVersion, file: &str, text: &str) -> Result<(PathBuf, PathBuf), BuildError> {
    let (wit, sdk) = (stage.join("wit"), stage.join("sdk"));
    write_wit(&wit, version)?;
    std::fs::create_dir_all(&sdk).map_err(io(&sdk))?;
    std::fs::write(sdk.join(file), text).map_err(io(&sdk))?;
    Ok((wit, sdk))
}

/// `componentize-py -d WIT -w WORLD componentize app -p DIR -p SDK -o OUT`:
/// the project's modules first (a vendored `tessera_sdk.py` wins), then
/// this binary's SDK.
fn build_python(
    dir: &Path,
    stage: &Path,
    kind: Kind,
    version: ContractVersion,
    out: &Path,
    tools: &Tools,
) -> Result<(), BuildError> {
    let (wit, sdk) = stage_sdk(stage, version, "tessera_sdk.py", PYTHON_SDK)?;
    let tool = tools.componentize_py.clone().ok_or_else(|| BuildError::ToolMissing {
        tool: "componentize-py",
        hint: format!("pip install componentize-py=={COMPONENTIZE_PY_VERSION}, or set TESSERA_COMPONENTIZE_PY"),
    })?;
    let mut cmd = Command::new(&tool);
    cmd.arg("-q").arg("-d").arg(&wit).arg("-w").arg(kind.world()).arg("componentize").arg("app");
    cmd.arg("-p").arg(dir).arg("-p").arg(&sdk).arg("-o").arg(out);
    run(cmd, &tool, dir)
}

/// `componentize-js app.js -w WIT -n WORLD -d http fetch-event -o OUT`, on
/// a copy of the project's scripts beside the SDK (it bundles what
/// `app.js` imports). WASI's HTTP is left out: the host grants none.
fn build_js(
    dir: &Path,
    stage: &Path,
    kind: Kind,
    version: ContractVersion,
    out: &Path,
    tools: &Tools,
) -> Result<(), BuildError> {
    let (wit, src) = stage_sdk(stage, version, "tessera_sdk.js", JS_SDK)?;
    copy_scripts(dir, &src)?;
    // The project's npm dependencies stay reachable from the copy.
    let modules = dir.join("node_modules");
    if modules.is_dir() {
        std::os::unix::fs::symlink(std::path::absolute(&modules).map_err(io(&modules))?, src.join("node_modules"))
            .map_err(io(&modules))?;
    }
    let local = dir.join("node_modules/.bin/componentize-js");
    let local = local.is_file().then_some(local);
    let tool = local.or_else(|| tools.componentize_js.clone()).ok_or_else(|| BuildError::ToolMissing {
        tool: "componentize-js",
        hint: format!(
            "npm install @bytecodealliance/componentize-js@{COMPONENTIZE_JS_VERSION} in the project, or set \
                 TESSERA_COMPONENTIZE_JS"
        ),
    })?;
    let mut cmd = Command::new(&tool);
    cmd.arg(src.join("app.js")).arg("-w").arg(&wit).arg("-n").arg(kind.world());
    cmd.args(["-d", "http", "fetch-event", "-o"]).arg(out);
    run(cmd, &tool, dir)
}

/// Copies the scripts (`.js`, `.mjs`, `.json`) under `from` to `to`, folders
/// and all, but `node_modules`, `wit` and dot-folders; a project's own
/// `tessera_sdk.js` replaces the staged one.
fn copy_scripts(from: &Path, to: &Path) -> Result<(), BuildError> {
    for entry in std::fs::read_dir(from).map_err(io(from))? {
        let entry = entry.map_err(io(from))?;
        let (path, name) = (entry.path(), entry.file_name());
        let skip = name == "node_modules" || name == "wit" || name.to_string_lossy().starts_with('.');
        if path.is_dir() && !skip {
            let sub = to.join(&name);
            std::fs::create_dir_all(&sub).map_err(io(&sub))?;
            copy_scripts(&path, &sub)?;
        } else if path.is_file() && path.extension().is_some_and(|e| e == "js" || e == "mjs" || e == "json") {
            std::fs::copy(&path, to.join(&name)).map_err(io(&path))?;
        }
    }
    Ok(())
}

/// `cargo build --release --target wasm32-wasip2`, then the crate's
/// `.wasm` copied to `out`.
fn build_rust(dir: &Path, m: &Manifest, out: &Path) -> Result<(), BuildError> {
    let cargo = std::env::var_os("CARGO").map_or_else(|| PathBuf::from("cargo"), PathBuf::from);
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| dir.join("target"), PathBuf::from);
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(dir).args(["build", "--release", "--target", "wasm32-wasip2", "--target-dir"]).arg(&target);
    run(cmd, &cargo, dir)?;
    let built = target.join("wasm32-wasip2/release").join(format!("{}.wasm", m.name.replace('-', "_")));
    std::fs::copy(&built, out).map_err(io(&built))?;
    Ok(())
}

/// `$VAR`, else `name` on the `PATH`.
fn find_tool(var: &str, name: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(var) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

fn run(mut cmd: Command, tool: &Path, dir: &Path) -> Result<(), BuildError> {
    let output = cmd.output().map_err(io(tool))?;
    if output.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stdout));
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(40)..].join("\n");
    Err(BuildError::ToolFailed {
        tool: tool.display().to_string(),
        status: output.status.to_string(),
        dir: dir.to_path_buf(),
        output: tail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_are_checked_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| std::fs::write(dir.path().join(MANIFEST), text).unwrap();
        write("name: ok\nlang: python\nkind: scorer\ncontract: 0.2.0\n");
        assert_eq!(Manifest::read(dir.path()).unwrap().lang, Lang::Python);
        write("name: ok\nlang: python\nkind: scorer\ncontract: 0.2.0\nworld: x\n");
        let e = Manifest::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("unknown field `world`"), "{e}");
        write("name: ok\nlang: cobol\nkind: scorer\ncontract: 0.2.0\n");
        let e = Manifest::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("lang") && e.contains("cobol"), "{e}");
        write("name: ok\nlang: js\nkind: scorer\ncontract: 0.9.0\n");
        let e = Manifest::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("contract: 0.9.0 is not one this host loads (0.1.0, 0.2.0, 0.2.1, 0.2.2)"), "{e}");
        write("name: Bad_Name\nlang: js\nkind: scorer\ncontract: 0.2.0\n");
        assert!(Manifest::read(dir.path()).unwrap_err().to_string().contains("name: \"Bad_Name\""));
    }

    #[test]
    fn a_missing_toolchain_says_what_to_install() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MANIFEST), "name: p\nlang: python\nkind: scorer\ncontract: 0.2.0\n").unwrap();
        let e = build(dir.path(), None, &Tools::default()).unwrap_err();
        assert!(matches!(e, BuildError::ToolMissing { tool: "componentize-py", .. }), "{e}");
        assert!(e.to_string().contains("pip install componentize-py==0.25.1"), "{e}");
        std::fs::write(dir.path().join(MANIFEST), "name: p\nlang: js\nkind: detector\ncontract: 0.1.0\n").unwrap();
        let e = build(dir.path(), None, &Tools::default()).unwrap_err();
        assert!(e.to_string().contains("@bytecodealliance/componentize-js@0.23.0"), "{e}");
        // A tool that is not there is named.
        let tools = Tools { componentize_py: Some("/nonexistent/componentize-py".into()), ..Tools::default() };
        std::fs::write(dir.path().join(MANIFEST), "name: p\nlang: python\nkind: scorer\ncontract: 0.2.0\n").unwrap();
        let e = build(dir.path(), None, &tools).unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/componentize-py"), "{e}");
    }
}
