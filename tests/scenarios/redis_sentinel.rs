//! Sentinel for real: one master, one replica and three `redis-sentinel` processes;
//! a `SENTINEL FAILOVER` under load is followed by the store (`+switch-master`, re-resolve,
//! `ROLE`), and no binding is written to the old master and lost.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use integration_tests::redis_cluster::role;
use integration_tests::{wait_until, Gateway, RedisSentinel};

use crate::store_common::{all_healthy, call, node_for, numsub, redis_get, setup};

/// Sentinel: `SENTINEL FAILOVER` under load on two gateways: no request fails, writes
/// reach the new master within 2 s, both gateways re-subscribe there, and every binding made
/// before, during and after the failover is on the new master once the old one is demoted.
/// Long on purpose: before, during and after one failover under continuous load.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn sentinel_failover_under_load_moves_writes_to_the_new_master() {
    let sentinel = RedisSentinel::start().await;
    let (_mocks, toml) = setup(&sentinel.url(), "250ms").await;
    let gws = Arc::new([Gateway::start(&toml).await, Gateway::start(&toml).await]);
    for gw in gws.iter() {
        all_healthy(gw).await;
    }
    let old = sentinel.master_port().await;
    assert_eq!(old, sentinel.data_ports[0]);
    let old_c = sentinel.client(old).await;
    both_subscribed(&old_c, 10, "both gateways subscribed on the master").await;

    // Load: a new id every few ms, alternating gateways; every answer recorded.
    let stop = Arc::new(AtomicBool::new(false));
    let served: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let failed: Arc<Mutex<Vec<String>>> = Arc::default();
    let load = {
        let (gws, stop, served, failed) =
            (gws.clone(), stop.clone(), served.clone(), failed.clone());
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let id = format!("sf-{i}");
                let (status, node, _) = call(&gws[(i % 2) as usize], &id).await;
                if status == 200 && !node.is_empty() {
                    served.lock().expect("lock").insert(id, node);
                } else {
                    failed.lock().expect("lock").push(format!("{id}: {status}"));
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let served_ref = &served;
    wait_until(
        Duration::from_secs(10),
        "load before the failover",
        || async move { served_ref.lock().expect("lock").len() >= 100 },
    )
    .await;

    let new = sentinel.failover().await;
    let switched = Instant::now();
    assert_ne!(new, old);
    let mut new_c = sentinel.client(new).await;

    // Writes resume on the new master within 2 s: a fresh id through each gateway is there.
    let mut probe = 0;
    loop {
        let mut both = true;
        for (g, gw) in gws.iter().enumerate() {
            let id = format!("probe-{g}-{probe}");
            let node = node_for(gw, &id).await;
            both &= redis_get(&mut new_c, &format!("hopgw:conn:{id}"))
                .await
                .as_deref()
                == Some(node.as_str());
        }
        if both {
            break;
        }
        probe += 1;
        assert!(
            switched.elapsed() < Duration::from_secs(2),
            "bindings not written to the new master {new} 2 s after the failover"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let resumed = switched.elapsed();
    both_subscribed(&new_c, 2, "both gateways re-subscribed on the new master").await;

    // Keep the load on until Sentinel has demoted the old master (it resyncs from the new one,
    // dropping whatever was written to it after the promotion).
    wait_until(
        Duration::from_secs(30),
        "the old master demoted to replica",
        || async move { role(old).await.as_deref() == Some("slave") },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    load.await.expect("load task");

    assert!(
        failed.lock().expect("lock").is_empty(),
        "failed requests: {:?}",
        failed.lock().expect("lock")
    );
    let served = served.lock().expect("lock").clone();
    let served_ref = &served;
    let missing = Arc::new(Mutex::new(Vec::new()));
    let missing_ref = &missing;
    let new_ref = &mut new_c;
    let complete = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let mut m = Vec::new();
            for (id, node) in served_ref {
                if redis_get(new_ref, &format!("hopgw:conn:{id}"))
                    .await
                    .as_deref()
                    != Some(node)
                {
                    m.push(id.clone());
                }
            }
            let done = m.is_empty();
            *missing_ref.lock().expect("lock") = m;
            if done {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let missing = missing.lock().expect("lock").clone();
    assert!(
        complete.is_ok(),
        "{} of {} bindings lost on the new master (first: {:?}); writes resumed after {resumed:?}",
        missing.len(),
        served.len(),
        missing.first()
    );
    eprintln!(
        "sentinel failover: {} bindings, none lost; writes on the new master {resumed:?} after the failover",
        served.len()
    );
}

/// Waits up to `secs` s until two clients (the two gateways) subscribe `hopgw:hops` on `c`.
async fn both_subscribed(c: &redis::aio::MultiplexedConnection, secs: u64, what: &str) {
    wait_until(Duration::from_secs(secs), what, || {
        let mut c = c.clone();
        async move { numsub(&mut c, "hopgw:hops").await == 2 }
    })
    .await;
}
