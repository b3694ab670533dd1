//! The old process's conversation with the new one (SPEC section 13): hello, handover with the
//! listening sockets, ready. Used by [`super::Upgrader`], which bounds it by `upgrade_timeout` and
//! rolls back on any error.

use tokio::net::UnixStream;
use tokio::process::Child;

use super::fds::{read_frame, send_fds, write_frame};
use super::message::{
    parse_from_new, to_json, FromNew, FromOld, Handover, Item, MessageError, HANDOVER_VERSION,
    OLDEST_VERSION,
};
use super::{borrowed, HeldListener, UpgradeError, Upgrader};

/// How long an exit is waited for after the channel closed, to name the exit status as the reason.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs the conversation on `ch` with the new process (`child`, when this process started it).
/// Returns the new process's pid and handover version once it is ready.
///
/// # Errors
/// [`UpgradeError`]: the channel closed or failed, the new process refused or spoke another
/// handover version, or `child` exited.
pub(super) async fn hand_over(
    up: &Upgrader,
    ch: &mut UnixStream,
    child: &mut Option<Child>,
) -> Result<(u32, u32), UpgradeError> {
    let conversation = talk(up, ch);
    let Some(c) = child.as_mut() else {
        return conversation.await;
    };
    let r = tokio::select! {
        // Biased: a "ready" read in the same poll as the child's exit is still a handover.
        biased;
        r = conversation => r,
        s = c.wait() => return Err(exited(s)),
    };
    match r {
        Err(UpgradeError::Channel(e)) => match tokio::time::timeout(EXIT_GRACE, c.wait()).await {
            Ok(s) => Err(exited(s)),
            Err(_) => Err(UpgradeError::Channel(e)),
        },
        r => r,
    }
}

fn exited(s: std::io::Result<std::process::ExitStatus>) -> UpgradeError {
    match s {
        Ok(s) => UpgradeError::Exited(s),
        Err(e) => UpgradeError::Channel(e),
    }
}

/// The next frame of the new process.
async fn next(ch: &mut UnixStream) -> Result<FromNew, UpgradeError> {
    let frame = read_frame(ch).await.map_err(UpgradeError::Channel)?;
    Ok(parse_from_new(&frame)?)
}

/// Hello, handover, ready (module docs).
async fn talk(up: &Upgrader, ch: &mut UnixStream) -> Result<(u32, u32), UpgradeError> {
    // Written in the lower of the two versions (the version rule, message module docs).
    let version = match next(ch).await? {
        FromNew::Hello { version, .. }
            if (OLDEST_VERSION..=HANDOVER_VERSION).contains(&version) =>
        {
            version
        }
        FromNew::Hello { version, .. } => {
            let e = MessageError::Version(version);
            refuse(ch, &e.to_string()).await;
            return Err(e.into());
        }
        FromNew::Refused { reason } => return Err(UpgradeError::Refused(reason)),
        FromNew::Ready { .. } => return Err(UpgradeError::Refused("ready before hello".into())),
    };
    let held = duplicates(up).map_err(UpgradeError::Channel)?;
    let mut items: Vec<Item> = held
        .iter()
        .enumerate()
        .map(|(fd, h)| Item::Listener {
            role: h.role,
            addr: h.addr,
            fd,
        })
        .collect();
    items.extend((up.state)());
    let msg = FromOld::Handover(Handover {
        version,
        from_pid: std::process::id(),
        fds: held.len(),
        items,
    });
    write_frame(ch, &to_json(&msg))
        .await
        .map_err(UpgradeError::Channel)?;
    send_fds(ch, &borrowed(&held))
        .await
        .map_err(UpgradeError::Channel)?;
    match next(ch).await? {
        FromNew::Ready { pid } => Ok((pid, version)),
        FromNew::Refused { reason } => Err(UpgradeError::Refused(reason)),
        FromNew::Hello { .. } => Err(UpgradeError::Refused("a second hello".into())),
    }
}

/// Duplicates of the held listeners, so the lock is not held across the sends.
fn duplicates(up: &Upgrader) -> std::io::Result<Vec<HeldListener>> {
    let held = up
        .listeners
        .lock()
        .expect("listener mutex is never poisoned: no panics while held");
    held.iter()
        .map(|h| {
            Ok(HeldListener {
                role: h.role,
                addr: h.addr,
                fd: h.fd.try_clone()?,
            })
        })
        .collect()
}

/// Tells the new process why it is refused; a failure to send is only logged (it sees the
/// channel close when it is stopped).
pub(super) async fn refuse(ch: &mut UnixStream, reason: &str) {
    let msg = to_json(&FromOld::Refused {
        reason: reason.to_string(),
    });
    if let Err(e) = write_frame(ch, &msg).await {
        tracing::debug!(error = %e, "cannot send the refusal");
    }
}
