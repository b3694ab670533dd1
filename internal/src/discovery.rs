//! DNS service discovery (SPEC section 12): the nodes of a cluster with
//! `discovery = { kind = "dns", name, port, interval }` are the A/AAAA records of `name`.
//!
//! [`run`] (spawned by the server, ended by the shutdown signal) keeps one resolution task per
//! discovery cluster of the live table, restarting a task whose settings changed and stopping the
//! tasks of clusters that left, on every table swap. Each task resolves its name, hands a good
//! answer to [`Routing::set_discovered`] (which probes new nodes before they get traffic and
//! drains vanished ones), and sleeps for the cluster's `interval`, or the record TTL when that is
//! shorter, never less than [`MIN_DISCOVERY_INTERVAL`].
//!
//! A failed or empty resolution keeps the last good node set: it is counted in
//! `gateway_discovery_errors_total{cluster}` and logged (WARN on the first failure of a streak,
//! debug after, INFO when the name resolves again). Discovery never judges health: a node whose
//! record stays but whose process died is ejected by its probes within the timing promise,
//! whatever the resolution interval.
//!
//! The resolver is hickory's, on the tokio runtime (no blocking `getaddrinfo`): `[server] resolver
//! = "ip:port"` names the server, else the system's `/etc/resolv.conf` is used, read once when the
//! first discovery cluster appears; a reload does not change it. Each resolution builds a fresh resolver
//! from that configuration ([`Lookups::resolve`]), so no cached answer ever stands in for a server
//! that stopped answering, and makes one attempt bounded by the cluster's `interval`: a dead
//! server is counted within two intervals, whatever its records' TTL.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hickory_resolver::config::{
    ConnectionConfig, LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig,
    ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::system_conf::read_system_conf;
use hickory_resolver::TokioResolver;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{DiscoveryConfig, MIN_DISCOVERY_INTERVAL};
use crate::drain;
use crate::metrics::{ClusterLabel, Metrics};
use crate::routing::discovered::DnsAnswer;
use crate::routing::reload::Routing;

/// Longest wait for one DNS query: a server slower than this on loopback or a LAN has failed. A
/// resolution waits at most the shorter of this and the cluster's `interval`.
pub(crate) const RESOLVE_QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a resolution gave no usable node set; the last good set stays.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DiscoveryError {
    /// The resolver could not be built (e.g. `/etc/resolv.conf` unreadable).
    #[error("no resolver: {0}")]
    NoResolver(String),
    /// The lookup failed (timeout, refused, NXDOMAIN, server failure).
    #[error("lookup of {name:?} failed: {source}")]
    Lookup {
        /// The name.
        name: String,
        /// hickory's error.
        #[source]
        source: hickory_resolver::net::NetError,
    },
    /// The lookup got no answer within the resolution's limit (the server is gone or too slow).
    #[error("lookup of {name:?} got no answer within {limit:?}")]
    Timeout {
        /// The name.
        name: String,
        /// The resolution's limit.
        limit: Duration,
    },
    /// The lookup succeeded without a single A/AAAA record.
    #[error("{0:?} has no A/AAAA records")]
    Empty(String),
}

/// One good answer: the addresses and how long the server said they stay valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// Unique addresses, sorted.
    pub ips: BTreeSet<IpAddr>,
    /// The answer's lifetime (smallest record TTL).
    pub ttl: Duration,
}

/// What every resolution's resolver is built from: the name servers and the options.
#[derive(Debug, Clone)]
pub(crate) struct Lookups {
    config: ResolverConfig,
    opts: ResolverOpts,
}

impl Lookups {
    /// Takes the configured server (`[server] resolver`) or `None` for the system configuration
    /// (read now, once); returns the settings of every resolution's resolver: asking A and AAAA, no
    /// cache, `/etc/hosts` ignored when a server is named.
    ///
    /// # Errors
    /// [`DiscoveryError::NoResolver`] when the system configuration cannot be read.
    pub(crate) fn new(server: Option<SocketAddr>) -> Result<Lookups, DiscoveryError> {
        let (config, mut opts) = match server {
            Some(addr) => {
                let mut udp = ConnectionConfig::udp();
                udp.port = addr.port();
                let mut tcp = ConnectionConfig::tcp();
                tcp.port = addr.port();
                let ns = NameServerConfig::new(addr.ip(), true, vec![udp, tcp]);
                let mut opts = ResolverOpts::default();
                opts.use_hosts_file = ResolveHosts::Never;
                (ResolverConfig::from_name_servers(vec![ns]), opts)
            }
            None => read_system_conf().map_err(|e| DiscoveryError::NoResolver(e.to_string()))?,
        };
        // Each resolution asks the server (a cached answer is what left Spring Cloud's dead nodes in
        // rotation); the resolver is fresh every time anyway, so nothing is kept between them.
        opts.cache_size = 0;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        // One attempt per resolution: hickory's `attempts` counts retries after the first query. The
        // next resolution is the retry, an `interval` later.
        opts.attempts = 0;
        Ok(Lookups { config, opts })
    }

    /// Takes a name and the resolution's `limit` (the cluster's `interval`); returns its A/AAAA
    /// addresses and their TTL, asked of the server by a fresh resolver within `limit`.
    ///
    /// # Errors
    /// [`DiscoveryError::NoResolver`], [`DiscoveryError::Lookup`], [`DiscoveryError::Timeout`]
    /// (no answer within `limit`) or [`DiscoveryError::Empty`].
    pub(crate) async fn resolve(
        &self,
        name: &str,
        limit: Duration,
    ) -> Result<Answer, DiscoveryError> {
        let mut opts = self.opts.clone();
        opts.timeout = limit.min(RESOLVE_QUERY_TIMEOUT);
        let resolver = TokioResolver::builder_with_config(
            self.config.clone(),
            TokioRuntimeProvider::default(),
        )
        .with_options(opts)
        .build()
        .map_err(|e| DiscoveryError::NoResolver(e.to_string()))?;
        let lookup = tokio::time::timeout(limit, resolver.lookup_ip(name))
            .await
            .map_err(|_| DiscoveryError::Timeout {
                name: name.to_string(),
                limit,
            })?
            .map_err(|source| DiscoveryError::Lookup {
                name: name.to_string(),
                source,
            })?;
        let ips: BTreeSet<IpAddr> = lookup.iter().collect();
        if ips.is_empty() {
            return Err(DiscoveryError::Empty(name.to_string()));
        }
        let ttl = lookup
            .valid_until()
            .saturating_duration_since(std::time::Instant::now());
        Ok(Answer { ips, ttl })
    }
}

/// Takes the cluster's interval and an answer's TTL; returns the wait before the next round:
/// the shorter of the two, never below [`MIN_DISCOVERY_INTERVAL`] (SPEC section 12).
pub(crate) fn next_wait(interval: Duration, ttl: Duration) -> Duration {
    ttl.min(interval).max(MIN_DISCOVERY_INTERVAL)
}

struct Task {
    settings: DiscoveryConfig,
    cancel: CancellationToken,
}

/// Runs discovery until `watch` fires: one task per discovery cluster of the live table,
/// reconciled on every table swap. `server` is `[server] resolver`. Joins its tasks before it
/// returns.
pub(crate) async fn run(
    routing: Arc<Routing>,
    server: Option<SocketAddr>,
    metrics: Arc<Metrics>,
    mut watch: drain::Watch,
) {
    // Built when the first discovery cluster appears: a gateway without one never reads
    // /etc/resolv.conf nor logs about it.
    let mut shared: Option<SharedResolver> = None;
    let mut swaps = routing.subscribe_swaps();
    let mut tasks: HashMap<String, Task> = HashMap::new();
    let mut set = JoinSet::new();
    loop {
        let table = routing.table();
        let wanted: HashMap<&str, &DiscoveryConfig> = table
            .config
            .clusters
            .iter()
            .filter_map(|c| c.discovery.as_ref().map(|d| (c.name.as_str(), d)))
            .collect();
        tasks.retain(|name, t| {
            let keep = wanted.get(name.as_str()) == Some(&&t.settings);
            if !keep {
                t.cancel.cancel();
            }
            keep
        });
        for (name, d) in wanted {
            if tasks.contains_key(name) {
                continue;
            }
            let resolver = shared
                .get_or_insert_with(|| {
                    let r = Lookups::new(server).map(Arc::new).map_err(Arc::new);
                    if let Err(e) = &r {
                        tracing::error!(error = %e, "DNS discovery has no resolver; discovery clusters keep their last nodes (none at start) until restart");
                    }
                    r
                })
                .clone();
            let cancel = CancellationToken::new();
            set.spawn(resolve_loop(
                routing.clone(),
                resolver,
                name.to_string(),
                d.clone(),
                metrics.clone(),
                cancel.clone(),
            ));
            tasks.insert(
                name.to_string(),
                Task {
                    settings: d.clone(),
                    cancel,
                },
            );
        }
        while set.try_join_next().is_some() {}
        tokio::select! {
            _ = watch.signaled() => break,
            r = swaps.changed() => if r.is_err() { break },
        }
    }
    for t in tasks.values() {
        t.cancel.cancel();
    }
    while set.join_next().await.is_some() {}
}

type SharedResolver = Result<Arc<Lookups>, Arc<DiscoveryError>>;

async fn resolve_loop(
    routing: Arc<Routing>,
    resolver: SharedResolver,
    cluster: String,
    d: DiscoveryConfig,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) {
    let errors = metrics
        .discovery_errors
        .get_or_create(&ClusterLabel {
            cluster: Arc::from(cluster.as_str()),
        })
        .clone();
    let mut failing = false;
    loop {
        let outcome = match &resolver {
            Ok(r) => tokio::select! {
                _ = cancel.cancelled() => return,
                a = r.resolve(&d.name, d.interval) => a,
            },
            Err(e) => Err(DiscoveryError::NoResolver(e.to_string())),
        };
        let wait = match outcome {
            Ok(answer) => {
                if failing {
                    tracing::info!(cluster = %cluster, name = %d.name, nodes = answer.ips.len(), "DNS discovery resolves again");
                    failing = false;
                }
                let wait = next_wait(d.interval, answer.ttl);
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = routing.set_discovered(&cluster, DnsAnswer {
                        name: d.name.clone(),
                        port: d.port,
                        ips: answer.ips,
                        resolved_ms: unix_ms(),
                    }) => {}
                }
                wait
            }
            Err(e) => {
                errors.inc();
                if failing {
                    tracing::debug!(cluster = %cluster, error = %e, "DNS discovery failed again; keeping the last good node set");
                } else {
                    tracing::warn!(cluster = %cluster, error = %e, "DNS discovery failed; keeping the last good node set");
                    failing = true;
                }
                d.interval
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_is_the_shorter_of_interval_and_ttl_but_at_least_a_second() {
        let s = Duration::from_secs;
        let cases = [
            (s(5), s(30), s(5), "TTL longer: the interval"),
            (s(30), s(3), s(3), "TTL shorter: the TTL"),
            (s(30), s(0), s(1), "TTL 0: never more often than 1 s"),
            (s(1), Duration::from_millis(200), s(1), "sub-second TTL"),
        ];
        for (interval, ttl, want, why) in cases {
            assert_eq!(next_wait(interval, ttl), want, "{why}");
        }
    }
}
