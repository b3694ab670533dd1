//! The access log: the fields operators grep for.

use super::*;

/// The access log: client address, protocol (http/1.1, h2, ws), upstream address and status,
/// a reason for the gateway's own answers, and `traceparent` forwarded untouched and logged as
/// `trace_id`.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
#[tokio::test]
async fn access_log_has_the_fields_operators_grep_for() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(&[("node-a", a.addr())])).await;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let r = get(&gw.url("/echo?x=1"), &[("traceparent", tp)])
        .await
        .expect("echo");
    assert_eq!(r.status, 200);
    let headers = r.json()["headers"].clone();
    assert!(
        headers
            .as_array()
            .expect("headers")
            .iter()
            .any(|h| h[0] == "traceparent" && h[1] == tp),
        "forwarded untouched: {headers}"
    );
    let line = access_line(&gw, &["path=/echo"]).await;
    contains_all(
        &line,
        &[
            "protocol=\"http/1.1\"",
            "client=127.0.0.1:",
            &format!("upstream=\"{}\"", a.addr()),
            "upstream_status=200",
            "reason=\"-\"",
            "trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\"",
        ],
    );

    let mut h2 = integration_tests::h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    assert_eq!(h2.get("/data?h2", &[]).await.expect("h2").status, 200);
    let line = access_line(&gw, &["path=/data", "protocol=\"h2\""]).await;
    assert!(
        line.contains("upstream_status=200") && !line.contains("trace_id"),
        "{line}"
    );

    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{}/ws", gw.port))
        .await
        .expect("ws");
    use futures_util::StreamExt;
    ws.next().await.expect("hello").expect("frame");
    ws.close(None).await.expect("close");
    while ws.next().await.is_some() {}
    let line = access_line(&gw, &["path=/ws"]).await;
    assert!(
        line.contains("protocol=\"ws\"") && line.contains("upstream_status=101"),
        "{line}"
    );

    a.set_down().await;
    gw.wait_node_state("node-a", "ejected", Duration::from_secs(15))
        .await;
    let r = get(&gw.url("/data?down"), &[]).await.expect("fallback");
    assert_eq!(r.status, 503);
    let line = access_line(&gw, &["status=503"]).await;
    contains_all(
        &line,
        &[
            "reason=\"no_healthy_node\"",
            "upstream=\"-\"",
            "upstream_status=-",
        ],
    );
}

/// A head the gateway's HTTP/1.1 server refuses (400, 414) is logged with what its request line
/// said: method, path and protocol when the line parsed, the method alone when only it parsed,
/// else `-` for each (SPEC section 8: a field without a value is `-`).
#[tokio::test]
async fn a_refused_head_is_logged_with_what_its_request_line_said() {
    use integration_tests::raw::refused;
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(&[("node-a", a.addr())])).await;
    let long = format!("PUT /{} HTTP/1.1\r\n\r\n", "a".repeat(17_000));
    let cases: [(&[u8], u16, &[&str]); 4] = [
        (
            b"GET /ten?q=1 HTTP/1.0\r\nBad Name: 1\r\n\r\n",
            400,
            &["method=GET", "path=/ten", "protocol=\"http/1.0\""],
        ),
        (
            b"POST /eleven HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n",
            400,
            &["method=POST", "path=/eleven", "protocol=\"http/1.1\""],
        ),
        (
            long.as_bytes(),
            414,
            &["method=PUT", "path=-", "protocol=\"-\""],
        ),
        (
            b"G(T / HTTP/1.1\r\n\r\n",
            400,
            &["method=-", "path=-", "protocol=\"-\""],
        ),
    ];
    for (wire, status, fields) in cases {
        assert_eq!(refused(gw.port, wire).await.0.status, status);
        let line = access_line(&gw, &[fields[0], &format!("status={status}")]).await;
        contains_all(&line, fields);
        contains_all(
            &line,
            &[
                "client=127.0.0.1:",
                "route=\"-\"",
                "node=\"-\"",
                "upstream=\"-\"",
                "upstream_status=-",
                if status == 414 {
                    "reason=\"uri_too_long\""
                } else {
                    "reason=\"bad_request\""
                },
            ],
        );
    }
}

/// The first access-log line of `gw` with every one of `parts`, waited for up to 5 s.
async fn access_line(gw: &Gateway, parts: &[&str]) -> String {
    let mut all = vec!["access"];
    all.extend_from_slice(parts);
    gw.logs.wait_for(&all, Duration::from_secs(5)).await
}

/// `line` contains each of `wants`; the failure names the first missing one.
fn contains_all(line: &str, wants: &[&str]) {
    for want in wants {
        assert!(line.contains(want), "{want} in {line}");
    }
}
