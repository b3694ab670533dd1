//! CASE-34 (Redis store outages, SPEC section 7) with real `redis-server` processes: a black-holed
//! Redis costs at most one `redis_timeout` per request once, then nothing until it is back, and a
//! server that turns replica (`READONLY`) is left and rejoined by itself.

use std::time::Duration;

use integration_tests::{info_replication, wait_until, Gateway, Redis};

use crate::store_common::{all_healthy, call, node_for, redis_get, setup};

/// Fills `port`'s accept queue with connections nobody accepts (the server is stopped), so that
/// later SYNs are dropped; returns them (kept open) once a connect no longer completes.
async fn fill_backlog(port: u16) -> Vec<tokio::net::TcpStream> {
    let mut held = Vec::new();
    for _ in 0..5000 {
        let c = tokio::net::TcpStream::connect(("127.0.0.1", port));
        match tokio::time::timeout(Duration::from_millis(200), c).await {
            Ok(Ok(s)) => held.push(s),
            Ok(Err(e)) => panic!("connect to a stopped redis failed instead of hanging: {e}"),
            Err(_) => return held,
        }
    }
    panic!("the accept queue of {port} never filled");
}

/// CASE-34 a (black hole, SYN dropped): Redis stopped with SIGSTOP and its accept queue full.
/// The first request pays at most `redis_timeout` (1 s here) plus a margin; the next 50, spread
/// over 2.5 s (several probe rounds), each take well under it; every request is 200 and bound ids
/// keep their node; once Redis is back the ids bound during the outage are written to it.
#[tokio::test]
async fn redis_black_hole_costs_one_timeout_then_none() {
    let redis = Redis::start().await;
    let (_mocks, toml) = setup(&redis.url(), "1s").await;
    let gw = Gateway::start(&toml).await;
    all_healthy(&gw).await;
    let mut old = Vec::new();
    for i in 0..10 {
        let id = format!("old-{i}");
        old.push((id.clone(), node_for(&gw, &id).await));
    }

    redis.pause();
    let held = fill_backlog(redis.port).await;
    let (status, first_node, first) = call(&gw, "new-0").await;
    assert_eq!(status, 200);
    assert!(
        first <= Duration::from_millis(1000 + 700),
        "first request during the black hole took {first:?} (redis_timeout 1 s)"
    );
    let mut new = vec![("new-0".to_string(), first_node)];
    let mut slowest = Duration::ZERO;
    for i in 0..50 {
        let (id, want) = if i % 2 == 0 {
            (format!("new-{}", i / 2 + 1), None)
        } else {
            let (id, node) = &old[i % old.len()];
            (id.clone(), Some(node.clone()))
        };
        let (status, node, took) = call(&gw, &id).await;
        assert_eq!(status, 200, "{id} during the black hole");
        if let Some(want) = want {
            assert_eq!(node, want, "{id} keeps its node");
        } else {
            new.push((id, node));
        }
        slowest = slowest.max(took);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        slowest < Duration::from_millis(300),
        "with the circuit open a request took {slowest:?}: it waited on Redis"
    );
    // The ids bound during the outage stay on their node through this gateway.
    for (id, node) in &new {
        assert_eq!(&node_for(&gw, id).await, node, "{id} during the outage");
    }

    redis.resume();
    drop(held);
    let mut c = redis.client().await;
    let (new_ref, c_ref) = (&new, &mut c);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    'wait: loop {
        for (id, node) in new_ref {
            if redis_get(c_ref, &format!("hopgw:conn:{id}"))
                .await
                .as_deref()
                != Some(node)
            {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{id} not written back 10 s after Redis came back"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue 'wait;
            }
        }
        break;
    }
    eprintln!("black hole: first request {first:?}, slowest of the next 50 {slowest:?}");
}

/// CASE-34 c (READONLY): the server turns replica (`REPLICAOF`), so writes answer `READONLY`:
/// requests keep being served and bound locally; when it is a master again (the failed-over
/// address), writes resume within 2 s and the bindings made meanwhile are written.
#[tokio::test]
async fn redis_readonly_is_left_and_writes_resume() {
    let redis = Redis::start().await;
    let other = Redis::start().await;
    let (_mocks, toml) = setup(&redis.url(), "250ms").await;
    let gw = Gateway::start(&toml).await;
    all_healthy(&gw).await;
    let mut c = redis.client().await;
    assert!(!node_for(&gw, "before").await.is_empty());

    replicaof(&mut c, "127.0.0.1", &other.port.to_string()).await;
    wait_synced(&c).await;
    let mut during = Vec::new();
    for i in 0..20 {
        let id = format!("ro-{i}");
        let (status, node, took) = call(&gw, &id).await;
        assert_eq!(status, 200, "{id} while Redis is read-only");
        assert!(took < Duration::from_secs(1), "{id} took {took:?}");
        during.push((id, node));
    }

    replicaof(&mut c, "NO", "ONE").await;
    let promoted = tokio::time::Instant::now();
    let (during_ref, c_ref) = (&during, &c);
    wait_until(
        Duration::from_secs(2),
        "bindings made while read-only written",
        || {
            let mut c = c_ref.clone();
            async move {
                for (id, node) in during_ref {
                    if redis_get(&mut c, &format!("hopgw:conn:{id}"))
                        .await
                        .as_deref()
                        != Some(node)
                    {
                        return false;
                    }
                }
                true
            }
        },
    )
    .await;
    // And new writes go straight through again.
    let node = node_for(&gw, "after").await;
    assert_eq!(
        redis_get(&mut c, "hopgw:conn:after").await.as_deref(),
        Some(node.as_str())
    );
    eprintln!(
        "readonly: writes resumed {:?} after the promotion",
        promoted.elapsed()
    );
}

/// `REPLICAOF <host> <port>` on `c` (`"NO", "ONE"` makes it a master again); panics on error.
async fn replicaof(c: &mut redis::aio::MultiplexedConnection, host: &str, port: &str) {
    let _: () = redis::cmd("REPLICAOF")
        .arg(host)
        .arg(port)
        .query_async(c)
        .await
        .unwrap_or_else(|e| panic!("REPLICAOF {host} {port}: {e}"));
}

/// Waits up to 10 s until the server behind `c` is a replica with its master link up.
async fn wait_synced(c: &redis::aio::MultiplexedConnection) {
    let what = "the server to be a synced replica";
    wait_until(Duration::from_secs(10), what, || {
        let mut c = c.clone();
        async move {
            let info = info_replication(&mut c).await;
            info.contains("master_link_status:up")
        }
    })
    .await;
}
