//! The client half of the gateway's own HTTP/1.x codec (pingora's `protocols/http/v1/client.rs`):
//! the client that sends a request to an HTTP/1.1 node in the request's own task ([`conn`], over
//! [`io`]), writing its head ([`request_head`]) and parsing the
//! node's ([`head`]), pumping its body ([`pump`]) and
//! reading the answer's ([`body`]), with the idle connections to each node ([`pool`]). The chunked
//! coding and the node's fields kept as bytes are shared with the server half
//! ([`crate::proxy::http1_codec`]).

pub mod body;
pub mod conn;
pub mod head;
pub mod io;
pub mod pool;
pub mod pump;
pub mod request_head;
