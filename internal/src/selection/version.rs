//! The canary version filter and the per-request version decision (SPEC section 3 `[routes.canary]`,
//! section 6). Pure functions: nothing here keeps request data between calls.

use crate::config::Config;
use crate::registry::Node;

use super::{Candidates, Criteria, VersionMiss};

/// A node's version: metadata `key`, compared case-insensitively on the key.
pub(crate) fn node_version<'n>(node: &'n Node, key: &str) -> Option<&'n str> {
    node.metadata
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.as_str())
}

/// Keeps candidates whose version equals the wanted one. With none wanted, drops the nodes of
/// split-reserved versions while any other candidate remains. With a version that no candidate
/// has, keeps all and reports the miss.
pub(crate) fn filter(all: Candidates, c: &Criteria<'_>) -> (Candidates, Option<VersionMiss>) {
    match c.version {
        Some(v) => {
            let total = all.len();
            let matched: Candidates = all
                .iter()
                .filter(|cand| node_version(&cand.node, c.metadata_key) == Some(v))
                .cloned()
                .collect();
            if matched.is_empty() && total > 0 {
                (
                    all,
                    Some(VersionMiss {
                        candidates: total,
                        matched: 0,
                    }),
                )
            } else {
                (matched, None)
            }
        }
        None if !c.avoid_versions.is_empty() => {
            let rest: Candidates = all
                .iter()
                .filter(|cand| {
                    !node_version(&cand.node, c.metadata_key)
                        .is_some_and(|nv| c.avoid_versions.iter().any(|a| a == nv))
                })
                .cloned()
                .collect();
            if rest.is_empty() {
                (all, None)
            } else {
                (rest, None)
            }
        }
        None => (all, None),
    }
}

/// The version a request asks for, decided once per request (SPEC section 3 `[routes.canary]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// Explicit or split-assigned version.
    pub version: Option<String>,
    /// Split versions this request must avoid (it fell outside every bucket).
    pub avoid: Vec<String>,
    /// The split key that put the request in a bucket: its node is then the key's stable
    /// (rendezvous) choice among the bucket's nodes (SPEC section 7).
    pub split_key: Option<String>,
}

/// Reads the version header, else the version query parameter; else assigns a split bucket by a
/// stable hash of the split key (FNV-1a, so every replica agrees).
pub(crate) fn wanted(
    canary: &crate::config::CanaryConfig,
    headers: &http::HeaderMap,
    query: Option<&str>,
) -> Wanted {
    if let Some(v) = headers
        .get(&canary.version_header)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
    {
        return Wanted {
            version: Some(v.to_string()),
            ..Wanted::default()
        };
    }
    if let Some(v) = query
        .and_then(|q| query_param(q, &canary.version_query))
        .filter(|v| !v.is_empty())
    {
        return Wanted {
            version: Some(v),
            ..Wanted::default()
        };
    }
    if canary.split.is_empty() {
        return Wanted::default();
    }
    let mut floor = 0.0;
    for s in &canary.split {
        let key = match &s.by {
            crate::config::SplitKey::Header(h) => headers
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            crate::config::SplitKey::Cookie(name) => cookie(headers, name),
            crate::config::SplitKey::Query(name) => query.and_then(|q| query_param(q, name)),
        };
        if let Some(key) = key {
            let bucket = (fnv1a(key.as_bytes()) % 10_000) as f64 / 100.0;
            if bucket >= floor && bucket < floor + s.percent {
                return Wanted {
                    version: Some(s.version.clone()),
                    avoid: Vec::new(),
                    split_key: Some(key),
                };
            }
        }
        floor += s.percent;
    }
    Wanted {
        version: None,
        avoid: canary.split.iter().map(|s| s.version.clone()).collect(),
        split_key: None,
    }
}

fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, x| {
        (h ^ u64::from(*x)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The first value of query parameter `name` in `query` (not percent-decoded beyond `+`).
pub(crate) fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| v.replace('+', " "))
    })
}

fn cookie(headers: &http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| {
            kv.trim()
                .split_once('=')
                .filter(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
}

/// A node metadata key that equals a route's canary `metadata_key` only when case is ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyCaseMismatch {
    /// Route whose canary block names the key.
    pub route: String,
    /// Cluster of the node.
    pub cluster: String,
    /// Node id.
    pub node: String,
    /// The key as the node's metadata spells it.
    pub found: String,
    /// The key as the route's canary block spells it.
    pub configured: String,
}

/// Every node metadata key that differs only in case from the canary `metadata_key` of a route
/// targeting the node's cluster (matching ignores case, so such a config works, but it is most
/// likely a typo worth a warning). One entry per route, node and key.
pub(crate) fn metadata_key_case_mismatches(config: &Config) -> Vec<KeyCaseMismatch> {
    let mut out = Vec::new();
    for route in &config.routes {
        let Some(canary) = &route.canary else {
            continue;
        };
        let configured = canary.metadata_key.as_str();
        for cluster in config.clusters.iter().filter(|c| c.name == route.cluster) {
            for node in &cluster.nodes {
                for key in node
                    .metadata
                    .keys()
                    .filter(|k| k.as_str() != configured && k.eq_ignore_ascii_case(configured))
                {
                    out.push(KeyCaseMismatch {
                        route: route.id.clone(),
                        cluster: cluster.name.clone(),
                        node: node.id.clone(),
                        found: key.clone(),
                        configured: configured.to_string(),
                    });
                }
            }
        }
    }
    out
}

/// Logs one WARN per [`metadata_key_case_mismatches`] entry; called once per loaded config (when
/// its route table is built).
pub(crate) fn warn_metadata_key_case(config: &Config) {
    for m in metadata_key_case_mismatches(config) {
        tracing::warn!(
            route = %m.route,
            cluster = %m.cluster,
            node = %m.node,
            found = %m.found,
            configured = %m.configured,
            "node metadata key differs only in case from the canary metadata_key; matched case-insensitively"
        );
    }
}
