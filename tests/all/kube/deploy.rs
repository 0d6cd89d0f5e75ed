//! The manifests in `deploy/` (filled in below).
