//! The rustls server side of the TLS listener (SPEC section 10): versions, ALPN, client
//! certificates, and the SNI certificate resolver behind an atomic swap.
//!
//! [`TlsCerts`] owns the live [`SniTable`] (`ArcSwap`, swapped whole) and reloads it; the
//! resolver reads it once per handshake, so established sessions keep what they negotiated and
//! new handshakes get the new certificate. A reload that fails keeps the old table.
//! [`watch_reload`] (spawned by the server, ended by the drain signal) reloads on file changes in
//! the certificate files' directories (debounced; a rename-into-place or a Kubernetes `..data`
//! symlink swap are directory events) and on `SIGHUP`; `POST /admin/reload` calls
//! [`TlsCerts::reload`] directly.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use super::certs::{self, SniTable};
use crate::config::server_tls::{ServerTlsConfig, TlsVersion};
use crate::config::ConfigError;
use crate::drain;
use crate::metrics::Metrics;
use crate::watch::{Trigger, Triggers};

/// What the handshake settled, kept per downstream connection.
#[derive(Debug, Clone, Default)]
pub struct TlsInfo {
    /// The SNI name the client sent.
    pub sni: Option<String>,
    /// The negotiated ALPN protocol id.
    pub alpn: Option<Vec<u8>>,
    /// The verified client certificate's subject (mTLS), for the access log.
    pub client_subject: Option<Arc<str>>,
}

/// Picks the certificate for each handshake from the live table.
#[derive(Debug)]
struct SniResolver {
    live: Arc<ArcSwap<SniTable>>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.live.load().resolve(hello.server_name()).key.clone())
    }
}

/// The listener's certificates and their reload.
#[derive(Debug)]
pub(crate) struct TlsCerts {
    spec: ServerTlsConfig,
    live: Arc<ArcSwap<SniTable>>,
    metrics: Arc<Metrics>,
    /// One reload at a time, so the last file state read is the one that stays.
    lock: tokio::sync::Mutex<()>,
}

impl TlsCerts {
    /// Loads the certificates of `spec` (blocking file I/O; call at start-up).
    ///
    /// # Errors
    /// Every certificate problem ([`certs::load_table`]).
    pub(crate) fn load(spec: ServerTlsConfig, metrics: Arc<Metrics>) -> Result<Self, ConfigError> {
        let table = certs::load_table(&spec)?;
        let certs = TlsCerts {
            spec,
            live: Arc::new(ArcSwap::from_pointee(table)),
            metrics,
            lock: tokio::sync::Mutex::new(()),
        };
        certs.refresh_expiry();
        Ok(certs)
    }

    /// The rustls config of the listener: TLS 1.3 (and 1.2 unless `min_version = "1.3"`), the
    /// configured ALPN, client certificates verified against `client_ca` when set, and the SNI
    /// resolver over the live table.
    ///
    /// # Errors
    /// `client_ca` cannot be read or is not a usable CA.
    pub(crate) fn server_config(&self) -> Result<Arc<ServerConfig>, ConfigError> {
        let provider = certs::provider();
        let versions: &[&'static rustls::SupportedProtocolVersion] = match self.spec.min_version {
            TlsVersion::V1_2 => &[&rustls::version::TLS13, &rustls::version::TLS12],
            TlsVersion::V1_3 => &[&rustls::version::TLS13],
        };
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .map_err(|e| self.spec.client_ca_at.error(format!("TLS versions: {e}")))?;
        let builder = match certs::load_client_roots(&self.spec)? {
            None => builder.with_no_client_auth(),
            Some(roots) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| self.spec.client_ca_at.error(format!("client_ca: {e}")))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut cfg = builder.with_cert_resolver(Arc::new(SniResolver {
            live: self.live.clone(),
        }));
        cfg.alpn_protocols = self.spec.alpn.clone();
        Ok(Arc::new(cfg))
    }

    /// True if the listener offers `h2` (then RFC 8441 extended CONNECT is enabled).
    pub(crate) fn offers_h2(&self) -> bool {
        self.spec.alpn.iter().any(|a| a == b"h2")
    }

    /// Re-reads every certificate file and swaps the table in when all of them are good and
    /// something changed; `trigger` names the cause in the log. Counted in
    /// `gateway_tls_cert_reloads_total{result}` (`ok`, `unchanged`, `invalid`).
    ///
    /// # Errors
    /// Every problem found; the live certificates stay.
    pub(crate) async fn reload(self: &Arc<Self>, trigger: &'static str) -> Result<(), ConfigError> {
        let _guard = self.lock.lock().await;
        let me = self.clone();
        let loaded = tokio::task::spawn_blocking(move || certs::load_table(&me.spec))
            .await
            .expect("certificate loading does not panic");
        match loaded {
            Err(e) => {
                self.metrics.tls_cert_reload("invalid");
                tracing::warn!(trigger, errors = %e, "certificate reload refused; the previous certificates stay");
                Err(e)
            }
            Ok(table) if table.digest == self.live.load().digest => {
                self.metrics.tls_cert_reload("unchanged");
                tracing::debug!(trigger, "certificate files unchanged");
                Ok(())
            }
            Ok(table) => {
                let names: Vec<&str> = table.certs().iter().map(|c| c.name.as_str()).collect();
                tracing::info!(trigger, certs = ?names, "certificates reloaded; new handshakes use them");
                self.live.store(Arc::new(table));
                self.metrics.tls_cert_reload("ok");
                self.refresh_expiry();
                Ok(())
            }
        }
    }

    /// Sets `gateway_tls_cert_expiry_seconds{name}` from the live table (call at scrape time).
    pub(crate) fn refresh_expiry(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let table = self.live.load();
        self.metrics.tls_cert_expiry.clear();
        for c in table.certs() {
            self.metrics
                .tls_cert_expiry
                .get_or_create(&crate::metrics::NameLabel {
                    name: c.name.clone(),
                })
                .set(c.not_after.saturating_sub(now));
        }
    }

    /// The directories holding the certificate, key and client CA files.
    fn dirs(&self) -> BTreeSet<PathBuf> {
        let parent = |p: &Path| {
            p.parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
        };
        let mut dirs: BTreeSet<PathBuf> = self
            .spec
            .certs
            .iter()
            .flat_map(|c| [parent(&c.cert), parent(&c.key)])
            .collect();
        dirs.extend(self.spec.client_ca.as_deref().map(parent));
        dirs
    }
}

/// Reloads `certs` on file changes in their directories and on `SIGHUP` until `watch` fires.
/// A watch or signal that cannot be set up is logged; the other triggers keep working.
pub(crate) async fn watch_reload(certs: Arc<TlsCerts>, mut watch: drain::Watch) {
    let mut triggers = Triggers::new(
        |tx| dir_watcher(&certs.dirs(), tx),
        "SIGHUP handler unavailable for certificate reloads",
    );
    loop {
        let trigger = tokio::select! {
            _ = watch.signaled() => return,
            t = triggers.next() => match t {
                Trigger::File => "file",
                Trigger::Signal => "signal",
            },
        };
        // A refusal is logged and counted inside reload.
        let _ = certs.reload(trigger).await;
    }
}

fn dir_watcher(
    dirs: &BTreeSet<PathBuf>,
    tx: tokio::sync::mpsc::Sender<()>,
) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        // Any change in the directories: a Kubernetes secret swaps a `..data` symlink, not the
        // file names the config holds. Unchanged content is recognised by its digest.
        if ev.is_ok_and(|ev| !ev.kind.is_access()) {
            // A full channel already holds a pending trigger: coalesced.
            let _ = tx.try_send(());
        }
    })
    .map_err(|e| tracing::warn!(error = %e, "certificate file watch unavailable; use SIGHUP or POST /admin/reload"))
    .ok()?;
    for dir in dirs {
        if let Err(e) = w.watch(dir, notify::RecursiveMode::NonRecursive) {
            tracing::warn!(error = %e, dir = %dir.display(), "certificate file watch unavailable for this directory; use SIGHUP or POST /admin/reload");
        }
    }
    Some(w)
}
