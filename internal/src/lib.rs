//! hopping-gateway: a gateway for long-lived WebSocket, gRPC and HTTP services whose connections
//! **hop** to a healthy node when theirs dies, drains or is redeployed.
//!
//! Request path: [`server`] accepts HTTP/1.1 and h2c on one port and hands each request to
//! [`proxy::Proxy::handle`], which runs named phases over one request context: match a route in
//! the live [`routing::RouteTable`] (loaded once), identify the conn id, select a node (the bound
//! node, or a [`selection`] result that the [`hopper::Hopper`] rebinds and counts as a hop),
//! forward with retries over [`proxy::upstream`], respond, log (the phase map is in [`proxy`]).
//! Every failure is a [`proxy::ProxyError`] rendered in [`proxy::respond`]. With `[server.tls]`,
//! [`tls`] terminates TLS on a second listener (SNI certificates behind an atomic swap, live
//! reload) and hands the decrypted stream to the same connection handler.
//!
//! Background tasks: per-node health probes ([`registry::health`]), reload triggers
//! ([`routing::reload`]), DNS discovery ([`discovery`]), the admin listener ([`admin`]), the upgrade
//! triggers ([`upgrade`]: `SIGUSR2`, `upgrade_socket`), connection tasks. All of them watch the
//! [`drain`] signal and are joined on shutdown. An upgrade hands the listeners and the in-memory
//! state to a new process of the gateway's binary; [`server`] then shuts down as on SIGTERM.
//!
//! State owners: [`routing::reload::Routing`] owns the table (`ArcSwap`, swapped whole);
//! [`registry::Registry`] owns node runtime (health, drain, in-flight; survives reloads by node id);
//! the hopper owns bindings through its [`hopper::AffinityStore`]; [`metrics::Metrics`] is a leaf.
//! Dependencies point one way: config <- registry <- selection <- routing <- hopper <- proxy <- server/admin.

pub(crate) mod admin;
pub mod config;
pub(crate) mod discovery;
pub(crate) mod drain;
pub(crate) mod events;
pub mod hopper;
pub mod logging;
pub(crate) mod metrics;
pub(crate) mod notify;
pub mod proxy;
pub(crate) mod registry;
pub mod routing;
pub(crate) mod selection;
pub mod server;
pub mod tls;
pub mod upgrade;
mod watch;
