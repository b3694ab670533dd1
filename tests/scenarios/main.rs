//! Integration scenarios: one module per behaviour area, each starting real processes on
//! ephemeral loopback ports through `integration_tests` (tests/support).

#![allow(missing_docs)]

mod canary;
mod cases;
mod core;
mod drain;
mod h2;
mod health;
mod redis;
mod redis_cluster;
mod redis_outage;
mod redis_sentinel;
mod reload;
mod store_common;
mod websocket;
mod ws_fleet;
