//! Shutdown and drain signalling: a [`Signal`] held by the server, [`Watch`]es held by every
//! connection and long-lived stream. A leaf module.

use std::sync::OnceLock;

use tokio::sync::watch;

/// The sending half: fire once to tell every watcher to wind down.
#[derive(Debug)]
pub(crate) struct Signal(watch::Sender<bool>);

/// The receiving half; cheap to clone.
#[derive(Debug, Clone)]
pub struct Watch(watch::Receiver<bool>);

/// A new signal/watch pair.
pub(crate) fn channel() -> (Signal, Watch) {
    let (tx, rx) = watch::channel(false);
    (Signal(tx), Watch(rx))
}

impl Signal {
    /// Tells every watcher to wind down.
    pub(crate) fn fire(&self) {
        self.0.send_replace(true);
    }

    /// Waits until every [`Watch`] is dropped.
    pub(crate) async fn closed(&self) {
        self.0.closed().await;
    }
}

impl Watch {
    /// A watch whose signal never fires: what a waiter holds once it has handled the signal and
    /// must not be woken by it again (a WebSocket waiting for its point of `shutdown_spread`,
    /// SPEC section 5).
    pub(crate) fn never() -> Watch {
        // One sender for the process, never fired and never dropped (a dropped one reads as fired).
        static NEVER: OnceLock<watch::Sender<bool>> = OnceLock::new();
        Watch(NEVER.get_or_init(|| watch::channel(false).0).subscribe())
    }

    /// Resolves once the signal fired (at once if it already had).
    pub async fn signaled(&mut self) {
        // An Err means the Signal was dropped, which only happens at the end of shutdown: treat as fired.
        let _ = self.0.wait_for(|fired| *fired).await;
    }

    /// True if the signal fired.
    pub fn is_signaled(&self) -> bool {
        *self.0.borrow()
    }
}
