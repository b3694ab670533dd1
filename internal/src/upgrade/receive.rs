//! The new process's side of the handover (SPEC section 13): open the channel ([`Source`]), say
//! hello, take the handover and its listening sockets ([`receive`]), and once serving on them tell
//! the old process ([`Received::ready`]). Anything it cannot read is refused on the channel (the old
//! process then rolls back) and returned as an error: the new process exits, it never panics.

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use tokio::net::UnixStream;

use super::fds::{read_frame, recv_fds, write_frame};
use super::message::{
    parse_from_old, to_json, BindingItem, FromNew, FromOld, Item, ListenerRole, HANDOVER_VERSION,
};
use super::moving::Arrivals;
use super::UpgradeError;
use crate::metrics::CarriedSample;

/// Most descriptors a handover may announce: two per worker and two more, for any machine.
const MAX_FDS: usize = 4096;

/// Where the handover channel of a new process is.
#[derive(Debug, Clone)]
pub enum Source {
    /// Standard input: the old process started this one ([`super::child::UPGRADE_FD_ENV`]).
    Stdin,
    /// The old process's `[server] upgrade_socket` (`--upgrade-from <socket>`).
    Socket(PathBuf),
}

/// An operator drain that moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovedDrain {
    /// Node id.
    pub node: String,
    /// Deadline in Unix milliseconds.
    pub deadline_ms: u64,
    /// Period in milliseconds.
    pub period_ms: u64,
}

/// What a new process received, until it is ready.
#[derive(Debug)]
pub struct Received {
    channel: UnixStream,
    /// The old process's pid.
    pub from_pid: u32,
    listeners: Vec<(ListenerRole, SocketAddr, std::net::TcpListener)>,
    /// How many listening sockets were received.
    pub listener_count: usize,
    /// Bindings of the in-memory store, least recently used first.
    pub bindings: Vec<BindingItem>,
    /// Operator drains.
    pub drains: Vec<MovedDrain>,
    /// Counter and histogram samples to continue from.
    pub samples: Vec<CarriedSample>,
}

impl Received {
    /// Takes the received listeners of `role` (in the order sent), with their addresses.
    pub fn take(&mut self, role: ListenerRole) -> Vec<(SocketAddr, std::net::TcpListener)> {
        let (taken, rest) = std::mem::take(&mut self.listeners)
            .into_iter()
            .partition(|(r, _, _)| *r == role);
        self.listeners = rest;
        taken.into_iter().map(|(_, a, l)| (a, l)).collect()
    }

    /// How many listeners of `role` were received and not taken yet.
    pub fn count(&self, role: ListenerRole) -> usize {
        self.listeners.iter().filter(|(r, _, _)| *r == role).count()
    }

    /// The received listeners nothing took, closed here (the old process closes its copies).
    pub fn drop_untaken(&mut self) {
        for (role, addr, _) in self.listeners.drain(..) {
            tracing::info!(role = role.as_str(), %addr, "received listener not in the config: closed");
        }
    }

    /// Tells the old process that this one accepts on every listener it received; returns where
    /// the old process's idle connections arrive from then on.
    ///
    /// # Errors
    /// The channel's write error (the old process is gone).
    pub async fn ready(mut self) -> std::io::Result<Arrivals> {
        let pid = std::process::id();
        write_frame(&mut self.channel, &to_json(&FromNew::Ready { pid })).await?;
        Ok(Arrivals {
            channel: self.channel,
        })
    }
}

/// Opens `source` as a channel.
async fn open(source: &Source) -> std::io::Result<UnixStream> {
    match source {
        Source::Socket(path) => UnixStream::connect(path).await,
        Source::Stdin => {
            let fd: OwnedFd = std::io::stdin().as_fd().try_clone_to_owned()?;
            // Standard input stops being the channel: the old process sees the channel close
            // when this process closes its one descriptor of it.
            let null = std::fs::File::open("/dev/null")?;
            rustix::stdio::dup2_stdin(&null)?;
            let s = std::os::unix::net::UnixStream::from(fd);
            s.set_nonblocking(true)?;
            UnixStream::from_std(s)
        }
    }
}

/// Sends a refusal with `reason`; a failure to send is only logged (the old process sees the
/// channel close either way).
async fn refuse(ch: &mut UnixStream, reason: &str) {
    let msg = to_json(&FromNew::Refused {
        reason: reason.to_string(),
    });
    if let Err(e) = write_frame(ch, &msg).await {
        tracing::debug!(error = %e, "cannot send the refusal");
    }
}

/// Runs the new process's side of the handover up to taking everything, within `timeout`.
///
/// # Errors
/// [`UpgradeError`]: the channel failed or timed out, the old process refused, or the handover
/// was unreadable (then refused on the channel).
pub async fn receive(source: &Source, timeout: Duration) -> Result<Received, UpgradeError> {
    match tokio::time::timeout(timeout, receive_now(source)).await {
        Ok(r) => r,
        Err(_) => Err(UpgradeError::Timeout),
    }
}

async fn receive_now(source: &Source) -> Result<Received, UpgradeError> {
    let mut ch = open(source).await.map_err(UpgradeError::Channel)?;
    let hello = FromNew::Hello {
        version: HANDOVER_VERSION,
        pid: std::process::id(),
    };
    write_frame(&mut ch, &to_json(&hello))
        .await
        .map_err(UpgradeError::Channel)?;
    let frame = read_frame(&mut ch).await.map_err(UpgradeError::Channel)?;
    let h = match parse_from_old(&frame) {
        Ok(FromOld::Handover(h)) if h.fds <= MAX_FDS => h,
        Ok(FromOld::Refused { reason }) => return Err(UpgradeError::Refused(reason)),
        Ok(other) => {
            let reason = match other {
                FromOld::Handover(h) => {
                    format!("{} descriptors announced (at most {MAX_FDS})", h.fds)
                }
                _ => "connections before the handover".to_string(),
            };
            refuse(&mut ch, &reason).await;
            return Err(UpgradeError::Refused(reason));
        }
        Err(e) => {
            refuse(&mut ch, &e.to_string()).await;
            return Err(e.into());
        }
    };
    let fds = match recv_fds(&ch, h.fds).await {
        Ok(fds) => fds,
        Err(e) => {
            refuse(&mut ch, &format!("descriptors: {e}")).await;
            return Err(UpgradeError::Channel(e));
        }
    };
    let mut fds: Vec<Option<OwnedFd>> = fds.into_iter().map(Some).collect();
    let mut got = Received {
        channel: ch,
        from_pid: h.from_pid,
        listeners: Vec::new(),
        listener_count: 0,
        bindings: Vec::new(),
        drains: Vec::new(),
        samples: Vec::new(),
    };
    for item in h.items {
        match item {
            Item::Listener { role, addr, fd } => {
                // parse_from_old checked that every index is announced and named once.
                let Some(fd) = fds.get_mut(fd).and_then(Option::take) else {
                    continue;
                };
                let l = std::net::TcpListener::from(fd);
                l.set_nonblocking(true).map_err(UpgradeError::Channel)?;
                got.listeners.push((role, addr, l));
            }
            Item::Bindings { bindings } => got.bindings.extend(bindings),
            Item::Drain {
                node,
                deadline_ms,
                period_ms,
            } => got.drains.push(MovedDrain {
                node,
                deadline_ms,
                period_ms,
            }),
            Item::Metrics { samples } => got.samples.extend(samples),
            Item::Http1 { peer, .. } => {
                // Connections come after "ready" only; this one's descriptor closes below.
                tracing::warn!(%peer, "upgrade: a connection inside the handover; closed");
            }
        }
    }
    got.listener_count = got.listeners.len();
    Ok(got)
}
