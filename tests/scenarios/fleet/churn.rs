//! The fleet under churn: rolling restarts, a Redis master kill and a replica restart with zero loss.

use super::*;

/// Fleet test: 3 replicas, 4 nodes, Redis; 1,000 hop-mode WebSockets and 1,000 HTTP ids
/// through a rolling restart of every node, kill -9 of a Redis master and a gateway replica restart: zero
/// failed requests, zero closed sockets, zero lost or reordered messages, one agreed node per id.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fleet_survives_rolling_restarts_redis_master_kill_and_replica_restart() {
    let started = Instant::now();
    let mut redis = RedisCluster::start().await;
    let mut mocks = Vec::new();
    for id in NODES {
        mocks.push(Mock::start(id).await);
    }
    let toml = config(&redis, &mocks);
    let mut gws = Vec::new();
    for _ in 0..3 {
        gws.push(Gateway::start(&toml).await);
    }
    let ports: Arc<Vec<u16>> = Arc::new(gws.iter().map(|g| g.port).collect());

    // HTTP: workers cycle over the ids, each id homed on replica (i % 3).
    let stats = Arc::new(HttpStats::default());
    let (stop_http, stop_rx) = watch::channel(false);
    let mut http_tasks: Vec<JoinHandle<()>> = Vec::new();
    for w in 0..HTTP_WORKERS {
        let (ports, stats, stop) = (ports.clone(), stats.clone(), stop_rx.clone());
        http_tasks.push(tokio::spawn(async move {
            let mut i = w;
            while !*stop.borrow() {
                let id = format!("http-{}", i % IDS);
                http_once(&ports, i % 3, &id, &stats).await;
                i += HTTP_WORKERS;
            }
        }));
    }

    // WebSockets on replicas 0 and 1.
    let opened: Vec<(Ws, String)> = stream::iter(0..SOCKETS)
        .map(|i| {
            let port = ports[i % 2];
            async move { open(port, &format!("ws-{i}")).await }
        })
        .buffered(CONNECT_CONCURRENCY)
        .collect()
        .await;
    let connected = started.elapsed();
    let (sending, sending_rx) = watch::channel(true);
    let t0 = Instant::now();
    let mut logs = Vec::new();
    let mut ws_tasks = Vec::new();
    for (i, (ws, node)) in opened.into_iter().enumerate() {
        let log = Arc::new(Mutex::new(WsLog {
            node,
            hellos: 1,
            ..WsLog::default()
        }));
        let first = t0 + MESSAGE_PERIOD.mul_f64(i as f64 / SOCKETS as f64);
        let client = ws_client(ws, log.clone(), sending_rx.clone(), first);
        ws_tasks.push(tokio::spawn(client));
        logs.push(log);
    }
    let on = |node: &str| {
        logs.iter()
            .filter(|l| l.lock().expect("lock").node == node)
            .count()
    };
    let spread: Vec<usize> = NODES.iter().map(|n| on(n)).collect();
    assert!(
        spread.iter().all(|n| *n > 150),
        "sockets spread over the nodes: {spread:?}"
    );
    wait_until(Duration::from_secs(30), "every HTTP id served once", || {
        let stats = stats.clone();
        async move { stats.last_node.lock().expect("lock").len() == IDS }
    })
    .await;

    // 1. Rolling restart: drain on replica k % 3, kill, restart, undrain on the next replica.
    for (k, node) in NODES.iter().enumerate() {
        let status = post(
            &gws[k % 3],
            &format!("/admin/nodes/{node}/drain?period={DRAIN}"),
        )
        .await;
        assert_eq!(status, 202, "drain {node}");
        wait_all(&gws, node, "draining", Duration::from_secs(5)).await;
        wait_until(
            Duration::from_secs(20),
            &format!("every socket off {node}"),
            || {
                let left = on(node);
                async move { left == 0 }
            },
        )
        .await;
        // In-flight HTTP on the node finished long ago (drain: no new requests since the call).
        mocks[k].restart().await;
        let status = post(&gws[(k + 1) % 3], &format!("/admin/nodes/{node}/undrain")).await;
        assert_eq!(status, 200, "undrain {node}");
        wait_all(&gws, node, "healthy", Duration::from_secs(10)).await;
    }
    let after_nodes = started.elapsed();

    // 2. kill -9 of one Redis master: its replica takes its slots over; bindings it had not
    // replicated are written again by the replicas (they serve from their caches meanwhile).
    let master = redis.masters().await[0];
    redis.kill(master).await;
    let mut rc = redis.client().await;
    let served_before = stats.ok.load(Ordering::Relaxed);
    let all_bound = "every HTTP id bound in Redis after the failover";
    wait_until(Duration::from_secs(30), all_bound, || {
        let mut rc = rc.clone();
        async move {
            for i in 0..IDS {
                let got: Result<Option<String>, _> = redis::cmd("GET")
                    .arg(format!("hopgw:conn:http-{i}"))
                    .query_async(&mut rc)
                    .await;
                if !matches!(got, Ok(Some(_))) {
                    return false;
                }
            }
            true
        }
    })
    .await;
    assert!(
        stats.ok.load(Ordering::Relaxed) > served_before,
        "traffic flowed meanwhile"
    );

    // 3. Replica 2 restarts gracefully (SIGTERM, then start on the same ports).
    gws[2].signal("TERM");
    assert_eq!(
        gws[2].wait_exit(Duration::from_secs(30)).await,
        Some(0),
        "clean exit"
    );
    gws[2].restart().await;
    let restarted = stats.ok.load(Ordering::Relaxed);
    wait_until(
        Duration::from_secs(10),
        "traffic after the replica restart",
        || {
            let stats = stats.clone();
            async move { stats.ok.load(Ordering::Relaxed) > restarted + 2 * IDS as u64 }
        },
    )
    .await;

    // Quiesce: stop HTTP, stop sending, wait for every echo.
    stop_http.send_replace(true);
    for t in http_tasks {
        t.await.expect("http worker");
    }
    sending.send_replace(false);
    wait_until(Duration::from_secs(20), "every echo", || {
        let pending = logs
            .iter()
            .filter(|l| {
                let l = l.lock().expect("lock");
                l.errors.is_empty() && l.echoed < l.sent
            })
            .count();
        async move { pending == 0 }
    })
    .await;

    // Assertions.
    let failed = stats.failed.load(Ordering::Relaxed);
    assert_eq!(
        failed,
        0,
        "failed HTTP requests; first: {:?}",
        stats.first_failure.lock().expect("lock")
    );
    let mut errors = Vec::new();
    let (mut sent, mut hops) = (0, 0);
    for (i, l) in logs.iter().enumerate() {
        let l = l.lock().expect("lock");
        if !l.errors.is_empty() || l.echoed != l.sent {
            errors.push(format!(
                "ws-{i}: sent {} echoed {} errors {:?}",
                l.sent, l.echoed, l.errors
            ));
        }
        sent += l.sent;
        hops += l.hellos - 1;
    }
    assert!(
        errors.is_empty(),
        "{} sockets failed: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    let last = stats.last_node.lock().expect("lock").clone();
    let mut disagree = Vec::new();
    for i in 0..IDS {
        let id = format!("http-{i}");
        let in_redis: Option<String> = redis::cmd("GET")
            .arg(format!("hopgw:conn:{id}"))
            .query_async(&mut rc)
            .await
            .expect("GET");
        let mut views = vec![in_redis.clone()];
        for gw in &gws {
            let r = get(&gw.admin(&format!("/admin/conns/{id}")), &[])
                .await
                .expect("admin");
            views.push(
                (r.status == 200)
                    .then(|| r.json()["node"].as_str().unwrap_or_default().to_string()),
            );
        }
        if in_redis.is_none()
            || views.iter().any(|v| *v != in_redis)
            || last.get(&id) != in_redis.as_ref()
        {
            let served = last.get(&id).cloned();
            disagree.push((id, views, served));
        }
    }
    assert!(
        disagree.is_empty(),
        "{} ids disagree: {:?}",
        disagree.len(),
        &disagree[..disagree.len().min(5)]
    );
    sending.send_replace(false);
    drop(sending);
    for t in ws_tasks {
        let _ = timeout(Duration::from_secs(5), t).await;
    }
    eprintln!(
        "fleet: {SOCKETS} sockets connected by {connected:?}; {sent} messages, {hops} socket hops, 0 lost; \
         {} HTTP requests ok, 0 failed, {} replica failovers; nodes rolled by {after_nodes:?}; total {:?}",
        stats.ok.load(Ordering::Relaxed),
        stats.failovers.load(Ordering::Relaxed),
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "runtime {:?}",
        started.elapsed()
    );
}
