//! The gateway's own HTTP/1.x data path on the downstream side (issue 16; STYLE section 2: "own
//! HTTP/1.1 codec on httparse"): the request head parsed with httparse and judged by
//! [`super::head`]'s rules ([`request`]), the answer's head written by [`response`], one chunked
//! decoder and one encoder ([`chunked`]), the request body read off the connection ([`body`]), and
//! the connection driver that runs the phases in the connection's own task ([`conn`]), and the
//! hand-on of an accepted upgrade's raw socket to the WebSocket relay ([`upgrade`]). HTTP/2 stays
//! with hyper ([`rewind`] hands it the bytes already read).

pub(crate) mod body;
pub mod chunked;
pub mod conn;
pub mod request;
pub mod response;
pub mod rewind;
pub mod upgrade;
