//! The Kubernetes backend's section of the service's configuration
//! (`kube:` in `serve.yaml`). The service crate keeps the section as
//! written; this crate decodes and checks it at load, as kube-scheduler's
//! plugins decode their own `pluginConfig` arguments.

use serde::{Deserialize, Serialize};
use tessera_server::config::ConfigError;

/// The Kubernetes backend: which pods it schedules, leader election, and
/// where node agents publish GPU telemetry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubeBackendConfig {
    /// Pods naming this scheduler (`spec.schedulerName`) are queued.
    pub scheduler_name: String,
    /// Watch pods of this namespace only (unset: all namespaces).
    pub namespace: Option<String>,
    /// Elect one leader among the replicas on a Lease; only the leader
    /// binds and moves (off: this replica always acts).
    pub leader_election: bool,
    /// The Lease.
    pub lease_name: String,
    /// Its namespace.
    pub lease_namespace: String,
    /// This replica's identity in the Lease (unset: `POD_NAME`, else the
    /// host name).
    pub identity: Option<String>,
    /// Seconds a leader's lease lasts without renewal.
    pub lease_duration_s: u64,
    /// Seconds a leader keeps trying to renew before it steps down.
    pub renew_deadline_s: u64,
    /// Seconds between attempts to acquire or renew.
    pub retry_period_s: u64,
    /// Port of the node agents' `/v1/sample` (on each node's InternalIP);
    /// unset: no GPU telemetry is scraped.
    pub agent_port: Option<u16>,
    /// Seconds between two scrapes of every agent.
    pub agent_interval_s: u64,
    /// Seconds to wait for the first list of nodes and pods.
    pub sync_timeout_s: u64,
    /// The ConfigMap (in the Lease's namespace) the leader journals
    /// rescheduling moves to; a new leader resumes the plan from it.
    pub journal_name: String,
    /// GPU model names for GPU feature discovery's products, exact
    /// product → name (`NVIDIA-A100-SXM4-80GB: A100-80GB`), before the
    /// rule in `tessera_kube::models` (`NVIDIA-H100-80GB-HBM3` → `H100`).
    pub gpu_models: std::collections::BTreeMap<String, String>,
}

impl Default for KubeBackendConfig {
    fn default() -> Self {
        Self {
            scheduler_name: "tessera".into(),
            namespace: None,
            leader_election: true,
            lease_name: "tessera-scheduler".into(),
            lease_namespace: "tessera-system".into(),
            identity: None,
            lease_duration_s: 15,
            renew_deadline_s: 10,
            retry_period_s: 2,
            agent_port: Some(9402),
            agent_interval_s: 10,
            sync_timeout_s: 60,
            journal_name: "tessera-movement-journal".into(),
            gpu_models: std::collections::BTreeMap::new(),
        }
    }
}

/// The part of a `serve.yaml` this crate reads; every other section is the
/// service's own.
#[derive(Deserialize)]
struct Document {
    #[serde(default)]
    kube: KubeBackendConfig,
}

impl KubeBackendConfig {
    /// The `kube:` section of the service configuration `text` (from
    /// `origin`), decoded (unknown fields refused, with line and column)
    /// and checked; the defaults when there is none.
    pub fn from_serve_yaml(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let doc: Document = serde_yaml_ng::from_str(text)
            .map_err(|e| ConfigError::Parse { path: origin.to_string(), message: e.to_string() })?;
        doc.kube.validate(origin)?;
        Ok(doc.kube)
    }

    /// Checks every range; `origin` names where the values came from.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let bad = |field, message: &str| {
            Err(ConfigError::Invalid { path: origin.to_string(), field, message: message.to_string() })
        };
        if self.scheduler_name.is_empty() || self.lease_name.is_empty() || self.lease_namespace.is_empty() {
            return bad("kube", "scheduler_name, lease_name and lease_namespace must not be empty");
        }
        if self.journal_name.is_empty() {
            return bad("kube.journal_name", "must not be empty");
        }
        if let Some((p, _)) = self.gpu_models.iter().find(|(p, n)| p.trim().is_empty() || n.trim().is_empty()) {
            return Err(ConfigError::Invalid {
                path: origin.to_string(),
                field: "kube.gpu_models",
                message: format!("{p:?}: a product and its model name must not be empty"),
            });
        }
        if self.agent_interval_s == 0 {
            return bad("kube.agent_interval_s", "must be at least 1");
        }
        if self.sync_timeout_s == 0 {
            return bad("kube.sync_timeout_s", "must be at least 1");
        }
        if !(self.retry_period_s >= 1
            && self.retry_period_s < self.renew_deadline_s
            && self.renew_deadline_s < self.lease_duration_s)
        {
            return bad(
                "kube.lease_duration_s",
                "needs 1 <= retry_period_s < renew_deadline_s < lease_duration_s (client-go's rule)",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_is_decoded_and_checked_with_its_place_in_the_file() {
        let text = "listen: 127.0.0.1:9000\nkube:\n  scheduler_name: gpu\n  leader_election: false\n";
        let k = KubeBackendConfig::from_serve_yaml(text, "serve.yaml").unwrap();
        assert_eq!((k.scheduler_name.as_str(), k.leader_election), ("gpu", false));
        assert_eq!(
            KubeBackendConfig::from_serve_yaml("listen: 127.0.0.1:9000\n", "s.yaml").unwrap(),
            Default::default()
        );
        let e = KubeBackendConfig::from_serve_yaml("kube:\n  lease_nme: x\n", "serve.yaml").unwrap_err().to_string();
        assert!(e.contains("serve.yaml") && e.contains("lease_nme") && e.contains("line 2"), "{e}");
        let e = KubeBackendConfig::from_serve_yaml("kube:\n  retry_period_s: 10\n", "serve.yaml").unwrap_err();
        assert!(e.to_string().contains("kube.lease_duration_s"), "{e}");
        let e = KubeBackendConfig::from_serve_yaml("kube:\n  agent_interval_s: 0\n", "serve.yaml").unwrap_err();
        assert!(e.to_string().contains("kube.agent_interval_s"), "{e}");
    }
}
