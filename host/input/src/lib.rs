//! # tessera-input
//!
//! Everything Tessera reads that a user hands it — policy documents,
//! campaigns, traces, component files — comes through here, bounded:
//!
//! - [`file`](mod@file): regular files only (a FIFO or `/dev/zero` is refused before
//!   it is opened for good), a size cap per kind of input, a line-length cap
//!   for line-oriented formats, and paths kept inside an allowed root.
//! - [`yaml`](mod@yaml): a document's nesting depth is capped and duplicate keys are
//!   refused before serde reads it (a 100,000-deep flow document is refused
//!   in microseconds, not minutes), a UTF-8 byte-order mark is dropped, and
//!   every error carries the line, column and path of the field at fault
//!   (`plugins[1].limits.deadline_ms`), with echoed values clipped.
//!
//! No other crate of ours: the policy, chaos and trace crates build on it.

pub mod file;
pub mod yaml;

pub use file::{FileError, Limit};
pub use yaml::{Located, YamlError};

/// Clips text echoed into an error (a value from the input): at most `max`
/// bytes at a char boundary, with how much was left out.
pub fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}
