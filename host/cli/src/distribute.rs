//! `tessera plugin push` / `pull`: components to and from an OCI registry
//! (the distribution API the TesseraPolicy controller pulls from,
//! `tessera_kube::oci`), so a policy can pin what was pushed by digest.

use std::path::{Path, PathBuf};

use tessera_kube::oci::{self, Credentials};

/// Why a push or pull failed.
#[derive(Debug, thiserror::Error)]
pub enum DistributeError {
    /// The reference is not `oci://REGISTRY/REPOSITORY[:TAG|@sha256:…]`.
    #[error("{0:?}: expected oci://REGISTRY/REPOSITORY[:TAG|@sha256:DIGEST]")]
    NotOci(String),
    /// The file is missing, too large, or not a component.
    #[error("{}: {reason}", path.display())]
    Component {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The registry refused, or could not be reached.
    #[error("{0}")]
    Registry(String),
}

fn strip(reference: &str) -> Result<&str, DistributeError> {
    reference.strip_prefix("oci://").ok_or_else(|| DistributeError::NotOci(reference.to_string()))
}

/// Credentials from `TESSERA_OCI_USERNAME` and `TESSERA_OCI_PASSWORD`,
/// when both are set.
pub fn credentials_from_env() -> Option<Credentials> {
    Some(Credentials {
        username: std::env::var("TESSERA_OCI_USERNAME").ok()?,
        password: std::env::var("TESSERA_OCI_PASSWORD").ok()?,
    })
}

/// Pushes the component in `file` to `reference` (`oci://…:TAG`); returns
/// the reference pinned to what the registry stored
/// (`oci://…/REPOSITORY@sha256:…`).
pub async fn push_file(file: &Path, reference: &str, creds: Option<Credentials>) -> Result<String, DistributeError> {
    let r = strip(reference)?;
    let bytes = tessera_input::file::read(file, tessera_input::Limit::COMPONENT)
        .map_err(|e| DistributeError::Component { path: file.into(), reason: e.to_string() })?;
    if !tessera_wasm::is_wasm(&bytes) {
        return Err(DistributeError::Component {
            path: file.into(),
            reason: "not WebAssembly (no \\0asm magic): push the built component".into(),
        });
    }
    let parsed = oci::Reference::parse(r).map_err(DistributeError::Registry)?;
    let digest =
        oci::push(&reqwest::Client::new(), r, &bytes, creds.as_ref()).await.map_err(DistributeError::Registry)?;
    Ok(format!("oci://{}/{}@{digest}", parsed.registry, parsed.repository))
}

/// Pulls the component `reference` names into `out`; returns the
/// component's own digest (`sha256:…`).
pub async fn pull_file(reference: &str, out: &Path) -> Result<String, DistributeError> {
    let r = strip(reference)?;
    let bytes = oci::pull(&reqwest::Client::new(), r).await.map_err(DistributeError::Registry)?;
    std::fs::write(out, &bytes).map_err(|e| DistributeError::Component { path: out.into(), reason: e.to_string() })?;
    Ok(format!("sha256:{}", oci::sha256_hex(&bytes)))
}
