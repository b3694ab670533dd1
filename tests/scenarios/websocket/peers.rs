//! `websocket = "hop"` with third-party peers (SPEC section 5, "Extensions and subprotocols"): the
//! client and the nodes are the PyPI `websockets` library (`tests/peers/ws_peer.py`), so the
//! permessage-deflate streams (RFC 7692) and subprotocol answers are another implementation's.
//! Each row takes the socket's node away, by SIGKILL and by drain, and checks that the client's
//! socket stays open and 50 messages after the hop come back exactly; the last test hops one
//! compressed socket five times with 1 MiB messages.

use super::*;
use integration_tests::check::{bind_to_via, bind_via, bound_node, unbind};
use integration_tests::peers::{self, Compression, Compression::Deflate, Compression::Off};
use integration_tests::peers::{PyClient, PyNode};

/// Messages echoed after each hop, and their size in bytes.
const AFTER_HOP: usize = 50;
const SIZE: usize = 2000;

/// How the node under the socket goes away.
#[derive(Clone, Copy, Debug)]
enum Loss {
    /// SIGKILL: the node's sockets end without a Close frame.
    Kill,
    /// `POST /admin/nodes/{id}/drain?period=1s`: the node lives on and the socket must leave it.
    Drain,
}

/// A hop-mode gateway (fast HTTP probes) over `nodes` as cluster `c`, catch-all route.
pub(super) async fn gateway_over(nodes: &[&PyNode]) -> Gateway {
    let toml = Config::new()
        .health(Health::http_fast())
        .with_cluster(peers::cluster("c", nodes))
        .route(ws_route("hop"))
        .toml();
    Gateway::start(&toml).await
}

/// Takes `node` away by `loss` and waits until the gateway has bound `id` to another node.
async fn lose(gw: &Gateway, node: &mut PyNode, loss: Loss, id: &str) {
    match loss {
        Loss::Kill => node.kill().await,
        Loss::Drain => {
            let r = gw
                .admin_post(&format!("/admin/nodes/{}/drain?period=1s", node.id))
                .await;
            assert_eq!(r.status, 202, "{}", r.text());
        }
    }
    let from = node.id.clone();
    wait_until(
        Duration::from_secs(5),
        &format!("{id} to leave {from} ({loss:?})"),
        || async {
            let b = gw.admin_json(&format!("/admin/conns/{id}")).await;
            b["node"].as_str().is_some_and(|n| n != from)
        },
    )
    .await;
}

/// After a hop from `from` to `to`: 50 messages echo exactly, the socket never closed, and the
/// client's node and the binding are `to`, whose handshake came with `X-Hopped-From: from`.
async fn assert_hopped(gw: &Gateway, client: &mut PyClient, id: &str, from: &str, to: &PyNode) {
    client.echo(AFTER_HOP, SIZE, "mixed").await;
    assert_eq!(client.whoami().await, to.id);
    assert_eq!(bound_node(gw, id).await, to.id);
    let leg = to.conns().into_iter().find(|c| c["conn_id"] == id);
    assert_eq!(
        leg.as_ref().map(|c| c["hopped_from"].clone()),
        Some(json!(from)),
        "{}'s handshakes: {:?}",
        to.id,
        to.conns()
    );
    client.assert_open();
}

/// One two-node row: a client with `client` compression on a socket bound to a node with `first`,
/// which is taken away by `loss`; the socket hops to the node with `second`.
async fn two_node_row(client: Compression, first: Compression, second: Compression, loss: Loss) {
    let [mut a, b]: [PyNode; 2] =
        PyNode::start_all(&[("node-a", first, &[]), ("node-b", second, &[])])
            .await
            .try_into()
            .ok()
            .expect("two nodes");
    let gw = gateway_over(&[&a, &b]).await;
    let id = bind_to_via(&gw, "/health", &format!("c-{loss:?}"), "node-a").await;
    let url = format!("ws://127.0.0.1:{}/ws", gw.port);
    let mut c = PyClient::connect(&url, &id, client, None).await;
    // The client negotiated what node-a answered: the gateway relays the extension it accepted.
    let deflate = client == Deflate && first == Deflate;
    let ext = c.opened["extensions"].as_str().unwrap_or("").to_string();
    assert_eq!(ext.contains("permessage-deflate"), deflate, "{}", c.opened);
    assert_eq!(c.whoami().await, "node-a");
    c.echo(10, SIZE, "mixed").await;

    lose(&gw, &mut a, loss, &id).await;
    assert_hopped(&gw, &mut c, &id, "node-a", &b).await;
}

/// Deflate client (context takeover), deflate node killed, deflate node next.
#[tokio::test]
async fn ws_deflate_socket_hops_to_a_deflate_node_when_its_node_dies() {
    two_node_row(Deflate, Deflate, Deflate, Loss::Kill).await;
}

/// Deflate client (context takeover), deflate node drained, deflate node next.
#[tokio::test]
async fn ws_deflate_socket_hops_to_a_deflate_node_when_its_node_drains() {
    two_node_row(Deflate, Deflate, Deflate, Loss::Drain).await;
}

/// Deflate client, deflate node killed, a node without compression next.
#[tokio::test]
async fn ws_deflate_socket_hops_to_a_node_without_compression_when_its_node_dies() {
    two_node_row(Deflate, Deflate, Off, Loss::Kill).await;
}

/// Deflate client, deflate node drained, a node without compression next.
#[tokio::test]
async fn ws_deflate_socket_hops_to_a_node_without_compression_when_its_node_drains() {
    two_node_row(Deflate, Deflate, Off, Loss::Drain).await;
}

/// Deflate client on a node without compression (nothing negotiated), killed; a deflate node next.
#[tokio::test]
async fn ws_deflate_offer_on_an_uncompressed_node_hops_to_a_deflate_node_when_it_dies() {
    two_node_row(Deflate, Off, Deflate, Loss::Kill).await;
}

/// Deflate client on a node without compression (nothing negotiated), drained; a deflate node next.
#[tokio::test]
async fn ws_deflate_offer_on_an_uncompressed_node_hops_to_a_deflate_node_when_it_drains() {
    two_node_row(Deflate, Off, Deflate, Loss::Drain).await;
}

/// The subprotocol row: node-a and node-c select `chat`, node-b selects none (it refuses the
/// offer). The conn id is one whose rendezvous order (SPEC section 7) puts node-a first and node-b
/// ahead of node-c, so the hop dials the refuser first; the socket must skip it, end on node-c
/// with `chat`, and stay open.
async fn subprotocol_row(loss: Loss) {
    let [mut a, b, c]: [PyNode; 3] = PyNode::start_all(&[
        ("node-a", Off, &["chat"]),
        ("node-b", Off, &[]),
        ("node-c", Off, &["chat"]),
    ])
    .await
    .try_into()
    .ok()
    .expect("three nodes");
    let gw = gateway_over(&[&a, &b, &c]).await;
    // Selection depends on the id, the node ids and their weights alone: a gateway over node-b
    // and node-c tells which of the two wins the hop for an id.
    let probe = gateway_over(&[&b, &c]).await;
    let mut id = None;
    for n in 0..64 {
        let candidate = format!("c-sub-{loss:?}-{n}");
        if bind_via(&probe, "/health", &candidate).await == "node-b"
            && bind_via(&gw, "/health", &candidate).await == "node-a"
        {
            id = Some(candidate);
            break;
        }
        unbind(&gw, &candidate).await;
    }
    let id = id.expect("an id ordered node-a, node-b, node-c within 64 tries");
    drop(probe);

    let url = format!("ws://127.0.0.1:{}/ws", gw.port);
    let mut client = PyClient::connect(&url, &id, Off, Some("chat")).await;
    assert_eq!(client.opened["subprotocol"], "chat", "{}", client.opened);
    assert_eq!(client.whoami().await, "node-a");

    lose(&gw, &mut a, loss, &id).await;
    assert_hopped(&gw, &mut client, &id, "node-a", &c).await;
    let leg = c.conns().into_iter().find(|x| x["conn_id"] == id.as_str());
    assert_eq!(leg.map(|x| x["subprotocol"].clone()), Some(json!("chat")));
    // The refuser was dialled (it answered 101 without `chat`) and not used.
    let refused: Vec<Value> = b
        .conns()
        .into_iter()
        .filter(|x| x["conn_id"] == id.as_str())
        .collect();
    assert_eq!(
        refused,
        vec![
            json!({"conn_id": id, "hopped_from": "node-a", "extensions": null, "subprotocol": null})
        ]
    );
}

/// Subprotocol `chat`: its node killed, the refuser skipped, the socket on the other selector.
#[tokio::test]
async fn ws_subprotocol_hop_skips_a_node_refusing_it_when_its_node_dies() {
    subprotocol_row(Loss::Kill).await;
}

/// Subprotocol `chat`: its node drained, the refuser skipped, the socket on the other selector.
#[tokio::test]
async fn ws_subprotocol_hop_skips_a_node_refusing_it_when_its_node_drains() {
    subprotocol_row(Loss::Drain).await;
}

/// A compressed socket hops five times in a row (SIGKILL and drain in turn) over six deflate
/// nodes; before the first hop and after each, four 1 MiB messages (compressible text and
/// pseudo-random binary in turn) come back intact.
#[tokio::test]
async fn ws_deflate_socket_keeps_1mib_messages_intact_over_five_hops() {
    let ids: Vec<String> = (1..=6).map(|i| format!("node-{i}")).collect();
    let specs: Vec<_> = ids
        .iter()
        .map(|id| (id.as_str(), Deflate, &[][..]))
        .collect();
    let mut nodes = PyNode::start_all(&specs).await;
    let gw = gateway_over(&nodes.iter().collect::<Vec<_>>()).await;
    let url = format!("ws://127.0.0.1:{}/ws", gw.port);
    let id = "c-five-hops";
    let mut c = PyClient::connect(&url, id, Deflate, None).await;
    let ext = c.opened["extensions"].as_str().unwrap_or("").to_string();
    assert!(ext.contains("permessage-deflate"), "{}", c.opened);
    c.echo(4, 1 << 20, "mixed").await;

    for hop in 0..5 {
        let on = c.whoami().await;
        let node = nodes.iter_mut().find(|n| n.id == on).expect("a known node");
        let loss = if hop % 2 == 0 {
            Loss::Kill
        } else {
            Loss::Drain
        };
        lose(&gw, node, loss, id).await;
        // A small round trip first: messages held while the re-dial runs are bounded (1 MiB).
        c.echo(1, 64, "text").await;
        c.echo(4, 1 << 20, "mixed").await;
        assert_ne!(c.whoami().await, on, "hop {hop}");
    }
    c.assert_open();
}
