//! `[server]` and `[affinity]` (SPEC section 3): listeners, trusted proxies, affinity header and store.

use super::*;

pub(super) fn server(c: &mut Check, f: &FileConfig) -> ServerConfig {
    let s = &f.server;
    let trusted_proxies = s
        .trusted_proxies
        .as_ref()
        .filter(|v| !v.is_empty())
        .map(|list| {
            list.iter()
                .enumerate()
                .filter_map(|(i, cidr)| {
                    let parsed = cidr
                        .parse::<ipnet::IpNet>()
                        .or_else(|_| cidr.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
                    match parsed {
                        Ok(n) => Some(n),
                        Err(e) => {
                            c.err(
                                format!("server.trusted_proxies[{i}]"),
                                format!("invalid CIDR {cidr:?}: {e}"),
                            );
                            None
                        }
                    }
                })
                .collect()
        });
    ServerConfig {
        listen: c.addr("server.listen", s.listen.as_ref(), DEFAULT_LISTEN),
        admin_listen: c.addr(
            "server.admin_listen",
            s.admin_listen.as_ref(),
            DEFAULT_ADMIN_LISTEN,
        ),
        admin_token: s.admin_token.clone().filter(|t| !t.is_empty()),
        zone: s.zone.clone().filter(|z| !z.is_empty()),
        trusted_proxies,
        shutdown_timeout: c.duration(
            "server.shutdown_timeout",
            s.shutdown_timeout.as_ref(),
            DEFAULT_SHUTDOWN_TIMEOUT,
        ),
        shutdown_spread: shutdown_spread(c, s.shutdown_spread.as_ref()),
        upgrade_timeout: upgrade_timeout(c, s.upgrade_timeout.as_ref()),
        upgrade_socket: s
            .upgrade_socket
            .as_ref()
            .filter(|p| !p.is_empty())
            .map(std::path::PathBuf::from),
        access_log: s.access_log.unwrap_or(true),
        health_listen: s
            .health_listen
            .as_ref()
            .filter(|a| !a.is_empty())
            .and_then(|a| match a.parse() {
                Ok(addr) => Some(addr),
                Err(e) => {
                    c.err(
                        "server.health_listen",
                        format!("invalid socket address {a:?}: {e}"),
                    );
                    None
                }
            }),
        resolver: s.resolver.as_ref().filter(|r| !r.is_empty()).and_then(|r| {
            match r.parse::<SocketAddr>() {
                Ok(a) => Some(a),
                Err(e) => {
                    c.err(
                        "server.resolver",
                        format!("invalid DNS server {r:?}: {e} (expected IP:PORT, e.g. \"127.0.0.1:53\")"),
                    );
                    None
                }
            }
        }),
        tls: s.tls.as_ref().map(|t| server_tls::server_tls(c, t)),
    }
}

/// `server.shutdown_spread` (SPEC section 5): `None` for `"0s"` (the default); reports a value
/// over [`MAX_SHUTDOWN_SPREAD`]. It adds to `shutdown_timeout` (the wait for in-flight work comes
/// after it), so no relation between the two is required.
fn shutdown_spread(c: &mut Check, v: Option<&String>) -> Option<Duration> {
    let key = "server.shutdown_spread";
    let spread = c.duration(key, v, DEFAULT_SHUTDOWN_SPREAD);
    if spread > MAX_SHUTDOWN_SPREAD {
        c.err(
            key,
            format!(
                "must be at most {} (got {}): the gateway would stay up that long after SIGTERM",
                humantime::format_duration(MAX_SHUTDOWN_SPREAD),
                humantime::format_duration(spread)
            ),
        );
    }
    (!spread.is_zero()).then_some(spread)
}

/// `server.upgrade_timeout` (SPEC section 13): a duration above zero.
fn upgrade_timeout(c: &mut Check, v: Option<&String>) -> Duration {
    let t = c.duration("server.upgrade_timeout", v, DEFAULT_UPGRADE_TIMEOUT);
    if t.is_zero() {
        c.err("server.upgrade_timeout", "must be greater than 0s");
    }
    t
}

pub(super) fn affinity(c: &mut Check, f: &FileConfig) -> AffinityConfig {
    let a = &f.affinity;
    let header_str = a.header.as_deref().unwrap_or(DEFAULT_AFFINITY_HEADER);
    let header = c
        .header_name("affinity.header", header_str)
        .unwrap_or(http::HeaderName::from_static("x-conn-id"));
    let ids = c.one_of("affinity.ids", a.ids.as_ref(), IdMode::Client);
    let redis_url = a
        .redis_url
        .clone()
        .unwrap_or_else(|| DEFAULT_REDIS_URL.to_string());
    let store = match a.store.as_deref() {
        None | Some("memory") => StoreKind::Memory,
        Some("redis") => {
            let ok = [
                "redis://",
                "rediss://",
                "redis+cluster://",
                "redis+sentinel://",
                "redis+unix://",
                "unix://",
            ];
            if !ok.iter().any(|p| redis_url.starts_with(p)) {
                c.err("affinity.redis_url", format!("unsupported URL {redis_url:?}: use redis://, rediss://, redis+cluster:// or redis+sentinel://"));
            }
            StoreKind::Redis { url: redis_url }
        }
        Some(other) => {
            c.err(
                "affinity.store",
                format!("unknown value {other:?}, expected one of \"memory\", \"redis\""),
            );
            StoreKind::Memory
        }
    };
    let ttl = c.duration("affinity.ttl", a.ttl.as_ref(), DEFAULT_AFFINITY_TTL);
    if ttl.is_zero() {
        c.err("affinity.ttl", "must be greater than 0s");
    }
    let max_entries = a
        .max_entries
        .map(|n| n as usize)
        .unwrap_or(DEFAULT_MAX_ENTRIES);
    if max_entries == 0 {
        c.err("affinity.max_entries", "must be at least 1");
    }
    AffinityConfig {
        header,
        ids,
        secret_env: a
            .secret_env
            .clone()
            .unwrap_or_else(|| "HOPGW_SECRET".into()),
        old_secrets_env: a
            .old_secrets_env
            .clone()
            .unwrap_or_else(|| "HOPGW_OLD_SECRETS".into()),
        store,
        ttl,
        max_entries: max_entries.max(1),
        key_prefix: a
            .key_prefix
            .clone()
            .unwrap_or_else(|| DEFAULT_KEY_PREFIX.into()),
        redis_timeout: c.duration(
            "affinity.redis_timeout",
            a.redis_timeout.as_ref(),
            DEFAULT_REDIS_TIMEOUT,
        ),
        redis_ca: redis_ca(c, a.redis_ca.as_deref()),
    }
}

/// Reads and checks `affinity.redis_ca` (PEM with at least one certificate); `None` when unset.
pub(super) fn redis_ca(c: &mut Check, path: Option<&str>) -> Option<Vec<u8>> {
    use rustls::pki_types::pem::PemObject;
    let path = path.filter(|p| !p.is_empty())?;
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            c.err("affinity.redis_ca", format!("cannot read {path:?}: {e}"));
            return None;
        }
    };
    match rustls::pki_types::CertificateDer::pem_slice_iter(&bytes).collect::<Result<Vec<_>, _>>() {
        Ok(list) if !list.is_empty() => Some(bytes),
        Ok(_) => {
            c.err(
                "affinity.redis_ca",
                format!("{path:?} holds no PEM certificate"),
            );
            None
        }
        Err(e) => {
            c.err(
                "affinity.redis_ca",
                format!("{path:?} is not valid PEM: {e}"),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::text::{catch_all_route_text, cluster_text};
    use crate::config::{load_str, DEFAULT_UPGRADE_TIMEOUT};

    fn with_server(lines: &str) -> String {
        format!(
            "[server]\n{lines}\n{}{}",
            cluster_text("c", "", &[("a", "127.0.0.1:1")]),
            catch_all_route_text("r", "c")
        )
    }

    #[test]
    fn upgrade_keys_default_parse_and_refuse_a_zero_timeout() {
        let c = load_str(&with_server(""), "g.toml").expect("valid");
        assert_eq!(c.server.upgrade_timeout, DEFAULT_UPGRADE_TIMEOUT);
        assert_eq!(c.server.upgrade_socket, None);
        let text = with_server("upgrade_timeout = \"5s\"\nupgrade_socket = \"/run/gw.sock\"");
        let c = load_str(&text, "g.toml").expect("valid");
        assert_eq!(c.server.upgrade_timeout, std::time::Duration::from_secs(5));
        assert_eq!(
            c.server.upgrade_socket.as_deref(),
            Some(std::path::Path::new("/run/gw.sock"))
        );
        let c = load_str(&with_server("upgrade_socket = \"\""), "g.toml").expect("valid");
        assert_eq!(c.server.upgrade_socket, None, "empty is off");
        let e = load_str(&with_server("upgrade_timeout = \"0s\""), "g.toml").expect_err("zero");
        assert!(
            e.to_string()
                .contains("g.toml:2:1: server.upgrade_timeout: must be greater than 0s"),
            "{e}"
        );
    }
}
