//! Fetching a plugin component from an OCI registry (the distribution
//! API): the manifest by tag or digest, then the blob of its Wasm layer,
//! checked against the layer's digest. Anonymous pulls, with the bearer
//! token dance public registries ask for (`WWW-Authenticate: Bearer
//! realm=…,service=…,scope=…`). Registries on `localhost` or a loopback
//! address are spoken to over plain HTTP, as Docker does; the rest over
//! HTTPS.

use sha2::{Digest as _, Sha256};

/// Media types a Wasm component layer comes with.
pub const WASM_LAYER_TYPES: [&str; 3] = [
    "application/wasm",
    "application/vnd.wasm.content.layer.v1+wasm",
    "application/vnd.module.wasm.content.layer.v1+wasm",
];

/// Largest component accepted, bytes.
pub const MAX_BYTES: usize = tessera_input::Limit::COMPONENT.max_bytes as usize;

/// A parsed reference: `registry/repository[:tag][@sha256:digest]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host[:port]`.
    pub registry: String,
    /// `org/name`.
    pub repository: String,
    /// Tag or `sha256:…` digest.
    pub reference: String,
}

impl Reference {
    /// Parses `r`; the registry part is required (no implicit Docker Hub).
    pub fn parse(r: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("OCI reference {r:?}: {why}");
        let (name, reference) = match r.split_once('@') {
            Some((n, d)) => {
                if !d.starts_with("sha256:") || d.len() != 71 {
                    return Err(bad("the digest must be sha256:<64 hex digits>"));
                }
                (n, d.to_string())
            }
            None => match r.rsplit_once(':') {
                Some((n, tag)) if !tag.contains('/') => (n, tag.to_string()),
                _ => (r, "latest".to_string()),
            },
        };
        let (registry, repository) = name.split_once('/').ok_or_else(|| bad("no registry"))?;
        if !(registry.contains('.') || registry.contains(':') || registry == "localhost") || repository.is_empty() {
            return Err(bad("expected registry.example/repository[:tag|@sha256:…]"));
        }
        Ok(Self { registry: registry.to_string(), repository: repository.to_string(), reference })
    }

    fn base(&self) -> String {
        let host = self.registry.split(':').next().unwrap_or_default();
        let plain = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_loopback());
        format!("{}://{}/v2/{}", if plain { "http" } else { "https" }, self.registry, self.repository)
    }
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// GET with the registry's token dance when it answers 401.
async fn get(http: &reqwest::Client, url: &str, accept: &str) -> Result<reqwest::Response, String> {
    send(http, || http.get(url).header("Accept", accept), None, &mut None).await.map_err(|e| format!("{url}: {e}"))
}

/// Largest manifest accepted, bytes (real ones are a few hundred).
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// The body of `r`, at most `max` bytes (an error past that, read no
/// further).
async fn read_bounded(mut r: reqwest::Response, max: usize, url: &str) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    while let Some(chunk) = r.chunk().await.map_err(|e| format!("{url}: {e}"))? {
        if bytes.len() + chunk.len() > max {
            return Err(format!("{url}: the body is larger than {max} bytes"));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// The component `reference` names: its Wasm layer's bytes, checked
/// against the layer digest.
pub async fn pull(http: &reqwest::Client, reference: &str) -> Result<Vec<u8>, String> {
    let r = Reference::parse(reference)?;
    let manifest_url = format!("{}/manifests/{}", r.base(), r.reference);
    let accept = format!("{OCI_MANIFEST}, application/vnd.docker.distribution.manifest.v2+json");
    let m = get(http, &manifest_url, &accept).await?;
    if !m.status().is_success() {
        return Err(format!("{manifest_url}: {}", m.status()));
    }
    let body = read_bounded(m, MAX_MANIFEST_BYTES, &manifest_url).await?;
    if let Some(d) = r.reference.strip_prefix("sha256:")
        && sha256_hex(&body) != d
    {
        return Err(format!("{manifest_url}: the manifest does not match its digest"));
    }
    #[derive(serde::Deserialize)]
    struct Layer {
        #[serde(rename = "mediaType")]
        media_type: String,
        digest: String,
        size: Option<u64>,
    }
    #[derive(serde::Deserialize)]
    struct Manifest {
        layers: Vec<Layer>,
    }
    let manifest: Manifest =
        serde_json::from_slice(&body).map_err(|e| format!("{manifest_url}: not an image manifest: {e}"))?;
    let layer = manifest
        .layers
        .iter()
        .find(|l| WASM_LAYER_TYPES.contains(&l.media_type.as_str()))
        .or(if manifest.layers.len() == 1 { manifest.layers.first() } else { None })
        .ok_or_else(|| format!("{manifest_url}: no Wasm layer ({})", WASM_LAYER_TYPES.join(", ")))?;
    if layer.size.is_some_and(|s| s > MAX_BYTES as u64) {
        return Err(format!("{manifest_url}: the layer is larger than {MAX_BYTES} bytes"));
    }
    let blob_url = format!("{}/blobs/{}", r.base(), layer.digest);
    let b = get(http, &blob_url, "application/octet-stream").await?;
    if !b.status().is_success() {
        return Err(format!("{blob_url}: {}", b.status()));
    }
    // A registry that sends more than a component may be (whatever the
    // manifest said of its size) is cut off, not buffered.
    let bytes = read_bounded(b, MAX_BYTES, &blob_url).await?;
    let want = layer.digest.strip_prefix("sha256:").unwrap_or(&layer.digest);
    if sha256_hex(&bytes) != want {
        return Err(format!("{blob_url}: the blob does not match its digest"));
    }
    Ok(bytes)
}

/// The media type of a Wasm component layer as pushed.
pub const WASM_LAYER: &str = WASM_LAYER_TYPES[0];
/// The config of a Wasm artifact (the CNCF wasm OCI artifact layout).
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// An OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// The manifest and config a component is pushed with: deterministic
/// (no timestamps), so the same component always has the same digest.
pub fn artifact(component: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let layer = format!("sha256:{}", sha256_hex(component));
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer],
    }))
    .expect("json");
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": WASM_CONFIG,
        "config": { "mediaType": WASM_CONFIG, "digest": format!("sha256:{}", sha256_hex(&config)), "size": config.len() },
        "layers": [{ "mediaType": WASM_LAYER, "digest": layer, "size": component.len() }],
    }))
    .expect("json");
    (manifest, config)
}

/// Credentials for a registry that wants them to push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User name.
    pub username: String,
    /// Password or token.
    pub password: String,
}

/// A request sent again with a bearer token when the registry answers 401
/// with a challenge (`scope` as it asks, credentials if given).
async fn send(
    http: &reqwest::Client,
    build: impl Fn() -> reqwest::RequestBuilder,
    creds: Option<&Credentials>,
    token: &mut Option<String>,
) -> Result<reqwest::Response, String> {
    let with = |b: reqwest::RequestBuilder, t: &Option<String>| match t {
        Some(t) => b.bearer_auth(t),
        None => b,
    };
    let r = with(build(), token).send().await.map_err(|e| e.to_string())?;
    if r.status() != reqwest::StatusCode::UNAUTHORIZED {
        return Ok(r);
    }
    let challenge = r.headers().get("www-authenticate").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    if let Some(c) = creds
        && challenge.starts_with("Basic")
    {
        return build().basic_auth(&c.username, Some(&c.password)).send().await.map_err(|e| e.to_string());
    }
    let params = challenge.strip_prefix("Bearer ").ok_or("401 and no bearer challenge")?;
    let field = |k: &str| {
        params.split(',').find_map(|p| p.trim().strip_prefix(&format!("{k}=")).map(|v| v.trim_matches('"').to_string()))
    };
    let realm = field("realm").ok_or("bearer challenge without a realm")?;
    let query: Vec<(&str, String)> = ["service", "scope"].into_iter().filter_map(|k| Some((k, field(k)?))).collect();
    let mut req = http.get(&realm).query(&query);
    if let Some(c) = creds {
        req = req.basic_auth(&c.username, Some(&c.password));
    }
    #[derive(serde::Deserialize)]
    struct Token {
        token: Option<String>,
        access_token: Option<String>,
    }
    let t: Token = req
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| format!("token from {realm}: {e}"))?
        .json()
        .await
        .map_err(|e| format!("token from {realm}: {e}"))?;
    *token = Some(t.token.or(t.access_token).ok_or_else(|| format!("{realm}: no token in the answer"))?);
    with(build(), token).send().await.map_err(|e| e.to_string())
}

/// Pushes `component` to `reference` (a tag, or none for `latest`):
/// config and layer blobs (each skipped if the registry has it), then
/// the manifest. Returns the manifest's digest (`sha256:…`), what a
/// policy pins.
pub async fn push(
    http: &reqwest::Client,
    reference: &str,
    component: &[u8],
    creds: Option<&Credentials>,
) -> Result<String, String> {
    let r = Reference::parse(reference)?;
    if r.reference.starts_with("sha256:") {
        return Err(format!("OCI reference {reference:?}: push to a tag; the digest is the registry's answer"));
    }
    let (manifest, config) = artifact(component);
    let base = r.base();
    let mut token = None;
    for blob in [&config[..], component] {
        let digest = format!("sha256:{}", sha256_hex(blob));
        let url = format!("{base}/blobs/{digest}");
        let head = send(http, || http.head(&url), creds, &mut token).await.map_err(|e| format!("{url}: {e}"))?;
        if head.status().is_success() {
            continue;
        }
        let start = format!("{base}/blobs/uploads/");
        let up = send(http, || http.post(&start), creds, &mut token).await.map_err(|e| format!("{start}: {e}"))?;
        if up.status() != reqwest::StatusCode::ACCEPTED {
            return Err(format!("{start}: {} (expected 202 Accepted)", up.status()));
        }
        let location = up
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| format!("{start}: no Location for the upload"))?;
        // Relative or absolute, with or without a query of its own.
        let mut put = reqwest::Url::parse(&base)
            .and_then(|b| b.join(location))
            .map_err(|e| format!("{start}: Location {location:?}: {e}"))?;
        put.query_pairs_mut().append_pair("digest", &digest);
        let body = blob.to_vec();
        let done = send(
            http,
            || http.put(put.clone()).header("Content-Type", "application/octet-stream").body(body.clone()),
            creds,
            &mut token,
        )
        .await
        .map_err(|e| format!("{put}: {e}"))?;
        if done.status() != reqwest::StatusCode::CREATED {
            return Err(format!("{put}: {} (expected 201 Created)", done.status()));
        }
    }
    let url = format!("{base}/manifests/{}", r.reference);
    let put =
        send(http, || http.put(&url).header("Content-Type", OCI_MANIFEST).body(manifest.clone()), creds, &mut token)
            .await
            .map_err(|e| format!("{url}: {e}"))?;
    if put.status() != reqwest::StatusCode::CREATED {
        return Err(format!("{url}: {} (expected 201 Created)", put.status()));
    }
    let digest = format!("sha256:{}", sha256_hex(&manifest));
    if let Some(said) = put.headers().get("docker-content-digest").and_then(|v| v.to_str().ok())
        && said != digest
    {
        return Err(format!("{url}: the registry says the manifest is {said}, not {digest}"));
    }
    Ok(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_with_tags_digests_and_ports() {
        let d = format!("sha256:{}", "a".repeat(64));
        let r = Reference::parse(&format!("ghcr.io/tessera/fgd@{d}")).unwrap();
        assert_eq!((r.registry.as_str(), r.repository.as_str(), r.reference.as_str()), ("ghcr.io", "tessera/fgd", &*d));
        assert_eq!(r.base(), "https://ghcr.io/v2/tessera/fgd");
        let r = Reference::parse("127.0.0.1:5000/plugins/binpack:0.1").unwrap();
        assert_eq!((r.reference.as_str(), r.base().as_str()), ("0.1", "http://127.0.0.1:5000/v2/plugins/binpack"));
        assert_eq!(Reference::parse("localhost/p/x").unwrap().reference, "latest");
        for bad in ["binpack", "tessera/fgd:1", "ghcr.io/x@sha256:12"] {
            assert!(Reference::parse(bad).is_err(), "{bad}");
        }
    }
}
