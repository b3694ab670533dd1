//! The metric set of SPEC section 8, in Prometheus text format.
//!
//! Label sets are bounded: routes, clusters and nodes come from the config, codes from HTTP, reasons
//! and results from fixed enums; never a conn id. Node gauges are refreshed from the live route
//! table at scrape time so removed nodes disappear. A leaf module: depends only on the leaf
//! [`crate::events`], whose hub it carries so that every component that counts can also report.

mod carried;
mod counters;
pub(crate) mod format;
mod labels;

pub(crate) use carried::CarriedSample;
pub(crate) use counters::RequestCounters;

pub(crate) use labels::*;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Every metric the gateway exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// The operator event feed (SPEC section 11 `GET /admin/events`); not a metric, carried here
    /// because every publisher already holds the metrics.
    pub events: crate::events::Events,
    /// `hopping_count_total{reason}`.
    pub hops: Family<ReasonLabel, Counter>,
    /// `gateway_passive_ejections_suppressed_total{cluster}` (CASE-32).
    pub ejections_suppressed: Family<ClusterLabel, Counter>,
    /// `hopping_latency_seconds`: failure seen -> connection served again.
    pub hop_latency: Histogram,
    /// `gateway_requests_total{route,node,code}`.
    pub requests: Family<RequestLabels, Counter>,
    /// `gateway_request_duration_seconds`.
    pub request_duration: Histogram,
    /// `gateway_active_connections{protocol}`.
    pub active_connections: Family<ProtocolLabel, Gauge>,
    /// `gateway_node_weight{cluster,node}` (effective weight in configured units).
    pub node_weight: Family<NodeLabels, Gauge<f64, AtomicU64>>,
    /// `gateway_node_state{cluster,node,state}` (1 for the current state, 0 otherwise).
    pub node_state: Family<NodeStateLabels, Gauge>,
    /// `gateway_route_table_generation`.
    pub generation: Gauge,
    /// `gateway_reloads_total{result}`.
    pub reloads: Family<ResultLabel, Counter>,
    /// `gateway_affinity_store_errors_total{op}`.
    pub store_errors: Family<OpLabel, Counter>,
    /// `gateway_canary_fallback_total{cluster}`.
    pub canary_fallback: Family<ClusterLabel, Counter>,
    /// `gateway_retries_total{route,reason}`.
    pub retries: Family<RetryLabels, Counter>,
    /// `gateway_fail_open_total{cluster}`: requests sent while every node was down.
    pub fail_open: Family<ClusterLabel, Counter>,
    /// `gateway_health_transitions_total{cluster,node,to}`: health state changes (probe, passive, reload).
    pub health_transitions: Family<TransitionLabels, Counter>,
    /// `gateway_discovery_errors_total{cluster}`: failed or empty DNS resolutions (SPEC section 12).
    pub discovery_errors: Family<ClusterLabel, Counter>,
    /// `gateway_h2_goaway_sent_total{reason}`: GOAWAYs the gateway sent for abuse
    /// (`too_many_resets`, `too_many_control_frames`, `header_block_timeout`).
    pub h2_goaway: Family<ReasonLabel, Counter>,
    /// `gateway_tls_handshakes_total{result}`: downstream TLS handshakes (`ok`, `error`, `timeout`).
    pub tls_handshakes: Family<ResultLabel, Counter>,
    /// `gateway_tls_cert_expiry_seconds{name}`: seconds until each served leaf's notAfter.
    pub tls_cert_expiry: Family<NameLabel, Gauge>,
    /// `gateway_tls_cert_reloads_total{result}`: certificate reloads (`ok`, `unchanged`, `invalid`).
    pub tls_cert_reloads: Family<ResultLabel, Counter>,
    /// `gateway_upgrades_total{result}` (SPEC section 13): `success`, `failed`, `timeout`.
    pub upgrades: Family<ResultLabel, Counter>,
    /// `gateway_upgrade_moved_total{kind}` (SPEC section 13): what moved to this process
    /// (`listener`; `websocket` and `http1` once those move).
    pub upgrade_moved: Family<KindLabel, Counter>,
    /// The counter and histogram values of the process this one took over from, added to every
    /// exposition ([`carried`]); empty unless the process was started by an upgrade.
    carried: std::sync::RwLock<carried::Carried>,
}

/// Registers each `(field, name, help)` of the table with `$m`'s registry, in table order (the
/// order of the exposition).
macro_rules! register {
    ($m:expr, [$(($field:ident, $name:literal, $help:literal)),* $(,)?]) => {
        $($m.registry.register($name, $help, $m.$field.clone());)*
    };
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric (SPEC section 8), in the order they are exposed.
    pub fn new() -> Self {
        let mut m = Metrics {
            registry: Registry::default(),
            events: crate::events::Events::new(),
            hops: Family::default(),
            // 1 ms .. ~16 s.
            hop_latency: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            requests: Family::default(),
            request_duration: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            active_connections: Family::default(),
            node_weight: Family::default(),
            node_state: Family::default(),
            generation: Gauge::default(),
            reloads: Family::default(),
            store_errors: Family::default(),
            canary_fallback: Family::default(),
            retries: Family::default(),
            fail_open: Family::default(),
            health_transitions: Family::default(),
            discovery_errors: Family::default(),
            h2_goaway: Family::default(),
            tls_handshakes: Family::default(),
            tls_cert_expiry: Family::default(),
            tls_cert_reloads: Family::default(),
            ejections_suppressed: Family::default(),
            upgrades: Family::default(),
            upgrade_moved: Family::default(),
            carried: Default::default(),
        };
        m.register_traffic();
        m.register_nodes();
        m.register_build_info();
        m.register_edges();
        m
    }

    /// Registers the metrics of hops, requests and downstream connections.
    fn register_traffic(&mut self) {
        register!(
            self,
            [
                (
                    hops,
                    "hopping_count",
                    "Hops: a conn id rebound to another node"
                ),
                (
                    hop_latency,
                    "hopping_latency_seconds",
                    "From a failure being seen to the connection being served again"
                ),
                (
                    requests,
                    "gateway_requests",
                    "Requests by route, node and status"
                ),
                (
                    request_duration,
                    "gateway_request_duration_seconds",
                    "Time to the response head"
                ),
                (
                    active_connections,
                    "gateway_active_connections",
                    "Open downstream connections and streams by protocol"
                ),
            ]
        );
    }

    /// Registers the metrics of nodes, the route table, reloads, the affinity store, canaries,
    /// retries and health transitions.
    fn register_nodes(&mut self) {
        register!(
            self,
            [
                (
                    node_weight,
                    "gateway_node_weight",
                    "Effective node weight (configured x health% x warm-up%)"
                ),
                (
                    node_state,
                    "gateway_node_state",
                    "1 for the node's current state"
                ),
                (
                    generation,
                    "gateway_route_table_generation",
                    "Generation of the live route table"
                ),
                (reloads, "gateway_reloads", "Reload attempts by result"),
                (
                    store_errors,
                    "gateway_affinity_store_errors",
                    "Affinity store errors by operation"
                ),
                (
                    canary_fallback,
                    "gateway_canary_fallback",
                    "Requests whose version matched no node"
                ),
                (
                    retries,
                    "gateway_retries",
                    "Upstream attempts retried on another connection or node"
                ),
                (
                    fail_open,
                    "gateway_fail_open",
                    "Requests sent with every node down (on_all_down = fail_open)"
                ),
                (
                    health_transitions,
                    "gateway_health_transitions",
                    "Node health state changes by the state entered"
                ),
            ]
        );
    }

    /// Registers `gateway_build_info`, set to 1 with the gateway's version as its label.
    fn register_build_info(&mut self) {
        let build_info = Family::<VersionLabel, Gauge>::default();
        build_info
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        self.registry.register(
            "gateway_build_info",
            "Always 1; the label carries the gateway's version",
            build_info,
        );
    }

    /// Registers the metrics of DNS discovery, HTTP/2 abuse, TLS and suppressed passive ejections.
    fn register_edges(&mut self) {
        register!(
            self,
            [
                (discovery_errors, "gateway_discovery_errors", "Failed or empty DNS discovery resolutions; the last good node set stays"),
                (h2_goaway, "gateway_h2_goaway_sent", "GOAWAY frames the gateway sent to h2 clients for abuse, by reason"),
                (tls_handshakes, "gateway_tls_handshakes", "Downstream TLS handshakes by result"),
                (tls_cert_expiry, "gateway_tls_cert_expiry_seconds", "Seconds until the served leaf certificate's notAfter"),
                (tls_cert_reloads, "gateway_tls_cert_reloads", "Certificate reloads by result"),
                (ejections_suppressed, "gateway_passive_ejections_suppressed", "Passive ejections not made because of max_ejection_percent or the last ready node"),
                (upgrades, "gateway_upgrades", "Upgrades of the gateway's binary by result"),
                (upgrade_moved, "gateway_upgrade_moved", "What moved to this process in upgrades, by kind"),
            ]
        );
    }

    /// Counts one hop with `reason` (`hopping_count_total{reason}`, SPEC section 8).
    pub fn hop(&self, reason: crate::events::HopReason) {
        self.hops
            .get_or_create(&ReasonLabel {
                reason: reason.label(),
            })
            .inc();
    }

    /// Counts one store error for `op`.
    pub fn store_error(&self, op: &'static str) {
        self.store_errors.get_or_create(&OpLabel { op }).inc();
    }

    /// Counts one downstream TLS handshake with `result`.
    pub fn tls_handshake(&self, result: &'static str) {
        self.tls_handshakes
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// Counts one certificate reload with `result`.
    pub fn tls_cert_reload(&self, result: &'static str) {
        self.tls_cert_reloads
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// Counts one reload with `result`.
    pub fn reload(&self, result: &'static str) {
        self.reloads.get_or_create(&ResultLabel { result }).inc();
    }

    /// Tracks one open connection of `protocol` until the guard drops.
    pub fn connection(&self, protocol: &'static str) -> ConnectionGauge {
        let g = self
            .active_connections
            .get_or_create_owned(&ProtocolLabel { protocol });
        g.inc();
        ConnectionGauge(g)
    }

    /// The exposition in `format` (SPEC section 8; see [`format`](mod@format)).
    pub fn encode_as(&self, format: format::Format) -> String {
        match format {
            format::Format::OpenMetrics => self.encode(),
            format::Format::Prometheus => format::to_prometheus_text(&self.encode()),
        }
    }

    /// The OpenMetrics text exposition (with `# EOF`), the carried values added
    /// ([`Metrics::carry`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        let carried = self.carried.read().unwrap_or_else(|e| e.into_inner());
        if carried.is_empty() {
            return out;
        }
        carried.merge(&out)
    }

    /// Every counter and histogram sample of this process (carried ones included), for the
    /// handover of an upgrade (SPEC section 13).
    pub fn counter_samples(&self) -> Vec<CarriedSample> {
        carried::samples_of(&self.encode())
    }

    /// Adds `samples` (the old process's [`Metrics::counter_samples`]) to every later exposition,
    /// so counters and histograms continue across an upgrade.
    pub fn carry(&self, samples: Vec<CarriedSample>) {
        *self.carried.write().unwrap_or_else(|e| e.into_inner()) = carried::Carried::new(samples);
    }

    /// Counts one upgrade with `result` (`success`, `failed`, `timeout`).
    pub fn upgrade(&self, result: &'static str) {
        self.upgrades.get_or_create(&ResultLabel { result }).inc();
    }
}

/// Decrements `gateway_active_connections` on drop.
#[derive(Debug)]
pub struct ConnectionGauge(Gauge);

impl Drop for ConnectionGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}
