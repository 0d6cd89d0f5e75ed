//! The Movement Manager's journal kept in the cluster, in a ConfigMap, so
//! that a new leader can resume the plan the previous one was executing
//! (`Executor::resume` reads it). Opening it claims it (the writer's name
//! in an annotation), and every write is a replace with the
//! resourceVersion last seen: once a new leader has opened the journal,
//! the deposed leader's next write conflicts and it must stop acting, so
//! the journal also fences it. A new plan starts the journal afresh
//! (resuming needs only the latest plan); one plan's records must fit a
//! ConfigMap (1 MiB).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Client};
use tessera_movement::journal::{Entry, Journal, JournalError};

/// The annotation naming the journal's writer.
pub const WRITER: &str = "tessera.io/journal-writer";

/// Largest journal kept, bytes (a ConfigMap holds 1 MiB).
pub const MAX_BYTES: usize = 1_000_000;

/// A journal in the ConfigMap `name`.
pub struct ConfigMapJournal {
    api: Api<ConfigMap>,
    name: String,
    rt: tokio::runtime::Handle,
    /// The ConfigMap as last written or read (its resourceVersion fences).
    current: ConfigMap,
    next: u64,
}

fn remote(what: &str, e: &kube::Error) -> JournalError {
    match e {
        kube::Error::Api(s) if s.code == 409 => JournalError::Remote(format!(
            "{what}: another writer (a new leader) changed the journal; this replica stops acting"
        )),
        other => JournalError::Remote(format!("{what}: {other}")),
    }
}

impl ConfigMapJournal {
    /// Opens the journal `namespace/name` for `writer` (creating it empty
    /// if missing) and claims it. Call outside the runtime `rt` (its
    /// writes block on it).
    pub fn open(
        client: Client,
        namespace: &str,
        name: &str,
        writer: &str,
        rt: tokio::runtime::Handle,
    ) -> Result<Self, JournalError> {
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let current = rt.block_on(async {
            let mut cm = match api.get_opt(name).await.map_err(|e| remote("read", &e))? {
                Some(cm) => cm,
                None => {
                    let cm = ConfigMap {
                        metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
                        data: Some(BTreeMap::new()),
                        ..ConfigMap::default()
                    };
                    api.create(&PostParams::default(), &cm).await.map_err(|e| remote("create", &e))?
                }
            };
            cm.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(WRITER.into(), writer.into());
            api.replace(name, &PostParams::default(), &cm).await.map_err(|e| remote("claim", &e))
        })?;
        let next = current.data.as_ref().map_or(0, |d| d.len() as u64);
        Ok(Self { api, name: name.into(), rt, current, next })
    }
}

impl Journal for ConfigMapJournal {
    fn append(&mut self, entry: &Entry) -> Result<(), JournalError> {
        let mut cm = self.current.clone();
        let data = cm.data.get_or_insert_with(BTreeMap::new);
        if matches!(entry, Entry::Plan { .. }) {
            data.clear();
            self.next = 0;
        }
        let text = serde_json::to_string(entry).map_err(|source| JournalError::Record { seq: self.next, source })?;
        data.insert(format!("{:08}", self.next), text);
        let size: usize = data.iter().map(|(k, v)| k.len() + v.len()).sum();
        if size > MAX_BYTES {
            return Err(JournalError::Remote(format!(
                "the journal of this plan outgrew its ConfigMap ({size} bytes > {MAX_BYTES})"
            )));
        }
        let written = self.rt.block_on(self.api.replace(&self.name, &PostParams::default(), &cm));
        self.current = written.map_err(|e| remote("write", &e))?;
        self.next += 1;
        Ok(())
    }

    fn read_all(&mut self) -> Result<Vec<Entry>, JournalError> {
        self.current = self.rt.block_on(self.api.get(&self.name)).map_err(|e| remote("read", &e))?;
        let data = self.current.data.clone().unwrap_or_default();
        self.next = data.len() as u64;
        data.iter()
            .map(|(k, v)| {
                serde_json::from_str(v).map_err(|source| JournalError::Record { seq: k.parse().unwrap_or(0), source })
            })
            .collect()
    }
}
