//! Where reload triggers come from (SPEC section 6): the config file watch (notify, through the
//! file's directory so editors that replace the file are seen) and the `SIGHUP` stream. A leaf of
//! `routing`: it knows nothing of the table it triggers.

use std::path::PathBuf;

use crate::watch::Triggers;

/// Where reload triggers come from: the config file's watcher and the SIGHUP stream
/// ([`crate::watch::Triggers`]). Created by [`super::reload::Routing::new`], before the gateway
/// serves or reports ready, so no change or signal right after start is lost.
#[derive(Debug)]
pub struct TriggerSources(pub(super) Triggers);

impl TriggerSources {
    /// Starts watching `file` (if any) and listening for SIGHUP; must run inside the tokio
    /// runtime. Either failing is logged and leaves the other triggers working.
    pub fn new(file: Option<&std::path::Path>) -> Self {
        TriggerSources(Triggers::new(
            |tx| file.and_then(|f| file_watcher(f, tx)),
            "SIGHUP handler unavailable; use the file watch or POST /admin/reload",
        ))
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
