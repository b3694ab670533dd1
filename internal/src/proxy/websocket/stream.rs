//! The byte stream of one WebSocket side ([`Stream`]): the client's HTTP/1.1 socket as the
//! gateway's own driver handed it on ([`crate::proxy::downstream::http1::upgrade`]), a stream hyper's h2
//! server upgraded (an RFC 8441 client), or a node connection the gateway dialled itself (the
//! first handshake, [`crate::proxy::upstream::http1::conn::handshake`], or a hop's re-dial,
//! [`super::redial`]), whose first bytes past the `101` head were read with it. Spawns nothing.

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;

use crate::proxy::downstream::http1::rewind::Rewind;
use crate::proxy::downstream::http1::upgrade::{self, OnUpgrade};
use crate::tls::client::NodeStream;

/// Where the client side of a WebSocket comes from once its handshake is answered.
#[derive(Debug)]
pub(crate) enum ClientUpgrade {
    /// An HTTP/1.1 upgrade: the gateway's own driver hands the socket on after the `101`.
    Own(OnUpgrade),
    /// An RFC 8441 extended CONNECT: hyper's h2 server upgrades the stream after the `200`.
    Hyper(hyper::upgrade::OnUpgrade),
}

impl ClientUpgrade {
    /// The client side, once the answer went out; `None` if the upgrade did not happen.
    pub(crate) async fn take(self) -> Option<Stream> {
        match self {
            ClientUpgrade::Own(on) => on.await.ok().map(Stream::Client),
            ClientUpgrade::Hyper(on) => on.await.ok().map(Stream::from),
        }
    }
}

/// One side of a relayed WebSocket, read and written as bytes.
#[derive(Debug)]
pub(crate) enum Stream {
    /// The client's HTTP/1.1 socket, handed on by the gateway's own driver (the bytes it read past
    /// the upgrade head in front).
    Client(upgrade::Upgraded),
    /// An RFC 8441 client stream upgraded by hyper's h2 server.
    Upgraded(TokioIo<Upgraded>),
    /// A node connection (cleartext or TLS; first dial or re-dial) with the bytes read past its
    /// `101` head put back in front, delivered before anything else (often the node's first frame
    /// came in the same read).
    Node(Rewind<NodeStream>),
}

impl From<Upgraded> for Stream {
    fn from(up: Upgraded) -> Self {
        Stream::Upgraded(TokioIo::new(up))
    }
}

upgrade::delegate_io!(Stream {
    Stream::Client,
    Stream::Upgraded,
    Stream::Node
});

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_redialled_stream_delivers_its_early_bytes_first_then_the_socket() {
        let (client, mut server) = crate::proxy::loopback::tcp_pair().await;
        let mut s = Stream::Node(Rewind::new(
            bytes::Bytes::from_static(b"early "),
            NodeStream::Plain(client),
        ));
        server.write_all(b"late").await.expect("write");
        drop(server);
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.expect("read");
        assert_eq!(got, b"early late");
    }
}
