//! A worker's recently used `gateway_requests_total` counters ([`RequestCounters`]): counting a
//! request then costs two pointer comparisons instead of hashing its label set into the family's
//! map (CPU per request).

use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::RequestLabels;

/// Entries kept; past it the oldest goes (a route table has few routes and nodes, and most
/// requests end with one or two statuses).
const CACHED_COUNTERS: usize = 64;

/// The counters of `gateway_requests_total{route,node,code}` a worker used recently, by the
/// addresses of the label values: the route and node ids are the route table's and the
/// registry's own `Arc<str>`s, and each entry holds its two, so an address is never reused
/// while its entry lives. A reload's new `Arc<str>` for the same id makes a second entry with
/// the same counter (the family's, found by value), so counts are never split.
#[derive(Debug, Default)]
pub(crate) struct RequestCounters(Mutex<Vec<Cached>>);

#[derive(Debug)]
struct Cached {
    route: Arc<str>,
    node: Arc<str>,
    code: u16,
    counter: Counter,
}

impl RequestCounters {
    /// Adds one to `family`'s counter for `route`, `node` and `code` (HTTP status).
    pub(crate) fn inc(
        &self,
        family: &Family<RequestLabels, Counter>,
        route: &Arc<str>,
        node: &Arc<str>,
        code: u16,
    ) {
        let mut cached = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let hit = cached
            .iter()
            .find(|c| c.code == code && Arc::ptr_eq(&c.route, route) && Arc::ptr_eq(&c.node, node));
        if let Some(c) = hit {
            c.counter.inc();
            return;
        }
        let counter = family
            .get_or_create(&RequestLabels {
                route: route.clone(),
                node: node.clone(),
                code,
            })
            .clone();
        counter.inc();
        if cached.len() == CACHED_COUNTERS {
            cached.remove(0);
        }
        cached.push(Cached {
            route: route.clone(),
            node: node.clone(),
            code,
            counter,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(f: &Family<RequestLabels, Counter>, route: &str, node: &str, code: u16) -> u64 {
        f.get_or_create(&RequestLabels {
            route: route.into(),
            node: node.into(),
            code,
        })
        .get()
    }

    #[test]
    fn counts_land_on_the_family_whichever_arc_names_the_labels() {
        let family = Family::<RequestLabels, Counter>::default();
        let cache = RequestCounters::default();
        let (r1, n1): (Arc<str>, Arc<str>) = ("api".into(), "node-1".into());
        cache.inc(&family, &r1, &n1, 200);
        cache.inc(&family, &r1, &n1, 200);
        cache.inc(&family, &r1, &n1, 502);
        // A reload's new Arc for the same route id: the same counter.
        let r2: Arc<str> = "api".into();
        cache.inc(&family, &r2, &n1, 200);
        assert_eq!(count(&family, "api", "node-1", 200), 3);
        assert_eq!(count(&family, "api", "node-1", 502), 1);
        assert_eq!(cache.0.lock().expect("lock").len(), 3);
    }

    #[test]
    fn the_cache_keeps_at_most_its_bound_and_still_counts_evicted_labels() {
        let family = Family::<RequestLabels, Counter>::default();
        let cache = RequestCounters::default();
        let (r, n): (Arc<str>, Arc<str>) = ("r".into(), "n".into());
        for code in 0..(CACHED_COUNTERS as u16 + 10) {
            cache.inc(&family, &r, &n, code);
        }
        assert_eq!(cache.0.lock().expect("lock").len(), CACHED_COUNTERS);
        // Code 0 was evicted first; counting it again finds the family's counter.
        cache.inc(&family, &r, &n, 0);
        assert_eq!(count(&family, "r", "n", 0), 2);
        assert_eq!(count(&family, "r", "n", 70), 1);
    }
}
