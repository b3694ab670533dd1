//! TLS: downstream listener certificates ([`certs`]), the rustls server side with its SNI
//! resolver and reload ([`server`]), and the TLS accept loop ([`accept`]) (SPEC section 10).

pub mod accept;
pub mod certs;
pub mod gen;
pub mod server;
