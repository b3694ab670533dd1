//! Where reload triggers come from (SPEC section 6): the config file watch (notify, through the
//! file's directory so editors that replace the file are seen) and the `SIGHUP` stream. A leaf of
//! `routing`: it knows nothing of the table it triggers.

use std::path::PathBuf;

/// Where reload triggers come from: the file watcher's channel and the SIGHUP stream. Created by
/// [`Routing::new`], before the gateway serves or reports ready, so no change or signal right
/// after start is lost (an unhandled SIGHUP would terminate the process).
pub struct TriggerSources {
    pub(super) rx: tokio::sync::mpsc::Receiver<()>,
    _watcher: Option<notify::RecommendedWatcher>,
    #[cfg(unix)]
    pub(super) hup: Option<tokio::signal::unix::Signal>,
}

impl std::fmt::Debug for TriggerSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TriggerSources")
            .field("file_watch", &self._watcher.is_some())
            .finish_non_exhaustive()
    }
}

impl TriggerSources {
    /// Starts watching `file` (if any) and listening for SIGHUP; must run inside the tokio
    /// runtime. Either failing is logged and leaves the other triggers working.
    pub fn new(file: Option<&std::path::Path>) -> Self {
        // One pending trigger is enough: more coalesce into it.
        let (tx, rx) = tokio::sync::mpsc::channel::<()>(1);
        let watcher = file.and_then(|f| file_watcher(f, tx));
        #[cfg(unix)]
        let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| tracing::warn!(error = %e, "SIGHUP handler unavailable; use the file watch or POST /admin/reload"))
            .ok();
        TriggerSources {
            rx,
            _watcher: watcher,
            #[cfg(unix)]
            hup,
        }
    }
}

fn file_watcher(
    file: &std::path::Path,
    tx: tokio::sync::mpsc::Sender<()>,
) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let name = file.file_name()?.to_os_string();
    let dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        if let Ok(ev) = ev {
            let relevant = !ev.kind.is_access()
                && ev
                    .paths
                    .iter()
                    .any(|p| p.file_name() == Some(name.as_os_str()));
            if relevant {
                // A full channel already holds a pending trigger: coalesced.
                let _ = tx.try_send(());
            }
        }
    })
    .map_err(
        |e| tracing::warn!(error = %e, "file watch unavailable; use SIGHUP or POST /admin/reload"),
    )
    .ok()?;
    if let Err(e) = w.watch(&dir, notify::RecursiveMode::NonRecursive) {
        tracing::warn!(error = %e, dir = %dir.display(), "file watch unavailable; use SIGHUP or POST /admin/reload");
        return None;
    }
    Some(w)
}
