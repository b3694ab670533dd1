//! TLS (SPEC section 10): downstream listener certificates ([`certs`]), the rustls server side
//! with its SNI resolver and reload ([`server`]), the TLS accept loop ([`accept`]), throw-away
//! certificates ([`gen`]), and TLS to the nodes ([`client`]: `clusters[].tls`, `protocol = "h2"`).

pub mod accept;
pub mod certs;
pub mod client;
pub mod gen;
pub mod server;
