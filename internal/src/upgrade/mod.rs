//! The gateway upgrades itself (SPEC section 13): the running process (the old one) starts the
//! binary at its own path, hands its listening sockets and its state over to it, and leaves once
//! the new process serves; or, when the new binary fails, keeps serving as if nothing happened.
//!
//! [`Upgrader`] is the old process's side: a trigger (`SIGUSR2` [`watch_signal`], `POST
//! /admin/upgrade`, a connection on `[server] upgrade_socket` [`watch_socket`]) starts one upgrade at a
//! time; a trigger meanwhile is refused with a WARN. The upgrade spawns the new process
//! ([`child`]), waits for its hello, sends the [`message::Handover`] (listeners by `SCM_RIGHTS`
//! [`fds`], bindings, drains, counters) and waits for "ready", all within `upgrade_timeout`. Ready:
//! [`Upgrader::handed_over`] resolves and the server shuts down as on SIGTERM. Anything else: the new
//! process is killed, the reason logged and counted, and the listeners were never touched.
//! After ready, the idle HTTP/1.1 connections the server gives the [`Mover`] cross the same channel
//! ([`moving`]) until [`Upgrader::join`] closes it at the end of the drain. [`receive`] is the new
//! process's side. Spawns the upgrade task and the two watchers; never reads or writes a connection
//! (the server owns them) and never closes a listener itself.

pub mod child;
mod driver;
pub mod fds;
pub mod message;
pub mod moving;
pub mod receive;
mod triggers;

pub use triggers::{usr2, watch_signal, watch_socket};

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::UnixStream;
use tokio::process::Child;
use tokio_util::sync::CancellationToken;

use crate::metrics::{KindLabel, Metrics};
use crate::proxy::moving::Mover;
use child::SelfExe;
use message::{Item, ListenerRole};

/// Why an upgrade failed (the old process's log) or why a new process could not take over.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    /// The handover channel failed: closed, unreadable, not openable.
    #[error("handover channel: {0}")]
    Channel(#[source] std::io::Error),
    /// A frame could not be read (an unknown version included).
    #[error(transparent)]
    Message(#[from] message::MessageError),
    /// The other process refused.
    #[error("handover refused: {0}")]
    Refused(String),
    /// The new binary could not be started.
    #[error("cannot start {path}: {source}")]
    Spawn {
        /// The binary.
        path: std::path::PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The new process exited before it was ready.
    #[error("the new process exited ({0}) before it was ready")]
    Exited(std::process::ExitStatus),
    /// Not ready within `upgrade_timeout`.
    #[error("the new process was not ready within upgrade_timeout")]
    Timeout,
    /// The gateway shuts down (SIGTERM): the upgrade is stopped, not finished.
    #[error("the gateway is shutting down")]
    ShuttingDown,
}

impl UpgradeError {
    /// The `gateway_upgrades_total{result}` label of this failure (exhaustive: a new kind chooses).
    pub fn result(&self) -> &'static str {
        match self {
            UpgradeError::Timeout => "timeout",
            UpgradeError::Channel(_)
            | UpgradeError::Message(_)
            | UpgradeError::Refused(_)
            | UpgradeError::Spawn { .. }
            | UpgradeError::Exited(_)
            | UpgradeError::ShuttingDown => "failed",
        }
    }
}

/// An upgrade was triggered while one runs (or after this process handed over).
#[derive(Debug, thiserror::Error)]
#[error("an upgrade is already running")]
pub struct Busy;

/// One listening socket the old process can hand over: a duplicate of the descriptor the server
/// accepts on.
#[derive(Debug)]
pub struct HeldListener {
    /// Which listener.
    pub role: ListenerRole,
    /// Its local address.
    pub addr: SocketAddr,
    /// The duplicate.
    pub fd: OwnedFd,
}

/// What the handover carries besides the listeners, read when the new process says hello.
pub type StateSnapshot = Box<dyn Fn() -> Vec<Item> + Send + Sync>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Running,
    HandedOver,
}

/// The old process's side of upgrades; see the module docs.
pub struct Upgrader {
    exe: SelfExe,
    timeout: Duration,
    metrics: Arc<Metrics>,
    phase: Mutex<Phase>,
    listeners: Mutex<Vec<HeldListener>>,
    state: StateSnapshot,
    /// Where the server's idle HTTP/1.1 connections go once the new process is ready.
    mover: Arc<Mover>,
    handed_over: CancellationToken,
    /// Cancelled on shutdown: an upgrade still running is rolled back.
    stop: CancellationToken,
    /// The running upgrade's task.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Upgrader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (exe, phase) = (&self.exe, &self.phase);
        write!(f, "Upgrader {{ exe: {exe:?}, phase: {phase:?}, .. }}")
    }
}

impl Upgrader {
    /// An upgrader starting `exe`, allowing the new process `timeout` to be ready, handing over
    /// the listeners and what the snapshot returns (`handover`), then the idle connections the
    /// server gives `mover`, counting on `metrics`. `busy`
    /// starts it in the running phase: a process being upgraded into refuses triggers until it
    /// calls [`Upgrader::idle`].
    pub fn new(
        exe: SelfExe,
        timeout: Duration,
        metrics: Arc<Metrics>,
        handover: (Vec<HeldListener>, StateSnapshot),
        mover: Arc<Mover>,
        busy: bool,
    ) -> Arc<Self> {
        let (listeners, state) = handover;
        Arc::new(Upgrader {
            exe,
            timeout,
            metrics,
            phase: Mutex::new(if busy { Phase::Running } else { Phase::Idle }),
            listeners: Mutex::new(listeners),
            state,
            mover,
            handed_over: CancellationToken::new(),
            stop: CancellationToken::new(),
            task: Mutex::new(None),
        })
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase
            .lock()
            .expect("upgrade phase mutex is never poisoned: no panics while held")
    }

    /// Ends the start-up of a process that was upgraded into: triggers are taken from now on.
    pub fn idle(&self) {
        let mut p = self.phase();
        if *p == Phase::Running {
            *p = Phase::Idle;
        }
    }

    /// True while an upgrade runs (or after this process handed over).
    pub fn is_running(&self) -> bool {
        *self.phase() != Phase::Idle
    }

    /// Resolves once a new process took over; the server then shuts down.
    pub async fn handed_over(&self) {
        self.handed_over.cancelled().await;
    }

    /// Closes the held listener duplicates: on shutdown, so that the listening sockets close with
    /// the server's own listeners (new connections are refused, not queued).
    pub fn release_listeners(&self) {
        self.listeners
            .lock()
            .expect("listener mutex is never poisoned: no panics while held")
            .clear();
    }

    /// Starts an upgrade (`by` names the trigger in the log): spawns the new binary and hands over.
    ///
    /// # Errors
    /// [`Busy`] while an upgrade runs; logged here with a WARN.
    pub fn trigger(self: &Arc<Self>, by: &'static str) -> Result<(), Busy> {
        self.start(by, None)
    }

    /// Claims the phase and spawns the upgrade task over `channel` (`None`: spawn the binary).
    fn start(self: &Arc<Self>, by: &'static str, channel: Option<UnixStream>) -> Result<(), Busy> {
        {
            let mut p = self.phase();
            if self.stop.is_cancelled() {
                tracing::warn!(
                    trigger = by,
                    "upgrade refused: the gateway is shutting down"
                );
                return Err(Busy);
            }
            if *p != Phase::Idle {
                tracing::warn!(
                    trigger = by,
                    "upgrade refused: an upgrade is already running"
                );
                return Err(Busy);
            }
            *p = Phase::Running;
        }
        tracing::info!(trigger = by, path = %self.exe.path.display(), "upgrade started");
        let me = self.clone();
        let task = tokio::spawn(async move { me.run(channel).await });
        // The previous upgrade's task has ended: the phase was idle.
        *self
            .task
            .lock()
            .expect("task mutex is never poisoned: no panics while held") = Some(task);
        Ok(())
    }

    /// One upgrade from start to its outcome (module docs).
    async fn run(self: Arc<Self>, channel: Option<UnixStream>) {
        let mut child: Option<Child> = None;
        let mut peer_pid: Option<u32> = None;
        let mut kept: Option<UnixStream> = None;
        let outcome = async {
            let mut ch = self.open(channel, &mut child, &mut peer_pid)?;
            let r = driver::hand_over(&self, &mut ch, &mut child).await;
            kept = Some(ch);
            r
        };
        let outcome = tokio::select! {
            r = tokio::time::timeout(self.timeout, outcome) => r.unwrap_or(Err(UpgradeError::Timeout)),
            () = self.stop.cancelled() => Err(UpgradeError::ShuttingDown),
        };
        match outcome {
            Ok((pid, version)) => {
                tracing::info!(
                    new_pid = pid,
                    "upgrade handed over; this process stops accepting and shuts down"
                );
                // Opened before the drain signal (which the handed-over state sends): idle
                // connections move from their first look at the signal on.
                let taken = (version >= message::CONNECTIONS_VERSION).then(|| self.mover.open());
                *self.phase() = Phase::HandedOver;
                self.handed_over.cancel();
                if let (Some(rx), Some(mut ch)) = (taken, kept) {
                    let sent = moving::send(&mut ch, rx, self.timeout).await;
                    tracing::info!(
                        new_pid = pid,
                        connections = sent,
                        "upgrade: idle connections moved"
                    );
                }
            }
            Err(UpgradeError::ShuttingDown) => {
                child::stop(child.as_mut(), peer_pid).await;
                tracing::warn!(new_pid = ?peer_pid, "upgrade stopped: the gateway is shutting down");
                self.metrics.upgrade("failed");
            }
            Err(e) => {
                child::stop(child.as_mut(), peer_pid).await;
                tracing::warn!(reason = %e, new_pid = ?peer_pid, "upgrade failed; serving on");
                self.metrics.upgrade(e.result());
                *self.phase() = Phase::Idle;
            }
        }
    }

    /// The handover channel: `channel` from `upgrade_socket` (its peer's pid into `peer_pid`), or
    /// a socket pair whose other end goes to the binary spawned here (into `child`).
    ///
    /// # Errors
    /// [`UpgradeError::Channel`] when the pair cannot be made; [`UpgradeError::Spawn`].
    fn open(
        &self,
        channel: Option<UnixStream>,
        child: &mut Option<Child>,
        peer_pid: &mut Option<u32>,
    ) -> Result<UnixStream, UpgradeError> {
        if let Some(ch) = channel {
            *peer_pid = ch
                .peer_cred()
                .ok()
                .and_then(|c| c.pid())
                .and_then(|p| u32::try_from(p).ok());
            return Ok(ch);
        }
        let (ours, theirs) =
            std::os::unix::net::UnixStream::pair().map_err(UpgradeError::Channel)?;
        let spawned = child::spawn(&self.exe, OwnedFd::from(theirs)).map_err(|source| {
            UpgradeError::Spawn {
                path: self.exe.path.clone(),
                source,
            }
        })?;
        *peer_pid = spawned.id();
        tracing::info!(new_pid = ?spawned.id(), "upgrade: new process started");
        *child = Some(spawned);
        ours.set_nonblocking(true).map_err(UpgradeError::Channel)?;
        UnixStream::from_std(ours).map_err(UpgradeError::Channel)
    }

    /// Rolls back an upgrade still running and waits for its task (on shutdown); after a handover,
    /// closes the mover (the server's connections have ended) and waits for the last connections
    /// to be sent.
    pub async fn join(&self) {
        self.mover.close();
        self.stop.cancel();
        let task = self
            .task
            .lock()
            .expect("task mutex is never poisoned: no panics while held")
            .take();
        if let Some(t) = task {
            if let Err(e) = t.await {
                tracing::warn!(error = %e, "upgrade task failed");
            }
        }
    }
}

/// Counts what a new process received (`gateway_upgrade_moved_total{kind="listener"}`) and the
/// upgrade that started it (`gateway_upgrades_total{result="success"}`).
pub fn count_success(metrics: &Metrics, listeners: usize) {
    metrics.upgrade("success");
    metrics
        .upgrade_moved
        .get_or_create(&KindLabel { kind: "listener" })
        .inc_by(listeners as u64);
}

/// Counts connections of `kind` a new process took (`gateway_upgrade_moved_total{kind}`).
pub fn count_moved(metrics: &Metrics, kind: &'static str, n: usize) {
    metrics
        .upgrade_moved
        .get_or_create(&KindLabel { kind })
        .inc_by(n as u64);
}

/// Borrowed descriptors of `held`, in order (for [`fds::send_fds`]).
fn borrowed(held: &[HeldListener]) -> Vec<std::os::fd::BorrowedFd<'_>> {
    held.iter().map(|h| h.fd.as_fd()).collect()
}
