//! `[[routes]]` (SPEC section 3): paths, methods, cluster references, timeouts, canary splits.

use std::collections::HashSet;

use super::*;

/// Validates every `[[routes]]` table (SPEC section 3) against the validated `clusters`: unique
/// ids, then each route's keys ([`route()`]).
pub(super) fn routes(
    c: &mut Check,
    f: &FileConfig,
    clusters: &[ClusterConfig],
) -> Vec<RouteConfig> {
    let mut ids = HashSet::new();
    let mut out = Vec::new();
    for (i, r) in f.routes.iter().enumerate() {
        let key = format!("routes[{i}]");
        c.required_unique(format!("{key}.id"), &r.id, &mut ids, || {
            format!("duplicate route id {:?}", r.id)
        });
        out.push(route(c, &key, r, clusters));
    }
    out
}

/// Validates route `r` (at `key`): its cluster reference, match rules, fallback, canary, warm-up,
/// timeouts, retries and WebSocket mode, in file order.
fn route(
    c: &mut Check,
    key: &str,
    r: &super::file::RouteFile,
    clusters: &[ClusterConfig],
) -> RouteConfig {
    if r.cluster.is_empty() {
        c.err(format!("{key}.cluster"), "required");
    } else if !clusters.iter().any(|cl| cl.name == r.cluster) {
        c.err(
            format!("{key}.cluster"),
            format!("unknown cluster {:?}", r.cluster),
        );
    }
    let matcher = matcher(c, key, &r.match_);
    let fallback = fallback(c, key, r.fallback.clone().unwrap_or_default());
    let canary = r.canary.as_ref().map(|cf| canary(c, key, cf));
    let warmup = r.warmup.as_ref().map(|w| warmup(c, key, w));
    RouteConfig {
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
        ),
        on_all_down: c.one_of(
            &format!("{key}.on_all_down"),
            r.on_all_down.as_ref(),
            OnAllDown::Fallback,
        ),
        fallback,
        max_body: r.max_body,
        canary,
        warmup,
    }
}

/// A route's `match` table (at `key`): paths must start with `/`, methods and header names must
/// be valid; empty paths and hosts count as absent, hosts are lower-cased.
fn matcher(c: &mut Check, key: &str, m: &super::file::MatchFile) -> RouteMatch {
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
        .filter_map(
            |(j, s)| match http::Method::from_bytes(s.to_ascii_uppercase().as_bytes()) {
                Ok(m) => Some(m),
                Err(_) => {
                    c.err(
                        format!("{key}.match.methods[{j}]"),
                        format!("invalid method {s:?}"),
                    );
                    None
                }
            },
        )
        .collect();
    let headers = m
        .headers
        .iter()
        .filter_map(|(name, v)| {
            c.header_name(&format!("{key}.match.headers.{name}"), name)
                .map(|h| (h, v.clone()))
        })
        .collect();
    RouteMatch {
        path_prefix: m.path_prefix.clone().filter(|p| !p.is_empty()),
        path: m.path.clone().filter(|p| !p.is_empty()),
        host: m
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .map(|h| h.to_ascii_lowercase()),
        methods,
        headers,
    }
}

/// A route's `fallback` table (at `key`): a status from 200 to 599 (default 503), a JSON body by
/// default.
fn fallback(c: &mut Check, key: &str, fb: super::file::FallbackFile) -> Fallback {
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
    Fallback {
        status,
        content_type: fb.content_type.unwrap_or_else(|| "application/json".into()),
        body: fb
            .body
            .unwrap_or_else(|| r#"{"code":-1,"message":"service temporarily unavailable"}"#.into()),
    }
}

/// A route's `warmup` table (at `key`): a percentage from 0 to 100, an error rate from 0 to 1.
fn warmup(c: &mut Check, key: &str, w: &super::file::WarmupFile) -> WarmupConfig {
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
}

/// A route's `canary` table (at `key`): the version header and the weighted split.
pub(super) fn canary(c: &mut Check, key: &str, cf: &super::file::CanaryFile) -> CanaryConfig {
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
        ),
        split,
    }
}
