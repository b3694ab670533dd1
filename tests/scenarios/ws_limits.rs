//! WebSocket message sizes and hops mid-message (SPEC section 5, CASE-28): large and fragmented
//! messages with pings between fragments pass whole; a message over
//! `limits.websocket_max_message` closes the sender's socket with 1009; a hop in the middle of
//! a fragmented client message delivers the message whole to the new node.

use integration_tests::check::Ws;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use integration_tests::{cluster_toml, Gateway, Mock, FAST_HEALTH};
use tokio::time::timeout;
use tokio_tungstenite::connect_async_with_config;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Bytes, Message};

fn config(nodes: &[&Mock], limits: &str) -> String {
    let list: Vec<(&str, String)> = nodes.iter().map(|m| (m.id.as_str(), m.addr())).collect();
    format!(
        "{FAST_HEALTH}\n[limits]\n{limits}\n{}\n[[routes]]\nid = \"ws\"\ncluster = \"c\"\nwebsocket = \"hop\"\n",
        cluster_toml("c", &list, "")
    )
}

async fn connect(gw: &Gateway) -> Ws {
    let cfg = WebSocketConfig::default()
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20));
    let url = format!("ws://127.0.0.1:{}/ws", gw.port);
    let (ws, _) = timeout(
        Duration::from_secs(5),
        connect_async_with_config(url, Some(cfg), false),
    )
    .await
    .expect("handshake in time")
    .expect("upgrade");
    ws
}

/// The next data or close message within 20 s (pongs are returned too).
async fn next(ws: &mut Ws) -> Message {
    timeout(Duration::from_secs(20), ws.next())
        .await
        .expect("a message in time")
        .expect("socket open")
        .expect("valid frame")
}

/// The node's hello (`{"node":..}`) as JSON.
async fn hello(ws: &mut Ws) -> serde_json::Value {
    match next(ws).await {
        Message::Text(t) => serde_json::from_str(&t).expect("hello JSON"),
        other => panic!("expected hello, got {other:?}"),
    }
}

fn fragment(first: bool, fin: bool, data: &[u8]) -> Message {
    let op = if first {
        OpCode::Data(Data::Text)
    } else {
        OpCode::Data(Data::Continue)
    };
    Message::Frame(Frame::message(Bytes::copy_from_slice(data), op, fin))
}

/// A 4,000,000-octet UTF-8 text whose "é" (C3 A9) straddles the first fragment boundary.
fn big_text() -> Vec<u8> {
    let mut t = vec![b'a'; 59_999];
    t.extend_from_slice("é".as_bytes());
    while t.len() < 4_000_000 {
        t.push(b'b' + (t.len() % 20) as u8);
    }
    t
}

/// CASE-28 a, b: a 1 MiB binary message comes back byte-identical; a 4,000,000-octet text
/// message in 60,000-octet fragments, "é" split across fragments 1 and 2 and a Ping after
/// fragment 10, reaches node-a as one message (its echo is identical) and the Ping's Pong returns.
#[tokio::test]
async fn large_and_fragmented_messages_pass_whole_with_pings_between() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(&[&a], "")).await;
    let mut ws = connect(&gw).await;
    assert_eq!(hello(&mut ws).await["node"], "node-a");
    let blob: Vec<u8> = (0..1 << 20).map(|i: u32| (i * 31 % 251) as u8).collect();
    ws.send(Message::Binary(Bytes::from(blob.clone())))
        .await
        .expect("send");
    match next(&mut ws).await {
        Message::Binary(b) => assert!(b == blob, "1 MiB echo differs"),
        other => panic!("expected binary echo, got {other:?}"),
    }
    let text = big_text();
    let parts: Vec<&[u8]> = text.chunks(60_000).collect();
    for (i, p) in parts.iter().enumerate() {
        ws.feed(fragment(i == 0, i + 1 == parts.len(), p))
            .await
            .expect("fragment");
        if i == 9 {
            ws.feed(Message::Ping(Bytes::from_static(b"hb-1")))
                .await
                .expect("ping");
        }
    }
    ws.flush().await.expect("flush");
    let (mut pong, mut echo) = (false, None);
    while echo.is_none() {
        match next(&mut ws).await {
            Message::Pong(p) => {
                assert_eq!(&p[..], b"hb-1");
                pong = true;
            }
            Message::Text(t) => echo = Some(t),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(pong, "the Pong came back before the echo");
    assert!(
        echo.expect("echo").as_bytes() == &text[..],
        "4,000,000-octet echo differs"
    );
}

/// CASE-28 e: with `websocket_max_message = "1MiB"`, a client message of 1 MiB + 1 in 256 KiB
/// fragments gets Close 1009 whose reason names the limit, and one WARN line; a message of
/// exactly 1 MiB on another socket passes.
#[tokio::test]
async fn message_over_the_limit_closes_with_1009() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(&[&a], "websocket_max_message = \"1MiB\"")).await;
    let mut ws = connect(&gw).await;
    hello(&mut ws).await;
    ws.send(Message::Binary(Bytes::from(vec![7u8; 1 << 20])))
        .await
        .expect("send");
    assert!(matches!(next(&mut ws).await, Message::Binary(b) if b.len() == 1 << 20));
    let data = vec![b'x'; (1 << 20) + 1];
    let parts: Vec<&[u8]> = data.chunks(256 * 1024).collect();
    for (i, p) in parts.iter().enumerate() {
        let _ = ws.feed(fragment(i == 0, i + 1 == parts.len(), p)).await;
    }
    let _ = ws.flush().await;
    match next(&mut ws).await {
        Message::Close(Some(c)) => {
            assert_eq!(u16::from(c.code), 1009);
            assert!(c.reason.contains("websocket_max_message"), "{}", c.reason);
        }
        other => panic!("expected Close 1009, got {other:?}"),
    }
    gw.logs
        .wait_for(
            &["WARN", "websocket_max_message", "node-a"],
            Duration::from_secs(5),
        )
        .await;
}

/// CASE-28 (hop, client direction): the socket's node dies after the first fragment of a client
/// message reached it; the gateway hops to the other node and replays that fragment before the
/// rest, so the new node receives (and echoes) the message whole: never split, never partly dropped.
#[tokio::test]
async fn hop_mid_fragmented_client_message_delivers_it_whole() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let gw = Gateway::start(&config(&[&a, &b], "")).await;
    let mut ws = connect(&gw).await;
    let first = hello(&mut ws).await;
    // The issued id's node comes from rendezvous hashing (SPEC 7): kill whichever it is.
    let on = first["node"].as_str().expect("node").to_string();
    let (dying, other) = if on == "node-a" {
        (&mut a, "node-b")
    } else {
        (&mut b, "node-a")
    };
    ws.send(fragment(true, false, b"part-1;"))
        .await
        .expect("fragment 1");
    // Make sure fragment 1 reached its node before it dies: a ping answered by that node follows it.
    ws.send(Message::Ping(Bytes::from_static(b"sync")))
        .await
        .expect("ping");
    assert!(matches!(next(&mut ws).await, Message::Pong(_)));
    dying.kill().await;
    let second = hello(&mut ws).await;
    assert_eq!(second["node"], other);
    assert_eq!(second["hopped_from"], on.as_str());
    ws.send(fragment(false, false, b"part-2;"))
        .await
        .expect("fragment 2");
    ws.send(fragment(false, true, b"part-3"))
        .await
        .expect("fragment 3");
    match next(&mut ws).await {
        Message::Text(t) => assert_eq!(t.as_str(), "part-1;part-2;part-3"),
        other => panic!("expected the whole message echoed by the new node, got {other:?}"),
    }
}
