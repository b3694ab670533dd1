//! Pickers (`lb`): choose one candidate by effective weight (SPEC section 3 and 6). Every picker
//! honours the effective weight (configured x health x warm-up), so a degraded, ramping or warming
//! node gets its reduced share whatever the `lb`:
//!
//! - `round_robin`: equal weights rotate exactly; unequal weights use a low-discrepancy sequence
//!   (golden-ratio stride) over the cumulative weights, so shares follow weights without a lock.
//! - `random`: uniform over nodes at full health, ignoring *configured* weights; health and warm-up
//!   still scale a node's chance (a degraded node gets `degraded_percent` of an equal share).
//! - `weighted`: weighted random by effective weight.
//! - `least_request`: equal weights: power of two choices on in-flight requests; unequal weights:
//!   weighted random over `weight / (in-flight + 1)` (Envoy's rule), so shares follow weights at
//!   rest and shift away from loaded nodes.
//!
//! [`pick_for`] is the entry point for a request: with a stable-selection key (conn id or split
//! key) and any `lb` but `least_request`, the node is the key's weighted rendezvous choice
//! ([`super::rendezvous`]); otherwise [`pick`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rand::Rng;

use super::Cluster;
use crate::config::Picker;
use crate::registry::Node;

use super::Candidate;

/// Picks from `cands` for a request with stable-selection `key` (SPEC section 7): the weighted
/// rendezvous choice for the key unless the cluster's `lb` is `least_request` or there is no key,
/// then [`pick`]. `None` if `cands` is empty.
pub(crate) fn pick_for<R: Rng + ?Sized>(
    cluster: &Cluster,
    cands: &[Candidate],
    key: Option<&str>,
    rng: &mut R,
) -> Option<Arc<Node>> {
    match key {
        Some(key) if cluster.lb != Picker::LeastRequest => {
            super::rendezvous::pick(cands, key).map(|i| cands[i].node.clone())
        }
        _ => pick(cluster, cands, rng),
    }
}

/// Picks from `cands` with the cluster's picker; `None` if empty.
pub(crate) fn pick<R: Rng + ?Sized>(
    cluster: &Cluster,
    cands: &[Candidate],
    rng: &mut R,
) -> Option<Arc<Node>> {
    match cands.len() {
        0 => return None,
        1 => return Some(cands[0].node.clone()),
        _ => {}
    }
    let i = match cluster.lb {
        Picker::RoundRobin => round_robin(cluster.cursor.fetch_add(1, Ordering::Relaxed), cands),
        Picker::Random => random(cands, rng),
        Picker::Weighted => weighted_at(cands, rng.random_range(0..total(cands))),
        Picker::LeastRequest => least_request(cands, rng),
    };
    Some(cands[i].node.clone())
}

fn total(cands: &[Candidate]) -> u64 {
    cands.iter().map(|c| c.weight).sum::<u64>().max(1)
}

/// Index of the candidate owning point `x` (0 <= x < total) of the cumulative weights.
fn weighted_at(cands: &[Candidate], mut x: u64) -> usize {
    for (i, c) in cands.iter().enumerate() {
        if x < c.weight {
            return i;
        }
        x -= c.weight;
    }
    cands.len() - 1
}

/// Round robin for tick `n`.
pub(crate) fn round_robin(n: usize, cands: &[Candidate]) -> usize {
    let w0 = cands[0].weight;
    if cands.iter().all(|c| c.weight == w0) {
        return n % cands.len();
    }
    // Golden-ratio (Weyl) sequence: evenly spread points in [0, 1).
    const PHI_FRAC: f64 = 0.618_033_988_749_895;
    let point = (n as f64 * PHI_FRAC).fract();
    weighted_at(cands, (point * total(cands) as f64) as u64)
}

/// Uniform over nodes, scaled by health and warm-up only: a candidate's effective weight divided by
/// its configured weight (the health % x warm-up % product, 0..=10000).
fn random<R: Rng + ?Sized>(cands: &[Candidate], rng: &mut R) -> usize {
    let share = |c: &Candidate| c.weight / u64::from(c.node.weight.max(1));
    let total: u64 = cands.iter().map(share).sum();
    if total == 0 {
        return rng.random_range(0..cands.len());
    }
    let mut x = rng.random_range(0..total);
    for (i, c) in cands.iter().enumerate() {
        let s = share(c);
        if x < s {
            return i;
        }
        x -= s;
    }
    cands.len() - 1
}

fn least_request<R: Rng + ?Sized>(cands: &[Candidate], rng: &mut R) -> usize {
    let inflight = |i: usize| cands[i].node.runtime.inflight() + 1;
    let w0 = cands[0].weight;
    if cands.iter().any(|c| c.weight != w0) {
        // Unequal weights: weighted random over weight / (in-flight + 1).
        let scores: Vec<f64> = (0..cands.len())
            .map(|i| cands[i].weight as f64 / inflight(i) as f64)
            .collect();
        let mut x = rng.random::<f64>() * scores.iter().sum::<f64>();
        for (i, s) in scores.iter().enumerate() {
            if x < *s {
                return i;
            }
            x -= s;
        }
        return cands.len() - 1;
    }
    let a = rng.random_range(0..cands.len());
    let mut b = rng.random_range(0..cands.len() - 1);
    if b >= a {
        b += 1;
    }
    if inflight(a) <= inflight(b) {
        a
    } else {
        b
    }
}
