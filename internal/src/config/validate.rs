//! `FileConfig` -> `Config`: every rule of SPEC section 3, collecting all problems with their keys.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use super::file::{FileConfig, HealthFile};
use super::spans::SpanIndex;
use super::*;

mod server_tls;

/// Collects issues by key; spans are resolved once at the end.
pub(super) struct Check {
    issues: Vec<(String, String)>,
}

impl Check {
    pub(super) fn err(&mut self, key: impl Into<String>, msg: impl Into<String>) {
        self.issues.push((key.into(), msg.into()));
    }

    pub(super) fn duration(
        &mut self,
        key: &str,
        v: Option<&String>,
        default: Duration,
    ) -> Duration {
        match v {
            None => default,
            Some(s) => match humantime::parse_duration(s) {
                Ok(d) => d,
                Err(e) => {
                    self.err(
                        key,
                        format!("invalid duration {s:?}: {e} (use e.g. \"250ms\", \"2s\", \"1h\")"),
                    );
                    default
                }
            },
        }
    }

    fn addr(&mut self, key: &str, v: Option<&String>, default: &str) -> SocketAddr {
        let s = v.map(String::as_str).unwrap_or(default);
        match s.parse() {
            Ok(a) => a,
            Err(e) => {
                self.err(key, format!("invalid socket address {s:?}: {e}"));
                default
                    .parse()
                    .expect("defaults are valid socket addresses")
            }
        }
    }

    fn one_of<T: Copy>(
        &mut self,
        key: &str,
        v: Option<&String>,
        default: T,
        options: &[(&str, T)],
    ) -> T {
        let Some(s) = v else { return default };
        match options.iter().find(|(name, _)| name == s) {
            Some((_, t)) => *t,
            None => {
                let names: Vec<_> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
                self.err(
                    key,
                    format!("unknown value {s:?}, expected one of {}", names.join(", ")),
                );
                default
            }
        }
    }

    fn header_name(&mut self, key: &str, s: &str) -> Option<http::HeaderName> {
        match http::HeaderName::from_bytes(s.as_bytes()) {
            Ok(h) => Some(h),
            Err(_) => {
                self.err(key, format!("invalid header name {s:?}"));
                None
            }
        }
    }
}

/// Parses TOML and validates; see [`super::load_str`].
pub(crate) fn load_str(text: &str, file: &str) -> Result<Config, ConfigError> {
    let index = SpanIndex::new(text);
    let mk = |issues: Vec<ConfigIssue>| ConfigError {
        file: file.to_string(),
        issues,
    };
    // A syntax error leaves no document to look further into: it is the one error reported.
    let doc: toml::Table = match text.parse() {
        Ok(doc) => doc,
        Err(e) => return Err(mk(vec![syntax_issue(&index, &e, "-".into())])),
    };
    let located = |(key, message): (String, String)| {
        let (line, column) = index.locate(&key);
        ConfigIssue {
            key,
            line,
            column,
            message,
        }
    };
    // Every serde-level error (unknown keys, wrong types), then every semantic one of what is left.
    let (parsed, serde_issues) = super::collect::deserialize_all(doc);
    let semantic = match &parsed {
        Some(f) => match from_file(f) {
            Ok(mut cfg) if serde_issues.is_empty() => {
                if let Some(t) = cfg.server.tls.as_mut() {
                    server_tls::locate(t, &index, file);
                }
                return Ok(cfg);
            }
            Ok(_) => Vec::new(),
            Err(issues) => issues,
        },
        None => Vec::new(),
    };
    let mut issues: Vec<ConfigIssue> = semantic
        .into_iter()
        .filter(|(key, _)| {
            !serde_issues
                .iter()
                .any(|(reported, _)| super::collect::covered(key, reported))
        })
        .chain(serde_issues.iter().cloned())
        .map(located)
        .collect();
    // File order (stable: issues on one key keep the order they were found in).
    issues.sort_by_key(|i| (i.line, i.column));
    Err(mk(issues))
}

fn syntax_issue(index: &SpanIndex, e: &toml::de::Error, key: String) -> ConfigIssue {
    let (line, column) = match e.span() {
        Some(span) => index.line_col(span.start),
        None => index.locate(&key),
    };
    ConfigIssue {
        key,
        line,
        column,
        message: e.message().trim().to_string(),
    }
}

/// Validates a parsed file into a [`Config`].
///
/// # Errors
/// Every problem as `(dotted key, message)`, in file order.
pub fn from_file(f: &FileConfig) -> Result<Config, Vec<(String, String)>> {
    let mut c = Check { issues: Vec::new() };
    let server = server(&mut c, f);
    let affinity = affinity(&mut c, f);
    let limits = limits(&mut c, f);
    let clusters = clusters(&mut c, f);
    let routes = routes(&mut c, f, &clusters);
    if c.issues.is_empty() {
        Ok(Config {
            server,
            affinity,
            limits,
            clusters,
            routes,
        })
    } else {
        Err(c.issues)
    }
}

fn server(c: &mut Check, f: &FileConfig) -> ServerConfig {
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

fn affinity(c: &mut Check, f: &FileConfig) -> AffinityConfig {
    let a = &f.affinity;
    let header_str = a.header.as_deref().unwrap_or(DEFAULT_AFFINITY_HEADER);
    let header = c
        .header_name("affinity.header", header_str)
        .unwrap_or(http::HeaderName::from_static("x-conn-id"));
    let ids = c.one_of(
        "affinity.ids",
        a.ids.as_ref(),
        IdMode::Client,
        &[("client", IdMode::Client), ("signed", IdMode::Signed)],
    );
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
fn redis_ca(c: &mut Check, path: Option<&str>) -> Option<Vec<u8>> {
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

/// Loads `clusters[i].tls` (key `key`); checks `protocol = "h2"` has it. `None` = cleartext.
fn cluster_tls(
    c: &mut Check,
    key: &str,
    t: Option<&super::file::TlsFile>,
    protocol: Protocol,
) -> Option<std::sync::Arc<crate::tls::client::ClusterTls>> {
    use crate::tls::client::{ClusterTls, TlsSpec};
    let Some(t) = t else {
        if protocol == Protocol::H2 {
            c.err(
                format!("{key}.protocol"),
                "\"h2\" is HTTP/2 over TLS: the cluster needs tls = { .. } (or use \"h2c\")",
            );
        }
        return None;
    };
    if protocol == Protocol::H2c {
        c.err(
            format!("{key}.protocol"),
            "\"h2c\" is cleartext HTTP/2: use \"h2\" for HTTP/2 over TLS",
        );
    }
    let set = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
    let spec = TlsSpec {
        sni: set(&t.sni),
        ca: set(&t.ca),
        verify: t.verify.unwrap_or(true),
        client_cert: set(&t.client_cert),
        client_key: set(&t.client_key),
    };
    match ClusterTls::load(&spec) {
        Ok(tls) => Some(std::sync::Arc::new(tls)),
        Err(issues) => {
            for (sub, msg) in issues {
                c.err(format!("{key}.tls.{sub}"), msg);
            }
            None
        }
    }
}

fn limits(c: &mut Check, f: &FileConfig) -> Limits {
    let l = &f.limits;
    let pos = |c: &mut Check, key: &str, v: Option<u64>, d: usize| -> usize {
        match v {
            Some(0) => {
                c.err(key, "must be at least 1");
                d
            }
            Some(n) => n as usize,
            None => d,
        }
    };
    let ws_idle = c.duration(
        "limits.websocket_idle_timeout",
        l.websocket_idle_timeout.as_ref(),
        Duration::ZERO,
    );
    let rate_window = c.duration(
        "limits.body_rate_window",
        l.body_rate_window.as_ref(),
        DEFAULT_BODY_RATE_WINDOW,
    );
    if rate_window.is_zero() {
        c.err("limits.body_rate_window", "must be more than 0s");
    }
    let body_min_rate = match l.body_min_rate.unwrap_or(DEFAULT_BODY_MIN_RATE) {
        0 => None,
        bytes_per_sec => Some(BodyMinRate {
            bytes_per_sec,
            window: if rate_window.is_zero() {
                DEFAULT_BODY_RATE_WINDOW
            } else {
                rate_window
            },
        }),
    };
    Limits {
        max_request_line: pos(
            c,
            "limits.max_request_line",
            l.max_request_line,
            DEFAULT_MAX_REQUEST_LINE,
        ),
        max_header_bytes: pos(
            c,
            "limits.max_header_bytes",
            l.max_header_bytes,
            DEFAULT_MAX_HEADER_BYTES,
        ),
        max_headers: pos(c, "limits.max_headers", l.max_headers, DEFAULT_MAX_HEADERS),
        header_read_timeout: c.duration(
            "limits.header_read_timeout",
            l.header_read_timeout.as_ref(),
            DEFAULT_HEADER_READ_TIMEOUT,
        ),
        body_idle_timeout: c.duration(
            "limits.body_idle_timeout",
            l.body_idle_timeout.as_ref(),
            DEFAULT_BODY_IDLE_TIMEOUT,
        ),
        max_connections: pos(
            c,
            "limits.max_connections",
            l.max_connections,
            DEFAULT_MAX_CONNECTIONS,
        ),
        websocket_idle_timeout: (!ws_idle.is_zero()).then_some(ws_idle),
        connect_timeout: c.duration(
            "limits.connect_timeout",
            l.connect_timeout.as_ref(),
            DEFAULT_CONNECT_TIMEOUT,
        ),
        upstream_idle_timeout: c.duration(
            "limits.upstream_idle_timeout",
            l.upstream_idle_timeout.as_ref(),
            DEFAULT_UPSTREAM_IDLE_TIMEOUT,
        ),
        body_min_rate,
        h2: H2Limits {
            max_concurrent_streams: u32::try_from(pos(
                c,
                "limits.h2_max_concurrent_streams",
                l.h2_max_concurrent_streams,
                DEFAULT_H2_MAX_CONCURRENT_STREAMS as usize,
            ))
            .unwrap_or(u32::MAX),
            max_header_list: u32::try_from(size(
                c,
                "limits.h2_max_header_list",
                l.h2_max_header_list.as_ref(),
                u64::from(DEFAULT_H2_MAX_HEADER_LIST),
            ))
            .unwrap_or(u32::MAX),
            max_resets_per_second: NonZeroU32::new(
                u32::try_from(pos(
                    c,
                    "limits.h2_max_resets_per_second",
                    l.h2_max_resets_per_second,
                    DEFAULT_H2_MAX_RESETS_PER_SECOND as usize,
                ))
                .unwrap_or(u32::MAX),
            )
            .expect("pos() never returns 0"),
        },
        websocket_max_message: size(
            c,
            "limits.websocket_max_message",
            l.websocket_max_message.as_ref(),
            DEFAULT_WEBSOCKET_MAX_MESSAGE,
        ),
    }
}

/// A `[limits]` size of at least 1 byte; reports a bad one and returns `default`.
fn size(c: &mut Check, key: &str, v: Option<&super::size::SizeFile>, default: u64) -> u64 {
    match v.map(super::size::SizeFile::bytes) {
        None => default,
        Some(Ok(0)) => {
            c.err(key, "must be at least 1 byte");
            default
        }
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            c.err(key, e);
            default
        }
    }
}

/// Merges `over` onto `base` key by key.
fn merge_health(base: &HealthFile, over: Option<&HealthFile>) -> HealthFile {
    let Some(o) = over else { return base.clone() };
    HealthFile {
        kind: o.kind.clone().or_else(|| base.kind.clone()),
        grpc_service: o.grpc_service.clone().or_else(|| base.grpc_service.clone()),
        path: o.path.clone().or_else(|| base.path.clone()),
        interval: o.interval.clone().or_else(|| base.interval.clone()),
        timeout: o.timeout.clone().or_else(|| base.timeout.clone()),
        expect_status: o
            .expect_status
            .clone()
            .or_else(|| base.expect_status.clone()),
        expect_json: o.expect_json.clone().or_else(|| base.expect_json.clone()),
        degrade_after: o.degrade_after.or(base.degrade_after),
        degraded_percent: o.degraded_percent.or(base.degraded_percent),
        eject_after: o.eject_after.or(base.eject_after),
        recover_after: o.recover_after.or(base.recover_after),
        slow_start: o.slow_start.clone().or_else(|| base.slow_start.clone()),
        passive_consecutive_errors: o
            .passive_consecutive_errors
            .or(base.passive_consecutive_errors),
        max_ejection_percent: o.max_ejection_percent.or(base.max_ejection_percent),
    }
}

/// Resolves one cluster's health settings; `key` is where its overrides live (for error keys).
fn health(c: &mut Check, key: &str, h: &HealthFile) -> HealthConfig {
    let kind = match h.kind.as_deref() {
        None | Some("http") => ProbeKind::Http,
        Some("tcp") => ProbeKind::Tcp,
        Some("grpc") => ProbeKind::Grpc,
        Some(o) => {
            c.err(
                format!("{key}.kind"),
                format!("unknown value {o:?}, expected one of \"http\", \"tcp\", \"grpc\""),
            );
            ProbeKind::Http
        }
    };
    let path = h.path.clone().unwrap_or_else(|| DEFAULT_HEALTH_PATH.into());
    if !path.starts_with('/') {
        c.err(format!("{key}.path"), "must start with '/'");
    }
    let interval = c.duration(
        &format!("{key}.interval"),
        h.interval.as_ref(),
        DEFAULT_HEALTH_INTERVAL,
    );
    if interval < Duration::from_millis(10) {
        c.err(format!("{key}.interval"), "must be at least 10ms");
    }
    let timeout = c.duration(
        &format!("{key}.timeout"),
        h.timeout.as_ref(),
        DEFAULT_HEALTH_TIMEOUT,
    );
    if timeout.is_zero() {
        c.err(format!("{key}.timeout"), "must be greater than 0s");
    }
    let expect_status = match h.expect_status.as_deref() {
        None => 200..=299,
        Some([lo, hi]) if (100..=599).contains(lo) && lo <= hi && *hi <= 599 => *lo..=*hi,
        Some(_) => {
            c.err(
                format!("{key}.expect_status"),
                "expected [low, high] with 100 <= low <= high <= 599",
            );
            200..=299
        }
    };
    let degrade_after = h.degrade_after.unwrap_or(DEFAULT_DEGRADE_AFTER);
    let eject_after = h.eject_after.unwrap_or(DEFAULT_EJECT_AFTER);
    if eject_after == 0 {
        c.err(format!("{key}.eject_after"), "must be at least 1");
    }
    if degrade_after == 0 || degrade_after > eject_after {
        c.err(
            format!("{key}.degrade_after"),
            format!("must be between 1 and eject_after ({eject_after})"),
        );
    }
    let degraded_percent = h
        .degraded_percent
        .unwrap_or(DEFAULT_DEGRADED_PERCENT as u32);
    if !(1..=100).contains(&degraded_percent) {
        c.err(
            format!("{key}.degraded_percent"),
            "must be between 1 and 100",
        );
    }
    let max_ejection_percent = h
        .max_ejection_percent
        .unwrap_or(u32::from(DEFAULT_MAX_EJECTION_PERCENT));
    if max_ejection_percent > 100 {
        c.err(
            format!("{key}.max_ejection_percent"),
            "must be between 0 and 100",
        );
    }
    let recover_after = h.recover_after.unwrap_or(DEFAULT_RECOVER_AFTER);
    if recover_after == 0 {
        c.err(format!("{key}.recover_after"), "must be at least 1");
    }
    let slow_start = c.duration(
        &format!("{key}.slow_start"),
        h.slow_start.as_ref(),
        DEFAULT_SLOW_START,
    );
    if let Some(j) = &h.expect_json {
        if !j.pointer.is_empty() && !j.pointer.starts_with('/') {
            c.err(
                format!("{key}.expect_json.pointer"),
                "a JSON pointer is empty or starts with '/' (RFC 6901)",
            );
        }
    }
    HealthConfig {
        kind,
        grpc_service: h.grpc_service.clone().unwrap_or_default(),
        path,
        interval,
        timeout,
        expect_status,
        expect_json: h.expect_json.as_ref().map(|j| ExpectJson {
            pointer: j.pointer.clone(),
            equals: j.equals.clone(),
        }),
        degrade_after: degrade_after.clamp(1, eject_after.max(1)),
        degraded_percent: degraded_percent.clamp(1, 100) as u8,
        eject_after: eject_after.max(1),
        recover_after: recover_after.max(1),
        slow_start: (!slow_start.is_zero()).then_some(slow_start),
        passive_consecutive_errors: NonZeroU32::new(
            h.passive_consecutive_errors
                .unwrap_or(DEFAULT_PASSIVE_ERRORS),
        ),
        max_ejection_percent: max_ejection_percent.min(100) as u8,
    }
}

fn clusters(c: &mut Check, f: &FileConfig) -> Vec<ClusterConfig> {
    // Validate the global block on its own so its errors carry `health.*` keys.
    let _ = health(c, "health", &f.health);
    let global_errors = c.issues.len();
    let mut names = HashSet::new();
    let mut node_ids = HashSet::new();
    let mut out = Vec::new();
    for (i, cl) in f.clusters.iter().enumerate() {
        let key = format!("clusters[{i}]");
        if cl.name.is_empty() {
            c.err(format!("{key}.name"), "required");
        } else if !names.insert(cl.name.clone()) {
            c.err(
                format!("{key}.name"),
                format!("duplicate cluster name {:?}", cl.name),
            );
        }
        let protocol = c.one_of(
            &format!("{key}.protocol"),
            cl.protocol.as_ref(),
            Protocol::Http1,
            &[
                ("http1", Protocol::Http1),
                ("h2c", Protocol::H2c),
                ("h2", Protocol::H2),
            ],
        );
        let tls = cluster_tls(c, &key, cl.tls.as_ref(), protocol);
        let lb = c.one_of(
            &format!("{key}.lb"),
            cl.lb.as_ref(),
            Picker::RoundRobin,
            &[
                ("round_robin", Picker::RoundRobin),
                ("random", Picker::Random),
                ("weighted", Picker::Weighted),
                ("least_request", Picker::LeastRequest),
            ],
        );
        let before = c.issues.len();
        let merged = merge_health(&f.health, cl.health.as_ref());
        let health = health(c, &format!("{key}.health"), &merged);
        // Errors that come only from the global block were already reported once as `health.*`.
        if global_errors > 0 && cl.health.is_none() {
            c.issues.truncate(before);
        }
        if health.kind == ProbeKind::Grpc && protocol == Protocol::Http1 {
            c.err(
                format!("{key}.protocol"),
                "health.kind = \"grpc\" needs an HTTP/2 protocol (\"h2c\" or \"h2\"): gRPC runs over HTTP/2",
            );
        }
        let discovery = cl
            .discovery
            .as_ref()
            .map(|d| super::discovery::discovery(c, &format!("{key}.discovery"), d));
        if discovery.is_some() && !cl.nodes.is_empty() {
            c.err(
                format!("{key}.nodes"),
                "a cluster takes static nodes or discovery, not both",
            );
        } else if discovery.is_none() && cl.nodes.is_empty() {
            c.err(format!("{key}.nodes"), "a cluster needs at least one node");
        }
        let mut nodes = Vec::new();
        for (j, n) in cl.nodes.iter().enumerate() {
            let nkey = format!("{key}.nodes[{j}]");
            if n.id.is_empty() {
                c.err(format!("{nkey}.id"), "required");
            } else if !node_ids.insert(n.id.clone()) {
                c.err(
                    format!("{nkey}.id"),
                    format!(
                        "duplicate node id {:?} (node ids are unique across clusters)",
                        n.id
                    ),
                );
            }
            match n.addr.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
                _ => c.err(
                    format!("{nkey}.addr"),
                    format!("expected HOST:PORT, got {:?}", n.addr),
                ),
            }
            let weight = n.weight.unwrap_or(100);
            if weight > 10_000 {
                c.err(format!("{nkey}.weight"), "must be between 0 and 10000");
            }
            nodes.push(NodeConfig {
                id: n.id.clone(),
                addr: n.addr.clone(),
                weight,
                metadata: n.metadata.clone(),
            });
        }
        out.push(ClusterConfig {
            name: cl.name.clone(),
            protocol,
            tls,
            health,
            lb,
            nodes,
            discovery,
        });
    }
    out
}

fn routes(c: &mut Check, f: &FileConfig, clusters: &[ClusterConfig]) -> Vec<RouteConfig> {
    let mut ids = HashSet::new();
    let mut out = Vec::new();
    for (i, r) in f.routes.iter().enumerate() {
        let key = format!("routes[{i}]");
        if r.id.is_empty() {
            c.err(format!("{key}.id"), "required");
        } else if !ids.insert(r.id.clone()) {
            c.err(
                format!("{key}.id"),
                format!("duplicate route id {:?}", r.id),
            );
        }
        if r.cluster.is_empty() {
            c.err(format!("{key}.cluster"), "required");
        } else if !clusters.iter().any(|cl| cl.name == r.cluster) {
            c.err(
                format!("{key}.cluster"),
                format!("unknown cluster {:?}", r.cluster),
            );
        }
        let m = &r.match_;
        for (k, v) in [("path_prefix", &m.path_prefix), ("path", &m.path)] {
            if let Some(p) = v {
                if !p.starts_with('/') {
                    c.err(format!("{key}.match.{k}"), "must start with '/'");
                }
            }
        }
        let methods = m
            .methods
            .iter()
            .enumerate()
            .filter_map(|(j, s)| {
                match http::Method::from_bytes(s.to_ascii_uppercase().as_bytes()) {
                    Ok(m) => Some(m),
                    Err(_) => {
                        c.err(
                            format!("{key}.match.methods[{j}]"),
                            format!("invalid method {s:?}"),
                        );
                        None
                    }
                }
            })
            .collect();
        let headers = m
            .headers
            .iter()
            .filter_map(|(name, v)| {
                c.header_name(&format!("{key}.match.headers.{name}"), name)
                    .map(|h| (h, v.clone()))
            })
            .collect();
        let matcher = RouteMatch {
            path_prefix: m.path_prefix.clone().filter(|p| !p.is_empty()),
            path: m.path.clone().filter(|p| !p.is_empty()),
            host: m
                .host
                .clone()
                .filter(|h| !h.is_empty())
                .map(|h| h.to_ascii_lowercase()),
            methods,
            headers,
        };
        let fb = r.fallback.clone().unwrap_or_default();
        let status = fb.status.unwrap_or(503);
        let status = match http::StatusCode::from_u16(status) {
            Ok(s) if (200..=599).contains(&status) => s,
            _ => {
                c.err(
                    format!("{key}.fallback.status"),
                    "must be between 200 and 599",
                );
                http::StatusCode::SERVICE_UNAVAILABLE
            }
        };
        let fallback = Fallback {
            status,
            content_type: fb.content_type.unwrap_or_else(|| "application/json".into()),
            body: fb.body.unwrap_or_else(|| {
                r#"{"code":-1,"message":"service temporarily unavailable"}"#.into()
            }),
        };
        let canary = r.canary.as_ref().map(|cf| canary(c, &key, cf));
        let warmup = r.warmup.as_ref().map(|w| {
            let initial_percent = w.initial_percent.unwrap_or(10.0);
            if !(0.0..=100.0).contains(&initial_percent) {
                c.err(
                    format!("{key}.warmup.initial_percent"),
                    "must be between 0 and 100",
                );
            }
            let max_error_rate = w.max_error_rate.unwrap_or(0.05);
            if !(0.0..=1.0).contains(&max_error_rate) {
                c.err(
                    format!("{key}.warmup.max_error_rate"),
                    "must be between 0 and 1",
                );
            }
            WarmupConfig {
                initial_percent,
                duration: c.duration(
                    &format!("{key}.warmup.duration"),
                    w.duration.as_ref(),
                    Duration::from_secs(120),
                ),
                max_error_rate,
            }
        });
        out.push(RouteConfig {
            id: r.id.clone(),
            matcher,
            cluster: r.cluster.clone(),
            strip_prefix: r.strip_prefix.clone().filter(|s| !s.is_empty()),
            timeout: c.duration(
                &format!("{key}.timeout"),
                r.timeout.as_ref(),
                DEFAULT_ROUTE_TIMEOUT,
            ),
            grpc_max_timeout: Some(c.duration(
                &format!("{key}.grpc_max_timeout"),
                r.grpc_max_timeout.as_ref(),
                Duration::ZERO,
            ))
            .filter(|d| !d.is_zero()),
            retries: r.retries.unwrap_or(DEFAULT_RETRIES),
            websocket: c.one_of(
                &format!("{key}.websocket"),
                r.websocket.as_ref(),
                WsMode::Hop,
                &[
                    ("hop", WsMode::Hop),
                    ("hint", WsMode::Hint),
                    ("close", WsMode::Close),
                ],
            ),
            on_all_down: c.one_of(
                &format!("{key}.on_all_down"),
                r.on_all_down.as_ref(),
                OnAllDown::Fallback,
                &[
                    ("fallback", OnAllDown::Fallback),
                    ("fail_open", OnAllDown::FailOpen),
                ],
            ),
            fallback,
            max_body: r.max_body,
            canary,
            warmup,
        });
    }
    out
}

fn canary(c: &mut Check, key: &str, cf: &super::file::CanaryFile) -> CanaryConfig {
    let version_header = c
        .header_name(
            &format!("{key}.canary.version_header"),
            cf.version_header.as_deref().unwrap_or("x-version"),
        )
        .unwrap_or(http::HeaderName::from_static("x-version"));
    let split = cf
        .split
        .iter()
        .enumerate()
        .filter_map(|(j, s)| {
            let skey = format!("{key}.canary.split[{j}]");
            if !(0.0..=100.0).contains(&s.percent) {
                c.err(format!("{skey}.percent"), "must be between 0 and 100");
            }
            if s.version.is_empty() {
                c.err(format!("{skey}.version"), "required");
            }
            let by = match s.by.split_once(':') {
                Some(("header", n)) if !n.is_empty() => c
                    .header_name(&format!("{skey}.by"), n)
                    .map(SplitKey::Header),
                Some(("cookie", n)) if !n.is_empty() => Some(SplitKey::Cookie(n.to_string())),
                Some(("query", n)) if !n.is_empty() => Some(SplitKey::Query(n.to_string())),
                _ => {
                    c.err(
                        format!("{skey}.by"),
                        format!(
                            "expected \"header:NAME\", \"cookie:NAME\" or \"query:NAME\", got {:?}",
                            s.by
                        ),
                    );
                    None
                }
            }?;
            Some(Split {
                by,
                percent: s.percent,
                version: s.version.clone(),
            })
        })
        .collect::<Vec<_>>();
    let total: f64 = split.iter().map(|s| s.percent).sum();
    if total > 100.0 {
        c.err(
            format!("{key}.canary.split"),
            format!("percents add up to {total}, more than 100"),
        );
    }
    CanaryConfig {
        version_header,
        version_query: cf.version_query.clone().unwrap_or_else(|| "version".into()),
        metadata_key: cf.metadata_key.clone().unwrap_or_else(|| "version".into()),
        no_match: c.one_of(
            &format!("{key}.canary.no_match"),
            cf.no_match.as_ref(),
            NoMatch::FallbackAll,
            &[
                ("fallback_all", NoMatch::FallbackAll),
                ("reject", NoMatch::Reject),
            ],
        ),
        split,
    }
}

#[cfg(test)]
mod tests {
    use super::super::load_str;

    #[test]
    fn unknown_key_is_refused_with_line_and_column() {
        let err = load_str("[server]\nlisten = \"127.0.0.1:1\"\nbogus = 1\n", "g.toml")
            .expect_err("the config is refused");
        assert_eq!(err.issues.len(), 1);
        let e = &err.issues[0];
        assert_eq!((e.line, e.column), (3, 1), "{e:?}");
        assert!(e.message.contains("unknown field `bogus`"), "{e:?}");
        assert!(err.to_string().starts_with("g.toml:3:1: "), "{err}");
    }

    #[test]
    fn bad_duration_names_its_key() {
        let err = load_str("[health]\ninterval = \"2 parsecs\"\n", "g.toml")
            .expect_err("the config is refused");
        assert_eq!(err.issues[0].key, "health.interval");
        assert_eq!((err.issues[0].line, err.issues[0].column), (2, 1));
    }

    #[test]
    fn every_semantic_error_is_reported() {
        let text = "[[clusters]]\nname = \"a\"\n[[clusters.nodes]]\nid = \"n\"\naddr = \"nope\"\n\n[[routes]]\nid = \"r\"\ncluster = \"missing\"\ntimeout = \"x\"\n";
        let err = load_str(text, "g.toml").expect_err("the config is refused");
        let keys: Vec<_> = err.issues.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "clusters[0].nodes[0].addr",
                "routes[0].cluster",
                "routes[0].timeout"
            ]
        );
        assert_eq!(err.issues[1].line, 9);
    }

    #[test]
    fn go_defaults_load() {
        let c = super::super::Config::go_defaults();
        assert_eq!(c.server.listen.to_string(), "0.0.0.0:8000");
        assert_eq!(c.clusters[0].nodes.len(), 2);
        assert_eq!(c.clusters[0].health.interval.as_secs(), 2);
    }
}
