//! The server half of the gateway's own HTTP/1.x codec (STYLE section 2: "own HTTP/1.1 codec on
//! httparse"; pingora's `protocols/http/v1/server.rs`): the request head parsed with httparse and
//! judged by [`crate::proxy::http1_codec::head`]'s rules ([`request`]), the answer's head written
//! by [`response`], the request body read off the connection ([`body`]), and the connection driver
//! that runs the phases in the connection's own task ([`conn`]), with the hand-on of an accepted
//! upgrade's raw socket to the WebSocket relay ([`upgrade`]). HTTP/2 stays with hyper ([`rewind`]
//! hands it the bytes already read). The chunked coding and the node's fields kept as bytes are
//! shared with the client half ([`crate::proxy::http1_codec`]).

pub(crate) mod body;
pub mod conn;
mod leave;
pub mod request;
pub mod response;
pub mod rewind;
pub mod upgrade;
