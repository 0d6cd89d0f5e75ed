//! YAML documents read safely and located exactly.
//!
//! Before serde sees a document, one pass over its events (yaml-rust2's
//! parser, a state machine without recursion) records where every key and
//! item is, refuses nesting deeper than [`MAX_DEPTH`] at the first level
//! too deep (serde_yaml_ng takes ~48 s to refuse 100,000 nested `[`), and
//! refuses a key given twice in one mapping anywhere, plugin configuration
//! included, at the second one. Serde then reads it through
//! `serde_path_to_error`, so an error names the field at fault
//! (`plugins[1].limits.deadline_ms`), not the mapping around it, and is
//! placed at that field's line and column. Values echoed in errors are
//! clipped. A leading UTF-8 byte-order mark is dropped, as the CSV readers
//! do.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::de::DeserializeOwned;
use yaml_rust2::Event;
use yaml_rust2::parser::Parser;

/// Deepest nesting of mappings and sequences a document may have.
pub const MAX_DEPTH: usize = 64;

/// Longest value echoed whole in an error; longer ones are clipped.
const MAX_ECHO: usize = 64;

/// A 1-based line and column; `0:0` when unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mark {
    /// Line.
    pub line: usize,
    /// Column.
    pub column: usize,
}

/// A document that could not be read, with where and which field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct YamlError {
    /// Where.
    pub at: Mark,
    /// The field at fault (`plugins[1].limits.deadline_ms`); empty for the
    /// document as a whole.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.at.line, self.at.column)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.reason)
    }
}

/// Where each key and sequence item of a document is, by path
/// (`plugins[1].name`).
#[derive(Debug, Clone, Default)]
pub struct Located {
    marks: HashMap<String, Mark>,
}

impl Located {
    /// The mark of `path`, or of its nearest located ancestor (`0:0` when
    /// none is).
    pub fn at(&self, path: &str) -> Mark {
        let mut p = path;
        loop {
            if let Some(m) = self.marks.get(p) {
                return *m;
            }
            match p.rfind(['.', '[']) {
                Some(i) => p = &p[..i],
                None => return self.marks.get("").copied().unwrap_or_default(),
            }
        }
    }

    /// Whether `path` is in the document (not filled in by a default).
    pub fn has(&self, path: &str) -> bool {
        self.marks.contains_key(path)
    }

    /// An error at `path`.
    pub fn error(&self, path: &str, reason: impl Into<String>) -> YamlError {
        YamlError { at: self.at(path), path: path.to_string(), reason: reason.into() }
    }
}

/// Reads a document as `T`, with where its keys are.
pub fn parse<T: DeserializeOwned>(text: &str) -> Result<(T, Located), YamlError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let located = scan(text)?;
    let de = serde_yaml_ng::Deserializer::from_str(text);
    match serde_path_to_error::deserialize::<_, T>(de) {
        Ok(v) => Ok((v, located)),
        Err(e) => {
            let path = match e.path().to_string() {
                p if p == "." => String::new(),
                p => p,
            };
            let inner = e.into_inner();
            let at = if located.has(&path) || inner.location().is_none() {
                located.at(&path)
            } else {
                inner.location().map(|l| Mark { line: l.line(), column: l.column() }).unwrap_or_default()
            };
            Err(YamlError { at, path, reason: reason_of(&inner.to_string()) })
        }
    }
}

/// serde_yaml_ng's message without its own (coarser) path and location,
/// values clipped.
fn reason_of(msg: &str) -> String {
    let msg = match msg.rfind(" at line ") {
        Some(i) => &msg[..i],
        None => msg,
    };
    // "plugins[0].limits: 99 is out of range": the path is reported
    // separately, and more exactly.
    let msg = match msg.split_once(": ") {
        Some((head, rest)) if !head.is_empty() && head.chars().all(|c| c.is_alphanumeric() || "_-.[]".contains(c)) => {
            rest
        }
        _ => msg,
    };
    clip_quoted(msg)
}

/// Clips every quoted run (`"…"` or `` `…` ``) longer than 64 bytes.
pub fn clip_quoted(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len().min(1024));
    let mut rest = msg;
    while let Some(i) = rest.find(['"', '`']) {
        let q = rest.as_bytes()[i] as char;
        out.push_str(&rest[..=i]);
        let after = &rest[i + 1..];
        let end = after.find(q).unwrap_or(after.len());
        out.push_str(&crate::clip(&after[..end], MAX_ECHO));
        rest = &after[end..];
        if let Some(r) = rest.strip_prefix(q) {
            out.push(q);
            rest = r;
        }
    }
    out.push_str(rest);
    crate::clip(&out, 1024)
}

enum Frame {
    Map { path: String, key: Option<String>, seen: HashSet<String> },
    Seq { path: String, next: usize },
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() { key.to_string() } else { format!("{parent}.{key}") }
}

/// One pass over the events of the first document: marks, depth, duplicate
/// keys.
fn scan(text: &str) -> Result<Located, YamlError> {
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    let mut located = Located::default();
    loop {
        let (event, m) = parser.next_token().map_err(|e| YamlError {
            at: Mark { line: e.marker().line(), column: e.marker().col() + 1 },
            path: stack_path(&stack),
            // The scanner's own cap on flow nesting (it reads ahead of the
            // events, so it can meet it before this pass meets ours).
            reason: match e.info() {
                "recursion limit exceeded" => format!("nested deeper than {MAX_DEPTH} levels"),
                other => other.to_string(),
            },
        })?;
        let at = Mark { line: m.line(), column: m.col() + 1 };
        let (opens, leaf) = match &event {
            Event::StreamEnd | Event::DocumentEnd => break,
            Event::Nothing | Event::StreamStart | Event::DocumentStart => continue,
            Event::SequenceEnd | Event::MappingEnd => {
                stack.pop();
                value_done(&mut stack);
                continue;
            }
            Event::Scalar(s, ..) => (None, Some(s.as_str())),
            Event::Alias(_) => (None, Some("*")),
            Event::SequenceStart(..) => (Some(false), None),
            Event::MappingStart(..) => (Some(true), None),
        };
        // The path of this node, and whether it is a mapping key.
        let path = match stack.last_mut() {
            None => String::new(),
            Some(Frame::Seq { path, next }) => {
                let p = format!("{path}[{next}]");
                *next += 1;
                located.marks.insert(p.clone(), at);
                p
            }
            Some(Frame::Map { path, key: Some(k), .. }) => join(path, k),
            Some(Frame::Map { path, key: key @ None, seen }) => {
                // A key. Complex keys (mappings as keys) are placed but not
                // compared.
                let name = leaf.unwrap_or("?").to_string();
                let p = join(path, &name);
                // A block mapping's start event is marked past its first
                // key: the mapping starts where that key does.
                if seen.is_empty()
                    && !path.is_empty()
                    && let Some(m) = located.marks.get_mut(path.as_str())
                    && (at.line, at.column) < (m.line, m.column)
                {
                    *m = at;
                }
                if leaf.is_some() && !seen.insert(name.clone()) {
                    return Err(YamlError {
                        at,
                        path: p,
                        reason: format!("duplicate key `{}`", crate::clip(&name, MAX_ECHO)),
                    });
                }
                located.marks.insert(p.clone(), at);
                *key = Some(name);
                if leaf.is_some() {
                    continue;
                }
                p
            }
        };
        if path.is_empty() {
            // A block mapping's start event is marked at its first key; the
            // document as a whole starts at its first line.
            located.marks.entry(String::new()).or_insert(Mark { line: at.line, column: 1 });
        }
        match opens {
            None => value_done(&mut stack),
            Some(map) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(YamlError { at, path, reason: format!("nested deeper than {MAX_DEPTH} levels") });
                }
                stack.push(if map {
                    Frame::Map { path, key: None, seen: HashSet::new() }
                } else {
                    Frame::Seq { path, next: 0 }
                });
            }
        }
    }
    Ok(located)
}

/// A value of the mapping on top is complete: the next scalar is a key.
fn value_done(stack: &mut [Frame]) {
    if let Some(Frame::Map { key, .. }) = stack.last_mut() {
        *key = None;
    }
}

fn stack_path(stack: &[Frame]) -> String {
    match stack.last() {
        Some(Frame::Map { path, key: Some(k), .. }) => join(path, k),
        Some(Frame::Map { path, .. } | Frame::Seq { path, .. }) => path.clone(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(try_from = "u64")]
    struct Small(#[allow(dead_code)] u64);
    impl TryFrom<u64> for Small {
        type Error = String;
        fn try_from(v: u64) -> Result<Self, String> {
            if v < 10 { Ok(Small(v)) } else { Err(format!("{v} is out of range 0..=9")) }
        }
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Limits {
        deadline_ms: Option<Small>,
        fuel: Option<u32>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Plugin {
        name: String,
        #[serde(default)]
        limits: Option<Limits>,
        #[serde(default)]
        config: serde_yaml_ng::Value,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Doc {
        name: String,
        timeout_ms: Option<Small>,
        plugins: Vec<Plugin>,
    }

    fn err(text: &str) -> String {
        parse::<Doc>(text).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_field_at_its_own_line() {
        // serde_yaml_ng alone says 1:1 for this, without the field.
        assert_eq!(err("name: a\ntimeout_ms: 99\nplugins: []\n"), "2:1: timeout_ms: 99 is out of range 0..=9");
        assert_eq!(
            err("name: a\nplugins:\n  - name: b\n    limits:\n      fuel: 1\n      deadline_ms: 99\n"),
            "6:7: plugins[0].limits.deadline_ms: 99 is out of range 0..=9"
        );
        assert_eq!(
            err("name: a\nplugins: [{name: b}, {name: c, limits: {deadline_ms: 99}}]\n"),
            "2:41: plugins[1].limits.deadline_ms: 99 is out of range 0..=9"
        );
    }

    #[test]
    fn duplicate_keys_are_refused_where_they_are_even_in_flow_style_and_config() {
        assert_eq!(
            err("name: a\nplugins: [{name: b, limits: {fuel: 1, fuel: 2}}]\n"),
            "2:39: plugins[0].limits.fuel: duplicate key `fuel`"
        );
        assert_eq!(
            err("name: a\nplugins:\n  - name: b\n    config: {x: 1, x: 2}\n"),
            "4:20: plugins[0].config.x: duplicate key `x`"
        );
    }

    #[test]
    fn a_name_inside_config_is_not_the_plugins_name() {
        let (_, loc) = parse::<Doc>("name: a\nplugins:\n  - config:\n      name: inner\n    name: b\n").unwrap();
        assert_eq!(loc.at("plugins[0].name"), Mark { line: 5, column: 5 });
        assert_eq!(loc.at("plugins[0].config.name"), Mark { line: 4, column: 7 });
    }

    #[test]
    fn deep_nesting_is_refused_at_once() {
        let deep = format!("name: a\nplugins: []\nx: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let e = err(&deep);
        assert!(e.starts_with("3:"), "{e}");
        assert!(e.ends_with("nested deeper than 64 levels"), "{e}");
        let block: String = (0..70).map(|i| format!("{}k{i}:\n", " ".repeat(i))).collect();
        assert!(err(&block).ends_with("nested deeper than 64 levels"));
    }

    #[test]
    fn a_byte_order_mark_is_dropped_and_long_values_are_clipped() {
        let (d, _) = parse::<Doc>("\u{feff}name: a\nplugins: []\n").unwrap();
        assert_eq!(d.name, "a");
        let long = "9".repeat(10 << 20);
        let e = err(&format!("name: a\nplugins:\n  - name: b\n    limits: {{fuel: x{long}}}\n"));
        assert!(e.len() < 400, "{} bytes", e.len());
        assert!(e.starts_with("4:14: plugins[0].limits.fuel: invalid type"), "{e}");
    }

    #[test]
    fn a_missing_field_is_reported_at_its_mapping() {
        assert_eq!(err("name: a\n"), "1:1: missing field `plugins`");
        assert_eq!(err("name: a\nplugins:\n  - limits: {}\n"), "3:5: plugins[0]: missing field `name`");
    }
}
