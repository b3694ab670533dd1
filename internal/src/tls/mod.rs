//! TLS (SPEC section 10): downstream listener certificates ([`certs`]), the rustls server side
//! with its SNI resolver and reload ([`server`]), the handshake of an accepted connection
//! ([`accept`]), throw-away certificates ([`gen`]), and TLS to the nodes ([`client`]:
//! `clusters[].tls`, `protocol = "h2"`).

pub(crate) mod accept;
pub mod certs;
pub(crate) mod client;
pub mod gen;
pub(crate) mod server;
