//! WebSocket fleets through a drain of their node: hints spread over the period in hint mode, every
//! socket moved with no loss in hop mode.

use super::*;

/// Drain period of the drain scenarios.
const DRAIN: Duration = Duration::from_secs(5);

/// Drains node-1 for [`DRAIN`]; returns the admin call's status.
async fn drain_node_1(gw: &Gateway) -> u16 {
    gw.admin_post(&format!(
        "/admin/nodes/node-1/drain?period={}ms",
        DRAIN.as_millis()
    ))
    .await
    .status
}

/// Most events in any window `[t, t + w)` among `times`.
fn densest(times: &[Duration], w: Duration) -> usize {
    let mut t = times.to_vec();
    t.sort_unstable();
    (0..t.len())
        .map(|i| t[i..].iter().take_while(|x| **x < t[i] + w).count())
        .max()
        .unwrap_or(0)
}

/// Waits up to `t` until every client of `fleet` has node-2's hello (its second) and `echoes`
/// echoes after it; panics as soon as any client socket ends.
pub(super) async fn moved_to_node_2(fleet: &Fleet, t: Duration, echoes: usize) {
    let what = format!("node-2's hello and {echoes} echoes after it");
    fleet
        .wait_all(t, &what, |l| {
            assert!(!l.ended(), "a client socket ended: {:?}", not_echoes(l));
            l.echoes_after_hello(1) >= echoes
        })
        .await;
}

/// The first and last of the `what` (hints, hops), after the drain call, fall within the drain
/// period (plus 1.5 s) and span at least half of it.
fn within_period_and_spread(what: &str, first: Duration, last: Duration) {
    assert!(
        last < DRAIN + Duration::from_millis(1500),
        "{what} must come within the period: last after {last:?}"
    );
    assert!(
        last - first >= DRAIN / 2,
        "{what} must span at least half the period: {first:?}..{last:?}"
    );
}

/// 200 hint-mode clients on a draining node get their hints spread over the drain period.
#[tokio::test]
async fn ws_fleet_of_200_hint_mode_drain_spreads_hints_over_the_period() {
    let (_n1, _n2, gw, fleet) =
        fleet_on_node_1("hint", "drain-hint", Duration::from_millis(200)).await;
    let t0 = Instant::now();
    assert_eq!(drain_node_1(&gw).await, 202);
    fleet
        .wait_all(DRAIN + Duration::from_secs(5), "a Close", |l| l.ended())
        .await;
    let logs = fleet.finish().await;
    let mut at = Vec::new();
    for (id, log) in &logs {
        let (hint, reason, when) = hint_close(id, log);
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
    within_period_and_spread("hints", first, last);
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

/// 200 hop-mode clients on a draining node all move to node-2 with no close and no lost message.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
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
    assert_eq!(drain_node_1(&gw).await, 202);
    moved_to_node_2(&fleet, DRAIN + Duration::from_secs(5), 3).await;
    let logs = fleet.finish().await;
    let mut at = Vec::new();
    for (id, log) in &logs {
        assert!(
            !log.ended(),
            "{id}: a client-visible close: {:?}",
            log.events
        );
        assert_eq!(log.hellos(), hopped_once(id).each_ref(), "{id}");
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
    within_period_and_spread("hops", first, last);
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
