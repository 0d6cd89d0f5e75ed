//! Cache of precompiled components.
//!
//! An entry is keyed by the XXH3-128 of the component bytes and by the
//! engine's compatibility hash (wasmtime version, target, compiler settings),
//! and carries a header that repeats both keys plus an XXH3-128 checksum of
//! the precompiled body. Loading checks all three before handing the body to
//! wasmtime; anything stale, foreign, truncated or altered is rejected,
//! recompiled and rewritten (atomically, through a temporary file).
//!
//! The checksum guards against corruption, not against an attacker who can
//! write the cache directory (one who can could rewrite any checksum); that
//! directory must be as private as the binary. XXH3 checks half a megabyte
//! in tens of microseconds, where SHA-256 took ~0.4 ms, a third of a load.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

const MAGIC: &[u8] = b"TESSERA-CWASM-2\n";
/// Magic, then component key (32 hex), engine key (64 hex) and body
/// checksum (32 hex), each ending in a newline.
const FIELDS: [usize; 3] = [32, 64, 32];
const HEADER_LEN: usize = MAGIC.len() + 32 + 1 + 64 + 1 + 32 + 1;

/// What the cache did for one load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// No cache configured.
    Disabled,
    /// Loaded from a valid entry.
    Hit,
    /// No entry: compiled and stored.
    Miss,
    /// An entry existed but was rejected (reason): compiled and replaced.
    Rejected(String),
}

/// A directory of precompiled components for one engine configuration.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
    engine_key: String,
}

struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        unreachable!("only the digest is read")
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn checksum_hex(bytes: &[u8]) -> String {
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(bytes))
}

/// The cache key of a component: hex XXH3-128 of its bytes. Not a
/// cryptographic digest: two components crafted to collide would share a
/// precompiled artifact, i.e. one would run the other's (equally sandboxed)
/// code; pins in policies are checked with SHA-256 on the bytes themselves.
pub fn content_key(wasm: &[u8]) -> String {
    checksum_hex(wasm)
}

impl ArtifactCache {
    /// A cache in `dir` (created if missing) for `engine`.
    pub fn new(dir: &Path, engine: &Engine) -> std::io::Result<Self> {
        fs::create_dir_all(dir)?;
        let mut h = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut h);
        Ok(Self { dir: dir.to_path_buf(), engine_key: hex::encode(h.0.finalize()) })
    }

    /// The engine key entries are written for.
    pub fn engine_key(&self) -> &str {
        &self.engine_key
    }

    /// Path of the entry for a component digest.
    pub fn entry_path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}-{}.cwasm", &self.engine_key[..16]))
    }

    /// Loads the component with this digest, or compiles `wasm` and stores it.
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        digest: &str,
        wasm: &[u8],
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let path = self.entry_path(digest);
        let outcome = match fs::read(&path) {
            Ok(bytes) => match self.verify(&bytes, digest) {
                Ok(body) => {
                    // SAFETY: the body was written by `store` below for this
                    // very component digest and engine key, and its SHA-256
                    // matches the header, so it is wasmtime's own output for
                    // this engine, unaltered. wasmtime checks its version and
                    // settings again while deserializing.
                    #[allow(unsafe_code)]
                    match unsafe { Component::deserialize(engine, body) } {
                        Ok(c) => return Ok((c, CacheOutcome::Hit)),
                        Err(e) => CacheOutcome::Rejected(format!("wasmtime refused it: {e}")),
                    }
                }
                Err(reason) => CacheOutcome::Rejected(reason),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => CacheOutcome::Miss,
            Err(e) => CacheOutcome::Rejected(format!("unreadable: {e}")),
        };
        if let CacheOutcome::Rejected(reason) = &outcome {
            tracing::warn!(entry = %path.display(), "precompiled cache entry rejected: {reason}; recompiling");
        }
        let component = Component::new(engine, wasm)?;
        if let Err(e) = self.store(&path, digest, &component) {
            tracing::warn!(entry = %path.display(), "could not write precompiled cache entry: {e}");
        }
        Ok((component, outcome))
    }

    fn verify<'a>(&self, bytes: &'a [u8], digest: &str) -> Result<&'a [u8], String> {
        if bytes.len() < HEADER_LEN || !bytes.starts_with(MAGIC) {
            return Err("not a Tessera cache entry".into());
        }
        let field = |i: usize| {
            let start = MAGIC.len() + FIELDS[..i].iter().map(|l| l + 1).sum::<usize>();
            std::str::from_utf8(&bytes[start..start + FIELDS[i]]).unwrap_or("")
        };
        if field(0) != digest {
            return Err(format!("entry is for component {}, not {digest}", field(0)));
        }
        if field(1) != self.engine_key {
            return Err("entry was compiled by another engine configuration or wasmtime version".into());
        }
        let body = &bytes[HEADER_LEN..];
        if field(2) != checksum_hex(body) {
            return Err("entry body does not match its recorded digest (truncated or altered)".into());
        }
        Ok(body)
    }

    fn store(&self, path: &Path, digest: &str, component: &Component) -> wasmtime::Result<()> {
        let body = component.serialize()?;
        let mut tmp = tempfile_in(&self.dir)?;
        tmp.1.write_all(MAGIC)?;
        for field in [digest, &self.engine_key, &checksum_hex(&body)] {
            tmp.1.write_all(field.as_bytes())?;
            tmp.1.write_all(b"\n")?;
        }
        tmp.1.write_all(&body)?;
        tmp.1.sync_all()?;
        fs::rename(&tmp.0, path)?;
        Ok(())
    }
}

fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, fs::File)> {
    let path = dir.join(format!(".tmp-{}-{:?}", std::process::id(), std::thread::current().id()));
    let file = fs::File::create(&path)?;
    Ok((path, file))
}
