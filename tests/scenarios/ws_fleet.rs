//! WebSocket fleets (issue 7, SPEC section 5): 200 clients on one node, each exchanging a numbered
//! message every few tens of milliseconds, through a `kill -9` of their node and through a drain.
//! `hop` mode must keep every client socket open, deliver every message in order, and show the new
//! node's hello (`hopped_from`, SPEC section 9) before its first echo; `hint` mode must close every
//! client with 1012 and the JSON hint, spread over the drain period, and a reconnect with the same
//! id must land on the healthy node. Hop latency figures are printed with `eprintln!` so a run can
//! record them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{stream, SinkExt, StreamExt};
use integration_tests::{cluster_toml, get, request, wait_until, Gateway, Mock, FAST_HEALTH};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{interval_at, timeout, Instant, MissedTickBehavior};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{connect_async, MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Clients per scenario (issue 7).
const CLIENTS: usize = 200;
/// Handshakes in flight while the fleet connects.
const CONNECT_CONCURRENCY: usize = 25;

/// One cluster `c` of node-1 and node-2 behind a catch-all route in WebSocket `mode`.
fn config(mode: &str, n1: &Mock, n2: &Mock) -> String {
    format!(
        "{FAST_HEALTH}\n{}\n[[routes]]\nid = \"ws\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\nwebsocket = \"{mode}\"\n",
        cluster_toml("c", &[("node-1", n1.addr()), ("node-2", n2.addr())], "")
    )
}

async fn admin_post(gw: &Gateway, path: &str) -> u16 {
    request("POST", &gw.admin(path), &[], Vec::new())
        .await
        .expect("admin call")
        .status
}

/// What a client saw, in arrival order.
#[derive(Debug, Clone)]
#[expect(
    dead_code,
    reason = "some fields are only read through Debug, in failure messages"
)]
enum Ev {
    /// A JSON hello from a node (the first message of every mock socket).
    Hello(Value, Instant),
    /// The echo of the client's message number `seq`.
    Echo(u64, Instant),
    /// A Close from the gateway: code and reason.
    Close(u16, String, Instant),
    /// Any other message (a failure in these scenarios).
    Other(String),
    /// The stream ended or failed, with the error if any.
    End(Option<String>, Instant),
}

/// One client's record: its events and the send time of each message (index = sequence number).
#[derive(Debug, Default)]
struct Log {
    events: Vec<Ev>,
    sent: Vec<Instant>,
}

impl Log {
    fn hellos(&self) -> Vec<&Value> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Ev::Hello(v, _) => Some(v),
                _ => None,
            })
            .collect()
    }

    fn hello_at(&self, n: usize) -> Option<Instant> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Ev::Hello(_, at) => Some(*at),
                _ => None,
            })
            .nth(n)
    }

    fn echoes(&self) -> impl Iterator<Item = (u64, Instant)> + '_ {
        self.events.iter().filter_map(|e| match e {
            Ev::Echo(s, at) => Some((*s, *at)),
            _ => None,
        })
    }

    /// Echoes that arrived after the `n`-th hello (0-based).
    fn echoes_after_hello(&self, n: usize) -> usize {
        let mut hellos = 0;
        let mut count = 0;
        for e in &self.events {
            match e {
                Ev::Hello(..) => hellos += 1,
                Ev::Echo(..) if hellos > n => count += 1,
                _ => {}
            }
        }
        count
    }

    fn close(&self) -> Option<(u16, String, Instant)> {
        self.events.iter().find_map(|e| match e {
            Ev::Close(c, r, at) => Some((*c, r.clone(), *at)),
            _ => None,
        })
    }

    fn ended(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e, Ev::Close(..) | Ev::End(..)))
    }
}

/// Phases of a running fleet, driven by the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Send a message every period.
    Send,
    /// Stop sending; keep reading.
    Quiet,
    /// Stop.
    Quit,
}

/// A fleet of clients, each in its own task.
struct Fleet {
    ids: Vec<String>,
    logs: Vec<Arc<Mutex<Log>>>,
    phase: watch::Sender<Phase>,
    tasks: Vec<JoinHandle<()>>,
}

/// Opens one socket with `X-Conn-Id: id` and reads its hello.
async fn open(gw: &Gateway, id: &str) -> (Ws, Value, Instant) {
    let mut req = format!("ws://127.0.0.1:{}/ws", gw.port)
        .into_client_request()
        .expect("request");
    req.headers_mut()
        .insert("x-conn-id", HeaderValue::from_str(id).expect("value"));
    let (mut ws, resp) = timeout(Duration::from_secs(10), connect_async(req))
        .await
        .unwrap_or_else(|_| panic!("{id}: handshake in time"))
        .unwrap_or_else(|e| panic!("{id}: upgrade accepted: {e}"));
    assert_eq!(resp.status(), 101);
    loop {
        let m = timeout(Duration::from_secs(10), ws.next())
            .await
            .unwrap_or_else(|_| panic!("{id}: hello in time"))
            .unwrap_or_else(|| panic!("{id}: socket open"))
            .unwrap_or_else(|e| panic!("{id}: no socket error: {e}"));
        if let Message::Text(t) = m {
            let v: Value = serde_json::from_str(&t).expect("hello is JSON");
            return (ws, v, Instant::now());
        }
    }
}

impl Fleet {
    /// Connects `CLIENTS` sockets with ids `<prefix>-<i>`, asserts each hello comes from `node`
    /// (not hopped), then starts every client sending a numbered message every `period`, the
    /// clients' first sends staggered over one period.
    async fn start(gw: &Gateway, prefix: &str, node: &str, period: Duration) -> Fleet {
        let ids: Vec<String> = (0..CLIENTS).map(|i| format!("{prefix}-{i}")).collect();
        let opened: Vec<(Ws, Value, Instant)> = stream::iter(ids.iter())
            .map(|id| open(gw, id))
            .buffered(CONNECT_CONCURRENCY)
            .collect()
            .await;
        let (phase, phase_rx) = watch::channel(Phase::Send);
        let mut logs = Vec::new();
        let mut tasks = Vec::new();
        let start = Instant::now();
        for (i, ((ws, hello, at), id)) in opened.into_iter().zip(&ids).enumerate() {
            assert_eq!(
                hello,
                json!({"node": node, "conn_id": id, "hopped_from": null}),
                "hello of {id}"
            );
            let log = Arc::new(Mutex::new(Log {
                events: vec![Ev::Hello(hello, at)],
                sent: Vec::new(),
            }));
            let first = start + period.mul_f64(i as f64 / CLIENTS as f64);
            tasks.push(tokio::spawn(client(
                ws,
                log.clone(),
                phase_rx.clone(),
                first,
                period,
            )));
            logs.push(log);
        }
        Fleet {
            ids,
            logs,
            phase,
            tasks,
        }
    }

    /// Waits until `f` holds for every client's log; panics at the deadline naming a laggard.
    async fn wait_all(&self, t: Duration, what: &str, f: impl Fn(&Log) -> bool) {
        let deadline = Instant::now() + t;
        loop {
            let lagging = self.logs.iter().position(|l| !f(&l.lock().expect("log")));
            let Some(i) = lagging else { return };
            assert!(
                Instant::now() < deadline,
                "timed out after {t:?} waiting for every client: {what}; {} is behind: {:?}",
                self.ids[i],
                self.logs[i]
                    .lock()
                    .expect("log")
                    .events
                    .iter()
                    .rev()
                    .take(5)
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops sending, waits until every client's last message is echoed (unless its socket
    /// ended), then stops the clients and returns their logs.
    async fn finish(self) -> Vec<(String, Log)> {
        for l in &self.logs {
            // Under each client's lock: once released, that client sends nothing more.
            let _held = l.lock().expect("log");
            self.phase.send_replace(Phase::Quiet);
        }
        self.wait_all(Duration::from_secs(10), "the last message echoed", |l| {
            l.ended()
                || l.sent.is_empty()
                || l.echoes().last().map(|(s, _)| s) == Some(l.sent.len() as u64 - 1)
        })
        .await;
        self.phase.send_replace(Phase::Quit);
        for t in self.tasks {
            t.await.expect("client task");
        }
        self.ids
            .into_iter()
            .zip(self.logs)
            .map(|(id, l)| (id, std::mem::take(&mut *l.lock().expect("log"))))
            .collect()
    }
}

/// One client: sends `m<seq>` every `period` from `first` while the phase is `Send`, records
/// every message it receives, stops at `Quit` or when the socket ends.
async fn client(
    mut ws: Ws,
    log: Arc<Mutex<Log>>,
    mut phase: watch::Receiver<Phase>,
    first: Instant,
    period: Duration,
) {
    let mut tick = interval_at(first, period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut closed = false;
    loop {
        let sending = *phase.borrow() == Phase::Send && !closed;
        tokio::select! {
            m = ws.next() => {
                let now = Instant::now();
                let ev = match m {
                    None => Ev::End(None, now),
                    Some(Err(e)) => Ev::End(Some(e.to_string()), now),
                    Some(Ok(Message::Text(t))) => {
                        if let Some(seq) = t.strip_prefix('m').and_then(|s| s.parse().ok()) {
                            Ev::Echo(seq, now)
                        } else if let Ok(v) = serde_json::from_str::<Value>(&t) {
                            Ev::Hello(v, now)
                        } else {
                            Ev::Other(t.to_string())
                        }
                    }
                    Some(Ok(Message::Close(c))) => {
                        closed = true;
                        let (code, reason) = c.map_or((1005, String::new()), |c| (u16::from(c.code), c.reason.to_string()));
                        Ev::Close(code, reason, now)
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(other)) => Ev::Other(format!("{other:?}")),
                };
                let end = matches!(ev, Ev::End(..));
                log.lock().expect("log").events.push(ev);
                if end {
                    return;
                }
            }
            _ = tick.tick(), if sending => {
                let seq = {
                    // Checked under the lock `finish` reads: no message starts after `Quiet`.
                    let mut l = log.lock().expect("log");
                    if *phase.borrow() != Phase::Send {
                        continue;
                    }
                    l.sent.push(Instant::now());
                    l.sent.len() - 1
                };
                if let Err(e) = ws.send(Message::text(format!("m{seq}"))).await {
                    log.lock().expect("log").events.push(Ev::End(Some(format!("send: {e}")), Instant::now()));
                    return;
                }
            }
            r = phase.changed() => {
                if r.is_err() || *phase.borrow() == Phase::Quit {
                    let _ = timeout(Duration::from_secs(1), ws.close(None)).await;
                    return;
                }
            }
        }
    }
}

/// Every event but the echoes, for failure messages.
fn not_echoes(log: &Log) -> Vec<&Ev> {
    log.events
        .iter()
        .filter(|e| !matches!(e, Ev::Echo(..)))
        .collect()
}

/// Echoes strictly increasing (no message reordered or duplicated); returns the sequence numbers
/// sent but never echoed.
fn missing(id: &str, log: &Log) -> Vec<u64> {
    let mut last: Option<u64> = None;
    for (s, _) in log.echoes() {
        assert!(
            last.is_none_or(|l| s > l),
            "{id}: echo m{s} after m{last:?}: reordered or duplicated"
        );
        last = Some(s);
    }
    let echoed: std::collections::HashSet<u64> = log.echoes().map(|(s, _)| s).collect();
    (0..log.sent.len() as u64)
        .filter(|s| !echoed.contains(s))
        .collect()
}

/// The `p` quantile (0..=1) of `v` (sorted here), nearest rank.
fn quantile(v: &mut [Duration], p: f64) -> Duration {
    v.sort_unstable();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// Sum of `hopping_count_total` over every reason, and the series as text.
async fn hop_counts(gw: &Gateway) -> (f64, String) {
    let text = get(&gw.admin("/metrics"), &[])
        .await
        .expect("metrics")
        .text();
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("hopping_count_total{"))
        .collect();
    let sum = series
        .iter()
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .sum();
    (sum, series.join("; "))
}

/// `hopping_latency_seconds` bucket counts (`le` → cumulative count) from the metrics text.
async fn hop_latency_buckets(gw: &Gateway) -> Vec<(f64, f64)> {
    let text = get(&gw.admin("/metrics"), &[])
        .await
        .expect("metrics")
        .text();
    text.lines()
        .filter_map(|l| l.strip_prefix("hopping_latency_seconds_bucket{le=\""))
        .filter_map(|rest| {
            let (le, rest) = rest.split_once("\"}")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, rest.trim().parse().ok()?))
        })
        .collect()
}

/// The upper bound of the histogram bucket holding the `p` quantile of the observations made
/// between `before` and `after` (cumulative bucket counts from [`hop_latency_buckets`]).
fn bucket_quantile(before: &[(f64, f64)], after: &[(f64, f64)], p: f64) -> f64 {
    let delta: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, n)| {
            let b = before
                .iter()
                .find(|(l, _)| l == le)
                .map_or(0.0, |(_, n)| *n);
            (*le, n - b)
        })
        .collect();
    let total = delta.last().map_or(0.0, |(_, n)| *n);
    let rank = (total * p).ceil();
    delta
        .iter()
        .find(|(_, n)| *n >= rank)
        .map_or(f64::INFINITY, |(le, _)| *le)
}

/// Starts node-1, node-2 and a gateway in `mode`, and connects the fleet with every socket on
/// node-1 (node-2 drained while the fleet connects, then undrained).
async fn fleet_on_node_1(
    mode: &str,
    prefix: &str,
    period: Duration,
) -> (Mock, Mock, Gateway, Fleet) {
    let n1 = Mock::start("node-1").await;
    let n2 = Mock::start("node-2").await;
    let gw = Gateway::start(&config(mode, &n1, &n2)).await;
    assert_eq!(
        admin_post(&gw, "/admin/nodes/node-2/drain?period=1s").await,
        202
    );
    let fleet = Fleet::start(&gw, prefix, "node-1", period).await;
    assert_eq!(admin_post(&gw, "/admin/nodes/node-2/undrain").await, 200);
    gw.wait_node_state("node-2", "healthy", Duration::from_secs(5))
        .await;
    assert_eq!(gw.node("node-1").await["inflight"], CLIENTS);
    (n1, n2, gw, fleet)
}

#[tokio::test]
async fn ws_fleet_of_200_hops_off_a_killed_node_without_losing_a_message() {
    let (mut n1, _n2, gw, fleet) =
        fleet_on_node_1("hop", "kill-hop", Duration::from_millis(50)).await;
    fleet
        .wait_all(Duration::from_secs(10), "5 echoes from node-1", |l| {
            l.echoes().count() >= 5
        })
        .await;
    let (hops_before, _) = hop_counts(&gw).await;
    let buckets_before = hop_latency_buckets(&gw).await;
    let count_before = gw.metric("hopping_latency_seconds_count").await;
    let sum_before = gw.metric("hopping_latency_seconds_sum").await;

    n1.kill().await;
    // The process is reaped: its sockets are closed. A message sent from now on must not be lost.
    let killed = Instant::now();
    fleet
        .wait_all(
            Duration::from_secs(15),
            "node-2's hello and 5 echoes after it",
            |l| {
                assert!(!l.ended(), "a client socket ended: {:?}", not_echoes(l));
                l.echoes_after_hello(1) >= 5
            },
        )
        .await;
    let logs = fleet.finish().await;

    let mut lost = 0;
    let mut client_latency = Vec::new();
    for (id, log) in &logs {
        assert!(
            !log.ended(),
            "{id}: the client socket must stay open: {:?}; gateway log: {:#?}; node states: {:#?}; re-dial failures: {:#?}",
            not_echoes(log),
            gw.logs.matching(&[id.as_str()]),
            gw.logs.matching(&["node state changed"]),
            gw.logs.matching(&["re-dial failed"]).iter().take(5).collect::<Vec<_>>()
        );
        assert!(
            !log.events.iter().any(|e| matches!(e, Ev::Other(_))),
            "{id}: unexpected message in {:?}",
            log.events
        );
        assert_eq!(
            log.hellos(),
            [
                &json!({"node": "node-1", "conn_id": id, "hopped_from": null}),
                &json!({"node": "node-2", "conn_id": id, "hopped_from": "node-1"}),
            ],
            "{id}; gateway log: {:#?}; node states: {:#?}",
            gw.logs.matching(&[id.as_str()]),
            gw.logs.matching(&["node state changed"]),
        );
        // Every echo after node-2's hello came from node-2; none from node-1 arrived after it.
        let hello2 = log.hello_at(1).expect("second hello");
        client_latency.push(hello2.saturating_duration_since(killed));
        for s in missing(id, log) {
            let sent = log.sent[s as usize];
            assert!(
                sent < killed,
                "{id}: m{s} was sent {:?} after node-1 was dead and never echoed",
                sent - killed
            );
            lost += 1;
        }
    }
    // Each socket hops once: "node_lost" when its own leg failed first, "ejected" when the node's
    // ejection (passive errors of the other sockets) reached it first.
    let (hops_after, breakdown) = hop_counts(&gw).await;
    assert_eq!(hops_after - hops_before, CLIENTS as f64, "{breakdown}");
    let buckets_after = hop_latency_buckets(&gw).await;
    let count = gw.metric("hopping_latency_seconds_count").await - count_before;
    assert_eq!(count, CLIENTS as f64, "one hop latency per socket");
    let mean_ms = (gw.metric("hopping_latency_seconds_sum").await - sum_before) / count * 1000.0;
    let gw_p99 = bucket_quantile(&buckets_before, &buckets_after, 0.99);
    let p50 = quantile(&mut client_latency, 0.50);
    let p99 = quantile(&mut client_latency, 0.99);
    let max = quantile(&mut client_latency, 1.0);
    eprintln!(
        "ws fleet kill hop: {CLIENTS} sockets; hopping_latency_seconds mean {mean_ms:.1} ms, p99 <= {:.0} ms (bucket bound); \
         client-observed (node-1 reaped -> node-2 hello) p50 {p50:?} p99 {p99:?} max {max:?}; \
         {lost} messages in flight to node-1 at the kill not echoed",
        gw_p99 * 1000.0
    );
    assert!(
        p99 < Duration::from_secs(4),
        "p99 hop latency {p99:?} (limit 4 s on a loaded machine)"
    );
}

#[tokio::test]
async fn ws_fleet_of_200_gets_1012_hints_on_a_kill_and_reconnects_land_on_node_2() {
    let (mut n1, _n2, gw, fleet) =
        fleet_on_node_1("hint", "kill-hint", Duration::from_millis(50)).await;
    fleet
        .wait_all(Duration::from_secs(10), "5 echoes from node-1", |l| {
            l.echoes().count() >= 5
        })
        .await;
    n1.kill().await;
    fleet
        .wait_all(Duration::from_secs(10), "a Close", |l| l.ended())
        .await;
    let logs = fleet.finish().await;
    let mut retry = Vec::new();
    for (id, log) in &logs {
        missing(id, log);
        let (code, reason, _) = log
            .close()
            .unwrap_or_else(|| panic!("{id}: the socket ended without a Close: {:?}", log.events));
        assert_eq!(code, 1012, "{id}: {reason}");
        let hint: Value = serde_json::from_str(&reason)
            .unwrap_or_else(|e| panic!("{id}: the reason is JSON ({e}): {reason}"));
        let obj = hint.as_object().expect("a JSON object");
        assert_eq!(
            obj.len(),
            2,
            "{id}: exactly reconnect and retry_ms: {reason}"
        );
        assert_eq!(hint["reconnect"], true, "{id}: {reason}");
        let ms = hint["retry_ms"]
            .as_u64()
            .unwrap_or_else(|| panic!("{id}: retry_ms is a non-negative integer: {reason}"));
        assert!(ms <= 60_000, "{id}: retry_ms {ms}");
        assert_eq!(log.hellos().len(), 1, "{id}: no hop in hint mode");
        retry.push((id.clone(), ms));
    }
    // Every client comes back after its retry_ms with the same id and lands on node-2.
    let t0 = Instant::now();
    let back: Vec<(String, Value)> = stream::iter(retry)
        .map(|(id, ms)| {
            let gw = &gw;
            async move {
                tokio::time::sleep_until(t0 + Duration::from_millis(ms)).await;
                let (mut ws, hello, _) = open(gw, &id).await;
                let _ = ws.close(None).await;
                (id, hello)
            }
        })
        .buffer_unordered(CONNECT_CONCURRENCY)
        .collect()
        .await;
    for (id, hello) in back {
        assert_eq!(
            hello,
            json!({"node": "node-2", "conn_id": id, "hopped_from": null}),
            "reconnect of {id}"
        );
    }
    assert_eq!(
        gw.admin_json("/admin/conns/kill-hint-7").await["node"],
        "node-2"
    );
}

/// Drain period of the drain scenarios.
const DRAIN: Duration = Duration::from_secs(5);

/// Most events in any window `[t, t + w)` among `times`.
fn densest(times: &[Duration], w: Duration) -> usize {
    let mut t = times.to_vec();
    t.sort_unstable();
    (0..t.len())
        .map(|i| t[i..].iter().take_while(|x| **x < t[i] + w).count())
        .max()
        .unwrap_or(0)
}

#[tokio::test]
async fn ws_fleet_of_200_hint_mode_drain_spreads_hints_over_the_period() {
    let (_n1, _n2, gw, fleet) =
        fleet_on_node_1("hint", "drain-hint", Duration::from_millis(200)).await;
    let t0 = Instant::now();
    assert_eq!(
        admin_post(
            &gw,
            &format!("/admin/nodes/node-1/drain?period={}ms", DRAIN.as_millis())
        )
        .await,
        202
    );
    fleet
        .wait_all(DRAIN + Duration::from_secs(5), "a Close", |l| l.ended())
        .await;
    let logs = fleet.finish().await;
    let mut at = Vec::new();
    for (id, log) in &logs {
        missing(id, log);
        let (code, reason, when) = log
            .close()
            .unwrap_or_else(|| panic!("{id}: ended without a Close: {:?}", log.events));
        assert_eq!(code, 1012, "{id}: {reason}");
        let hint: Value = serde_json::from_str(&reason).expect("JSON reason");
        assert_eq!(hint["reconnect"], true);
        assert!(hint["retry_ms"].is_u64(), "{reason}");
        at.push(when - t0);
    }
    let first = *at.iter().min().expect("closes");
    let last = *at.iter().max().expect("closes");
    let densest_second = densest(&at, Duration::from_secs(1));
    eprintln!(
        "ws fleet drain hints: {CLIENTS} closes from {first:?} to {last:?} after the drain call (period {DRAIN:?}); \
         busiest 1 s window holds {densest_second}"
    );
    assert!(
        last < DRAIN + Duration::from_millis(1500),
        "hints must come within the period: last after {last:?}"
    );
    assert!(
        last - first >= DRAIN / 2,
        "hints must span at least half the period: {first:?}..{last:?}"
    );
    assert!(
        densest_second * 10 <= CLIENTS * 4,
        "{densest_second} of {CLIENTS} hints in one second: a burst, not a spread"
    );
    // Reconnects with the same ids land on node-2.
    for i in [0, 99, 199] {
        let id = format!("drain-hint-{i}");
        let (mut ws, hello, _) = open(&gw, &id).await;
        assert_eq!(
            hello,
            json!({"node": "node-2", "conn_id": id, "hopped_from": null})
        );
        let _ = ws.close(None).await;
    }
}

#[tokio::test]
async fn ws_fleet_of_200_hop_mode_drain_moves_every_socket_with_no_close_and_no_loss() {
    let (_n1, _n2, gw, fleet) =
        fleet_on_node_1("hop", "drain-hop", Duration::from_millis(100)).await;
    fleet
        .wait_all(Duration::from_secs(10), "3 echoes from node-1", |l| {
            l.echoes().count() >= 3
        })
        .await;
    let hops_before = gw.metric("hopping_count_total{reason=\"draining\"}").await;
    let t0 = Instant::now();
    assert_eq!(
        admin_post(
            &gw,
            &format!("/admin/nodes/node-1/drain?period={}ms", DRAIN.as_millis())
        )
        .await,
        202
    );
    fleet
        .wait_all(
            DRAIN + Duration::from_secs(5),
            "node-2's hello and 3 echoes after it",
            |l| {
                assert!(!l.ended(), "a client socket ended: {:?}", not_echoes(l));
                l.echoes_after_hello(1) >= 3
            },
        )
        .await;
    let logs = fleet.finish().await;
    let mut at = Vec::new();
    for (id, log) in &logs {
        assert!(
            !log.ended(),
            "{id}: a client-visible close: {:?}",
            log.events
        );
        assert_eq!(
            log.hellos(),
            [
                &json!({"node": "node-1", "conn_id": id, "hopped_from": null}),
                &json!({"node": "node-2", "conn_id": id, "hopped_from": "node-1"}),
            ],
            "{id}"
        );
        // A drain is graceful: node-1 answers everything it got before the socket moves.
        let lost = missing(id, log);
        if let Some(&s) = lost.first() {
            let hello2 = log.hello_at(1).expect("second hello");
            let sent = log.sent[s as usize];
            panic!(
                "{id}: messages {lost:?} lost in the drain; m{s} sent {:?} {} node-2's hello; events: {:?}",
                if sent < hello2 { hello2 - sent } else { sent - hello2 },
                if sent < hello2 { "before" } else { "after" },
                log.events.iter().map(|e| match e {
                    Ev::Hello(v, _) => format!("hello {}", v["node"]),
                    Ev::Echo(s, _) => format!("m{s}"),
                    other => format!("{other:?}"),
                }).collect::<Vec<_>>()
            );
        }
        at.push(log.hello_at(1).expect("second hello") - t0);
    }
    let first = *at.iter().min().expect("hops");
    let last = *at.iter().max().expect("hops");
    eprintln!(
        "ws fleet drain hops: {CLIENTS} sockets moved from {first:?} to {last:?} after the drain call (period {DRAIN:?}); \
         busiest 1 s window holds {}",
        densest(&at, Duration::from_secs(1))
    );
    assert!(
        last < DRAIN + Duration::from_millis(1500),
        "last hop after {last:?}"
    );
    assert!(
        last - first >= DRAIN / 2,
        "hops must be spread: {first:?}..{last:?}"
    );
    assert_eq!(
        gw.metric("hopping_count_total{reason=\"draining\"}").await - hops_before,
        CLIENTS as f64
    );
    wait_until(Duration::from_secs(3), "nothing left on node-1", || async {
        gw.node("node-1").await["inflight"] == 0
    })
    .await;
    assert_eq!(gw.node("node-1").await["state"], "draining");
}
