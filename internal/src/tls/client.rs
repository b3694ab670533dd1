//! TLS to the nodes (SPEC section 10 "Upstream TLS", section 3 `clusters[].tls`).
//!
//! [`ClusterTls::load`] turns a cluster's `tls = { sni, ca, verify, client_cert, client_key }` into
//! two rustls client configs (ALPN `http/1.1` for HTTP/1.1 and WebSocket dials, ALPN `h2` for
//! `protocol = "h2"`), reading and checking every PEM file once per config load. [`connect()`] opens
//! the TCP connection to a node and, for a TLS cluster, runs the handshake within the same connect
//! timeout; a handshake failure comes back as an `io::Error` carrying a [`HandshakeError`] that names
//! the TLS alert or the verification error, so callers treat it as a connect failure (retried on
//! another node, counted by passive health). Crypto is rustls with the ring provider only.
//!
//! TLS 1.3 client authentication: a node that demands a client certificate judges it after the
//! client's side of the handshake is complete, so a rejection would only show when the response is
//! read. When the node asked for a certificate, [`connect()`] therefore waits (at most
//! [`CLIENT_AUTH_VERDICT_WAIT`]) for the node's first record after the handshake: a session ticket
//! or data means accepted, an alert is a handshake failure like any other.
//! Spawns nothing; holds no state besides the immutable configs.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use sha2::{Digest, Sha256};

mod connect;
mod stream;
mod verify;
pub(crate) use self::connect::{connect, handshake_error, HandshakeError};
pub(crate) use self::stream::NodeStream;
use self::verify::NoVerify;

/// Longest wait, after a TLS 1.3 handshake in which the node asked for a client certificate, for
/// the node's verdict (a session ticket, data, or an alert). Nodes send their tickets right after
/// the handshake; one that sends none costs this much once per new connection.
pub(crate) const CLIENT_AUTH_VERDICT_WAIT: Duration = Duration::from_millis(200);

/// A cluster's `tls` table as written (paths as given; empty strings mean "not set").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSpec {
    /// Name sent in SNI and verified; `None` = the host part of each node's `addr`.
    pub sni: Option<String>,
    /// PEM file of the CA(s) that sign node certificates; `None` = the system roots.
    pub ca: Option<String>,
    /// False: accept any node certificate (signatures are still checked). WARN at start.
    pub verify: bool,
    /// PEM certificate chain presented to nodes that demand one (mTLS).
    pub client_cert: Option<String>,
    /// PEM private key of `client_cert` (PKCS#8, PKCS#1 or SEC1).
    pub client_key: Option<String>,
}

/// Which application protocol a connection offers in ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alpn {
    /// `http/1.1`: HTTP/1.1 requests, probes and WebSocket dials.
    Http1,
    /// `h2`: HTTP/2 over TLS (`protocol = "h2"`).
    H2,
}

/// A cluster's loaded TLS settings for its nodes; cheap to share (`Arc`).
pub struct ClusterTls {
    /// The settings as written.
    pub spec: TlsSpec,
    /// SNI name from `spec.sni`, parsed once.
    sni: Option<ServerName<'static>>,
    h1: Arc<ClientConfig>,
    h2: Arc<ClientConfig>,
    /// SHA-256 of the settings and every file's bytes: two loads are equal when nothing changed.
    digest: [u8; 32],
}

impl std::fmt::Debug for ClusterTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterTls")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl PartialEq for ClusterTls {
    /// Equal when the settings and the bytes of every file they name are the same.
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}

impl Eq for ClusterTls {}

/// A problem with one key of the `tls` table: `(key under tls, message)`, e.g. `("ca", "...")`.
pub(crate) type SpecIssue = (&'static str, String);

/// Reads `path` for key `key`.
fn read(key: &'static str, path: &str, digest: &mut Sha256) -> Result<Vec<u8>, SpecIssue> {
    let bytes = std::fs::read(path).map_err(|e| (key, format!("cannot read {path:?}: {e}")))?;
    digest.update(path.as_bytes());
    digest.update(&bytes);
    Ok(bytes)
}

/// The certificates in PEM `bytes` (at least one) for key `key`.
fn certs(
    key: &'static str,
    path: &str,
    bytes: &[u8],
) -> Result<Vec<CertificateDer<'static>>, SpecIssue> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| (key, format!("{path:?} is not valid PEM: {e}")))?;
    if certs.is_empty() {
        return Err((key, format!("{path:?} holds no PEM certificate")));
    }
    Ok(certs)
}

/// The roots `spec` trusts: its `ca` file (added to `digest`), else the system's when it verifies;
/// problems go to `issues`.
fn roots(spec: &TlsSpec, digest: &mut Sha256, issues: &mut Vec<SpecIssue>) -> RootCertStore {
    let mut roots = RootCertStore::empty();
    match spec.ca.as_deref() {
        Some(path) => match read("ca", path, digest).and_then(|b| certs("ca", path, &b)) {
            Ok(list) => {
                for c in list {
                    if let Err(e) = roots.add(c) {
                        issues.push(("ca", format!("{path:?}: bad CA certificate: {e}")));
                    }
                }
            }
            Err(i) => issues.push(i),
        },
        None if spec.verify => {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
            if roots.is_empty() {
                issues.push((
                    "ca",
                    "no system root certificates found: set ca to a PEM file".into(),
                ));
            }
        }
        None => {}
    }
    roots
}

/// `spec`'s client certificate chain and key (read into `digest`), if it has both; problems (one
/// without the other, unreadable or invalid files) go to `issues`.
fn client_auth(
    spec: &TlsSpec,
    digest: &mut Sha256,
    issues: &mut Vec<SpecIssue>,
) -> Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    match (spec.client_cert.as_deref(), spec.client_key.as_deref()) {
        (None, None) => None,
        (Some(_), None) => {
            issues.push(("client_key", "client_cert needs client_key".into()));
            None
        }
        (None, Some(_)) => {
            issues.push(("client_cert", "client_key needs client_cert".into()));
            None
        }
        (Some(cp), Some(kp)) => {
            let chain = read("client_cert", cp, digest)
                .and_then(|b| certs("client_cert", cp, &b))
                .map_err(|i| issues.push(i))
                .ok();
            let key = read("client_key", kp, digest)
                .and_then(|b| {
                    PrivateKeyDer::from_pem_slice(&b).map_err(|e| {
                        (
                            "client_key",
                            format!("{kp:?} holds no usable private key: {e}"),
                        )
                    })
                })
                .map_err(|i| issues.push(i))
                .ok();
            chain.zip(key)
        }
    }
}

/// The rustls ring provider shared by every node TLS config.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl ClusterTls {
    /// Loads `spec`: reads and parses the CA file (or the system roots), the client certificate and
    /// key, and builds the HTTP/1.1 and h2 client configs.
    ///
    /// # Errors
    /// Every problem as `(key under tls, message)`: unreadable file, no/invalid PEM, a client
    /// certificate without its key (or the reverse), a key that does not fit, an invalid `sni`.
    ///
    /// Every file of the spec is read once and every problem collected before either config is
    /// built, so all errors come back together.
    pub fn load(spec: &TlsSpec) -> Result<ClusterTls, Vec<SpecIssue>> {
        let mut issues = Vec::new();
        let mut digest = Sha256::new();
        digest.update(format!("{spec:?}").as_bytes());
        let sni = match spec.sni.as_deref() {
            None => None,
            Some(s) => match ServerName::try_from(s.to_string()) {
                Ok(n) => Some(n),
                Err(e) => {
                    issues.push(("sni", format!("invalid server name {s:?}: {e}")));
                    None
                }
            },
        };
        let roots = roots(spec, &mut digest, &mut issues);
        let client = client_auth(spec, &mut digest, &mut issues);
        if !issues.is_empty() {
            return Err(issues);
        }
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| vec![("verify", format!("TLS versions: {e}"))])?;
        let builder = if spec.verify {
            builder.with_root_certificates(roots)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerify(provider())))
        };
        let mut config = match client {
            None => builder.with_no_client_auth(),
            Some((chain, key)) => builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| vec![("client_key", format!("client certificate and key: {e}"))])?,
        };
        let mut h2 = config.clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        h2.alpn_protocols = vec![b"h2".to_vec()];
        Ok(ClusterTls {
            spec: spec.clone(),
            sni,
            h1: Arc::new(config),
            h2: Arc::new(h2),
            digest: digest.finalize().into(),
        })
    }

    /// The name verified for a node at `addr` (`host:port`): `sni`, else the host part of `addr`.
    fn server_name(&self, addr: &str) -> io::Result<ServerName<'static>> {
        if let Some(n) = &self.sni {
            return Ok(n.clone());
        }
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        ServerName::try_from(host.to_string()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{host:?} is not a TLS server name ({e}): set tls.sni"),
            )
        })
    }
}
