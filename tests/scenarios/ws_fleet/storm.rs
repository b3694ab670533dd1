//! A hop storm: many idle hop-mode sockets on one node, `kill -9` of that node, and
//! every socket re-dialled to node-2 at once. Each must hop exactly once, none may close, and the
//! gateway must count and time each hop once; the re-dials are paced per node (at most
//! `REDIALS_IN_FLIGHT` in flight, in order), which the gateway's unit tests check.

use super::*;

/// Idle sockets in the storm: enough that every re-dial after the kill queues behind others.
const STORM: usize = 300;

/// Reads `ws` until its next text message (pings and pongs skipped), within `t`.
async fn next_text(ws: &mut Ws, t: Duration) -> Result<String, String> {
    let deadline = Instant::now() + t;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => return Err(format!("nothing within {t:?}")),
            Ok(None) => return Err("the stream ended".into()),
            Ok(Some(Err(e))) => return Err(format!("socket error: {e}")),
            Ok(Some(Ok(Message::Text(t)))) => return Ok(t.to_string()),
            Ok(Some(Ok(Message::Close(c)))) => return Err(format!("closed: {c:?}")),
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// 300 idle hop-mode sockets on a killed node all hop to node-2 exactly once: none closes, each
/// reads node-2's hello naming node-1, `hopping_count_total` and `hopping_latency_seconds_count`
/// grow by exactly 300, and no re-dial failed or fell back to a reconnect hint.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn ws_storm_of_300_idle_sockets_hops_off_a_killed_node_exactly_once_each() {
    let mut n1 = Mock::start("node-1").await;
    let n2 = Mock::start("node-2").await;
    let gw = Gateway::start(&config("hop", &n1, &n2)).await;
    // Every socket on node-1: node-2 takes none while they connect.
    assert_eq!(
        gw.admin_post("/admin/nodes/node-2/drain?period=1s")
            .await
            .status,
        202
    );
    let ids: Vec<String> = (0..STORM).map(|i| format!("storm-{i}")).collect();
    let opened: Vec<(Ws, Value, Instant)> = stream::iter(ids.iter())
        .map(|id| open(&gw, id))
        .buffered(CONNECT_CONCURRENCY)
        .collect()
        .await;
    for ((_, hello, _), id) in opened.iter().zip(&ids) {
        assert_eq!(
            hello,
            &json!({"node": "node-1", "conn_id": id, "hopped_from": null}),
            "hello of {id}"
        );
    }
    assert_eq!(
        gw.admin_post("/admin/nodes/node-2/undrain").await.status,
        200
    );
    gw.wait_node_state("node-2", "healthy", Duration::from_secs(5))
        .await;
    assert_eq!(gw.node("node-1").await["inflight"], STORM);
    let (hops_before, _) = gw.metric_series("hopping_count_total{").await;
    let timed_before = gw.metric("hopping_latency_seconds_count").await;

    n1.kill().await;
    let killed = Instant::now();
    // Every socket reads again at once, as a client of a storm would.
    let mut watched: Vec<(String, Result<String, String>, Duration, Ws)> =
        stream::iter(opened.into_iter().zip(ids))
            .map(|((mut ws, _, _), id)| async move {
                let got = next_text(&mut ws, Duration::from_secs(15)).await;
                (id, got, killed.elapsed(), ws)
            })
            .buffer_unordered(STORM)
            .collect()
            .await;

    let mut latency = Vec::new();
    for (id, got, after, _) in &watched {
        let text = got.as_ref().unwrap_or_else(|e| {
            panic!(
                "{id}: node-2's hello after the kill: {e}; gateway log: {:#?}",
                gw.logs.matching(&[id.as_str()])
            )
        });
        let hello: Value = serde_json::from_str(text).expect("a JSON hello");
        assert_eq!(
            hello,
            json!({"node": "node-2", "conn_id": id, "hopped_from": "node-1"}),
            "{id}"
        );
        latency.push(*after);
    }
    // Still open, and nothing more came (a second hop would send another hello).
    for (id, _, _, ws) in watched.iter_mut() {
        ws.send(Message::text("m0"))
            .await
            .unwrap_or_else(|e| panic!("{id}: send: {e}"));
        assert_eq!(
            next_text(ws, Duration::from_secs(10)).await.as_deref(),
            Ok("m0"),
            "{id}: node-2 echoes on the hopped socket"
        );
    }
    let (hops_after, breakdown) = gw.metric_series("hopping_count_total{").await;
    assert_eq!(hops_after - hops_before, STORM as f64, "{breakdown:?}");
    assert_eq!(
        gw.metric("hopping_latency_seconds_count").await - timed_before,
        STORM as f64,
        "one hop latency per socket"
    );
    assert_eq!(gw.logs.matching(&["re-dial failed"]), Vec::<String>::new());
    assert_eq!(gw.logs.matching(&["hop deadline"]), Vec::<String>::new());
    latency.sort_unstable();
    eprintln!(
        "ws storm: {STORM} sockets hopped; kill -> node-2 hello p50 {:?} p99 {:?} max {:?}",
        latency[STORM / 2],
        latency[STORM * 99 / 100],
        latency[STORM - 1]
    );
}
