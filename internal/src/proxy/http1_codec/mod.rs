//! The parts of the gateway's own HTTP/1.x codec that its server half
//! ([`super::downstream::http1`]) and its client half ([`super::upstream::http1`]) share, so
//! neither side imports the other: the rules a head's lines must meet ([`head`]), the chunked
//! coding ([`chunked`]), and an HTTP/1.x node's answer with its fields kept as bytes
//! ([`fields`]).

pub mod chunked;
pub mod fields;
pub mod head;
