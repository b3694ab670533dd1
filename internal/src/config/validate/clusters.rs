//! `[[clusters]]` and `[health]` (SPEC section 3): nodes, per-cluster health overrides, cluster TLS.

use super::*;

/// Merges `over` onto `base` key by key.
pub(super) fn merge_health(base: &HealthFile, over: Option<&HealthFile>) -> HealthFile {
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

/// `[health] kind` (at `key`): `http` when absent.
fn probe_kind(c: &mut Check, key: &str, h: &HealthFile) -> ProbeKind {
    match h.kind.as_deref() {
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
    }
}

/// `[health] expect_status` (at `key`): `[low, high]` within 100..=599; 200..=299 when absent.
fn expect_status(c: &mut Check, key: &str, h: &HealthFile) -> std::ops::RangeInclusive<u16> {
    match h.expect_status.as_deref() {
        None => 200..=299,
        Some([lo, hi]) if (100..=599).contains(lo) && lo <= hi && *hi <= 599 => *lo..=*hi,
        Some(_) => {
            c.err(
                format!("{key}.expect_status"),
                "expected [low, high] with 100 <= low <= high <= 599",
            );
            200..=299
        }
    }
}

/// Resolves one cluster's health settings; `key` is where its overrides live (for error keys).
/// One check per key of `[health]` (SPEC section 3), in the order the SPEC lists them.
pub(super) fn health(c: &mut Check, key: &str, h: &HealthFile) -> HealthConfig {
    let kind = probe_kind(c, key, h);
    let path = h.path.clone().unwrap_or_else(|| DEFAULT_HEALTH_PATH.into());
    c.require(
        path.starts_with('/'),
        format!("{key}.path"),
        "must start with '/'",
    );
    let (interval, timeout) = probe_timing(c, key, h);
    let expect_status = expect_status(c, key, h);
    let ladder = ladder(c, key, h);
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
        degrade_after: ladder.degrade_after,
        degraded_percent: ladder.degraded_percent,
        eject_after: ladder.eject_after,
        recover_after: ladder.recover_after,
        slow_start: (!slow_start.is_zero()).then_some(slow_start),
        passive_consecutive_errors: NonZeroU32::new(
            h.passive_consecutive_errors
                .unwrap_or(DEFAULT_PASSIVE_ERRORS),
        ),
        max_ejection_percent: ladder.max_ejection_percent,
    }
}

/// `[health] interval` (at least 10ms) and `timeout` (more than 0s), at `key`.
fn probe_timing(c: &mut Check, key: &str, h: &HealthFile) -> (Duration, Duration) {
    let interval = c.duration_at_least(
        &format!("{key}.interval"),
        h.interval.as_ref(),
        DEFAULT_HEALTH_INTERVAL,
        Duration::from_millis(10),
        "must be at least 10ms",
    );
    let timeout = c.duration(
        &format!("{key}.timeout"),
        h.timeout.as_ref(),
        DEFAULT_HEALTH_TIMEOUT,
    );
    c.require(
        !timeout.is_zero(),
        format!("{key}.timeout"),
        "must be greater than 0s",
    );
    (interval, timeout)
}

/// The health ladder's thresholds, each within its range (a reported value out of range is
/// clamped into it).
struct Ladder {
    degrade_after: u32,
    degraded_percent: u8,
    eject_after: u32,
    recover_after: u32,
    max_ejection_percent: u8,
}

/// `[health]` `degrade_after`, `eject_after`, `degraded_percent`, `max_ejection_percent` and
/// `recover_after` (at `key`).
fn ladder(c: &mut Check, key: &str, h: &HealthFile) -> Ladder {
    let degrade_after = h.degrade_after.unwrap_or(DEFAULT_DEGRADE_AFTER);
    let eject_after = h.eject_after.unwrap_or(DEFAULT_EJECT_AFTER);
    c.require(
        eject_after != 0,
        format!("{key}.eject_after"),
        "must be at least 1",
    );
    c.require(
        degrade_after != 0 && degrade_after <= eject_after,
        format!("{key}.degrade_after"),
        format!("must be between 1 and eject_after ({eject_after})"),
    );
    let degraded_percent = h
        .degraded_percent
        .unwrap_or(DEFAULT_DEGRADED_PERCENT as u32);
    c.require(
        (1..=100).contains(&degraded_percent),
        format!("{key}.degraded_percent"),
        "must be between 1 and 100",
    );
    let max_ejection_percent = h
        .max_ejection_percent
        .unwrap_or(u32::from(DEFAULT_MAX_EJECTION_PERCENT));
    c.require(
        max_ejection_percent <= 100,
        format!("{key}.max_ejection_percent"),
        "must be between 0 and 100",
    );
    let recover_after = h.recover_after.unwrap_or(DEFAULT_RECOVER_AFTER);
    c.require(
        recover_after != 0,
        format!("{key}.recover_after"),
        "must be at least 1",
    );
    Ladder {
        degrade_after: degrade_after.clamp(1, eject_after.max(1)),
        degraded_percent: degraded_percent.clamp(1, 100) as u8,
        eject_after: eject_after.max(1),
        recover_after: recover_after.max(1),
        max_ejection_percent: max_ejection_percent.min(100) as u8,
    }
}

/// Validates every `[[clusters]]` table (SPEC section 3): unique names, protocol, picker, nodes
/// (unique ids across clusters, addresses, weights), discovery, TLS and health overrides, one
/// check per key of the table in file order.
pub(super) fn clusters(c: &mut Check, f: &FileConfig) -> Vec<ClusterConfig> {
    // Validate the global block on its own so its errors carry `health.*` keys.
    let _ = health(c, "health", &f.health);
    let global_errors = c.issues.len();
    let mut names = HashSet::new();
    let mut node_ids = HashSet::new();
    let mut out = Vec::new();
    for (i, cl) in f.clusters.iter().enumerate() {
        let key = format!("clusters[{i}]");
        c.required_unique(format!("{key}.name"), &cl.name, &mut names, || {
            format!("duplicate cluster name {:?}", cl.name)
        });
        let protocol = c.one_of(
            &format!("{key}.protocol"),
            cl.protocol.as_ref(),
            Protocol::Http1,
        );
        let tls = cluster_tls(c, &key, cl.tls.as_ref(), protocol);
        let lb = c.one_of(&format!("{key}.lb"), cl.lb.as_ref(), Picker::RoundRobin);
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
        let nodes = nodes(c, &key, &cl.nodes, &mut node_ids);
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

/// A cluster's static `nodes` (at `key`): ids unique across clusters (`node_ids` holds those
/// seen), `HOST:PORT` addresses, weights from 0 to 10000 (default 100).
fn nodes(
    c: &mut Check,
    key: &str,
    file: &[super::file::NodeFile],
    node_ids: &mut HashSet<String>,
) -> Vec<NodeConfig> {
    let mut nodes = Vec::new();
    for (j, n) in file.iter().enumerate() {
        let nkey = format!("{key}.nodes[{j}]");
        c.required_unique(format!("{nkey}.id"), &n.id, node_ids, || {
            format!(
                "duplicate node id {:?} (node ids are unique across clusters)",
                n.id
            )
        });
        match n.addr.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
            _ => c.err(
                format!("{nkey}.addr"),
                format!("expected HOST:PORT, got {:?}", n.addr),
            ),
        }
        let weight = n.weight.unwrap_or(100);
        c.require(
            weight <= 10_000,
            format!("{nkey}.weight"),
            "must be between 0 and 10000",
        );
        nodes.push(NodeConfig {
            id: n.id.clone(),
            addr: n.addr.clone(),
            weight,
            metadata: n.metadata.clone(),
        });
    }
    nodes
}

/// Loads `clusters[i].tls` (key `key`); checks `protocol = "h2"` has it. `None` = cleartext.
pub(super) fn cluster_tls(
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
