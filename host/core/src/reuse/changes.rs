//! Which nodes changed when, and each node's zone: the log plugin
//! instances are synced from and reused answers are checked against.

use crate::model::NodeId;

/// Which nodes changed when, as a plugin's node mirror sees them: the log
/// plugin instances are synced from (`tessera_wasm`'s node feed) and
/// reused answers are checked against.
#[derive(Debug, Clone, Default)]
pub struct Changes {
    /// Bumps on every change.
    generation: u64,
    /// `(generation, node)` of each change, oldest first.
    log: Vec<(u64, NodeId)>,
    /// The generation before the oldest entry of `log`.
    log_start: u64,
    /// One past the largest node id seen.
    nodes: usize,
    /// Bumps when every answer may have changed: a node joined or left, a
    /// zone signal moved.
    epoch: u64,
    /// Each node's zone, as an index into `zone_names` (by node id;
    /// [`NO_ZONE`] until told).
    zones: Vec<u32>,
    /// The zones' names, in order of first sight.
    zone_names: Vec<String>,
}

impl Changes {
    /// Node `id`'s record changed; `joined`: it was not there before.
    pub fn changed(&mut self, id: NodeId, joined: bool) {
        self.generation += 1;
        self.nodes = self.nodes.max(id as usize + 1);
        self.log.push((self.generation, id));
        // Kept in proportion to the cluster by dropping the older half: a
        // reader further behind (a plugin instance, a class of answers)
        // starts over from a snapshot; dropping all of it would send every
        // reader, however current, the whole cluster.
        if self.log.len() > 2 * self.nodes + 1024 {
            let cut = self.log.len() / 2;
            self.log_start = self.log[cut - 1].0;
            self.log.drain(..cut);
        }
        if joined {
            self.epoch += 1;
        }
        // Every node seen has a slot for its zone, unknown until told.
        if id as usize >= self.zones.len() {
            self.zones.resize(id as usize + 1, NO_ZONE);
        }
    }

    /// Node `id` is in `zone` (call it with every change of the node's
    /// record; the empty name is a zone like any other).
    pub fn set_zone(&mut self, id: NodeId, zone: &str) {
        let i = id as usize;
        if self.zones.get(i).is_some_and(|&z| z != NO_ZONE && self.zone_names[z as usize] == zone) {
            return;
        }
        let z = match self.zone_names.iter().position(|n| n == zone) {
            Some(z) => z as u32,
            None => {
                self.zone_names.push(zone.to_string());
                self.zone_names.len() as u32 - 1
            }
        };
        if i >= self.zones.len() {
            self.zones.resize(i + 1, NO_ZONE);
        }
        self.zones[i] = z;
    }

    /// Node `id`'s zone as an index (the same index for the same name);
    /// `None` for a node whose zone was never told.
    #[inline]
    pub fn zone_of(&self, id: NodeId) -> Option<u32> {
        self.zones.get(id as usize).copied().filter(|&z| z != NO_ZONE)
    }

    /// How many zone indices there are (one past the largest).
    pub fn zone_count(&self) -> usize {
        self.zone_names.len()
    }

    /// One past the largest node id seen.
    pub(super) fn nodes(&self) -> usize {
        self.nodes
    }

    /// Each node's zone index by node id ([`NO_ZONE`] where not told).
    pub(super) fn zones(&self) -> &[u32] {
        &self.zones
    }

    /// Node `id` left.
    pub fn left(&mut self, id: NodeId) {
        self.changed(id, true);
    }

    /// Something every answer may depend on moved (a zone signal), but no
    /// node's record: the epoch moves, the generation does not.
    pub fn everything(&mut self) {
        self.epoch += 1;
    }

    /// Current generation: the number of node changes so far.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Current epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The nodes changed after generation `since` (repeats possible), or
    /// none if the log no longer reaches back that far.
    pub fn since(&self, since: u64) -> Option<impl Iterator<Item = NodeId> + '_> {
        (since >= self.log_start).then(|| {
            let first = self.log.partition_point(|(g, _)| *g <= since);
            self.log[first..].iter().map(|(_, id)| *id)
        })
    }
}

/// A node whose zone was not told ([`Changes::zone_of`] is `None`).
pub(super) const NO_ZONE: u32 = u32::MAX;
