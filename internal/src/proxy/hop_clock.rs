//! What a request or a WebSocket owes `hopping_latency_seconds` (SPEC section 9): one
//! observation per counted hop, from when its failure was first seen to when the client is
//! served again.

use tokio::time::Instant;

/// The `hopping_latency_seconds` observations a request owes: one per hop it counted, from when
/// that hop's failure was first seen to when the request is served again (a node's response head)
/// or given up. Observed on drop, so every exit of [`super::forward::forward`] pays exactly once per hop.
/// It borrows the families (no reference count taken and dropped per request).
#[derive(Debug)]
pub(crate) struct HopClock<'a> {
    metrics: &'a crate::metrics::Metrics,
    seen: Vec<Instant>,
}

impl<'a> HopClock<'a> {
    /// A clock owing the hop counted at placement, if any, to `metrics`.
    pub(crate) fn new(metrics: &'a crate::metrics::Metrics, placed: Option<Instant>) -> Self {
        HopClock {
            metrics,
            seen: placed.into_iter().collect(),
        }
    }

    /// Owes one more observation, for a hop whose failure was seen at `seen`.
    pub(crate) fn push(&mut self, seen: Instant) {
        self.seen.push(seen);
    }

    /// Records what is owed now (the client is served again); owes nothing after. Reads the
    /// clock only when something is owed (most requests never hop: two clock reads of ~8 per
    /// proxied request).
    pub(crate) fn settle(&mut self) {
        if self.seen.is_empty() {
            return;
        }
        let now = Instant::now();
        for t in self.seen.drain(..) {
            self.metrics
                .hop_latency
                .observe(now.saturating_duration_since(t).as_secs_f64());
        }
    }
}

impl Drop for HopClock<'_> {
    fn drop(&mut self) {
        self.settle();
    }
}
