//! The node mirror a plugin keeps, fed by deltas from the host.

use crate::types::{Node, NodeDelta, NodeId};

/// Node table indexed by [`NodeId`]; ids are dense, so this is a vector.
#[derive(Debug, Default, Clone)]
pub struct NodeTable {
    slots: Vec<Option<Node>>,
    len: usize,
}

impl NodeTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one delta.
    pub fn apply(&mut self, delta: NodeDelta) {
        match delta {
            NodeDelta::Upsert(node) => {
                let i = node.id as usize;
                if i >= self.slots.len() {
                    self.slots.resize_with(i + 1, || None);
                }
                if self.slots[i].is_none() {
                    self.len += 1;
                }
                self.slots[i] = Some(node);
            }
            NodeDelta::Remove(id) => {
                if let Some(slot) = self.slots.get_mut(id as usize) {
                    if slot.take().is_some() {
                        self.len -= 1;
                    }
                }
            }
        }
    }

    /// The node with this id, if present.
    #[inline]
    pub fn get(&self, id: NodeId) -> Option<&Node> {
        self.slots.get(id as usize).and_then(Option::as_ref)
    }

    /// Number of nodes present.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// All nodes present, in id order.
    pub fn iter(&self) -> impl Iterator<Item = &Node> {
        self.slots.iter().filter_map(Option::as_ref)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: NodeId) -> Node {
        Node { id, name: format!("n{id}"), ..Node::default() }
    }

    #[test]
    fn upsert_replace_remove() {
        let mut t = NodeTable::new();
        t.apply(NodeDelta::Upsert(node(3)));
        t.apply(NodeDelta::Upsert(node(0)));
        assert_eq!(t.len(), 2);
        let mut n3 = node(3);
        n3.zone = "z".into();
        t.apply(NodeDelta::Upsert(n3));
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(3).unwrap().zone, "z");
        t.apply(NodeDelta::Remove(3));
        t.apply(NodeDelta::Remove(3));
        t.apply(NodeDelta::Remove(99));
        assert_eq!(t.len(), 1);
        assert!(t.get(3).is_none());
        assert_eq!(t.iter().map(|n| n.id).collect::<Vec<_>>(), vec![0]);
    }
}
