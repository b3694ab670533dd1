//! The relay's busy path (WebSocket relay per message): bytes both ways in one poll,
//! frames passed through byte for byte.
//!
//! Each read batch lands in a stack scratch array; its whole frames are checked from their headers
//! ([`super::io::Track::scan`]: message boundaries and `limits.websocket_max_message`, SPEC section 5) and
//! written to the other side in one write, as they came (a client's frames keep the mask key the
//! client chose, RFC 6455 section 5.3). Only what cannot go at once is copied into the side's
//! buffer: an incomplete frame, the rest of a write the socket did not take, a frame the relay
//! handles itself. No allocation, timer or wake-up per frame; the node side is read first, so an
//! end of stream it already sent is seen before client bytes are written to it.
//!
//! The pump returns ([`Pumped`]) at the first thing it does not handle: a Close either way, a
//! client's fragmented message (kept for a hop: [`super::message::Partial`]), a frame the limits
//! or RFC 6455 refuse, an end of stream, a socket error, or a write that must wait. It never
//! returns `Pending` with a write half done. Spawns nothing.

use std::mem::MaybeUninit;
use std::task::{Context, Poll};

use bytes::Buf;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::frame::{Frame, FrameError};
use super::io::{FrameIo, Tried, READ_CHUNK};

/// A frame read for the relay's own handling, or the end of that side (as [`FrameIo::read`]).
pub(super) type Read = Result<Option<Frame>, FrameError>;

/// Bytes relayed each way and when the last frame passed (for the idle timeout, checked lazily
/// when its timer fires).
#[derive(Debug, Clone, Copy)]
pub(super) struct Traffic {
    /// Bytes read from the client.
    pub(super) bytes_in: u64,
    /// Bytes written to the client.
    pub(super) bytes_out: u64,
    /// When a frame last passed either way (pings included: CASE-06).
    pub(super) last: Instant,
}

/// Why [`poll`] returned.
#[derive(Debug)]
pub(super) enum Pumped {
    /// A client frame for the relay to handle (its bytes not yet in `bytes_in`), or the client's end.
    Client(Read),
    /// A node frame for the relay to handle, or the node side's end.
    Node(Read),
    /// The client side owes the node bytes the socket did not take at once ([`finish`]).
    NodeBusy,
    /// The node side owes the client bytes the socket did not take at once ([`finish`]).
    ClientBusy,
    /// Writing to the node failed; the client side's owed bytes are the frames that did not go.
    NodeWriteFailed(std::io::Error),
    /// Writing to the client failed.
    ClientWriteFailed(std::io::Error),
}

/// Reads one direction makes per poll before the other gets its turn: a side that floods cannot
/// starve the other (the task yields and is polled again).
const READS_PER_TURN: usize = 16;

/// One direction's outcome inside a poll.
enum Step {
    /// Waiting for bytes from the source.
    Idle,
    /// Bytes may be ready still, but the turn is over.
    Yield,
    /// Something for the relay (mapped to [`Pumped`] by the caller).
    Stop(DirStop),
}

enum DirStop {
    Frame(Read),
    Busy,
    WriteFailed(std::io::Error),
}

/// Relays ready bytes both ways until both sockets have nothing more to read (`Pending`), or
/// returns what the relay must handle. `down` is the client side, `up` the node side.
pub(super) fn poll<S: AsyncRead + AsyncWrite + Unpin>(
    cx: &mut Context<'_>,
    down: &mut FrameIo<S>,
    up: &mut FrameIo<S>,
    t: &mut Traffic,
) -> Poll<Pumped> {
    let mut moved = false;
    let out = 'out: {
        let mut n_out = 0;
        let node = direction(cx, up, down, &mut n_out, &mut moved);
        t.bytes_out += n_out;
        let node_yield = matches!(node, Step::Yield);
        match node {
            Step::Stop(DirStop::Frame(r)) => break 'out Pumped::Node(r),
            Step::Stop(DirStop::Busy) => break 'out Pumped::ClientBusy,
            Step::Stop(DirStop::WriteFailed(e)) => break 'out Pumped::ClientWriteFailed(e),
            Step::Idle | Step::Yield => {}
        }
        let mut n_in = 0;
        let client = direction(cx, down, up, &mut n_in, &mut moved);
        t.bytes_in += n_in;
        match client {
            Step::Stop(DirStop::Frame(r)) => Pumped::Client(r),
            Step::Stop(DirStop::Busy) => Pumped::NodeBusy,
            Step::Stop(DirStop::WriteFailed(e)) => Pumped::NodeWriteFailed(e),
            client => {
                if node_yield || matches!(client, Step::Yield) {
                    // A turn ended with bytes maybe still ready: poll again soon.
                    cx.waker().wake_by_ref();
                }
                // Otherwise both sides read until Pending: the task sleeps until either has more.
                if moved {
                    t.last = Instant::now();
                }
                return Poll::Pending;
            }
        }
    };
    if moved {
        t.last = Instant::now();
    }
    Poll::Ready(out)
}

/// Relays from `src` to `dst` until `src` has nothing to read or something stops it; `relayed`
/// grows by the bytes of whole frames scanned (and written, or owed).
/// Kept as one function: the per-message hot path; splitting it costs a call per read batch.
fn direction<S: AsyncRead + AsyncWrite + Unpin>(
    cx: &mut Context<'_>,
    src: &mut FrameIo<S>,
    dst: &mut FrameIo<S>,
    relayed: &mut u64,
    moved: &mut bool,
) -> Step {
    debug_assert!(
        src.owed.is_none(),
        "owed bytes are finished before the pump runs"
    );
    let mut reads = 0;
    loop {
        if !src.buf.is_empty() {
            // Bytes kept from an earlier batch: relay what is whole, then read more into the buffer.
            let scan = src.track.scan(&src.buf);
            if scan.relay > 0 {
                *relayed += scan.relay as u64;
                *moved = true;
                match dst.try_write(cx, &src.buf[..scan.relay]) {
                    Ok(Tried::All) => {
                        src.buf.advance(scan.relay);
                        src.release_if_empty();
                        continue;
                    }
                    Ok(Tried::Partly(done)) => {
                        src.owed = Some((done, scan.relay));
                        return Step::Stop(DirStop::Busy);
                    }
                    Err(e) => {
                        src.owed = Some((0, scan.relay));
                        return Step::Stop(DirStop::WriteFailed(e));
                    }
                }
            }
            if scan.stop || src.eof {
                if let Some(r) = src.read_now() {
                    return Step::Stop(DirStop::Frame(r));
                }
            }
            if reads == READS_PER_TURN {
                return Step::Yield;
            }
            reads += 1;
            src.reserve_front();
            match src.poll_fill(cx) {
                Poll::Pending => return Step::Idle,
                Poll::Ready(Err(e)) => return Step::Stop(DirStop::Frame(Err(e.into()))),
                Poll::Ready(Ok(_)) => {}
            }
            continue;
        }
        if src.eof {
            return Step::Stop(DirStop::Frame(Ok(None)));
        }
        if reads == READS_PER_TURN {
            return Step::Yield;
        }
        reads += 1;
        // Uninitialized: zeroing 8 KiB per read cost more than the rest of a small message.
        let mut scratch = [MaybeUninit::<u8>::uninit(); READ_CHUNK];
        let mut rb = ReadBuf::uninit(&mut scratch);
        match src.poll_read_into(cx, &mut rb) {
            Poll::Pending => return Step::Idle,
            Poll::Ready(Err(e)) => return Step::Stop(DirStop::Frame(Err(e.into()))),
            Poll::Ready(Ok(())) => {}
        }
        let batch = rb.filled();
        let scan = src.track.scan(batch);
        let mut kept = 0;
        if scan.relay > 0 {
            *relayed += scan.relay as u64;
            *moved = true;
            match dst.try_write(cx, &batch[..scan.relay]) {
                Ok(Tried::All) => kept = scan.relay,
                Ok(Tried::Partly(done)) => {
                    src.buf.extend_from_slice(batch);
                    src.owed = Some((done, scan.relay));
                    return Step::Stop(DirStop::Busy);
                }
                Err(e) => {
                    src.buf.extend_from_slice(batch);
                    src.owed = Some((0, scan.relay));
                    return Step::Stop(DirStop::WriteFailed(e));
                }
            }
        }
        // The rest (an incomplete frame, or one the relay handles) waits in the buffer.
        src.buf.extend_from_slice(&batch[kept..]);
    }
}

/// Writes the bytes `src` owes `dst` (a batch the socket did not take at once), waiting at most
/// [`super::io::WRITE_TIMEOUT`]. Returns the batch's length (all of it written now).
///
/// # Errors
/// The write's; the owed bytes then stay in `src` ([`super::io::unsent`] gives their frames).
pub(super) async fn finish<S: AsyncRead + AsyncWrite + Unpin>(
    src: &mut FrameIo<S>,
    dst: &mut FrameIo<S>,
) -> Result<usize, FrameError> {
    let Some((sent, end)) = src.owed else {
        return Ok(0);
    };
    dst.write_bytes(&src.buf[sent..end]).await?;
    src.buf.advance(end);
    src.owed = None;
    src.release_if_empty();
    Ok(end)
}

#[cfg(test)]
#[path = "pump_tests.rs"]
mod tests;
