//! The runtime state one node shares across its connections (SPEC section 9): identity, the
//! control knobs (`POST /control/*`), request stats, and the task set joined on shutdown.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use hyper::header::HeaderValue;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How many recent request paths `GET /control/stats` reports.
const STATS_PATHS: usize = 100;

/// Runtime state shared by every connection of one node.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) id: String,
    /// The bound main port, as reported by `/data`.
    pub(crate) port: u16,
    pub(crate) id_header: HeaderValue,
    pub(crate) version_header: Option<HeaderValue>,
    pub(crate) zone_header: Option<HeaderValue>,
    /// Business health switch: `true` while set down.
    pub(crate) down: AtomicBool,
    /// gRPC health alone set down (`/control/grpc-health`): HTTP health stays as `down` says.
    pub(crate) grpc_down: AtomicBool,
    /// While set, health answers follow a repeating down/up pattern instead of `down`.
    pub(crate) flap: Mutex<Option<Flap>>,
    /// Latency added before every non-control response.
    pub(crate) delay_ms: AtomicU64,
    /// `true` while requests are held unanswered.
    pub(crate) hang: watch::Sender<bool>,
    /// Idle keep-alive close for HTTP/1.1 connections, in ms; 0 = never.
    pub(crate) idle_ms: watch::Sender<u64>,
    /// Whether HTTP/1.1 responses advertise `Keep-Alive: timeout=<idle>` while `idle_ms` is set.
    pub(crate) advertise_keepalive: AtomicBool,
    /// `/control/keepalive?reset=1`: idle connections are ended by RST instead of FIN.
    pub(crate) idle_reset: AtomicBool,
    /// h2 connections get a graceful GOAWAY after this many streams; 0 = never.
    pub(crate) goaway_after: AtomicU64,
    /// `POST /control/grpc-read-delay?ms=N`: gRPC connections accepted from then on see every
    /// byte they receive N ms late (a busy event loop, CASE-25 C); 0 = off.
    pub(crate) grpc_read_delay_ms: AtomicU64,
    /// gRPC-port connections that carried a stream so far (`/control/stats` `grpc_connections`).
    pub(crate) grpc_connections: AtomicU64,
    /// `Ticks` streams open now: made and not yet finished or dropped by a cancel
    /// (`/control/stats` `grpc_open_ticks`).
    pub(crate) grpc_open_ticks: Arc<AtomicU64>,
    /// While `true`, every non-control request behaves as `/abort` (`POST /control/abort-all`).
    pub(crate) abort_all: AtomicBool,
    /// Body bytes read before such an abort; `u64::MAX` = the whole body.
    pub(crate) abort_after: AtomicU64,
    /// `POST /control/status-all?code=N`: every non-control, non-health request answers N (as
    /// `/status/N`); 0 = off.
    pub(crate) status_all: AtomicU64,
    pub(crate) stats: Mutex<Stats>,
    /// Flips to `true` once, when the node stops.
    pub(crate) shutdown: watch::Sender<bool>,
    pub(crate) tasks: TaskSet,
    pub(crate) pattern: Bytes,
}

/// A flapping health pattern (`POST /control/health?state=flap&down=N&up=M`): `down` answers
/// down, then `up` answers up, repeating, counted per health request (so per probe).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flap {
    pub(crate) down: u64,
    pub(crate) up: u64,
    /// Health answers given so far in this pattern.
    pub(crate) seen: u64,
}

impl Flap {
    pub(crate) fn next_is_down(&mut self) -> bool {
        let period = self.down + self.up;
        let down = period > 0 && self.seen % period < self.down;
        self.seen = self.seen.wrapping_add(1);
        down
    }
}

/// Requests seen (control requests excluded).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) requests: u64,
    pub(crate) paths: VecDeque<String>,
    /// Data messages (text or binary, whole) the node's WebSocket sessions received.
    pub(crate) ws_messages: u64,
}

impl State {
    /// Counts a non-control request, then holds it while the node hangs and applies the delay.
    /// Node shutdown releases held requests, so h2 stream tasks (spawned outside the task set)
    /// cannot outlive the node.
    pub(crate) async fn admit(&self, path: &str) {
        self.record(path);
        let mut hang = self.hang.subscribe();
        let mut shutdown = self.shutdown.subscribe();
        // wait_for's guards hold the watch locks: the select drops them at once (`_`) and an Err
        // cannot happen, since both senders live in State, which the caller borrows.
        tokio::select! {
            _ = hang.wait_for(|hung| !*hung) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        let delay = self.delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(delay)) => {}
                _ = shutdown.wait_for(|stop| *stop) => {}
            }
        }
    }

    pub(crate) fn record(&self, path: &str) {
        let mut stats = self.stats();
        stats.requests += 1;
        if stats.paths.len() == STATS_PATHS {
            stats.paths.pop_front();
        }
        stats.paths.push_back(path.to_owned());
    }

    /// Counts one data message received on a WebSocket (`GET /control/stats` `ws_messages`).
    pub(crate) fn record_ws_message(&self) {
        self.stats().ws_messages += 1;
    }

    pub(crate) fn stats(&self) -> MutexGuard<'_, Stats> {
        // Stats stay consistent even if a holder panicked: every update is a single step.
        self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The answer for one health request (`/health`, `/actuator/health/business`): `true` = down.
    /// While flapping, every call advances the pattern by one answer.
    pub(crate) fn health_is_down(&self) -> bool {
        let mut flap = self.flap.lock().unwrap_or_else(PoisonError::into_inner);
        match flap.as_mut() {
            Some(f) => f.next_is_down(),
            None => self.down.load(Ordering::Relaxed),
        }
    }
}

/// Tracked spawned tasks (connections, WebSockets), joined or aborted on shutdown.
#[derive(Debug, Default)]
pub(crate) struct TaskSet {
    pub(crate) set: Mutex<JoinSet<()>>,
}

impl TaskSet {
    pub(crate) fn lock(&self) -> MutexGuard<'_, JoinSet<()>> {
        self.set.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Spawns `task`, first reaping finished tasks so the set stays bounded by live tasks.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut set = self.lock();
        while let Some(done) = set.try_join_next() {
            report_join(done);
        }
        set.spawn(task);
    }

    /// Waits up to `grace` for every task, then aborts the rest.
    pub(crate) async fn drain(&self, grace: Duration) {
        let mut set = std::mem::take(&mut *self.lock());
        let all_done = async {
            while let Some(done) = set.join_next().await {
                report_join(done);
            }
        };
        if tokio::time::timeout(grace, all_done).await.is_err() {
            set.shutdown().await;
        }
    }
}

/// A task that panicked is a bug in the mock: make it visible on stderr.
pub(crate) fn report_join(done: Result<(), tokio::task::JoinError>) {
    if let Err(err) = done {
        if err.is_panic() {
            eprintln!("mock-backend: task panicked: {err}");
        }
    }
}
