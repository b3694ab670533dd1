//! Validation of `[server.tls]` (SPEC section 3): addresses, ALPN ids, version, names. The
//! certificate files themselves are checked by `crate::tls::certs`.

use std::path::PathBuf;

use super::super::file::ServerTlsFile;
use super::super::server_tls::{
    CertEntry, KeyAt, ServerTlsConfig, TlsVersion, DEFAULT_ALPN, DEFAULT_TLS_LISTEN,
};
use super::super::spans::SpanIndex;
use super::Check;

/// Validates `t`; problems go to `c` under `server.tls.*` keys.
pub(super) fn server_tls(c: &mut Check, t: &ServerTlsFile) -> ServerTlsConfig {
    let listen = c.addr("server.tls.listen", t.listen.as_ref(), DEFAULT_TLS_LISTEN);
    let alpn = match &t.alpn {
        None => DEFAULT_ALPN.iter().map(|a| a.as_bytes().to_vec()).collect(),
        Some(list) => {
            if list.is_empty() {
                c.err(
                    "server.tls.alpn",
                    "must offer at least one of \"h2\", \"http/1.1\"",
                );
            }
            for (i, a) in list.iter().enumerate() {
                if !DEFAULT_ALPN.contains(&a.as_str()) {
                    c.err(
                        format!("server.tls.alpn[{i}]"),
                        format!("unknown protocol {a:?}, expected \"h2\" or \"http/1.1\""),
                    );
                }
            }
            list.iter().map(|a| a.as_bytes().to_vec()).collect()
        }
    };
    let min_version = c.one_of(
        "server.tls.min_version",
        t.min_version.as_ref(),
        TlsVersion::V1_2,
    );
    if t.certs.is_empty() {
        c.err(
            "server.tls",
            "needs at least one [[server.tls.certs]] entry (cert, key)",
        );
    }
    let mut certs = Vec::with_capacity(t.certs.len());
    for (i, e) in t.certs.iter().enumerate() {
        let base = format!("server.tls.certs[{i}]");
        for (what, v) in [("cert", &e.cert), ("key", &e.key)] {
            if v.is_empty() {
                c.err(format!("{base}.{what}"), "must name a PEM file");
            }
        }
        let mut names = Vec::with_capacity(e.server_names.len());
        for (j, n) in e.server_names.iter().enumerate() {
            match server_name(n) {
                Ok(n) => names.push(n),
                Err(msg) => c.err(format!("{base}.server_names[{j}]"), msg),
            }
        }
        certs.push(CertEntry {
            cert: PathBuf::from(&e.cert),
            key: PathBuf::from(&e.key),
            server_names: names,
            cert_at: KeyAt {
                key: format!("{base}.cert"),
                ..KeyAt::default()
            },
            key_at: KeyAt {
                key: format!("{base}.key"),
                ..KeyAt::default()
            },
        });
    }
    ServerTlsConfig {
        listen,
        alpn,
        min_version,
        client_ca: t
            .client_ca
            .as_ref()
            .filter(|p| !p.is_empty())
            .map(PathBuf::from),
        client_ca_at: KeyAt {
            key: "server.tls.client_ca".into(),
            ..KeyAt::default()
        },
        certs,
    }
}

/// A lower-cased SNI name: DNS labels of letters, digits and `-`, optionally `*.` in front of a
/// domain of at least two labels (one-label wildcard, RFC 6125 section 6.4.3).
fn server_name(n: &str) -> Result<String, String> {
    let lower = n.to_ascii_lowercase();
    let rest = lower.strip_prefix("*.").unwrap_or(&lower);
    let labels: Vec<&str> = rest.split('.').collect();
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if rest.len() > 253 || !labels.iter().all(label_ok) {
        return Err(format!(
            "invalid server name {n:?}: expected a DNS name or \"*.\" followed by one"
        ));
    }
    if lower.starts_with("*.") && labels.len() < 2 {
        return Err(format!(
            "invalid server name {n:?}: a wildcard needs a domain of two labels or more"
        ));
    }
    Ok(lower)
}

/// Fills in where each `[server.tls]` key is written, for errors found after validation.
pub(super) fn locate(t: &mut ServerTlsConfig, index: &SpanIndex, file: &str) {
    let fill = |at: &mut KeyAt| {
        (at.line, at.column) = index.locate(&at.key);
        at.file = file.to_string();
    };
    fill(&mut t.client_ca_at);
    for e in &mut t.certs {
        fill(&mut e.cert_at);
        fill(&mut e.key_at);
    }
}

#[cfg(test)]
mod tests {
    use super::server_name;

    #[test]
    fn server_names_are_dns_names_or_one_label_wildcards() {
        assert_eq!(server_name("API.example.com"), Ok("api.example.com".into()));
        assert_eq!(server_name("*.example.com"), Ok("*.example.com".into()));
        assert!(server_name("*.com").is_err());
        assert!(server_name("a..b").is_err());
        assert!(server_name("*.*.example.com").is_err());
        assert!(server_name("a b.com").is_err());
    }
}
