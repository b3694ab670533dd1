//! A request pipelined behind an upgrade request (CASE-37; RFC 9110 section 7.8: the protocol
//! changes only after the `101`'s empty line): nothing after the upgrade request's head reaches
//! the node before a `101`, and when the node refuses, the pipelined request is never spliced into
//! the node's stream as upgrade payload.

use std::time::Duration;

use integration_tests::raw::Raw;
use integration_tests::recorder::{admin_and_rest, handshake, path_and_length, Reply, Req, MARKER};

/// node-a of CASE-37: waits 500 ms before answering an upgrade request (recording what arrives
/// meanwhile), then `200 plain` (case a) or `403 forbidden` (case b).
fn slow_refusal(r: &Req) -> Reply {
    let wait = Duration::from_millis(500);
    match r.case() {
        "a" => Reply::ok("plain").after(wait),
        "b" => {
            Reply::now("HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\n\r\nforbidden").after(wait)
        }
        _ => path_and_length(r),
    }
}

/// CASE-37 a and b: a handshake and `GET /admin/secret` in one write; node-a records no octet
/// while it decides, never receives `/admin/secret` or the marker; the client gets node-a's
/// refusal as a normal answer; the pipelined request is then either routed to node-b (and logged
/// with its own path) or the connection closes.
#[tokio::test]
async fn case_37_request_behind_a_refused_upgrade_never_reaches_the_node_as_payload() {
    let (a, b, gw) = admin_and_rest(slow_refusal).await;
    let mut handled = 0;
    for (case, status, body) in [("a", 200, &b"plain"[..]), ("b", 403, &b"forbidden"[..])] {
        let mut wire = handshake(case);
        wire.extend_from_slice(
            b"GET /admin/secret HTTP/1.1\r\nHost: app.example.test\r\nX-Smuggled: r3\r\n\r\n",
        );
        let mut c = Raw::connect(gw.port).await;
        c.send(&wire).await;
        let (h, got) = c.response(Duration::from_secs(5)).await;
        assert_eq!((h.status, got.as_slice()), (status, body), "{case}");
        assert_ne!(h.status, 101);
        if let Some(h) = c.head(Duration::from_secs(3)).await {
            // Handled as a request of its own: node-b's answer, and its own access line.
            let v: serde_json::Value = serde_json::from_slice(&c.body(&h).await).expect("JSON");
            assert_eq!(
                (h.status, v["path"].as_str()),
                (200, Some("/admin/secret")),
                "{case}: {v}"
            );
            gw.logs
                .wait_for(&["access", "path=/admin/secret"], Duration::from_secs(2))
                .await;
            handled += 1;
        } else {
            assert!(
                c.closed_within(Duration::from_secs(3)).await,
                "{case}: left open"
            );
        }
    }
    assert_eq!(b.paths(), vec!["/admin/secret"; handled], "node-b");
    let conns = a.conns();
    assert!(
        conns.iter().all(|c| c.while_waiting.is_empty()),
        "octets reached node-a before its answer: {conns:?}"
    );
    assert!(
        !a.saw(MARKER) && !a.saw(b"/admin/secret"),
        "the pipelined request reached node-a"
    );
    assert_eq!(a.paths(), ["/ws", "/ws"]);
}
