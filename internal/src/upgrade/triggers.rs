//! The triggers of an upgrade besides `POST /admin/upgrade` (SPEC section 13): `SIGUSR2`
//! ([`watch_signal`]) and a connection on `[server] upgrade_socket` from a new process a supervisor
//! started with `--upgrade-from` ([`watch_socket`]). Each runs as a task until the drain signal.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::{UnixListener, UnixStream};
use tokio::signal::unix::Signal;

use super::Upgrader;
use crate::drain;

/// The `SIGUSR2` stream: registered at start-up, before anything else, so that the signal never
/// takes its default action (ending the process) once the gateway runs.
///
/// # Errors
/// The signal handler could not be installed.
pub fn usr2() -> std::io::Result<Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2())
}

/// Starts an upgrade on each `SIGUSR2` of `sig` until `stop` fires (one at a time: a signal
/// during an upgrade is refused with a WARN, [`Upgrader::trigger`]).
pub async fn watch_signal(up: Arc<Upgrader>, mut sig: Signal, mut stop: drain::Watch) {
    loop {
        tokio::select! {
            () = stop.signaled() => return,
            r = sig.recv() => {
                if r.is_none() {
                    return;
                }
                // A refusal is logged by trigger itself; nothing else to do with it here.
                let _refused = up.trigger("SIGUSR2");
            }
        }
    }
}

/// Listens on `path` (a stale file there is replaced; the socket is made owner-only) and takes
/// each connection from the same user as the handover channel of an upgrade, until `stop` fires.
/// A connection while an upgrade runs, or from another user, is refused on the channel.
pub async fn watch_socket(up: Arc<Upgrader>, path: PathBuf, mut stop: drain::Watch) {
    // A file left by an earlier process (or by the one this process took over from).
    if let Err(e) = std::fs::remove_file(&path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove the old upgrade socket");
        }
    }
    let listener = match UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "cannot listen on upgrade_socket; --upgrade-from is off");
            return;
        }
    };
    if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)) {
        tracing::warn!(path = %path.display(), error = %e, "cannot make upgrade_socket owner-only");
    }
    loop {
        let ch = tokio::select! {
            () = stop.signaled() => return,
            r = listener.accept() => match r {
                Ok((ch, _)) => ch,
                Err(e) => {
                    tracing::warn!(error = %e, "upgrade_socket accept failed");
                    continue;
                }
            },
        };
        offer(&up, ch).await;
    }
}

/// Starts an upgrade over `ch` unless its peer is another user or an upgrade runs.
async fn offer(up: &Arc<Upgrader>, mut ch: UnixStream) {
    let same_user = ch
        .peer_cred()
        .is_ok_and(|c| c.uid() == rustix::process::getuid().as_raw());
    if !same_user {
        tracing::warn!("upgrade refused: upgrade_socket connection from another user");
        super::driver::refuse(&mut ch, "not the gateway's user").await;
        return;
    }
    if up.is_running() {
        tracing::warn!("upgrade refused: an upgrade is already running");
        super::driver::refuse(&mut ch, "an upgrade is already running").await;
        return;
    }
    // Lost a race with another trigger: logged by start; the channel closes, which the new
    // process reads as a refusal.
    let _refused = up.start("upgrade_socket", Some(ch));
}
