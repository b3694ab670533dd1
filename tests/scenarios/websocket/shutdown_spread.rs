//! Gateway shutdown with `[server] shutdown_spread` (SPEC section 5): every WebSocket gets the
//! `1012` reconnect hint at its own point of the period, never at once, the binding stays (no hop
//! is counted), `/readyz` answers 503 from the signal on, and the gateway exits cleanly.

use super::*;
use futures_util::stream;
use integration_tests::get;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Sockets open through the gateway when it is told to stop.
const SOCKETS: usize = 300;
/// The gateway's `shutdown_spread`; wide, so a loaded 2-core machine keeps the timing margins.
const SPREAD: Duration = Duration::from_secs(3);
/// How late after the spread a hint may arrive (scheduling on a loaded machine).
const LATE: Duration = Duration::from_millis(750);
/// No slice of this length may hold more than a third of the hints.
const SLICE: Duration = Duration::from_millis(300);

/// One socket's hint: when it arrived, its close code and reason.
struct Hint {
    at: Instant,
    code: u16,
    reason: String,
}

/// Opens socket `i` (conn id `spread-<i>`) through `gw` and reads its hello.
async fn open_socket(gw: &Gateway, i: usize) -> Ws {
    let id = format!("spread-{i}");
    let mut ws = connect(gw, "/ws", &[("X-Conn-Id", &id)]).await;
    hello(&mut ws, Duration::from_secs(10)).await;
    ws
}

/// Waits for `ws`'s Close, counts it in `closed`, completes the closing handshake (the client's
/// reply, then TCP closed by the gateway).
async fn hint_of(mut ws: Ws, closed: Arc<AtomicUsize>) -> Hint {
    let (code, reason) = close_of(&mut ws, SPREAD + LATE + Duration::from_secs(5)).await;
    let at = Instant::now();
    closed.fetch_add(1, Ordering::SeqCst);
    expect_end(&mut ws, Duration::from_secs(3)).await;
    Hint { at, code, reason }
}

/// The most hints whose arrivals (`offsets`, sorted) fall within one [`SLICE`] (any start).
fn busiest_slice(offsets: &[Duration]) -> usize {
    offsets
        .iter()
        .enumerate()
        .map(|(i, from)| {
            offsets[i..]
                .iter()
                .take_while(|t| **t - *from < SLICE)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Asserts `hint` is the SPEC section 5 reconnect hint: code 1012, reason exactly
/// `{"reconnect":true,"retry_ms":N}` with N from 100 to 1099 ms.
fn assert_reconnect_hint(hint: &Hint) {
    assert_eq!(hint.code, 1012, "{}", hint.reason);
    let v: Value = serde_json::from_str(&hint.reason).expect("the reason is JSON");
    let retry_ms = v["retry_ms"].as_u64().expect("retry_ms");
    assert!((100..1100).contains(&retry_ms), "{}", hint.reason);
    assert_eq!(
        hint.reason,
        format!("{{\"reconnect\":true,\"retry_ms\":{retry_ms}}}")
    );
}

/// `/readyz` on the admin port: 503 "shutting down".
async fn assert_not_ready(gw: &Gateway) {
    let r = get(&gw.admin("/readyz"), &[])
        .await
        .expect("readyz answers");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["status"], "shutting down");
}

/// SPEC section 5: with `shutdown_spread = "3s"`, SIGTERM gives each of 300 sockets (`hop` mode)
/// the 1012 reconnect hint between the signal and the end of the spread, no 300 ms slice holding
/// more than a third of them; `/readyz` is 503 while sockets remain; no hop is counted (the
/// binding stays for the client's reconnect through another replica); exit code 0.
#[tokio::test]
async fn ws_shutdown_spread_hints_300_sockets_over_the_period_and_readyz_is_503() {
    let a = Mock::start("node-a").await;
    let top = "[server]\nshutdown_timeout = \"5s\"\nshutdown_spread = \"3s\"\n";
    let mut gw = Gateway::start(&config("hop", &[&a], top)).await;
    let sockets: Vec<Ws> = stream::iter(0..SOCKETS)
        .map(|i| open_socket(&gw, i))
        .buffered(50)
        .collect()
        .await;
    wait_gauge(&gw, SOCKETS as f64).await;
    let closed = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = sockets
        .into_iter()
        .map(|ws| tokio::spawn(hint_of(ws, closed.clone())))
        .collect();

    let signalled = Instant::now();
    gw.signal("TERM");
    let ready_url = gw.admin("/readyz");
    wait_until(
        Duration::from_secs(2),
        "readyz 503 after SIGTERM",
        || async { get(&ready_url, &[]).await.is_ok_and(|r| r.status == 503) },
    )
    .await;
    assert!(closed.load(Ordering::SeqCst) < SOCKETS, "sockets remain");
    assert_not_ready(&gw).await;
    wait_until(SPREAD, "half of the hints", || async {
        closed.load(Ordering::SeqCst) >= SOCKETS / 2
    })
    .await;
    assert!(closed.load(Ordering::SeqCst) < SOCKETS, "sockets remain");
    assert_not_ready(&gw).await;
    assert_eq!(hops(&gw).await, 0.0, "a hint at shutdown moves no binding");

    let mut offsets = Vec::with_capacity(SOCKETS);
    for r in readers {
        let hint = r.await.expect("reader");
        assert_reconnect_hint(&hint);
        assert!(hint.at >= signalled, "a hint before the signal");
        offsets.push(hint.at - signalled);
    }
    offsets.sort();
    assert_eq!(offsets.len(), SOCKETS);
    let (first, last) = (offsets[0], offsets[SOCKETS - 1]);
    assert!(last <= SPREAD + LATE, "last hint {last:?} after the signal");
    assert!(
        first < SPREAD / 3 && last > SPREAD * 2 / 3,
        "spread over the period: first {first:?}, last {last:?}"
    );
    let busiest = busiest_slice(&offsets);
    eprintln!(
        "FIGURE shutdown_spread {SPREAD:?}: {SOCKETS} hints from {first:?} to {last:?} after SIGTERM, at most {busiest} in one {SLICE:?} slice"
    );
    assert!(
        busiest <= SOCKETS / 3,
        "{busiest} hints in one {SLICE:?} slice"
    );
    assert_eq!(gw.wait_exit(Duration::from_secs(5)).await, Some(0));
}
