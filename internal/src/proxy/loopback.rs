//! A connected loopback TCP pair for the unit tests of the modules that drive sockets (the
//! upstream client, the WebSocket re-dial, the handed-on upgrade). Test builds only.

use tokio::net::{TcpListener, TcpStream};

/// A connection to a fresh listener on 127.0.0.1 and the listener's accepted end:
/// `(connecting end, accepted end)`.
///
/// # Panics
/// When loopback cannot bind, connect or accept (the test cannot run).
pub(crate) async fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let connecting = TcpStream::connect(addr).await.expect("connect");
    let (accepted, _) = listener.accept().await.expect("accept");
    (connecting, accepted)
}
