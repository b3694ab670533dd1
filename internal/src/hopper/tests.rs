//! Placement and hops of bound conn ids (SPEC section 4 and 7): version follow, ejected nodes,
//! racing hops, unbound requests.

use std::time::Duration;

use super::*;
use crate::config::load_str;
use crate::config::test_fixtures::two_versions;
use crate::hopper::ids::test_id as id;
use crate::registry::Registry;

fn setup() -> (Hopper, Arc<RouteTable>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let registry = Registry::new(metrics.clone());
    let cfg = Arc::new(load_str(&two_versions("version"), "t.toml").expect("valid"));
    let table = Arc::new(RouteTable::build(cfg, &registry, 1, None));
    let store = AffinityStore::Memory(affinity::MemoryStore::new(100, Duration::from_secs(60)));
    (Hopper::new(store, metrics.clone()), table, metrics)
}

fn crit(version: Option<&str>) -> Criteria<'_> {
    Criteria {
        version,
        metadata_key: "version",
        avoid_versions: &[],
        exclude: &[],
        zone: None,
        key: None,
    }
}

fn version_hops(m: &Metrics) -> u64 {
    m.hops
        .get_or_create(&crate::metrics::ReasonLabel { reason: "version" })
        .get()
}

#[tokio::test]
async fn bound_id_follows_the_requested_version() {
    let (hopper, table, metrics) = setup();
    let cluster = table.clusters.get("c").expect("cluster").clone();
    let now = Instant::now();
    let place = |v: Option<&'static str>| {
        let (h, t, c) = (&hopper, &table, &cluster);
        async move { h.place(Some(&id("conn-1")), t, c, &crit(v), now).await }
    };
    // First request binds to the v1 node.
    let p = place(Some("v1")).await;
    assert_eq!(p.node.as_ref().map(|n| &*n.id), Some("a"));
    assert!(p.hopped_from.is_none());
    // No version: the binding holds.
    assert_eq!(
        place(None).await.node.map(|n| n.id.to_string()).as_deref(),
        Some("a")
    );
    // A v2 request re-binds it, counted as a `version` hop.
    let p = place(Some("v2")).await;
    assert_eq!(p.node.as_ref().map(|n| &*n.id), Some("b"));
    assert_eq!(
        p.hopped_from.as_ref().map(|(from, why)| (&**from, *why)),
        Some(("a", HopReason::Version))
    );
    assert_eq!(version_hops(&metrics), 1);
    assert_eq!(
        hopper.store().get(&id("conn-1")).await.as_deref(),
        Some("b")
    );
    // Further v2 and unversioned requests stay.
    for v in [Some("v2"), None, Some("v2")] {
        let p = place(v).await;
        assert_eq!(p.node.as_ref().map(|n| &*n.id), Some("b"));
        assert!(p.hopped_from.is_none());
    }
    // A version no node has: falls back, reports the miss, keeps the binding (no hop).
    let p = place(Some("v3")).await;
    assert_eq!(p.node.as_ref().map(|n| &*n.id), Some("b"));
    assert!(p.hopped_from.is_none());
    assert_eq!(
        p.version_miss,
        Some(VersionMiss {
            candidates: 2,
            matched: 0
        })
    );
    assert_eq!(version_hops(&metrics), 1);
}

#[tokio::test]
async fn bound_id_hops_off_an_ejected_node() {
    let (hopper, table, metrics) = setup();
    let cluster = table.clusters.get("c").expect("cluster").clone();
    let now = Instant::now();
    let p = hopper
        .place(
            Some(&id("conn-2")),
            &table,
            &cluster,
            &crit(Some("v2")),
            now,
        )
        .await;
    let b = p.node.expect("placed");
    assert_eq!(&*b.id, "b");
    b.runtime.eject(&b.settings.health, "test", now);
    let ejected_at = b.runtime.unusable_since().expect("ejected: unusable");
    let later = Instant::now();
    let p = hopper
        .place(Some(&id("conn-2")), &table, &cluster, &crit(None), later)
        .await;
    // The hop's latency runs from the ejection, not from the request that noticed it.
    assert_eq!(p.hop_seen, Some(ejected_at));
    assert_eq!(p.node.as_ref().map(|n| &*n.id), Some("a"));
    assert_eq!(
        p.hopped_from.as_ref().map(|(from, why)| (&**from, *why)),
        Some(("b", HopReason::Ejected))
    );
    assert_eq!(
        metrics
            .hops
            .get_or_create(&crate::metrics::ReasonLabel { reason: "ejected" })
            .get(),
        1
    );
}

#[tokio::test]
async fn racing_hops_of_one_id_move_it_once_and_count_once() {
    let (hopper, table, metrics) = setup();
    let cluster = table.clusters.get("c").expect("cluster").clone();
    let now = Instant::now();
    let b = cluster.node("b").expect("node b").clone();
    assert_eq!(
        &*hopper.store().bind(&id("conn-r"), &Arc::from("a")).await,
        "a"
    );
    // Two requests saw "a" fail and both move the id (to the same node, as a burst would).
    for i in 0..2 {
        let (n, counted) = hopper
            .hop(
                &id("conn-r"),
                "a",
                b.clone(),
                Follow::Winner(&cluster, &crit(None)),
                HopReason::ConnectError,
                now,
            )
            .await
            .logged();
        assert_eq!(&*n.id, "b");
        assert_eq!(counted, i == 0, "only the first call counts the hop");
    }
    assert!(
        !hopper
            .hop(
                &id("conn-r"),
                "a",
                b.clone(),
                Follow::No,
                HopReason::ConnectError,
                Instant::now()
            )
            .await
            .logged()
            .1
    );
    let count = metrics
        .hops
        .get_or_create(&crate::metrics::ReasonLabel {
            reason: "connect_error",
        })
        .get();
    assert_eq!(count, 1, "one change of the binding, one hop");
    assert_eq!(
        hopper.store().get(&id("conn-r")).await.as_deref(),
        Some("b")
    );
}

#[tokio::test]
async fn requests_without_conn_id_are_not_bound() {
    let (hopper, table, _) = setup();
    let cluster = table.clusters.get("c").expect("cluster").clone();
    let p = hopper
        .place(None, &table, &cluster, &crit(Some("v2")), Instant::now())
        .await;
    assert_eq!(p.node.as_ref().map(|n| &*n.id), Some("b"));
    assert!(hopper.store().get(&id("conn-x")).await.is_none());
}
