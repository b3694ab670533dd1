//! Reload triggers and the warm-up watcher, run by [`watch_triggers`] (spawned by the server,
//! ended by the shutdown signal): file changes (notify, debounced), `SIGHUP`, and every
//! [`WARMUP_CHECK_INTERVAL`] the warm-up error-rate check that rolls a bad table back
//! (SPEC section 6). `POST /admin/reload` calls [`Routing::reload`] directly.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::reload::{ReloadTrigger, Routing};
use super::warmup::{MIN_ROLLBACK_SAMPLE, WARMUP_CHECK_INTERVAL};

/// Runs the warm-up watcher until `watch` fires: every [`WARMUP_CHECK_INTERVAL`], a live table
/// with a warm-up whose error rate is above `max_error_rate` (with at least
/// [`MIN_ROLLBACK_SAMPLE`] requests) is rolled back (SPEC section 6).
pub async fn watch_warmup(routing: Arc<Routing>, mut watch: crate::drain::Watch) {
    let mut tick = tokio::time::interval(WARMUP_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = watch.signaled() => return,
            _ = tick.tick() => {}
        }
        let table = routing.table();
        let Some(b) = table.warmup_breach(Instant::now(), MIN_ROLLBACK_SAMPLE) else {
            continue;
        };
        tracing::warn!(
            generation = table.generation,
            subject = %b.subject,
            requests = b.outcomes.requests,
            errors = b.outcomes.errors,
            error_rate = b.outcomes.rate(),
            max_error_rate = b.max_error_rate,
            "warm-up error rate above max_error_rate; rolling back the route table"
        );
        match routing.rollback_from(table.generation, "rolled_back").await {
            Ok(Some(_)) | Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "warm-up rollback impossible; the table stays"),
        }
    }
}

/// Debounce for file-change events: editors write a file in several steps.
const FILE_DEBOUNCE: Duration = Duration::from_millis(200);

/// Where reload triggers come from: the file watcher's channel and the SIGHUP stream. Created by
/// [`Routing::new`], before the gateway serves or reports ready, so no change or signal right
/// after start is lost (an unhandled SIGHUP would terminate the process).
pub struct TriggerSources {
    rx: tokio::sync::mpsc::Receiver<()>,
    _watcher: Option<notify::RecommendedWatcher>,
    #[cfg(unix)]
    hup: Option<tokio::signal::unix::Signal>,
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

/// Runs the reload triggers and the warm-up watcher ([`watch_warmup`]) until `watch` fires.
/// Triggers: SIGHUP and changes to the config file (watched through its directory so editors
/// that replace the file are seen, debounced by [`FILE_DEBOUNCE`]); they coalesce in
/// [`Routing::reload_from`]. The sources are the ones [`Routing::new`] set up; `file` is only
/// used if they were already taken (a second call).
pub async fn watch_triggers(
    routing: Arc<Routing>,
    file: Option<PathBuf>,
    watch: crate::drain::Watch,
) {
    let sources = routing
        .take_trigger_sources()
        .unwrap_or_else(|| TriggerSources::new(file.as_deref()));
    tokio::join!(
        reload_triggers(routing.clone(), sources, watch.clone()),
        watch_warmup(routing, watch)
    );
}

async fn reload_triggers(
    routing: Arc<Routing>,
    mut sources: TriggerSources,
    mut watch: crate::drain::Watch,
) {
    loop {
        #[cfg(unix)]
        let hup_fut = async {
            match sources.hup.as_mut() {
                Some(h) => h.recv().await,
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let hup_fut = std::future::pending::<Option<()>>();
        let trigger = tokio::select! {
            _ = watch.signaled() => return,
            _ = hup_fut => ReloadTrigger::Signal,
            Some(()) = sources.rx.recv() => {
                // Let the burst of events settle, then swallow what queued meanwhile.
                tokio::time::sleep(FILE_DEBOUNCE).await;
                while sources.rx.try_recv().is_ok() {}
                ReloadTrigger::File
            }
        };
        match routing.reload_from(trigger).await {
            Ok(g) => tracing::debug!(?trigger, generation = g, "reload trigger handled"),
            // Already logged (and counted) where it was refused.
            Err(e) => tracing::debug!(?trigger, error = %e, "reload trigger refused"),
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
