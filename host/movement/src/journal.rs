//! The append-only journal: every plan, batch and step transition is
//! written (and committed) before the executor acts on it, so a restarted
//! executor knows exactly where it stopped.

use std::collections::BTreeMap;
use std::path::Path;

use redb::{Database, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use tessera_core::model::NodeId;
use tessera_core::sched::PodId;

use crate::MovePlan;
use crate::dag::Dag;
use crate::step::{MovementReport, StepState};

/// One journal record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Entry {
    /// A plan begins, with its ordering.
    Plan {
        /// The plan.
        plan: MovePlan,
        /// Its steps.
        dag: Dag,
    },
    /// A batch begins.
    Batch {
        /// Its number (1-based).
        number: u32,
        /// Its steps.
        steps: Vec<usize>,
    },
    /// A step's new state (intents included).
    Step {
        /// The step.
        step: usize,
        /// Its state.
        state: StepState,
        /// When.
        at: u64,
    },
    /// The batch is over; the next may start at `pause_until`.
    BatchDone {
        /// End of the pause.
        pause_until: u64,
        /// The report so far.
        report: MovementReport,
    },
    /// The plan is over.
    Finished {
        /// Its report.
        report: MovementReport,
    },
    /// The names of the plan's nodes (node ids are one replica's model's;
    /// a new leader maps them back through these names). Written by the
    /// caller right after the plan.
    Nodes {
        /// Name by node id.
        names: BTreeMap<NodeId, String>,
    },
    /// A moved pod is now another pod: its owner recreated it after the
    /// eviction and the replacement took the room held for the move.
    Replaced {
        /// The pod the plan moves.
        pod: PodId,
        /// Its replacement.
        by: PodId,
    },
}

/// A journal failed (or, in tests, a crash was injected).
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The store failed.
    #[error("journal store: {0}")]
    Store(#[from] Box<redb::Error>),
    /// A record could not be encoded or decoded.
    #[error("journal record {seq}: {source}")]
    Record {
        /// Sequence number.
        seq: u64,
        /// Why.
        source: serde_json::Error,
    },
    /// A journal kept elsewhere (in the cluster) refused or failed a
    /// write; with a conflict, another writer (a new leader) owns it now.
    #[error("journal: {0}")]
    Remote(String),
    /// The process stopped here (crash injection in tests).
    #[error("crashed after journal write {0}")]
    Crashed(u64),
}

/// Where entries go.
pub trait Journal {
    /// Appends and commits one entry.
    fn append(&mut self, entry: &Entry) -> Result<(), JournalError>;
    /// Every entry, oldest first.
    fn read_all(&mut self) -> Result<Vec<Entry>, JournalError>;
}

fn store(e: impl Into<redb::Error>) -> JournalError {
    JournalError::Store(Box::new(e.into()))
}

const ENTRIES: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("movement-journal");

/// A journal in a redb database file.
pub struct RedbJournal {
    db: Database,
    next: u64,
}

impl RedbJournal {
    /// Opens (or creates) the journal at `path`.
    pub fn open(path: &Path) -> Result<Self, JournalError> {
        let db = Database::create(path).map_err(store)?;
        let tx = db.begin_write().map_err(store)?;
        let next = {
            let t = tx.open_table(ENTRIES).map_err(store)?;
            let last = t.last().map_err(store)?.map(|(k, _)| k.value());
            last.map_or(0, |k| k + 1)
        };
        tx.commit().map_err(store)?;
        Ok(Self { db, next })
    }
}

impl Journal for RedbJournal {
    fn append(&mut self, entry: &Entry) -> Result<(), JournalError> {
        let bytes = serde_json::to_vec(entry).map_err(|source| JournalError::Record { seq: self.next, source })?;
        let tx = self.db.begin_write().map_err(store)?;
        {
            let mut t = tx.open_table(ENTRIES).map_err(store)?;
            t.insert(self.next, bytes.as_slice()).map_err(store)?;
        }
        tx.commit().map_err(store)?;
        self.next += 1;
        Ok(())
    }

    fn read_all(&mut self) -> Result<Vec<Entry>, JournalError> {
        let tx = self.db.begin_read().map_err(store)?;
        let t = tx.open_table(ENTRIES).map_err(store)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(store)? {
            let (k, v) = row.map_err(store)?;
            out.push(
                serde_json::from_slice(v.value()).map_err(|source| JournalError::Record { seq: k.value(), source })?,
            );
        }
        Ok(out)
    }
}

/// A journal in memory (dry runs, the simulator without a file).
#[derive(Debug, Default)]
pub struct MemJournal {
    /// The entries.
    pub entries: Vec<Entry>,
}

impl Journal for MemJournal {
    fn append(&mut self, entry: &Entry) -> Result<(), JournalError> {
        self.entries.push(entry.clone());
        Ok(())
    }

    fn read_all(&mut self) -> Result<Vec<Entry>, JournalError> {
        Ok(self.entries.clone())
    }
}
