//! Validation of `clusters[].discovery` (SPEC section 12) into [`DiscoveryConfig`].
//!
//! Only `kind = "dns"` exists. The name must be a DNS name (or an IP literal), the port 1-65535,
//! the interval at least [`MIN_DISCOVERY_INTERVAL`]. Whether static `nodes` are set beside it is
//! checked by the cluster validation, which sees both.

use super::super::file::DiscoveryFile;
use super::super::{
    DiscoveryConfig, DEFAULT_DISCOVERED_WEIGHT, DEFAULT_DISCOVERY_DRAIN,
    DEFAULT_DISCOVERY_INTERVAL, MIN_DISCOVERY_INTERVAL,
};
use super::Check;

/// Takes the checker, the dotted key of the table (`clusters[i].discovery`) and the table as
/// written; returns the typed settings. Every problem is reported on `c` under its own key
/// (`<key>.kind`, `.name`, `.port`, `.interval`, `.weight`, `.drain_period`).
pub(super) fn discovery(c: &mut Check, key: &str, d: &DiscoveryFile) -> DiscoveryConfig {
    match d.kind.as_deref() {
        Some("dns") => {}
        None => c.err(format!("{key}.kind"), "required: \"dns\""),
        Some(o) => c.err(
            format!("{key}.kind"),
            format!("unknown value {o:?}, expected \"dns\""),
        ),
    }
    if let Err(why) = check_name(&d.name) {
        c.err(format!("{key}.name"), why);
    }
    let port = match d.port {
        Some(p) if (1..=u32::from(u16::MAX)).contains(&p) => p as u16,
        Some(_) => {
            c.err(format!("{key}.port"), "must be between 1 and 65535");
            1
        }
        None => {
            c.err(
                format!("{key}.port"),
                "required: the port every discovered node listens on",
            );
            1
        }
    };
    let interval = c.duration_at_least(
        &format!("{key}.interval"),
        d.interval.as_ref(),
        DEFAULT_DISCOVERY_INTERVAL,
        MIN_DISCOVERY_INTERVAL,
        "must be at least 1s (names are never re-resolved more often than once a second)",
    );
    let weight = d.weight.unwrap_or(DEFAULT_DISCOVERED_WEIGHT);
    if weight > 10_000 {
        c.err(format!("{key}.weight"), "must be between 0 and 10000");
    }
    let drain_period = c.duration(
        &format!("{key}.drain_period"),
        d.drain_period.as_ref(),
        DEFAULT_DISCOVERY_DRAIN,
    );
    DiscoveryConfig {
        name: d.name.clone(),
        port,
        interval: interval.max(MIN_DISCOVERY_INTERVAL),
        weight,
        metadata: d.metadata.clone(),
        drain_period,
    }
}

/// A DNS name (RFC 1035 section 2.3.4 lengths; letters, digits, `-` and `_` as in SRV-style
/// labels), with an optional trailing dot.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("required: the DNS name to resolve".into());
    }
    let bare = name.strip_suffix('.').unwrap_or(name);
    if bare.len() > 253 {
        return Err(format!("{name:?} is longer than 253 characters"));
    }
    for label in bare.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            return Err(format!(
                "{name:?} is not a DNS name (labels of 1-63 letters, digits, '-' or '_')"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::load_str;

    const ROUTE: &str = "[[routes]]\nid = \"r\"\ncluster = \"c\"\n";

    #[test]
    fn dns_discovery_loads_with_defaults() {
        let text = format!(
            "[server]\nresolver = \"127.0.0.1:5353\"\n[[clusters]]\nname = \"c\"\ndiscovery = {{ kind = \"dns\", name = \"svc.test\", port = 8080 }}\n{ROUTE}"
        );
        let cfg = load_str(&text, "g.toml").expect("valid");
        let d = cfg.clusters[0].discovery.clone().expect("discovery set");
        assert_eq!(
            (d.name.as_str(), d.port, d.interval.as_secs(), d.weight),
            ("svc.test", 8080, 5, 100)
        );
        assert!(cfg.clusters[0].nodes.is_empty());
        assert_eq!(
            cfg.server.resolver.map(|a| a.to_string()).as_deref(),
            Some("127.0.0.1:5353")
        );
    }

    #[test]
    fn discovery_errors_name_their_keys() {
        let text = format!(
            "[server]\nresolver = \"localhost\"\n[[clusters]]\nname = \"c\"\ndiscovery = {{ kind = \"srv\", name = \"bad name\", port = 70000, interval = \"200ms\" }}\n  [[clusters.nodes]]\n  id = \"n\"\n  addr = \"127.0.0.1:1\"\n{ROUTE}"
        );
        let err = load_str(&text, "g.toml").expect_err("refused");
        let keys: Vec<_> = err.issues.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "server.resolver",
                "clusters[0].discovery.kind",
                "clusters[0].discovery.name",
                "clusters[0].discovery.port",
                "clusters[0].discovery.interval",
                "clusters[0].nodes",
            ]
        );
        assert!(err.issues[5].message.contains("not both"), "{err}");
    }

    #[test]
    fn grpc_probe_needs_http2_and_keeps_its_service() {
        let node = "  [[clusters.nodes]]\n  id = \"n\"\n  addr = \"127.0.0.1:1\"\n";
        let text = format!(
            "[health]\nkind = \"grpc\"\ngrpc_service = \"echo\"\n[[clusters]]\nname = \"c\"\nprotocol = \"h2c\"\n{node}{ROUTE}"
        );
        let cfg = load_str(&text, "g.toml").expect("valid");
        assert_eq!(cfg.clusters[0].health.kind, crate::config::ProbeKind::Grpc);
        assert_eq!(cfg.clusters[0].health.grpc_service, "echo");
        let text = format!("[health]\nkind = \"grpc\"\n[[clusters]]\nname = \"c\"\n{node}{ROUTE}");
        let err = load_str(&text, "g.toml").expect_err("http1 cannot carry gRPC");
        assert_eq!(err.issues[0].key, "clusters[0].protocol", "{err}");
    }
}
