//! `tessera plugin check`: is this component loadable, and what does it do
//! on the canned cluster?

use std::path::Path;

use serde::Serialize;
use tessera_wasm::{PluginSpec, Policy, Runtime, WorldKind, canned_frame, canned_nodes, canned_pods};

/// The report printed by `plugin check`.
#[derive(Debug, Serialize)]
pub struct CheckReport {
    /// The file checked.
    pub file: String,
    /// Whether it loaded and passed the canned calls.
    pub loadable: bool,
    /// Why not, if not.
    pub error: Option<String>,
    /// `scorer` or `detector`.
    pub world: Option<String>,
    /// Version of the `tessera:policy` package it targets.
    pub contract: Option<String>,
    /// Plugin's own name and version.
    pub plugin: Option<String>,
    /// Description.
    pub description: Option<String>,
    /// Filter reason codes it declares.
    pub filter_reasons: Vec<String>,
    /// How far a scorer says its answers may be reused (`fresh`, `node`,
    /// `node-shape`, `zone`; `tessera:policy/reuse`, since 0.2.1; `zone` since 0.2.2).
    pub reuse: Option<String>,
    /// Hex SHA-256 of the component.
    pub sha256: Option<String>,
    /// Exports.
    pub exports: Vec<String>,
    /// Imports.
    pub imports: Vec<String>,
    /// Compile (or cache load) time, µs.
    pub compile_us: Option<u128>,
    /// Check (instantiate + canned calls) time, µs.
    pub check_us: Option<u128>,
    /// Cache outcome.
    pub cache: Option<String>,
    /// One line per canned call.
    pub canned: Vec<String>,
}

/// Checks a component file.
pub fn check_file(rt: &Runtime, path: &Path, config_json: &str) -> CheckReport {
    let mut r = CheckReport {
        file: path.display().to_string(),
        loadable: false,
        error: None,
        world: None,
        contract: None,
        plugin: None,
        description: None,
        filter_reasons: Vec::new(),
        reuse: None,
        sha256: None,
        exports: Vec::new(),
        imports: Vec::new(),
        compile_us: None,
        check_us: None,
        cache: None,
        canned: Vec::new(),
    };
    let bytes = match tessera_input::file::read(path, tessera_input::Limit::COMPONENT) {
        Ok(b) => b,
        Err(e) => {
            r.error = Some(format!("cannot read {e}"));
            return r;
        }
    };
    let name = path.file_stem().map(|s| s.to_string_lossy().replace(|c: char| !c.is_ascii_alphanumeric(), "-"));
    let mut spec = PluginSpec::new(name.unwrap_or_else(|| "plugin".into()));
    spec.config_json = config_json.into();
    let (version, report) = match rt.load(&spec, &bytes) {
        Ok(v) => v,
        Err(e) => {
            r.sha256 = Some(tessera_wasm::sha256_hex(&bytes));
            r.error = Some(e.to_string());
            return r;
        }
    };
    r.loadable = true;
    r.world = Some(version.kind().to_string());
    r.contract = Some(report.contract.to_string());
    r.plugin = Some(format!("{} {}", version.info().name, version.info().version));
    r.description = Some(version.info().description.clone());
    r.filter_reasons = version.info().filter_reasons.clone();
    if version.kind() == WorldKind::Scorer {
        r.reuse = Some(version.declared_scope().to_string());
    }
    r.sha256 = Some(tessera_wasm::sha256_hex(&bytes));
    r.exports = report.exports.clone();
    r.imports = report.imports.clone();
    r.compile_us = Some(report.compile.as_micros());
    r.check_us = Some(report.check.as_micros());
    r.cache = Some(format!("{:?}", report.cache));

    match version.kind() {
        WorldKind::Scorer => {
            let nodes = canned_nodes();
            let member = tessera_wasm::Member {
                name: version.name().to_string(),
                weight: 1.0,
                slot: std::sync::Arc::new(tessera_wasm::PluginSlot::new(version)),
            };
            let policy = Policy::new("check", vec![member]);
            policy.upsert_nodes(&nodes);
            let ids: Vec<u32> = nodes.iter().map(|n| n.id).collect();
            for pod in canned_pods() {
                let d = policy.decide(&pod, &ids);
                let scores = d.outcomes.first().map(|o| format!("{:?}", o.scores)).unwrap_or_default();
                r.canned.push(format!(
                    "pod {:<8} feasible {:?} scores {} chosen {:?} gpu {:?}{}",
                    pod.name,
                    d.feasible,
                    scores,
                    d.chosen,
                    d.gpu_hint,
                    d.errors.first().map(|e| format!(" error: {e}")).unwrap_or_default()
                ));
            }
        }
        WorldKind::Detector => {
            for seq in 0..5u64 {
                let frame = canned_frame(seq);
                if let Err(e) = version.observe(&frame) {
                    r.canned.push(format!("observe {seq}: {e}"));
                }
            }
            match version.detect() {
                Ok(findings) => {
                    for f in findings {
                        r.canned.push(format!(
                            "finding node {} {:?} severity {}: {}",
                            f.node, f.kind, f.severity, f.message
                        ));
                    }
                }
                Err(e) => r.canned.push(format!("detect: {e}")),
            }
        }
    }
    r
}

impl CheckReport {
    /// Human-readable form.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let mut line = |k: &str, v: &str| s.push_str(&format!("{k:<15} {v}\n"));
        line("file", &self.file);
        line("loadable", if self.loadable { "yes" } else { "NO" });
        if let Some(e) = &self.error {
            line("error", e);
        }
        for (k, v) in [
            ("world", &self.world),
            ("contract", &self.contract.as_ref().map(|v| format!("tessera:policy@{v}"))),
            ("plugin", &self.plugin),
            ("description", &self.description),
            ("reuse", &self.reuse),
            ("sha256", &self.sha256),
            ("cache", &self.cache),
        ] {
            if let Some(v) = v {
                line(k, v);
            }
        }
        if let (Some(c), Some(k)) = (self.compile_us, self.check_us) {
            line("timings", &format!("compile/load {c} µs, check {k} µs"));
        }
        if !self.filter_reasons.is_empty() {
            line("filter reasons", &self.filter_reasons.join(", "));
        }
        if !self.exports.is_empty() {
            line("exports", &self.exports.join(", "));
        }
        if !self.imports.is_empty() {
            line("imports", &self.imports.join(", "));
        }
        for c in &self.canned {
            line("canned", c);
        }
        s
    }
}
