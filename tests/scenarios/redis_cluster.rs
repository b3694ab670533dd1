//! Redis Cluster for real: a 3-master, 3-replica cluster of `redis-server` processes.
//! Bindings spread over the shards and round-trip, racing hops from two gateways have one winner,
//! hop messages reach every gateway whichever node they were published on, and a slot migration
//! (`MOVED`/`ASK`) or a master's failover fails no request.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration_tests::redis_cluster::{key_slot, node_client};
use integration_tests::{get, wait_until, Gateway, RedisCluster};

use crate::store_common::{
    all_healthy, call, family_sum, node_for, numsub, redis_get, setup, store_errors,
};

/// Starts a cluster, three mocks and two gateways on it, and waits until both gateways hold their
/// hop subscription (on the first seed node).
async fn two_gateways() -> (RedisCluster, Vec<integration_tests::Mock>, [Gateway; 2]) {
    let cluster = RedisCluster::start().await;
    let (mocks, toml) = setup(&cluster.url(), "500ms").await;
    let gws = [Gateway::start(&toml).await, Gateway::start(&toml).await];
    for gw in &gws {
        all_healthy(gw).await;
    }
    let seed = node_client(cluster.ports()[0]).await;
    wait_until(Duration::from_secs(10), "both gateways subscribed", || {
        let mut c = seed.clone();
        async move { numsub(&mut c, "hopgw:hops").await == 2 }
    })
    .await;
    (cluster, mocks, gws)
}

/// Cluster spread, round trip and invalidation: 60 ids bound through one gateway land on
/// all three masters with the node that served them, the other gateway serves the same nodes, and
/// a hop message published on another node of the cluster reaches both gateways' caches.
#[tokio::test]
async fn cluster_bindings_spread_round_trip_and_invalidate() {
    let (cluster, _mocks, [gw_a, gw_b]) = two_gateways().await;
    let mut c = cluster.client().await;
    let mut shards = BTreeSet::new();
    let mut bound = Vec::new();
    for i in 0..60 {
        let id = format!("spread-{i}");
        let node = node_for(&gw_a, &id).await;
        let key = format!("hopgw:conn:{id}");
        assert_eq!(
            redis_get(&mut c, &key).await.as_deref(),
            Some(node.as_str()),
            "{key}"
        );
        shards.insert(cluster.master_of_slot(key_slot(&key)).await);
        bound.push((id, node));
    }
    assert_eq!(shards.len(), 3, "bindings on every master: {shards:?}");
    for (id, node) in &bound {
        assert_eq!(
            &node_for(&gw_b, id).await,
            node,
            "{id} through the other gateway"
        );
    }

    // Another replica (in any language) hops `spread-0` by the documented schema and publishes on
    // the last node; both gateways hold it cached and must drop it.
    let (id, from) = &bound[0];
    let to = if from == "node-a" { "node-b" } else { "node-a" };
    let _: () = redis::cmd("SET")
        .arg(format!("hopgw:conn:{id}"))
        .arg(to)
        .arg("PX")
        .arg(3_600_000)
        .query_async(&mut c)
        .await
        .expect("SET");
    let mut last = node_client(*cluster.ports().last().expect("six nodes")).await;
    let _: i64 = redis::cmd("PUBLISH")
        .arg("hopgw:hops")
        .arg(format!(r#"{{"conn":"{id}","from":"{from}","to":"{to}"}}"#))
        .query_async(&mut last)
        .await
        .expect("PUBLISH");
    let (a, b) = (&gw_a, &gw_b);
    wait_until(
        Duration::from_secs(1),
        "both gateways to follow the hop",
        || async move { node_for(a, id).await == to && node_for(b, id).await == to },
    )
    .await;
}

/// Cluster compare-and-set: the bound node dies and 20 requests on two gateways race
/// to hop one id: all succeed, all land on one new node, Redis holds it, and one hop is counted.
#[tokio::test]
async fn cluster_racing_hops_from_two_gateways_have_one_winner() {
    let (cluster, mut mocks, gws) = two_gateways().await;
    let id = "race-1";
    let first = node_for(&gws[0], id).await;
    assert_eq!(node_for(&gws[1], id).await, first);
    let hops_before = family_sum(&gws[0], "hopping_count_total").await
        + family_sum(&gws[1], "hopping_count_total").await;
    mocks
        .iter_mut()
        .find(|m| m.id == first)
        .expect("bound node is a mock")
        .kill()
        .await;
    let mut reqs = Vec::new();
    for gw in &gws {
        for _ in 0..10 {
            let url = gw.url("/echo");
            reqs.push(tokio::spawn(async move {
                get(&url, &[("x-conn-id", id)]).await.expect("request")
            }));
        }
    }
    let mut nodes = BTreeSet::new();
    for r in reqs {
        let r = r.await.expect("task");
        assert_eq!(r.status, 200, "{}", r.text());
        nodes.insert(r.header("x-node-id").expect("x-node-id"));
    }
    assert_eq!(nodes.len(), 1, "racing hops agree on one node: {nodes:?}");
    let winner = nodes.into_iter().next().expect("one");
    assert_ne!(winner, first);
    let mut c = cluster.client().await;
    assert_eq!(
        redis_get(&mut c, "hopgw:conn:race-1").await.as_deref(),
        Some(winner.as_str())
    );
    let hops = family_sum(&gws[0], "hopping_count_total").await
        + family_sum(&gws[1], "hopping_count_total").await
        - hops_before;
    assert_eq!(hops, 1.0, "one hop counted over both gateways");
}

/// Runs requests on `gw` until `stop`: the ids of `fixed` must keep their node, and a new id
/// `{mig}-new-N` is bound every round. Returns every id's served node and every failure.
fn load(
    gw: Arc<Gateway>,
    fixed: Vec<(String, String)>,
    stop: Arc<AtomicBool>,
    served: Arc<std::sync::Mutex<BTreeMap<String, String>>>,
) -> tokio::task::JoinHandle<Vec<String>> {
    served.lock().expect("lock").extend(fixed.iter().cloned());
    tokio::spawn(async move {
        let mut failed = Vec::new();
        let mut round = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let (id, want) = &fixed[(round as usize) % fixed.len()];
            let (status, node, _) = call(&gw, id).await;
            if status != 200 || &node != want {
                failed.push(format!("{id}: {status} on {node:?}, bound to {want}"));
            }
            let id = format!("{{mig}}-new-{round}");
            let (status, node, _) = call(&gw, &id).await;
            if status == 200 && !node.is_empty() {
                served.lock().expect("lock").insert(id, node);
            } else {
                failed.push(format!("{id}: {status}"));
            }
            round += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        failed
    })
}

/// Ids of `served` whose binding Redis does not hold (or holds with another node).
async fn missing_in_redis(
    cluster: &RedisCluster,
    served: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut c = cluster.client().await;
    let mut missing = Vec::new();
    for (id, node) in served {
        if redis_get(&mut c, &format!("hopgw:conn:{id}"))
            .await
            .as_deref()
            != Some(node)
        {
            missing.push(id.clone());
        }
    }
    missing
}

/// Cluster MOVED/ASK and failover: under load on ids of one hash slot, migrating the
/// slot to another master costs no request and no store error; killing that master (its replica
/// takes over) and a manual `CLUSTER FAILOVER` cost no request, and every binding ends up in Redis.
/// Long on purpose: migration, kill and manual failover under one continuous load.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn cluster_slot_migration_and_failover_fail_no_request() {
    let (mut cluster, _mocks, [gw, _gw_b]) = two_gateways().await;
    let gw = Arc::new(gw);
    let slot = key_slot("hopgw:conn:{mig}-0");
    let mut fixed = Vec::new();
    for i in 0..40 {
        let id = format!("{{mig}}-{i}");
        assert_eq!(key_slot(&format!("hopgw:conn:{id}")), slot);
        fixed.push((id.clone(), node_for(&gw, &id).await));
    }
    let from = cluster.master_of_slot(slot).await;
    let to = *cluster
        .masters()
        .await
        .iter()
        .find(|&&m| m != from)
        .expect("another master");

    let errors_before = store_errors(&gw).await;
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let running = load(gw.clone(), fixed.clone(), stop.clone(), served.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster
        .migrate_slot(slot, from, to, 4, Duration::from_millis(100))
        .await;
    assert_eq!(cluster.master_of_slot(slot).await, to, "slot migrated");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        store_errors(&gw).await,
        errors_before,
        "MOVED/ASK cost store errors"
    );
    let snapshot = served.lock().expect("lock").clone();
    assert_eq!(
        missing_in_redis(&cluster, &snapshot).await,
        Vec::<String>::new(),
        "bindings after the migration"
    );

    // kill -9 the slot's new master: its replica takes over (cluster-node-timeout 1 s).
    let replica = cluster.replica_of(to).await;
    // The replica has what the master acknowledged so far: Redis replicates asynchronously, and
    // a kill -9 before that loses acknowledged writes whatever the client does.
    let mut master = node_client(to).await;
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query_async(&mut master)
        .await
        .expect("WAIT");
    assert_eq!(acked, 1, "the replica is in sync before the kill");
    cluster.kill(to).await;
    slot_master_becomes(&cluster, slot, replica, "the replica to take the slot over").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.restart(to).await;
    cluster.wait_ok(Duration::from_secs(20)).await;

    // A manual failover back to the restarted node.
    cluster.failover(to).await;
    slot_master_becomes(&cluster, slot, to, "the manual failover").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let failed = running.await.expect("load task");
    let served = served.lock().expect("lock").clone();
    assert!(
        failed.is_empty(),
        "{} failed requests: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(served.len() > 100, "load ran: {} ids", served.len());
    let c = &cluster;
    let served_ref = &served;
    wait_until(
        Duration::from_secs(10),
        "every served binding in the cluster",
        || async move { missing_in_redis(c, served_ref).await.is_empty() },
    )
    .await;
    eprintln!(
        "cluster: {} ids, store errors {} during the failovers",
        served.len(),
        store_errors(&gw).await - errors_before
    );
}

/// Waits up to 20 s until `slot`'s master in `cluster` is the node on port `node`.
async fn slot_master_becomes(cluster: &RedisCluster, slot: u16, node: u16, what: &str) {
    wait_until(Duration::from_secs(20), what, || async move {
        cluster.slot_master(slot).await == Ok(node)
    })
    .await;
}
