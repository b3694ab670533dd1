//! Reading and checking the `[server.tls]` certificate files (SPEC section 10): PEM chains, private
//! keys, the client CA, and the SNI table built from them.
//!
//! Every problem is reported in the config-error shape at the key that names the file
//! (`server.tls.certs[0].cert`), and all of them at once. A chain that does not parse, a key that
//! does not match its leaf, or a leaf past its notAfter is refused. Blocking file I/O: call from
//! `spawn_blocking` or before the runtime serves. Never panics on bad input.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

use crate::config::server_tls::{CertEntry, KeyAt, ServerTlsConfig};
use crate::config::{ConfigError, ConfigIssue};

/// The one crypto provider of the process (ring: pure Rust and C, no cmake, fastest to build).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs [`provider`] as the process default once; later calls (and a provider installed by
/// someone else first) leave the default as it is.
pub fn install_provider() {
    // Err means a default is already installed: nothing to do.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// One loaded `[[server.tls.certs]]` entry.
#[derive(Debug)]
pub struct LoadedCert {
    /// Chain and signing key handed to rustls.
    pub key: Arc<CertifiedKey>,
    /// The metric label: the entry's first server name, else its cert file path.
    pub name: String,
    /// The leaf's notAfter, seconds since the Unix epoch.
    pub not_after: i64,
}

/// Certificates by SNI: exact names, then one-label wildcards, else the first entry (SPEC section 10).
#[derive(Debug)]
pub struct SniTable {
    certs: Vec<LoadedCert>,
    exact: HashMap<String, usize>,
    /// Keyed by the domain after `*.`.
    wildcard: HashMap<String, usize>,
    /// SHA-256 over every file read, to tell a reload that changed nothing.
    pub digest: [u8; 32],
}

impl SniTable {
    /// The certificate for `sni` (any case): an exact name, else a `*.` wildcard covering exactly
    /// one label more, else the first entry. An earlier entry wins a name listed twice.
    pub fn resolve(&self, sni: Option<&str>) -> &LoadedCert {
        let idx = sni.map(str::to_ascii_lowercase).and_then(|name| {
            self.exact.get(&name).copied().or_else(|| {
                let (_, parent) = name.split_once('.')?;
                self.wildcard.get(parent).copied()
            })
        });
        &self.certs[idx.unwrap_or(0)]
    }

    /// Every entry, in config order.
    pub fn certs(&self) -> &[LoadedCert] {
        &self.certs
    }
}

/// Reads and checks every certificate entry of `t` into an SNI table.
///
/// # Errors
/// Every unreadable file, bad PEM, unusable or mismatched key and expired leaf, one issue each.
pub fn load_table(t: &ServerTlsConfig) -> Result<SniTable, ConfigError> {
    let provider = provider();
    let mut issues = Vec::new();
    let mut certs = Vec::new();
    let mut hasher = Sha256::new();
    let now = unix_now();
    for entry in &t.certs {
        match load_entry(entry, &provider, now, &mut hasher) {
            Ok(c) => certs.push(c),
            Err(issue) => issues.push(issue),
        }
    }
    if !issues.is_empty() {
        return Err(ConfigError {
            file: first_file(t),
            issues,
        });
    }
    let (mut exact, mut wildcard) = (HashMap::new(), HashMap::new());
    for (i, entry) in t.certs.iter().enumerate() {
        for name in &entry.server_names {
            match name.strip_prefix("*.") {
                Some(parent) => wildcard.entry(parent.to_string()).or_insert(i),
                None => exact.entry(name.clone()).or_insert(i),
            };
        }
    }
    if certs.is_empty() {
        return Err(ConfigError {
            file: first_file(t),
            issues: vec![ConfigIssue {
                key: "server.tls".into(),
                line: 1,
                column: 1,
                message: "no certificate configured".into(),
            }],
        });
    }
    Ok(SniTable {
        certs,
        exact,
        wildcard,
        digest: hasher.finalize().into(),
    })
}

/// Reads `client_ca` into a root store; `Ok(None)` when no client certificates are asked for.
///
/// # Errors
/// The file cannot be read, holds no certificate, or a certificate is not a usable CA.
pub fn load_client_roots(t: &ServerTlsConfig) -> Result<Option<RootCertStore>, ConfigError> {
    let Some(path) = &t.client_ca else {
        return Ok(None);
    };
    let at = &t.client_ca_at;
    let chain = read_chain(path, at).map_err(|i| one(at, i))?;
    let mut roots = RootCertStore::empty();
    for c in chain {
        roots.add(c).map_err(|e| {
            at.error(format!(
                "{}: not a usable CA certificate: {e}",
                path.display()
            ))
        })?;
    }
    Ok(Some(roots))
}

/// Everything `--check-config` and start-up check about the files of `t`.
///
/// # Errors
/// The issues of [`load_table`] and [`load_client_roots`] together.
pub fn check(t: &ServerTlsConfig) -> Result<(), ConfigError> {
    let mut issues = Vec::new();
    if let Err(e) = load_table(t) {
        issues.extend(e.issues);
    }
    if let Err(e) = load_client_roots(t) {
        issues.extend(e.issues);
    }
    if issues.is_empty() {
        Ok(())
    } else {
        Err(ConfigError {
            file: first_file(t),
            issues,
        })
    }
}

fn one(at: &KeyAt, issue: ConfigIssue) -> ConfigError {
    ConfigError {
        file: at.file.clone(),
        issues: vec![issue],
    }
}

fn first_file(t: &ServerTlsConfig) -> String {
    t.certs
        .first()
        .map_or_else(|| t.client_ca_at.file.clone(), |c| c.cert_at.file.clone())
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn read(path: &Path, at: &KeyAt) -> Result<Vec<u8>, ConfigIssue> {
    std::fs::read(path).map_err(|e| at.issue(format!("cannot read {}: {e}", path.display())))
}

fn read_chain(path: &Path, at: &KeyAt) -> Result<Vec<CertificateDer<'static>>, ConfigIssue> {
    let bytes = read(path, at)?;
    chain_from(&bytes, path, at)
}

fn chain_from(
    bytes: &[u8],
    path: &Path,
    at: &KeyAt,
) -> Result<Vec<CertificateDer<'static>>, ConfigIssue> {
    let chain = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            at.issue(format!(
                "{}: not a PEM certificate chain: {e}",
                path.display()
            ))
        })?;
    if chain.is_empty() {
        return Err(at.issue(format!(
            "{}: no \"BEGIN CERTIFICATE\" section found",
            path.display()
        )));
    }
    Ok(chain)
}

fn load_entry(
    e: &CertEntry,
    provider: &CryptoProvider,
    now: i64,
    hasher: &mut Sha256,
) -> Result<LoadedCert, ConfigIssue> {
    let cert_bytes = read(&e.cert, &e.cert_at)?;
    let key_bytes = read(&e.key, &e.key_at)?;
    hasher.update(&cert_bytes);
    hasher.update(&key_bytes);
    let chain = chain_from(&cert_bytes, &e.cert, &e.cert_at)?;
    let (not_before, not_after) =
        validity(&chain[0]).map_err(|m| e.cert_at.issue(format!("{}: {m}", e.cert.display())))?;
    if not_after < now {
        return Err(e.cert_at.issue(format!(
            "{}: the leaf certificate expired at {} (notAfter)",
            e.cert.display(),
            rfc3339(not_after)
        )));
    }
    if not_before > now {
        return Err(e.cert_at.issue(format!(
            "{}: the leaf certificate is not valid before {} (notBefore)",
            e.cert.display(),
            rfc3339(not_before)
        )));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|err| {
        e.key_at.issue(format!(
            "{}: not a PEM private key (PKCS#8, PKCS#1 or SEC1): {err}",
            e.key.display()
        ))
    })?;
    let certified = CertifiedKey::from_der(chain, key, provider).map_err(|err| {
        let why = match err {
            rustls::Error::InconsistentKeys(_) => format!(
                "{}: the private key does not match the certificate in {}",
                e.key.display(),
                e.cert.display()
            ),
            other => format!("{}: unusable private key: {other}", e.key.display()),
        };
        e.key_at.issue(why)
    })?;
    Ok(LoadedCert {
        key: Arc::new(certified),
        name: e
            .server_names
            .first()
            .cloned()
            .unwrap_or_else(|| e.cert.display().to_string()),
        not_after,
    })
}

/// The leaf's notBefore and notAfter, seconds since the Unix epoch.
fn validity(leaf: &CertificateDer<'_>) -> Result<(i64, i64), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| format!("the leaf certificate does not parse: {e}"))?;
    let v = cert.validity();
    Ok((v.not_before.timestamp(), v.not_after.timestamp()))
}

/// The subject of a DER certificate as an RFC 4514-like string (`CN=client,O=Example`), for the
/// access log; `None` if it does not parse.
pub fn subject(der: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    Some(cert.subject().to_string())
}

fn rfc3339(unix: i64) -> String {
    u64::try_from(unix)
        .ok()
        .map(|s| humantime::format_rfc3339_seconds(UNIX_EPOCH + std::time::Duration::from_secs(s)))
        .map_or_else(|| unix.to_string(), |t| t.to_string())
}
