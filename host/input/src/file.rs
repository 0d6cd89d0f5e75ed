//! Bounded reading of files: regular files only, a size cap per kind of
//! input, a line-length cap for line-oriented formats, and paths kept
//! inside an allowed root.
//!
//! A file that never ends (`/dev/zero`, a FIFO, a socket) is refused from
//! its metadata, before it is read; on Unix it is opened non-blocking, so a
//! FIFO swapped in after the check cannot stall the open either. A regular
//! file that grows past its cap while being read is cut off with the same
//! error as one that was too large to start with.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// How much of one kind of input may be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// What the file is, for errors ("policy document").
    pub what: &'static str,
    /// Most bytes it may hold.
    pub max_bytes: u64,
    /// Longest line, bytes, for line-oriented formats (CSV, arrival
    /// orders); `None` for binary files and documents parsed as a whole.
    pub max_line: Option<usize>,
}

impl Limit {
    /// A policy document (the API takes 1 MiB too).
    pub const POLICY: Limit = Limit { what: "policy document", max_bytes: 1 << 20, max_line: None };
    /// A chaos campaign.
    pub const CAMPAIGN: Limit = Limit { what: "campaign", max_bytes: 1 << 20, max_line: None };
    /// A service or agent configuration file.
    pub const CONFIG: Limit = Limit { what: "configuration file", max_bytes: 1 << 20, max_line: None };
    /// A Wasm component (the API takes 64 MiB too; a Python component is
    /// ~18 MiB).
    pub const COMPONENT: Limit = Limit { what: "component", max_bytes: 64 << 20, max_line: None };
    /// A cluster trace (node list, pod list, arrival order, job trace):
    /// 512 MiB is ~5 million pod rows; a line of 64 KiB is far past any
    /// real row.
    pub const TRACE: Limit = Limit { what: "trace", max_bytes: 512 << 20, max_line: Some(64 << 10) };
    /// A snapshot of a running service (`GET /v1/snapshot`).
    pub const SNAPSHOT: Limit = Limit { what: "snapshot", max_bytes: 256 << 20, max_line: None };
}

/// A file that was not read, and why.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The operating system refused (missing, no permission, …).
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Cause.
        source: io::Error,
    },
    /// A directory, FIFO, device or socket.
    #[error("{path}: is {kind}, not a regular file")]
    NotRegular {
        /// The file.
        path: String,
        /// What it is instead.
        kind: &'static str,
    },
    /// Past the size cap of its kind.
    #[error("{path}: larger than {max} (the most a {what} may be)")]
    TooLarge {
        /// The file.
        path: String,
        /// Its kind.
        what: &'static str,
        /// The cap, readable.
        max: Size,
    },
    /// A line past the line-length cap.
    #[error("{path}:{line}: a line longer than {max} bytes")]
    LineTooLong {
        /// The file.
        path: String,
        /// 1-based line.
        line: u64,
        /// The cap.
        max: usize,
    },
    /// Text that is not UTF-8.
    #[error("{path}: not valid UTF-8 (at byte {at})")]
    NotUtf8 {
        /// The file.
        path: String,
        /// Offset of the first bad byte.
        at: usize,
    },
    /// A path that leads outside the directory files may be read from.
    #[error("{path}: outside {root} (files are read from there and below)")]
    OutsideRoot {
        /// The path as given.
        path: String,
        /// The allowed root.
        root: String,
    },
}

impl FileError {
    /// What is wrong, without the path (for a caller that names the file
    /// itself), and the 1-based line when one line is at fault.
    pub fn reason(&self) -> (String, Option<u64>) {
        match self {
            FileError::Io { source, .. } => (source.to_string(), None),
            FileError::NotRegular { kind, .. } => (format!("is {kind}, not a regular file"), None),
            FileError::TooLarge { what, max, .. } => (format!("larger than {max} (the most a {what} may be)"), None),
            FileError::LineTooLong { line, max, .. } => (format!("a line longer than {max} bytes"), Some(*line)),
            FileError::NotUtf8 { at, .. } => (format!("not valid UTF-8 (at byte {at})"), None),
            FileError::OutsideRoot { root, .. } => {
                (format!("outside {root} (files are read from there and below)"), None)
            }
        }
    }

    /// The [`FileError`] a [`Bounded`] reader put inside an I/O error.
    pub fn inside_io(e: &io::Error) -> Option<&FileError> {
        e.get_ref().and_then(|inner| inner.downcast_ref::<FileError>())
    }
}

/// A byte count shown in KiB, MiB or GiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        match b {
            _ if b >= 1 << 30 && b.is_multiple_of(1 << 30) => write!(f, "{} GiB", b >> 30),
            _ if b >= 1 << 20 && b.is_multiple_of(1 << 20) => write!(f, "{} MiB", b >> 20),
            _ if b >= 1 << 10 && b.is_multiple_of(1 << 10) => write!(f, "{} KiB", b >> 10),
            _ => write!(f, "{b} bytes"),
        }
    }
}

fn kind_of(t: std::fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        return None;
    }
    if t.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return Some("a FIFO");
        }
        if t.is_char_device() {
            return Some("a character device");
        }
        if t.is_block_device() {
            return Some("a block device");
        }
        if t.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a regular file")
}

/// An open input file that refuses to yield more than its cap, or a line
/// longer than its line cap.
#[derive(Debug)]
pub struct Bounded {
    file: File,
    path: String,
    limit: Limit,
    read: u64,
    line: u64,
    run: usize,
}

impl Bounded {
    fn fail(&self, e: FileError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

impl Read for Bounded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // One byte past the cap is asked for, so a file of exactly the cap
        // is read whole and one a byte longer is refused.
        let room = (self.limit.max_bytes + 1 - self.read).min(buf.len() as u64) as usize;
        let n = self.file.read(&mut buf[..room])?;
        self.read += n as u64;
        if self.read > self.limit.max_bytes {
            let e =
                FileError::TooLarge { path: self.path.clone(), what: self.limit.what, max: Size(self.limit.max_bytes) };
            return Err(self.fail(e));
        }
        if let Some(max) = self.limit.max_line {
            for &b in &buf[..n] {
                if b == b'\n' {
                    self.line += 1;
                    self.run = 0;
                } else {
                    self.run += 1;
                    if self.run > max {
                        let e = FileError::LineTooLong { path: self.path.clone(), line: self.line + 1, max };
                        return Err(self.fail(e));
                    }
                }
            }
        }
        Ok(n)
    }
}

/// The [`FileError`] inside an error a [`Bounded`] reader returned (or an
/// I/O error of `path`).
pub fn from_io(path: &Path, e: io::Error) -> FileError {
    if e.get_ref().is_some_and(|inner| inner.is::<FileError>()) {
        match e.into_inner().map(|inner| inner.downcast::<FileError>()) {
            Some(Ok(fe)) => return *fe,
            Some(Err(other)) => {
                return FileError::Io { path: path.display().to_string(), source: io::Error::other(other) };
            }
            None => unreachable!("checked above"),
        }
    }
    FileError::Io { path: path.display().to_string(), source: e }
}

/// Opens `path` for reading within `limit`: a regular file, no larger than
/// the cap.
pub fn open(path: &Path, limit: Limit) -> Result<Bounded, FileError> {
    let shown = path.display().to_string();
    let io = |source: io::Error| FileError::Io { path: shown.clone(), source };
    let meta = std::fs::metadata(path).map_err(io)?;
    if let Some(kind) = kind_of(meta.file_type()) {
        return Err(FileError::NotRegular { path: shown, kind });
    }
    if meta.len() > limit.max_bytes {
        return Err(FileError::TooLarge { path: shown, what: limit.what, max: Size(limit.max_bytes) });
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let file = opts.open(path).map_err(io)?;
    // What was opened, not what was looked at: the path may have changed.
    let meta = file.metadata().map_err(io)?;
    if let Some(kind) = kind_of(meta.file_type()) {
        return Err(FileError::NotRegular { path: shown, kind });
    }
    Ok(Bounded { file, path: shown, limit, read: 0, line: 0, run: 0 })
}

/// The whole of `path`, within `limit`.
pub fn read(path: &Path, limit: Limit) -> Result<Vec<u8>, FileError> {
    let mut r = open(path, limit)?;
    let mut out = Vec::new();
    r.read_to_end(&mut out).map_err(|e| from_io(path, e))?;
    Ok(out)
}

/// The whole of `path` as UTF-8 text, within `limit`.
pub fn read_to_string(path: &Path, limit: Limit) -> Result<String, FileError> {
    let bytes = read(path, limit)?;
    String::from_utf8(bytes)
        .map_err(|e| FileError::NotUtf8 { path: path.display().to_string(), at: e.utf8_error().valid_up_to() })
}

/// `path` (relative ones are taken from `root`) as a canonical path inside
/// `root`: `..`, absolute paths and symbolic links may not lead out of it.
/// The file must exist.
pub fn inside(root: &Path, path: &Path) -> Result<PathBuf, FileError> {
    let shown = path.display().to_string();
    let root_c = root.canonicalize().map_err(|source| FileError::Io { path: root.display().to_string(), source })?;
    let joined = if path.is_absolute() { path.to_path_buf() } else { root_c.join(path) };
    let full = joined.canonicalize().map_err(|source| FileError::Io { path: shown.clone(), source })?;
    if !full.starts_with(&root_c) {
        return Err(FileError::OutsideRoot { path: shown, root: root_c.display().to_string() });
    }
    Ok(full)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Limit = Limit { what: "test file", max_bytes: 16, max_line: Some(4) };

    #[test]
    fn a_file_at_the_cap_is_read_and_one_past_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("at");
        std::fs::write(&at, [b'a'; 16]).unwrap();
        let big = Limit { max_line: None, ..SMALL };
        assert_eq!(read(&at, big).unwrap().len(), 16);
        let past = dir.path().join("past");
        std::fs::write(&past, [b'a'; 17]).unwrap();
        let e = read(&past, big).unwrap_err().to_string();
        assert!(e.ends_with("past: larger than 16 bytes (the most a test file may be)"), "{e}");
    }

    #[test]
    fn a_long_line_is_refused_with_its_number() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("lines");
        std::fs::write(&f, "abcd\nab\nabcde\n").unwrap();
        let e = read(&f, SMALL).unwrap_err().to_string();
        assert!(e.ends_with("lines:3: a line longer than 4 bytes"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn endless_files_are_refused_before_reading() {
        let e = read(Path::new("/dev/zero"), Limit::TRACE).unwrap_err().to_string();
        assert_eq!(e, "/dev/zero: is a character device, not a regular file");
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        // No writer: opening it blocking would hang the test.
        let e = read(&fifo, Limit::POLICY).unwrap_err().to_string();
        assert!(e.ends_with("fifo: is a FIFO, not a regular file"), "{e}");
        let e = read(dir.path(), Limit::POLICY).unwrap_err().to_string();
        assert!(e.ends_with("is a directory, not a regular file"), "{e}");
    }

    #[test]
    fn paths_stay_inside_their_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.wasm"), b"x").unwrap();
        std::fs::write(dir.path().join("secret"), b"x").unwrap();
        assert!(inside(&root, Path::new("sub/a.wasm")).unwrap().ends_with("root/sub/a.wasm"));
        let abs = root.join("sub/a.wasm");
        assert!(inside(&root, &abs).is_ok());
        for bad in ["../secret", "sub/../../secret"] {
            let e = inside(&root, Path::new(bad)).unwrap_err();
            assert!(matches!(e, FileError::OutsideRoot { .. }), "{bad}: {e}");
        }
        let e = inside(&root, &dir.path().join("secret")).unwrap_err();
        assert!(matches!(e, FileError::OutsideRoot { .. }), "{e}");
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.path().join("secret"), root.join("link")).unwrap();
            let e = inside(&root, Path::new("link")).unwrap_err();
            assert!(matches!(e, FileError::OutsideRoot { .. }), "{e}");
        }
    }
}
