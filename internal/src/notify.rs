//! systemd readiness notifications (SPEC section 11, `Type=notify`): `READY=1` once the listeners
//! accept, `RELOADING=1` then `READY=1` around every reload, `STOPPING=1` on shutdown, and
//! `MAINPID=` with `READY=1` from the new process of an upgrade (SPEC section 13). Each is
//! one datagram to `$NOTIFY_SOCKET` via the sd-notify crate; without that variable (not started by
//! systemd) every call does nothing. A leaf module; spawns nothing.

use sd_notify::NotifyState;

fn send(state: NotifyState<'_>) {
    // The variable stays set: every reload notifies again (sd_notify(3) `unset_environment`).
    if let Err(e) = sd_notify::notify(false, &[state]) {
        tracing::warn!(error = %e, "cannot notify systemd");
    }
}

/// `READY=1`: start-up finished, or a reload ended (whatever its result).
pub(crate) fn ready() {
    send(NotifyState::Ready);
}

/// `RELOADING=1`: a reload started; [`ready`] follows when it ends.
pub(crate) fn reloading() {
    send(NotifyState::Reloading);
}

/// `MAINPID=<pid>` and `READY=1` in one datagram: a process started by an upgrade serves and is
/// now the service's main process (SPEC section 13; the unit sets `NotifyAccess=all`).
pub(crate) fn upgraded(pid: u32) {
    if let Err(e) = sd_notify::notify(false, &[NotifyState::MainPid(pid), NotifyState::Ready]) {
        tracing::warn!(error = %e, "cannot notify systemd");
    }
}

/// `STOPPING=1`: shutdown started.
pub(crate) fn stopping() {
    send(NotifyState::Stopping);
}
