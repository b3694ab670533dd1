//! Extended CONNECT on the TLS listener, which advertises SETTINGS_ENABLE_CONNECT_PROTOCOL
//! (CASE-36 b and c, SPEC section 4): a `:protocol` other than `websocket` is refused before
//! anything reaches a node (RFC 8441 section 4 forbids turning it into a tunnel), and a WebSocket
//! the node refuses gets the node's answer while the stream's DATA never reaches the node.

use super::*;
use bytes::Bytes;
use integration_tests::recorder::{own_answer, refuses_upgrades, Recorder, MARKER, SMUGGLED};

/// How an extended CONNECT for `protocol` with `headers` and the smuggled request as DATA ended
/// on a new h2 connection over TLS to `front`: the answer's status and body, or the reset's code.
async fn connect_with_data(
    front: &Front,
    protocol: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, Vec<u8>), h2::Reason> {
    let s = front.connect(&["h2"]).await.expect("h2 over TLS");
    let authority = format!("localhost:{}", front.port);
    let (resp, mut send) = h2ws::extended_connect(s, &authority, "/", protocol, headers)
        .await
        .expect("extended CONNECT sent");
    // The stream may already be reset: the answer says how it ended.
    let _ = send.send_data(Bytes::from_static(SMUGGLED), false);
    let ended = async {
        let (parts, mut body) = resp.await?.into_parts();
        let mut bytes = Vec::new();
        while let Some(chunk) = body.data().await {
            bytes.extend_from_slice(&chunk?);
        }
        Ok::<_, h2::Error>((parts.status.as_u16(), bytes))
    };
    match tokio::time::timeout(Duration::from_secs(5), ended)
        .await
        .expect("the stream ended in time")
    {
        Ok(answer) => Ok(answer),
        Err(e) => Err(e
            .reason()
            .unwrap_or_else(|| panic!("{protocol}: not a stream reset: {e}"))),
    }
}

/// CASE-36 b: on the TLS listener an extended CONNECT with `:protocol` `connect-udp` (then `foo`)
/// and DATA carrying a request is reset or answered 400/404/405/501, never 2xx; node-a receives
/// no request for it and no smuggled octet; `GET /victim` gets node-a's own answer.
#[tokio::test]
async fn case_36_extended_connect_for_another_protocol_is_refused_on_tls() {
    let a = Recorder::start(refuses_upgrades).await;
    let front = Front::start("extended connect CA", &[("node-a", a.addr.clone())], "").await;
    for protocol in ["connect-udp", "foo"] {
        match connect_with_data(&front, protocol, &[]).await {
            Err(reason) => eprintln!("{protocol}: reset {reason:?}"),
            Ok((status, body)) => assert!(
                [400, 404, 405, 501].contains(&status),
                "{protocol}: {status} {}",
                String::from_utf8_lossy(&body)
            ),
        }
        own_answer(&front.gw, "/victim").await;
    }
    assert!(!a.saw(MARKER), "smuggled octets reached node-a");
    assert_eq!(a.paths(), ["/victim", "/victim"]);
}

/// CASE-36 c: a WebSocket over h2 that node-a refuses with `426` gets that `426` and the stream
/// ends; the DATA sent behind the CONNECT never reaches node-a; `GET /victim` gets node-a's own
/// answer.
#[tokio::test]
async fn case_36_refused_websocket_over_h2_relays_the_426_and_no_data() {
    let a = Recorder::start(refuses_upgrades).await;
    let front = Front::start("refused websocket CA", &[("node-a", a.addr.clone())], "").await;
    let got = connect_with_data(&front, "websocket", &[("sec-websocket-version", "13")]).await;
    assert_eq!(got.map(|(status, _)| status), Ok(426));
    own_answer(&front.gw, "/victim").await;
    assert!(!a.saw(MARKER), "smuggled octets reached node-a");
    assert_eq!(a.paths(), ["/", "/victim"]);
}
