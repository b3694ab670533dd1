//! WebSocket fleets (SPEC section 5): 200 clients on one node, each exchanging a numbered
//! message every few tens of milliseconds, through a `kill -9` of their node and through a drain.
//! `hop` mode must keep every client socket open, deliver every message in order, and show the new
//! node's hello (`hopped_from`, SPEC section 9) before its first echo; `hint` mode must close every
//! client with 1012 and the JSON hint, spread over the drain period, and a reconnect with the same
//! id must land on the healthy node. Hop latency figures are printed with `eprintln!` so a run can
//! record them.

mod drain;
mod kill;
mod storm;

use futures_util::{stream, SinkExt, StreamExt};
use integration_tests::check::Ws;
use integration_tests::ws::{conn_id_request, next_by};
use integration_tests::{wait_until, Gateway, Mock};
use integration_tests::{Config, Health, Route};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{interval_at, timeout, Instant, MissedTickBehavior};
use tokio_tungstenite::connect_async;
use tokio_tungstenite::tungstenite::Message;

/// Clients per scenario.
const CLIENTS: usize = 200;

/// Handshakes in flight while the fleet connects.
const CONNECT_CONCURRENCY: usize = 25;

/// One cluster `c` of node-1 and node-2 behind a catch-all route in WebSocket `mode`.
fn config(mode: &str, n1: &Mock, n2: &Mock) -> String {
    Config::new()
        .health(Health::http_fast())
        .cluster_addrs("c", &[("node-1", n1.addr()), ("node-2", n2.addr())])
        .route(Route::prefix("ws", "/", "c").line(&format!("websocket = \"{mode}\"")))
        .toml()
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
    let req = conn_id_request(gw.port, id);
    let (mut ws, resp) = timeout(Duration::from_secs(10), connect_async(req))
        .await
        .unwrap_or_else(|_| panic!("{id}: handshake in time"))
        .unwrap_or_else(|e| panic!("{id}: upgrade accepted: {e}"));
    assert_eq!(resp.status(), 101);
    loop {
        let deadline = Instant::now() + Duration::from_secs(10);
        if let Message::Text(t) = next_by(&mut ws, deadline, &format!("{id}: hello")).await {
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

/// The two hellos of client `id` hopped once from node-1 to node-2.
fn hopped_once(id: &str) -> [Value; 2] {
    [
        json!({"node": "node-1", "conn_id": id, "hopped_from": null}),
        json!({"node": "node-2", "conn_id": id, "hopped_from": "node-1"}),
    ]
}

/// `id`'s socket ended in a 1012 Close whose reason is JSON, its echoes in order ([`missing`]):
/// (the parsed hint, the reason text, when the Close came). Panics otherwise.
fn hint_close(id: &str, log: &Log) -> (Value, String, Instant) {
    missing(id, log);
    let (code, reason, when) = log
        .close()
        .unwrap_or_else(|| panic!("{id}: the socket ended without a Close: {:?}", log.events));
    assert_eq!(code, 1012, "{id}: {reason}");
    let hint: Value = serde_json::from_str(&reason)
        .unwrap_or_else(|e| panic!("{id}: the reason is JSON ({e}): {reason}"));
    (hint, reason, when)
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
        gw.admin_post("/admin/nodes/node-2/drain?period=1s")
            .await
            .status,
        202
    );
    let fleet = Fleet::start(&gw, prefix, "node-1", period).await;
    assert_eq!(
        gw.admin_post("/admin/nodes/node-2/undrain").await.status,
        200
    );
    gw.wait_node_state("node-2", "healthy", Duration::from_secs(5))
        .await;
    assert_eq!(gw.node("node-1").await["inflight"], CLIENTS);
    (n1, n2, gw, fleet)
}
