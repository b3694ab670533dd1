//! The HTTP/2 abuse limits of a downstream connection (SPEC section 4; CASE-25, CASE-26): the IO
//! wrapper around hyper's h2 server ([`watch`]), the frame accounting it feeds ([`frames`]), and
//! the growing cost for a source that keeps breaking them ([`penalty`]).

pub mod frames;
pub mod penalty;
pub mod watch;
