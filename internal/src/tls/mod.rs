//! TLS (SPEC section 10): [`client`] is TLS to the nodes (`clusters[].tls`, `protocol = "h2"`).

pub mod client;
