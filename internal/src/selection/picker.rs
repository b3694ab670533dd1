//! Pickers (`lb`): choose one candidate by effective weight (SPEC section 3).
//!
//! - `round_robin`: equal weights rotate exactly; unequal weights use a low-discrepancy sequence
//!   (golden-ratio stride) over the cumulative weights, so shares follow weights without a lock.
//! - `random`: uniform. `weighted`: weighted random. `least_request`: power of two choices on
//!   in-flight requests divided by weight.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rand::Rng;

use crate::config::Picker;
use crate::registry::Node;
use crate::routing::Cluster;

use super::Candidate;

/// Picks from `cands` with the cluster's picker; `None` if empty.
pub fn pick<R: Rng + ?Sized>(cluster: &Cluster, cands: &[Candidate], rng: &mut R) -> Option<Arc<Node>> {
    match cands.len() {
        0 => return None,
        1 => return Some(cands[0].node.clone()),
        _ => {}
    }
    let i = match cluster.lb {
        Picker::RoundRobin => round_robin(cluster.cursor.fetch_add(1, Ordering::Relaxed), cands),
        Picker::Random => rng.random_range(0..cands.len()),
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
pub fn round_robin(n: usize, cands: &[Candidate]) -> usize {
    let w0 = cands[0].weight;
    if cands.iter().all(|c| c.weight == w0) {
        return n % cands.len();
    }
    // Golden-ratio (Weyl) sequence: evenly spread points in [0, 1).
    const PHI_FRAC: f64 = 0.618_033_988_749_895;
    let point = (n as f64 * PHI_FRAC).fract();
    weighted_at(cands, (point * total(cands) as f64) as u64)
}

fn least_request<R: Rng + ?Sized>(cands: &[Candidate], rng: &mut R) -> usize {
    let a = rng.random_range(0..cands.len());
    let mut b = rng.random_range(0..cands.len() - 1);
    if b >= a {
        b += 1;
    }
    // Load per unit of weight: (in-flight_a + 1) / w_a <= (in-flight_b + 1) / w_b, without division.
    let inflight = |i: usize| u128::from(cands[i].node.runtime.inflight() + 1);
    let weight = |i: usize| u128::from(cands[i].weight.max(1));
    if inflight(a) * weight(b) <= inflight(b) * weight(a) {
        a
    } else {
        b
    }
}

#[cfg(test)]
mod tests;
