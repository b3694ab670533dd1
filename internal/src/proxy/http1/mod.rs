//! The gateway's own HTTP/1.x data path on the downstream side (issue 16; STYLE section 2: "own
//! HTTP/1.1 codec on httparse"): the request head parsed with httparse and judged by
//! [`super::head`]'s rules ([`request`]), the answer's head written by [`response`], one chunked
//! decoder and one encoder ([`chunked`]), the request body read off the connection ([`body`]), and
//! the connection driver that runs the phases in the connection's own task ([`conn`]), with the
//! hand-on of an accepted upgrade's raw socket to the WebSocket relay ([`upgrade`]); and on the
//! upstream side, the client that sends a request to an HTTP/1.1 node in the request's own task
//! ([`node_conn`], [`node_io`], [`node_head`], [`node_pump`], [`node_body`]) with its
//! idle-connection [`pool`]. HTTP/2 stays with hyper ([`rewind`] hands it the bytes already read).

pub(crate) mod body;
pub mod chunked;
pub mod conn;
pub mod node_body;
pub mod node_conn;
pub mod node_fields;
pub mod node_head;
pub mod node_io;
pub mod node_pump;
pub mod pool;
pub mod request;
pub mod response;
pub mod rewind;
pub mod upgrade;
