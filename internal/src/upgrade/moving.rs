//! Idle HTTP/1.1 connections crossing the handover channel after "ready" (SPEC section 13): the
//! old process sends what its [`Mover`](crate::proxy::moving::Mover) took ([`send`]), in batches
//! of [`FDS_PER_MESSAGE`]; the new process takes them ([`Arrivals::next`]). A batch that cannot be
//! sent is closed here (as on any drain), and so is every connection after it; a frame the new
//! process cannot read ends its side: the descriptors still queued close with the channel.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use base64::Engine as _;
use tokio::net::UnixStream;
use tokio::sync::mpsc::UnboundedReceiver;

use super::fds::{read_frame, recv_fds, send_fds, write_frame, FDS_PER_MESSAGE};
use super::message::{parse_from_old, to_json, FromOld, Item};
use crate::proxy::moving::MovedConn;

/// Sends the connections arriving on `rx` over `ch` until `rx` ends (the mover closed at the end
/// of the drain), each batch within `timeout`. Returns how many were sent.
pub(super) async fn send(
    ch: &mut UnixStream,
    mut rx: UnboundedReceiver<MovedConn>,
    timeout: Duration,
) -> usize {
    let mut batch = Vec::with_capacity(FDS_PER_MESSAGE);
    let (mut sent, mut broken) = (0, false);
    while rx.recv_many(&mut batch, FDS_PER_MESSAGE).await > 0 {
        if !broken {
            match tokio::time::timeout(timeout, send_batch(ch, &batch)).await {
                Ok(Ok(())) => sent += batch.len(),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "idle connections cannot move; closing them");
                    broken = true;
                }
                Err(_) => {
                    tracing::warn!("the new process takes no idle connections; closing them");
                    broken = true;
                }
            }
        }
        for c in batch.drain(..) {
            if broken {
                let _ = c.socket.shutdown(std::net::Shutdown::Write);
            }
            // Sent: the new process holds its own descriptor; this one closes here.
        }
    }
    sent
}

/// One [`FromOld::Connections`] frame for `batch` and its descriptors.
async fn send_batch(ch: &mut UnixStream, batch: &[MovedConn]) -> std::io::Result<()> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let items = batch
        .iter()
        .enumerate()
        .map(|(fd, c)| Item::Http1 {
            fd,
            peer: c.peer,
            tls: false,
            buffered: b64.encode(&c.buffered),
        })
        .collect();
    let msg = FromOld::Connections {
        fds: batch.len(),
        items,
    };
    write_frame(ch, &to_json(&msg)).await?;
    let fds: Vec<_> = batch.iter().map(|c| c.socket.as_fd()).collect();
    send_fds(ch, &fds).await
}

/// The new process's end of the channel after "ready": where the old process's idle connections
/// arrive.
#[derive(Debug)]
pub struct Arrivals {
    pub(super) channel: UnixStream,
}

impl Arrivals {
    /// The next batch of connections, each ready to be served from its buffered bytes on; `None`
    /// once the old process closed the channel, or sent something this process cannot read
    /// (logged; the channel is then dropped, closing what was still queued on it).
    pub async fn next(&mut self) -> Option<Vec<MovedConn>> {
        let frame = read_frame(&mut self.channel).await.ok()?;
        let (fds, items) = match parse_from_old(&frame) {
            Ok(FromOld::Connections { fds, items }) if fds <= FDS_PER_MESSAGE => (fds, items),
            Ok(_) => {
                tracing::warn!("upgrade: unexpected frame after ready; no more connections taken");
                return None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "upgrade: unreadable connections; no more taken");
                return None;
            }
        };
        let got = match recv_fds(&self.channel, fds).await {
            Ok(got) => got,
            Err(e) => {
                tracing::warn!(error = %e, "upgrade: connection descriptors not received");
                return None;
            }
        };
        Some(adopt(items, got))
    }
}

/// The connections `items` name among `fds`; a TLS one, a bad base64 or a kind other than
/// `http1` is logged and its descriptor closed.
fn adopt(items: Vec<Item>, fds: Vec<OwnedFd>) -> Vec<MovedConn> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut fds: Vec<Option<OwnedFd>> = fds.into_iter().map(Some).collect();
    let mut conns = Vec::with_capacity(items.len());
    for item in items {
        let Item::Http1 {
            fd,
            peer,
            tls,
            buffered,
        } = item
        else {
            tracing::warn!("upgrade: an item that is no connection among connections; ignored");
            continue;
        };
        // parse_from_old checked that every index is announced and named once.
        let Some(owned) = fds.get_mut(fd).and_then(Option::take) else {
            continue;
        };
        let buffered = match (tls, b64.decode(buffered)) {
            (false, Ok(b)) => b,
            (true, _) | (_, Err(_)) => {
                tracing::warn!(%peer, tls, "upgrade: a connection that cannot be served; closed");
                continue;
            }
        };
        conns.push(MovedConn {
            socket: std::net::TcpStream::from(owned),
            peer,
            buffered: buffered.into(),
        });
    }
    conns
}
