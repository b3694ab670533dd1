//! Reload triggers as one stream: changes seen by a file watcher (notify, debounced) and `SIGHUP`
//! (SPEC section 6 for the config, section 10 for certificates). Built before the gateway serves,
//! so no change or signal right after start is lost (an unhandled SIGHUP would end the process).
//! A leaf: it knows nothing of what it triggers.

use std::time::Duration;

use tokio::sync::mpsc;

/// Debounce for file-change events: editors write a file, and deploys a certificate and its key,
/// in several steps.
pub(crate) const FILE_DEBOUNCE: Duration = Duration::from_millis(200);

/// What fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The watcher saw a change (a burst of changes counts once).
    File,
    /// `SIGHUP`.
    Signal,
}

/// A file watcher's channel and the SIGHUP stream.
pub(crate) struct Triggers {
    rx: mpsc::Receiver<()>,
    watcher: Option<notify::RecommendedWatcher>,
    #[cfg(unix)]
    hup: Option<tokio::signal::unix::Signal>,
}

impl std::fmt::Debug for Triggers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Triggers")
            .field("file_watch", &self.watcher.is_some())
            .finish_non_exhaustive()
    }
}

impl Triggers {
    /// Takes `watch`, which starts a file watcher that sends on the channel it is given (`None`
    /// when there is nothing to watch or it failed, logged by it), and `hup_unavailable`, the
    /// WARN logged when no SIGHUP handler can be installed. Must run inside the tokio runtime.
    pub(crate) fn new(
        watch: impl FnOnce(mpsc::Sender<()>) -> Option<notify::RecommendedWatcher>,
        hup_unavailable: &'static str,
    ) -> Self {
        // One pending trigger is enough: more coalesce into it.
        let (tx, rx) = mpsc::channel::<()>(1);
        let watcher = watch(tx);
        #[cfg(unix)]
        let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| tracing::warn!(error = %e, "{hup_unavailable}"))
            .ok();
        #[cfg(not(unix))]
        let _ = hup_unavailable;
        Triggers {
            rx,
            watcher,
            #[cfg(unix)]
            hup,
        }
    }

    /// Waits for the next trigger. A file change waits [`FILE_DEBOUNCE`] for its burst to settle
    /// and swallows what queued meanwhile. Without a watcher or handler, that source never fires.
    pub(crate) async fn next(&mut self) -> Trigger {
        #[cfg(unix)]
        let hup = async {
            match self.hup.as_mut() {
                Some(h) => h.recv().await,
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let hup = std::future::pending::<Option<()>>();
        tokio::select! {
            _ = hup => Trigger::Signal,
            Some(()) = self.rx.recv() => {
                tokio::time::sleep(FILE_DEBOUNCE).await;
                while self.rx.try_recv().is_ok() {}
                Trigger::File
            }
        }
    }
}
