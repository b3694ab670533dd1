//! Hand-made nodes: a loopback listener whose connections a scenario serves itself, for node
//! behaviour `mock-backend` does not have (SPEC section 9 lists what it has).

use std::future::Future;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::read_head;
use tokio::task::JoinHandle;

/// Listens on a free loopback port and runs `serve` on each accepted connection in a task of its
/// own. Returns the `host:port` to put in a cluster and the accept loop's task (abort it to stop
/// accepting; connections already served run on). Panics if the bind fails.
pub async fn hand_node<F, Fut>(serve: F) -> (String, JoinHandle<()>)
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(serve(s));
        }
    });
    (addr, task)
}

/// [`hand_node`] whose `serve` also gets a sender for reports (a channel of `capacity`): returns
/// the `host:port`, the receiving end and the accept loop's task. Panics if the bind fails.
pub async fn reporting_node<T, F, Fut>(
    capacity: usize,
    serve: F,
) -> (String, mpsc::Receiver<T>, JoinHandle<()>)
where
    T: Send + 'static,
    F: Fn(TcpStream, mpsc::Sender<T>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(capacity);
    let (addr, task) = hand_node(move |s| serve(s, tx.clone())).await;
    (addr, rx, task)
}

/// The Content-Length of a request head `head` given in lower case (as `content-length: N`
/// lines), 0 without one. Panics on a value that is not a number.
pub fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().expect("content-length"))
}

/// One request head read off a hand-made node's connection.
pub struct ReqHead {
    /// The head (request line and fields) in lower case.
    pub head: String,
    /// Its Content-Length, 0 without one.
    pub declared: usize,
    /// Body bytes read along with the head.
    pub early: usize,
}

/// Reads one request head off `s`; `None` when the peer closes or fails first (a TCP probe, or
/// the gateway gave up).
pub async fn request_head(s: &mut TcpStream) -> Option<ReqHead> {
    let mut buf = Vec::new();
    let head_end = read_head(s, &mut buf).await?;
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    Some(ReqHead {
        declared: content_length(&head),
        early: buf.len() - head_end,
        head,
    })
}

/// Reads body bytes off `s` after a head until `got` (bytes so far, e.g. [`ReqHead::early`])
/// reaches `want` (`usize::MAX`: until the peer closes) or the read ends or fails. Returns the
/// bytes received in all and when the first of this call's reads returned data (None if none did).
pub async fn read_body(s: &mut TcpStream, mut got: usize, want: usize) -> (usize, Option<Instant>) {
    let mut first = None;
    while got < want {
        let mut chunk = [0u8; 65536];
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                first.get_or_insert_with(Instant::now);
                got += n;
            }
        }
    }
    (got, first)
}
