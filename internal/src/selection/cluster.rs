//! [`Cluster`]: the node set selection works on — the cluster's nodes in config order, its picker
//! and the picker's round-robin cursor. Routing builds one per cluster in each route table
//! ([`crate::routing::RouteTable`]); selection reads it and moves only the cursor.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use crate::config::{Picker, Protocol};
use crate::registry::Node;

/// One cluster's node set (SPEC section 3 `clusters[]`).
#[derive(Debug)]
pub struct Cluster {
    /// Name.
    pub name: Arc<str>,
    /// The protocol its nodes speak.
    pub protocol: Protocol,
    /// Picker (`clusters[].lb`).
    pub lb: Picker,
    /// Nodes in config order.
    pub nodes: Vec<Arc<Node>>,
    /// Round-robin cursor (relaxed atomic; exact fairness is not required across threads).
    pub cursor: AtomicUsize,
}

impl Cluster {
    /// Takes the cluster's name, protocol, picker and nodes; returns it with the cursor at 0.
    pub fn new(name: Arc<str>, protocol: Protocol, lb: Picker, nodes: Vec<Arc<Node>>) -> Self {
        Cluster {
            name,
            protocol,
            lb,
            nodes,
            cursor: AtomicUsize::new(0),
        }
    }

    /// The node `id` of this cluster, if it has one.
    pub fn node(&self, id: &str) -> Option<&Arc<Node>> {
        self.nodes.iter().find(|n| &*n.id == id)
    }
}
