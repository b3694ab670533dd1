//! Routing: the immutable route table (routes + clusters + nodes + generation), its atomic swap,
//! reloads (with their triggers) and warm-up. The matching rule is documented in [`table`].
//!
//! A request loads the live table once ([`reload::Routing::table`]) and uses that snapshot to the end, so it
//! sees the whole old table or the whole new one (SPEC section 6). Writers build and validate a new
//! table beside the live one and `store` it in one step; there is never an empty or half table.

pub(crate) mod discovered;
pub mod path;
pub(crate) mod reload;
pub(crate) mod sources;
pub(crate) mod table;
pub(crate) mod triggers;
pub(crate) mod warmup;

pub(crate) use table::{Cluster, Route, RouteTable};

#[cfg(test)]
mod tests;
