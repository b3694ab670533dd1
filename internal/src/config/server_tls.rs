//! The typed `[server.tls]` block (SPEC sections 3 and 10): where the TLS listener binds, what it
//! offers, and which certificate files it serves. Paths only: the files are read and checked by
//! `crate::tls::certs`, at start, on `--check-config` and on every certificate reload.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::{ConfigError, ConfigIssue};

/// Address of the TLS listener when `[server.tls]` has no `listen` (SPEC section 3 example).
pub const DEFAULT_TLS_LISTEN: &str = "0.0.0.0:8443";
/// ALPN offered when `alpn` is absent: HTTP/2 first, so browsers and gRPC clients get h2.
pub const DEFAULT_ALPN: [&str; 2] = ["h2", "http/1.1"];

/// The lowest TLS version a client may negotiate (TLS 1.0 and 1.1 are never offered, RFC 8996).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3.
    V1_2,
    /// TLS 1.3 only.
    V1_3,
}

/// Where a key sits in the config file, so a certificate problem found later (at a reload) is
/// reported in the config-error shape `<file>:<line>:<column>: <key>: <message>`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyAt {
    /// The config file's name as the errors show it.
    pub file: String,
    /// Dotted key, e.g. `server.tls.certs[0].cert`.
    pub key: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
}

impl KeyAt {
    /// A refused config with one issue at this key.
    pub fn error(&self, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            issues: vec![self.issue(message)],
        }
    }

    /// One issue at this key.
    pub fn issue(&self, message: impl Into<String>) -> ConfigIssue {
        ConfigIssue {
            key: self.key.clone(),
            line: self.line,
            column: self.column,
            message: message.into(),
        }
    }
}

/// One `[[server.tls.certs]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertEntry {
    /// PEM chain file, leaf first (relative paths are relative to the working directory).
    pub cert: PathBuf,
    /// PEM private key file: PKCS#8, PKCS#1 or SEC1.
    pub key: PathBuf,
    /// Lower-case SNI names: exact names, or `*.` followed by a domain (one-label wildcard).
    pub server_names: Vec<String>,
    /// Where `cert` is written.
    pub cert_at: KeyAt,
    /// Where `key` is written.
    pub key_at: KeyAt,
}

/// `[server.tls]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsConfig {
    /// TLS listener address.
    pub listen: SocketAddr,
    /// ALPN protocol ids offered, in order; each is `h2` or `http/1.1`.
    pub alpn: Vec<Vec<u8>>,
    /// Lowest accepted TLS version.
    pub min_version: TlsVersion,
    /// CA file that client certificates must chain to; `None` = no client certificates.
    pub client_ca: Option<PathBuf>,
    /// Where `client_ca` is written.
    pub client_ca_at: KeyAt,
    /// Certificates; never empty, the first is the default.
    pub certs: Vec<CertEntry>,
}
