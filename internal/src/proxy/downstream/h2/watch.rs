//! [`H2Watch`]: the downstream connection's IO wrapper that enforces the HTTP/2 abuse limits of
//! SPEC section 4 (CASE-25, CASE-26) on the raw bytes, around hyper's h2 server.
//!
//! A connection that starts with the HTTP/2 client preface has every frame it sends and every
//! frame the gateway sends it accounted by a [`Meter`]; any other connection (HTTP/1.1) passes
//! untouched. When the meter trips, the bytes just read are withheld from hyper, the gateway
//! writes `GOAWAY(ENHANCE_YOUR_CALM)` at the next frame boundary of its own output, closes the
//! socket, and fails hyper's IO so that the connection and all of its streams end at once (their
//! upstream requests are dropped, i.e. cancelled). The work a flood costs is bounded by one read
//! buffer past the budget. hyper's h2 keeps its own caps (CONTINUATION count, header list size,
//! and pending-accept resets, set above this meter's burst in `server::accept` so the meter trips
//! first); the lifetime cap on resets it sends is turned off in favour of the rate here
//! (hyperium/h2 #856).
//!
//! With a source address ([`H2Watch::from_source`]), every trip is a strike against that address
//! ([`super::penalty`]), and a connection from an address that has earned a hold waits for it
//! before its first byte is read (HTTP/1.x or HTTP/2 alike: the hold comes before detection).
//!
//! Spawns nothing; the header-block deadline and the hold are timers polled by the reads
//! themselves.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::frames::{goaway, Abuse, FrameScanner, Meter, ENHANCE_YOUR_CALM};
use super::penalty::{HeldSlot, SOURCES};

/// The HTTP/2 client connection preface (RFC 9113 section 3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// How long the gateway tries to write its GOAWAY to a client that does not read, before it
/// closes the socket without it.
const GOAWAY_WRITE_LIMIT: Duration = Duration::from_secs(1);

/// Called once when a connection trips, with the limit it broke (for the metric and log line).
pub type OnAbuse = Arc<dyn Fn(Abuse) + Send + Sync>;

enum Mode {
    /// Fewer than 24 bytes read, all matching the preface so far.
    Detect(usize),
    /// Not HTTP/2 prior knowledge: bytes pass untouched.
    Plain,
    /// HTTP/2: frames are accounted.
    H2,
}

/// Where the connection is in its source's hold (see the module docs).
enum Hold {
    /// Not looked up yet (nothing read).
    Unchecked,
    /// Waiting until the source's hold has passed; the slot counts it among the source's held
    /// connections until then.
    Holding {
        sleep: Pin<Box<Sleep>>,
        _slot: HeldSlot,
    },
    /// Reading freely.
    Done,
}

struct Trip {
    bytes: Vec<u8>,
    written: usize,
    give_up: Pin<Box<Sleep>>,
    abuse: Abuse,
}

/// The HTTP/2 accounting of one connection: both frame scanners and the meter (about 0.5 KiB).
/// Allocated when the preface is seen, so an HTTP/1.x connection (and every WebSocket upgraded
/// from one) never holds it (memory per idle WebSocket).
struct H2State {
    rx: FrameScanner,
    tx: FrameScanner,
    meter: Meter,
}

pin_project_lite::pin_project! {
    /// See the module docs.
    pub struct H2Watch<T> {
        #[pin]
        inner: T,
        mode: Mode,
        // Set when `mode` becomes `H2`.
        h2: Option<Box<H2State>>,
        resets_per_second: u32,
        header_timeout: Duration,
        header_timer: Option<Pin<Box<Sleep>>>,
        trip: Option<Trip>,
        on_abuse: OnAbuse,
        // The client's address, for strikes and holds; `None`: neither.
        source: Option<IpAddr>,
        hold: Hold,
    }
}

impl<T> H2Watch<T> {
    /// Wraps `inner` with a budget of `resets_per_second` stream resets, header blocks bounded by
    /// `header_timeout`; `on_abuse` hears about a trip.
    pub fn new(
        inner: T,
        resets_per_second: u32,
        header_timeout: Duration,
        on_abuse: OnAbuse,
    ) -> Self {
        H2Watch {
            inner,
            mode: Mode::Detect(0),
            h2: None,
            resets_per_second,
            header_timeout,
            header_timer: None,
            trip: None,
            on_abuse,
            source: None,
            hold: Hold::Done,
        }
    }

    /// Counts this connection's trips against `ip` and holds it first if `ip` has earned a hold
    /// (SPEC section 4; [`super::penalty`]).
    pub fn from_source(mut self, ip: IpAddr) -> Self {
        self.source = Some(ip);
        self.hold = Hold::Unchecked;
        self
    }

    /// Ready once the source's hold (if any) has passed; an error if the source has too many
    /// connections held already (this one is refused).
    fn poll_hold(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        loop {
            match this.hold {
                Hold::Done => return Poll::Ready(Ok(())),
                Hold::Unchecked => {
                    let Some(ip) = *this.source else {
                        *this.hold = Hold::Done;
                        continue;
                    };
                    let now = Instant::now();
                    let Some(until) = SOURCES.held_until(ip, now) else {
                        *this.hold = Hold::Done;
                        continue;
                    };
                    let Some(slot) = SOURCES.hold_slot(ip) else {
                        *this.hold = Hold::Done;
                        tracing::info!(source = %ip, "connection refused: its source has too many connections held");
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::ConnectionRefused,
                            "source held for h2 abuse",
                        )));
                    };
                    tracing::info!(
                        source = %ip,
                        strikes = SOURCES.strikes(ip),
                        hold_ms = until.saturating_duration_since(now).as_millis() as u64,
                        "connection from a source that keeps breaking h2 abuse limits held before it is read"
                    );
                    *this.hold = Hold::Holding {
                        sleep: Box::pin(tokio::time::sleep_until(until)),
                        _slot: slot,
                    };
                }
                Hold::Holding { sleep, .. } => {
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    *this.hold = Hold::Done;
                }
            }
        }
    }
}

fn aborted(abuse: Abuse) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        format!("h2 connection ended for abuse: {}", abuse.reason()),
    )
}

impl<T: AsyncWrite> H2Watch<T> {
    /// Starts the trip: the GOAWAY to write, the limit on trying.
    fn start_trip(self: Pin<&mut Self>, abuse: Abuse) {
        let this = self.project();
        if this.trip.is_some() {
            return;
        }
        let last_stream = this.h2.as_ref().map_or(0, |h| h.meter.last_client_stream());
        let strikes = this.source.map(|ip| SOURCES.strike(ip, Instant::now()));
        tracing::warn!(
            reason = abuse.reason(),
            last_stream,
            source = this.source.map(tracing::field::display),
            strikes,
            "h2 client broke an abuse limit; sending GOAWAY(ENHANCE_YOUR_CALM)"
        );
        (this.on_abuse)(abuse);
        *this.trip = Some(Trip {
            bytes: goaway(last_stream, ENHANCE_YOUR_CALM, abuse.reason().as_bytes()),
            written: 0,
            give_up: Box::pin(tokio::time::sleep(GOAWAY_WRITE_LIMIT)),
            abuse,
        });
    }

    /// Writes the GOAWAY (once the gateway's own output is at a frame boundary) and shuts the
    /// socket; ready with the error hyper gets from then on.
    fn drive_trip(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Error> {
        let mut this = self.project();
        let trip = this
            .trip
            .as_mut()
            .expect("drive_trip runs only once tripped");
        let abuse = trip.abuse;
        if trip.give_up.as_mut().poll(cx).is_ready() {
            return Poll::Ready(aborted(abuse));
        }
        if !this.h2.as_ref().is_none_or(|h| h.tx.at_boundary()) {
            // hyper is finishing a frame; its next write completes it (see poll_write).
            return Poll::Pending;
        }
        while trip.written < trip.bytes.len() {
            match this
                .inner
                .as_mut()
                .poll_write(cx, &trip.bytes[trip.written..])
            {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(aborted(abuse)),
                Poll::Ready(Ok(n)) => trip.written += n,
                Poll::Pending => return Poll::Pending,
            }
        }
        if this.inner.as_mut().poll_flush(cx).is_pending() {
            return Poll::Pending;
        }
        let _ = this.inner.as_mut().poll_shutdown(cx);
        Poll::Ready(aborted(abuse))
    }
}

impl<T: AsyncRead + AsyncWrite> AsyncRead for H2Watch<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.trip.is_some() {
            return self.drive_trip(cx).map(Err);
        }
        if !matches!(self.hold, Hold::Done) {
            if let Err(e) = std::task::ready!(self.as_mut().poll_hold(cx)) {
                return Poll::Ready(Err(e));
            }
        }
        let before = buf.filled().len();
        let this = self.as_mut().project();
        if matches!(this.mode, Mode::Plain) {
            return this.inner.poll_read(cx, buf);
        }
        match this.inner.poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            Poll::Pending => {
                let this = self.as_mut().project();
                let Some(deadline) = this.h2.as_ref().and_then(|h| h.meter.header_deadline())
                else {
                    *this.header_timer = None;
                    return Poll::Pending;
                };
                let timer = this
                    .header_timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if timer.deadline() != deadline {
                    timer.as_mut().reset(deadline);
                }
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.as_mut().start_trip(Abuse::HeaderBlockTimeout);
                return self.drive_trip(cx).map(Err);
            }
            other => return other,
        }
        let this = self.as_mut().project();
        let mut new = &buf.filled()[before..];
        if let Mode::Detect(seen) = this.mode {
            let take = (PREFACE.len() - *seen).min(new.len());
            if new[..take] != PREFACE[*seen..*seen + take] {
                *this.mode = Mode::Plain;
                return Poll::Ready(Ok(()));
            }
            *seen += take;
            new = &new[take..];
            if *seen < PREFACE.len() {
                return Poll::Ready(Ok(()));
            }
            *this.mode = Mode::H2;
        }
        let now = Instant::now();
        let (resets, header_timeout) = (*this.resets_per_second, *this.header_timeout);
        let h2 = this.h2.get_or_insert_with(|| {
            Box::new(H2State {
                rx: FrameScanner::default(),
                tx: FrameScanner::default(),
                meter: Meter::new(resets, header_timeout, now),
            })
        });
        let H2State { rx, meter, .. } = &mut **h2;
        if let Err(abuse) = rx.feed(new, |f| meter.client_frame(f, now)) {
            buf.set_filled(before);
            self.as_mut().start_trip(abuse);
            return self.drive_trip(cx).map(Err);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + AsyncWrite> AsyncWrite for H2Watch<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.as_mut().project();
        match this.mode {
            Mode::H2 => {}
            Mode::Detect(_) => {
                // The gateway speaks first only on HTTP/1.x (an answer to a short request).
                *this.mode = Mode::Plain;
                return this.inner.poll_write(cx, buf);
            }
            Mode::Plain => return this.inner.poll_write(cx, buf),
        }
        let Some(h2) = this.h2.as_mut() else {
            // H2 mode is set together with its state (poll_read).
            return this.inner.poll_write(cx, buf);
        };
        let tripped = this.trip.is_some();
        let buf = if tripped {
            if h2.tx.at_boundary() {
                return self.drive_trip(cx).map(Err);
            }
            // Finish the frame hyper started, so the GOAWAY lands on a boundary.
            &buf[..h2.tx.left_in_frame().min(buf.len())]
        } else {
            buf
        };
        let n = match this.inner.poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => n,
            other => return other,
        };
        let now = Instant::now();
        let H2State { tx, meter, .. } = &mut **h2;
        let res = tx.feed(&buf[..n], |f| meter.gateway_frame(f, now));
        if let Err(abuse) = res {
            self.as_mut().start_trip(abuse);
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
