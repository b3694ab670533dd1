//! Chaos (SPEC sections 5 and 7): kill -9 and restart each node in turn, and Redis once, under
//! steady HTTP traffic and hop-mode WebSockets; no idempotent request fails and every socket hops
//! live instead of breaking.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use integration_tests::check::{hops_total, Ws, HDR};
use integration_tests::{get, Config, Gateway, Health, Mock, Redis, Route};
use tokio::time::{timeout, Instant};
use tokio_tungstenite::tungstenite::Message;

/// HTTP task `t` of the chaos run: GETs `url` every 10 ms, every other one with a bound id of 12,
/// until `stop`; returns (requests, failures as "status body" or error text).
async fn get_loop(stop: Arc<AtomicBool>, url: String, t: usize) -> (u32, Vec<String>) {
    let (mut n, mut failed) = (0u32, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        let id = format!("c-chaos-{}", (n as usize * 4 + t) % 12);
        let headers: Vec<(&str, &str)> = if n % 2 == 0 {
            vec![(HDR, id.as_str())]
        } else {
            vec![]
        };
        match get(&url, &headers).await {
            Ok(r) if r.status == 200 => {}
            Ok(r) => failed.push(format!("{} {}", r.status, r.text())),
            Err(e) => failed.push(e.to_string()),
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (n, failed)
}

/// WebSocket `i` of the chaos run: sends `m-<i>-<n>` every 200 ms on `ws` and waits up to 3 s for
/// its echo, skipping the node's hellos, until `stop`. A missing echo is excused (and listed as
/// lost) when one of `kills` came within 3 s after the send; any other failure ends the loop.
/// Returns (messages sent, failures, hellos seen, lost messages).
async fn echo_loop(
    mut ws: Ws,
    i: usize,
    stop: Arc<AtomicBool>,
    kills: Arc<Mutex<Vec<Instant>>>,
) -> (u32, Vec<String>, u32, Vec<String>) {
    let (mut sent, mut failed, mut hellos, mut lost) = (0u32, Vec::new(), 0u32, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        sent += 1;
        let msg = format!("m-{i}-{sent}");
        let sent_at = Instant::now();
        if let Err(e) = ws.send(Message::text(msg.clone())).await {
            failed.push(format!("send {msg}: {e}"));
            break;
        }
        // Hellos from the node (first, and after each hop) are skipped.
        let echoed = timeout(Duration::from_secs(3), async {
            loop {
                match ws.next().await {
                    Some(Ok(Message::Text(t))) if t.as_str() == msg => return Ok(()),
                    Some(Ok(Message::Text(t))) if t.starts_with('{') => {
                        hellos += 1;
                        continue;
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    other => return Err(format!("{other:?}")),
                }
            }
        })
        .await;
        match echoed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                failed.push(format!("{msg}: {e}"));
                break;
            }
            Err(_) => {
                let killed_in_flight = kills
                    .lock()
                    .expect("kills")
                    .iter()
                    .any(|k| *k >= sent_at && *k <= sent_at + Duration::from_secs(3));
                if !killed_in_flight {
                    failed.push(format!("{msg}: no echo in 3 s"));
                    break;
                }
                lost.push(msg);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (sent, failed, hellos, lost)
}

/// Kill -9 and restart of each node and of Redis under mixed traffic: no GET fails, WebSockets lose
/// at most the message in flight at a kill and each hops live. One long scenario on purpose: the
/// traffic runs through every kill.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_kill_and_restart_each_node_and_redis() {
    let started = Instant::now();
    let mut redis = Redis::start().await;
    let mut mocks = [
        Mock::start("node-a").await,
        Mock::start("node-b").await,
        Mock::start("node-c").await,
    ];
    let toml = Config::single(
        Health::http_fast(),
        &mocks.iter().collect::<Vec<_>>(),
        Route::api().retries(2).line("websocket = \"hop\""),
    )
    .toml();
    let gw = Gateway::start_with(&toml, &["--redis-url", &redis.url()]).await;
    let stop = Arc::new(AtomicBool::new(false));

    // Steady HTTP traffic: GETs with and without bound ids.
    let mut http = tokio::task::JoinSet::new();
    for t in 0..4 {
        let (stop, url) = (stop.clone(), gw.url("/data"));
        http.spawn(get_loop(stop, url, t));
    }
    // Five WebSockets in hop mode, each echoing a message every 200 ms. A message the node took
    // just before it was killed dies with it (a hop re-sends only what the client sent after the
    // failure was seen, SPEC section 5): its loss is excused when a kill came within 3 s after
    // it was sent, and the socket goes on; any other missing echo breaks the socket.
    let kills = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let mut sockets = tokio::task::JoinSet::new();
    for i in 0..5 {
        let (stop, kills) = (stop.clone(), kills.clone());
        let url = format!("ws://127.0.0.1:{}/ws", gw.port);
        let mut req =
            tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)
                .expect("request");
        req.headers_mut()
            .insert(HDR, format!("ws-chaos-{i}").parse().expect("value"));
        let (ws, _) = timeout(
            Duration::from_secs(5),
            tokio_tungstenite::connect_async(req),
        )
        .await
        .expect("in time")
        .expect("101");
        sockets.spawn(echo_loop(ws, i, stop, kills));
    }

    for m in mocks.iter_mut() {
        let id = m.id.clone();
        m.kill().await;
        kills.lock().expect("kills").push(Instant::now());
        gw.wait_node_state(&id, "ejected", Duration::from_secs(5))
            .await;
        m.restart().await;
        gw.wait_node_state(&id, "healthy", Duration::from_secs(5))
            .await;
    }
    redis.kill().await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // traffic keeps flowing on the local cache
    redis.restart().await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);

    let (mut requests, mut failed) = (0, Vec::new());
    while let Some(r) = http.join_next().await {
        let (n, f) = r.expect("http task");
        requests += n;
        failed.extend(f);
    }
    let (mut messages, mut ws_failed, mut ws_hops, mut ws_lost) =
        (0, Vec::new(), Vec::new(), Vec::new());
    while let Some(r) = sockets.join_next().await {
        let (n, f, hellos, lost) = r.expect("ws task");
        messages += n;
        ws_failed.extend(f);
        // At most one message in flight per socket at each of the three node kills.
        assert!(lost.len() <= 3, "messages lost at kills: {lost:?}");
        ws_lost.extend(lost);
        // The node's hello comes first and again after each hop.
        ws_hops.push(hellos.saturating_sub(1));
    }
    let hops = hops_total(&gw).await;
    eprintln!("FIGURE chaos: {requests} GETs, {} failed; {messages} WebSocket echoes, {} failed, lost in flight at a kill {ws_lost:?}, hops per socket {ws_hops:?}; {hops} hops; {:?} total", failed.len(), ws_failed.len(), started.elapsed());
    assert!(failed.is_empty(), "idempotent requests failed: {failed:?}");
    assert!(ws_failed.is_empty(), "WebSockets broke: {ws_failed:?}");
    assert!(
        requests > 200 && messages > 50,
        "{requests} requests, {messages} messages"
    );
    // Each of the five sockets sat on a node that was killed at some point, so each hopped live.
    assert!(
        ws_hops.iter().all(|h| *h >= 1),
        "WebSocket hops per socket: {ws_hops:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(40));
}
