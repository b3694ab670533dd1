//! Selection: candidate filters (canary version, zone), then a picker over effective weights
//! (SPEC section 6). Pure functions of the table snapshot and the request's [`Criteria`]: nothing
//! here keeps request data in shared fields, so every piece is testable alone.
//!
//! A request that carries a conn id (or was placed in a hash split by its split key) is given to
//! the node [`rendezvous`] hashing chooses for that key over the filtered candidates, whatever the
//! `lb` (but `least_request`, which picks by load): replicas agree on a new id's node without
//! coordination (SPEC section 7). Requests without a key are balanced by the `lb` picker.

mod cluster;
pub(crate) mod picker;
pub(crate) mod rendezvous;
pub(crate) mod version;
pub(crate) mod zone;

use std::sync::Arc;

use tokio::time::Instant;

pub(crate) use self::cluster::Cluster;
use crate::registry::{Node, NodeId};

/// Where selection gets each node's effective weight (configured × health % × warm-up %, SPEC
/// section 6); the route table implements it, so selection never reads routing's types.
pub(crate) trait Weights {
    /// Effective weight of `node` at `now`; 0 means not selectable.
    fn effective_weight(&self, node: &Node, now: Instant) -> u64;
}

impl<T: Weights + ?Sized> Weights for Arc<T> {
    fn effective_weight(&self, node: &Node, now: Instant) -> u64 {
        (**self).effective_weight(node, now)
    }
}

/// What one request asks of selection, decided once per request.
#[derive(Debug, Default, Clone)]
pub struct Criteria<'a> {
    /// Wanted version (from header, query or a split), matched to node metadata.
    pub version: Option<&'a str>,
    /// Metadata key holding a node's version.
    pub metadata_key: &'a str,
    /// Versions reserved for splits: requests outside every bucket avoid their nodes (while others are healthy).
    pub avoid_versions: &'a [String],
    /// Nodes already tried by this request.
    pub exclude: &'a [NodeId],
    /// The gateway's zone.
    pub zone: Option<&'a str>,
    /// Stable-selection key: the conn id, else the split key that put the request in a split
    /// bucket; `None` balances by `lb` (SPEC section 7).
    pub key: Option<&'a str>,
}

/// A selectable node with its effective weight.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    /// The node.
    pub node: Arc<Node>,
    /// Effective weight (> 0).
    pub weight: u64,
}

/// The candidates of one selection: on the stack for up to 8 nodes (an allocation less per
/// request for most clusters), on the heap beyond.
pub(crate) type Candidates = smallvec::SmallVec<[Candidate; 8]>;

/// Outcome of the version filter, for the no-match WARN and counter (SPEC section 6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VersionMiss {
    /// Selectable candidates before the filter.
    pub candidates: usize,
    /// Candidates matching the version (0).
    pub matched: usize,
}

/// What [`select`] found.
#[derive(Debug, Clone)]
pub(crate) struct Selection {
    /// Chosen node, `None` if no candidate is selectable.
    pub node: Option<Arc<Node>>,
    /// Set when a version was requested and no selectable node had it.
    pub version_miss: Option<VersionMiss>,
}

/// Selectable candidates of `cluster` at `now` (effective weight > 0, not excluded).
pub(crate) fn candidates(
    table: &impl Weights,
    cluster: &Cluster,
    exclude: &[NodeId],
    now: Instant,
) -> Candidates {
    cluster
        .nodes
        .iter()
        .filter(|n| !exclude.contains(&n.id))
        .filter_map(|n| {
            let weight = table.effective_weight(n, now);
            (weight > 0).then(|| Candidate {
                node: n.clone(),
                weight,
            })
        })
        .collect()
}

/// Runs the filters then the cluster's picker.
pub(crate) fn select(
    table: &impl Weights,
    cluster: &Cluster,
    c: &Criteria<'_>,
    now: Instant,
) -> Selection {
    let all = candidates(table, cluster, c.exclude, now);
    let (filtered, version_miss) = version::filter(all, c);
    let filtered = zone::filter(filtered, c.zone);
    let node = picker::pick_for(cluster, &filtered, c.key, &mut rand::rng());
    Selection { node, version_miss }
}

/// True if `node` satisfies the request's version constraint (a bound node must, to keep its binding).
pub(crate) fn satisfies(node: &Node, c: &Criteria<'_>) -> bool {
    match c.version {
        Some(v) => version::node_version(node, c.metadata_key).is_some_and(|nv| nv == v),
        None => true,
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_version;
