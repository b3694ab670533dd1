//! The re-dial's request head and answer checks, against a scripted node on a loopback socket.

use super::*;
use http::HeaderMap;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// RFC 6455 section 1.3's example key and its accept value.
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in pairs {
        h.append(*n, HeaderValue::from_static(v));
    }
    h
}

fn negotiated(protocol: Option<&'static str>, extensions: Agreed) -> Negotiated {
    Negotiated {
        protocol: protocol.map(HeaderValue::from_static),
        extensions,
    }
}

fn deflate(element: &str) -> Agreed {
    Agreed::Deflate(super::super::deflate::DeflateParams::parse(element).expect("valid"))
}

fn handshake(extra: &[(&'static str, &'static str)], n: &Negotiated) -> Handshake {
    let mut pairs = vec![
        ("host", "gw.example"),
        ("upgrade", "websocket"),
        ("connection", "Upgrade"),
        ("sec-websocket-key", KEY),
        ("sec-websocket-version", "13"),
    ];
    pairs.extend_from_slice(extra);
    Handshake::replay(&Method::GET, "/ws?x=1", &headers(&pairs), n)
}

#[test]
fn the_replayed_head_is_the_first_request_plus_x_hopped_from_without_a_refused_extension_offer() {
    let n = negotiated(None, Agreed::None);
    let hs = handshake(
        &[
            ("sec-websocket-extensions", "permessage-deflate"),
            ("x-hopped-from", "spoofed"),
            ("cookie", "a=1"),
        ],
        &n,
    );
    let head = String::from_utf8(hs.request("127.0.0.1:9", "node-1")).expect("ascii");
    assert_eq!(
        head,
        "GET /ws?x=1 HTTP/1.1\r\nhost: gw.example\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
         sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\ncookie: a=1\r\n\
         x-hopped-from: node-1\r\n\r\n"
    );
}

#[test]
fn without_a_host_each_redial_names_the_node_address_and_an_accepted_extension_stays_offered() {
    let n = negotiated(Some("chat"), Agreed::Other);
    let hs = Handshake::replay(
        &Method::GET,
        "/",
        &headers(&[
            ("sec-websocket-key", KEY),
            ("sec-websocket-extensions", "x-ext"),
        ]),
        &n,
    );
    let head = String::from_utf8(hs.request("10.0.0.2:8080", "a")).expect("ascii");
    assert_eq!(
        head,
        "GET / HTTP/1.1\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         sec-websocket-extensions: x-ext\r\nx-hopped-from: a\r\nhost: 10.0.0.2:8080\r\n\r\n"
    );
}

/// A connected pair: the gateway's end as a [`NodeStream`] and the scripted node's end.
async fn pair() -> (NodeStream, TcpStream) {
    let (gw, node) = crate::proxy::loopback::tcp_pair().await;
    (NodeStream::Plain(gw), node)
}

/// Runs one exchange of `hs` against a node that answers with the `answer` chunks (yielding in
/// between, so the head may arrive split) and then closes; returns the result and the request head
/// the node received.
async fn exchange_with(
    hs: &Handshake,
    n: &Negotiated,
    answer: Vec<&'static [u8]>,
) -> (Result<(Stream, Agreed), DialError>, String) {
    let (gw, mut node) = pair().await;
    let script = tokio::spawn(async move {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(b"\r\n\r\n") {
            let n = node.read(&mut buf).await.expect("read the request");
            assert!(n > 0, "the request head ended early");
            got.extend_from_slice(&buf[..n]);
        }
        for chunk in answer {
            node.write_all(chunk).await.expect("write");
            tokio::task::yield_now().await;
        }
        String::from_utf8(got).expect("ascii")
    });
    let r = exchange(gw, hs.request("127.0.0.1:1", "node-1"), hs, n).await;
    let request = script.await.expect("the script ran");
    (r, request)
}

#[tokio::test]
async fn a_matching_101_split_over_reads_gives_a_stream_that_starts_with_the_bytes_past_the_head() {
    let n = negotiated(Some("chat"), Agreed::None);
    let hs = handshake(&[("sec-websocket-protocol", "chat, superchat")], &n);
    let (r, request) = exchange_with(
        &hs,
        &n,
        vec![
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n",
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n",
            b"Sec-WebSocket-Protocol: chat\r\n\r\n\x81\x02hi",
        ],
    )
    .await;
    assert!(
        request.contains("\r\nx-hopped-from: node-1\r\n"),
        "{request}"
    );
    let (mut stream, agreed) = r.expect("a matching 101");
    assert_eq!(agreed, Agreed::None);
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).await.expect("read");
    assert_eq!(rest, b"\x81\x02hi");
    assert_eq!(
        hs.accept.as_ref().map(|a| a.as_slice()),
        Some(ACCEPT.as_bytes())
    );
}

/// The refusal reason of an exchange answered with `answer` (`Refused` expected).
async fn refused(n: &Negotiated, answer: &'static [u8]) -> String {
    let hs = handshake(&[], n);
    match exchange_with(&hs, n, vec![answer]).await.0 {
        Err(DialError::Refused(why)) => why,
        Err(e) => panic!("expected a refusal, got {e}"),
        Ok(_) => panic!("expected a refusal, got a stream"),
    }
}

#[tokio::test]
async fn answers_an_rfc_6455_client_must_fail_are_refused() {
    let plain = negotiated(None, Agreed::None);
    let chat = negotiated(Some("chat"), Agreed::None);
    let cases: [(&Negotiated, &'static [u8], &str); 6] = [
        (
            &plain,
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n",
            "status 503",
        ),
        (
            &plain,
            b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: d3Jvbmc=\r\n\r\n",
            "Sec-WebSocket-Accept does not match the key",
        ),
        (
            &plain,
            b"HTTP/1.1 101 OK\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\
              Sec-WebSocket-Protocol: chat\r\n\r\n",
            "the node selected a different subprotocol",
        ),
        (
            &chat,
            b"HTTP/1.1 101 OK\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
            "the node selected a different subprotocol",
        ),
        (
            &plain,
            b"HTTP/1.1 101 OK\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\
              Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
            "the node accepted an extension that was not offered",
        ),
        (
            &plain,
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
            "the 101 does not switch to websocket alone",
        ),
    ];
    for (n, answer, why) in cases {
        assert_eq!(refused(n, answer).await, why);
    }
    assert!(refused(&plain, b"HTTP/1.1 1O1 bad\r\n\r\n")
        .await
        .starts_with("malformed answer head"),);
}

#[tokio::test]
async fn a_node_that_closes_before_its_answer_head_is_an_exchange_error() {
    let n = negotiated(None, Agreed::None);
    let hs = handshake(&[], &n);
    let (r, _) = exchange_with(&hs, &n, vec![b"HTTP/1.1 101 Swit"]).await;
    match r {
        Err(DialError::Exchange(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
        Err(e) => panic!("expected an exchange error, got {e}"),
        Ok(_) => panic!("expected an exchange error, got a stream"),
    }
}

#[tokio::test]
async fn an_endless_answer_head_is_refused_at_the_bound() {
    let n = negotiated(None, Agreed::None);
    let hs = handshake(&[], &n);
    let (gw, mut node) = pair().await;
    let script = tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        let _ = node.read(&mut buf).await;
        let _ = node.write_all(b"HTTP/1.1 101 OK\r\n").await;
        let line = [b'a'; 1000];
        for _ in 0..MAX_ANSWER_HEAD / 1000 + 2 {
            if node.write_all(b"x-long: ").await.is_err()
                || node.write_all(&line).await.is_err()
                || node.write_all(b"\r\n").await.is_err()
            {
                break;
            }
        }
        node
    });
    let r = exchange(gw, hs.request("127.0.0.1:1", "n"), &hs, &n).await;
    drop(script.await);
    match r {
        Err(DialError::Refused(why)) => assert_eq!(
            why,
            format!("answer head larger than {MAX_ANSWER_HEAD} bytes")
        ),
        Err(e) => panic!("expected a refusal, got {e}"),
        Ok(_) => panic!("expected a refusal, got a stream"),
    }
}

#[test]
fn a_deflate_socket_redials_offering_exactly_what_its_client_agreed_to() {
    let n = negotiated(
        None,
        deflate("permessage-deflate; client_no_context_takeover; server_max_window_bits=12"),
    );
    let hs = handshake(
        &[(
            "sec-websocket-extensions",
            "permessage-deflate; client_max_window_bits, permessage-deflate",
        )],
        &n,
    );
    let head = String::from_utf8(hs.request("127.0.0.1:9", "node-1")).expect("ascii");
    assert!(
        head.contains(
            "\r\nsec-websocket-extensions: permessage-deflate; client_no_context_takeover; \
             server_max_window_bits=12\r\n"
        ),
        "{head}"
    );
    assert_eq!(
        head.matches("sec-websocket-extensions").count(),
        1,
        "{head}"
    );
}

#[tokio::test]
async fn a_deflate_client_takes_a_node_with_other_parameters_or_none_but_not_another_extension() {
    let n = negotiated(
        None,
        deflate("permessage-deflate; client_no_context_takeover"),
    );
    let hs = handshake(&[], &n);
    let ok = |ext: &'static [u8]| {
        let hs = &hs;
        let n = &n;
        async move {
            let answer: Vec<&'static [u8]> = vec![
                b"HTTP/1.1 101 OK\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\
                  Upgrade: websocket\r\nConnection: Upgrade\r\n",
                ext,
                b"\r\n",
            ];
            exchange_with(hs, n, answer)
                .await
                .0
                .map(|(_, agreed)| agreed)
        }
    };
    assert_eq!(
        ok(b"Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=9\r\n")
            .await
            .expect("accepted"),
        deflate("permessage-deflate; server_max_window_bits=9")
    );
    assert_eq!(ok(b"").await.expect("accepted"), Agreed::None);
    match ok(b"Sec-WebSocket-Extensions: x-ext\r\n").await {
        Err(DialError::Refused(why)) => {
            assert_eq!(why, "the node accepted an extension that was not offered")
        }
        Err(e) => panic!("expected a refusal, got {e}"),
        Ok(a) => panic!("expected a refusal, got {a:?}"),
    }
}
