//! A recording HTTP/1.1 node for the smuggling and abort scenarios: it keeps every octet each
//! connection carried, reads requests one after another (a body exactly per its framing,
//! `Content-Length` or chunked, before answering), answers each as the test's policy says, and
//! notes when the gateway ended a connection. What it records is what "node-a receives" means
//! in the field cases.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::nodes::hand_node;
use crate::{find, wait_until};

mod setups;
pub use setups::*;

/// One request a recorder read: its head as sent (request line and fields, through the blank
/// line), its body bytes, and whether the body was complete by its framing.
#[derive(Debug, Clone)]
pub struct Req {
    /// The head as received.
    pub head: String,
    /// The body bytes received (up to the framing's end, or what came before the close).
    pub body: Vec<u8>,
    /// True if the whole body arrived (its `Content-Length`, or the last chunk).
    pub complete: bool,
}

impl Req {
    /// The request line's target (`/path?query`).
    pub fn path(&self) -> &str {
        self.head.split(' ').nth(1).unwrap_or_default()
    }

    /// The value of the test's own `X-Case` field (which answer a scenario wants), or "".
    pub fn case(&self) -> &str {
        self.head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(name, _)| name.eq_ignore_ascii_case("x-case"))
            .map_or("", |(_, value)| value.trim())
    }
}

/// What the node does with one request once its body is read.
pub struct Reply {
    /// Waits this long before answering; octets arriving meanwhile are recorded as
    /// [`ConnLog::while_waiting`] (and the connection's end, if it ends).
    pub delay: Duration,
    /// The answer's bytes, written in one write.
    pub bytes: Vec<u8>,
    /// What follows the answer.
    pub then: Then,
}

/// What a connection does after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Reads the next request (keep-alive).
    Next,
    /// Records whatever arrives, parsing nothing (the node switched protocols), until the close.
    Raw,
}

impl Reply {
    /// Writes `bytes` at once and reads on.
    pub fn now(bytes: impl Into<Vec<u8>>) -> Reply {
        Reply {
            delay: Duration::ZERO,
            bytes: bytes.into(),
            then: Then::Next,
        }
    }

    /// A `200` with `body` (`Content-Length`), at once.
    pub fn ok(body: &str) -> Reply {
        Reply::now(format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ))
    }

    /// The same answer after `delay`.
    pub fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    /// The same answer, then raw recording.
    pub fn then_raw(mut self) -> Reply {
        self.then = Then::Raw;
        self
    }
}

/// Everything one connection carried.
#[derive(Debug, Clone, Default)]
pub struct ConnLog {
    /// Every octet received, in order.
    pub octets: Vec<u8>,
    /// Requests read, in order.
    pub requests: Vec<Req>,
    /// Octets that arrived while the node waited before an answer ([`Reply::delay`]).
    pub while_waiting: Vec<u8>,
    /// True while a request was read and its answer is not yet written.
    pub holding: bool,
    /// When the peer ended the connection (FIN or reset), if it did.
    pub ended: Option<Instant>,
}

type Policy = Arc<dyn Fn(&Req) -> Reply + Send + Sync>;

/// A recording node (module docs). Stops accepting when dropped.
pub struct Recorder {
    /// `host:port` to put in a cluster.
    pub addr: String,
    log: Arc<Mutex<Vec<ConnLog>>>,
    accepting: JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl Recorder {
    /// Starts a node on a free loopback port answering each request with `policy(request)`.
    /// Panics if the bind fails.
    pub async fn start(policy: impl Fn(&Req) -> Reply + Send + Sync + 'static) -> Recorder {
        let log: Arc<Mutex<Vec<ConnLog>>> = Arc::default();
        let policy: Policy = Arc::new(policy);
        let shared = log.clone();
        let (addr, accepting) = hand_node(move |s| {
            let (log, policy) = (shared.clone(), policy.clone());
            async move {
                let at = {
                    let mut l = log.lock().expect("log");
                    l.push(ConnLog::default());
                    l.len() - 1
                };
                Conn {
                    s,
                    log,
                    at,
                    buf: Vec::new(),
                }
                .serve(&*policy)
                .await;
            }
        })
        .await;
        Recorder {
            addr,
            log,
            accepting,
        }
    }

    /// Every connection that carried at least one octet (TCP probes carry none), in accept order.
    pub fn conns(&self) -> Vec<ConnLog> {
        let l = self.log.lock().expect("log");
        l.iter().filter(|c| !c.octets.is_empty()).cloned().collect()
    }

    /// Every request read on any connection, in accept order, but health probes (`/health`).
    pub fn requests(&self) -> Vec<Req> {
        self.conns()
            .into_iter()
            .flat_map(|c| c.requests)
            .filter(|r| r.path() != "/health")
            .collect()
    }

    /// The targets of [`Recorder::requests`].
    pub fn paths(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| r.path().to_string())
            .collect()
    }

    /// True if `needle` occurs in the octets of any connection.
    pub fn saw(&self, needle: &[u8]) -> bool {
        let l = self.log.lock().expect("log");
        l.iter().any(|c| find(&c.octets, needle).is_some())
    }

    /// Connections holding a request (read, not yet answered) that the gateway has not closed.
    pub fn holding(&self) -> usize {
        let l = self.log.lock().expect("log");
        l.iter().filter(|c| c.holding && c.ended.is_none()).count()
    }

    /// Waits up to `within` until `pred` holds for the connection log; panics with `what`.
    pub async fn wait(&self, within: Duration, what: &str, pred: impl Fn(&[ConnLog]) -> bool) {
        wait_until(within, what, || {
            let ok = pred(&self.conns());
            async move { ok }
        })
        .await;
    }
}

/// One accepted connection being served.
struct Conn {
    s: TcpStream,
    log: Arc<Mutex<Vec<ConnLog>>>,
    at: usize,
    buf: Vec<u8>,
}

impl Conn {
    async fn serve(mut self, policy: &(dyn Fn(&Req) -> Reply + Send + Sync)) {
        loop {
            let Some(req) = self.request().await else {
                return;
            };
            let complete = req.complete;
            self.edit(|c| {
                c.holding = complete;
                c.requests.push(req.clone());
            });
            if !complete {
                return;
            }
            let reply = policy(&req);
            if !self.wait(reply.delay).await {
                return;
            }
            self.edit(|c| c.holding = false);
            if self.s.write_all(&reply.bytes).await.is_err() {
                return;
            }
            if reply.then == Then::Raw {
                while self.read(false).await {}
                return;
            }
        }
    }

    fn edit(&self, f: impl FnOnce(&mut ConnLog)) {
        f(&mut self.log.lock().expect("log")[self.at]);
    }

    /// Reads once into `buf`, recording the octets (also as waited-for ones when `waiting`);
    /// false (and the end noted) at EOF or reset.
    async fn read(&mut self, waiting: bool) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        match self.s.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                self.edit(|c| c.ended = Some(Instant::now()));
                false
            }
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                self.edit(|c| {
                    c.octets.extend_from_slice(&chunk[..n]);
                    if waiting {
                        c.while_waiting.extend_from_slice(&chunk[..n]);
                    }
                });
                true
            }
        }
    }

    /// Waits `delay`, recording what arrives; false if the connection ended meanwhile.
    async fn wait(&mut self, delay: Duration) -> bool {
        let until = Instant::now() + delay;
        loop {
            match tokio::time::timeout_at(until, self.read(true)).await {
                Err(_) => return true,
                Ok(true) => {}
                Ok(false) => return false,
            }
        }
    }

    /// The next request: its head, then its body per its framing; `None` when the connection
    /// ended before a whole head.
    async fn request(&mut self) -> Option<Req> {
        let head_end = loop {
            if let Some(p) = find(&self.buf, b"\r\n\r\n") {
                break p + 4;
            }
            if !self.read(false).await {
                return None;
            }
        };
        let head: String = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        self.buf.drain(..head_end);
        let lower = head.to_ascii_lowercase();
        let chunked = lower.contains("\r\ntransfer-encoding: chunked\r\n");
        let length = crate::nodes::content_length(&lower);
        let end = loop {
            let end = if chunked {
                chunked_end(&self.buf)
            } else {
                (self.buf.len() >= length).then_some(length)
            };
            if end.is_some() || !self.read(false).await {
                break end;
            }
        };
        let (body, complete) = match end {
            Some(n) => (self.buf.drain(..n).collect(), true),
            None => (std::mem::take(&mut self.buf), false),
        };
        Some(Req {
            head,
            body,
            complete,
        })
    }
}

/// The length of a whole chunked body at the start of `buf` (through the last chunk and the
/// empty line after its trailers), if it is all there.
fn chunked_end(buf: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let line = find(&buf[at..], b"\r\n")?;
        let size = std::str::from_utf8(&buf[at..at + line]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        at += line + 2;
        if size == 0 {
            // Trailer lines, then the empty line.
            loop {
                let l = find(&buf[at..], b"\r\n")?;
                at += l + 2;
                if l == 0 {
                    return Some(at);
                }
            }
        }
        if buf.len() < at + size + 2 {
            return None;
        }
        at += size + 2;
    }
}
