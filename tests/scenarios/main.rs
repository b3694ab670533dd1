//! Integration scenarios: one module per behaviour area, each starting real processes on
//! ephemeral loopback ports through `integration_tests` (tests/support).

#![allow(missing_docs)]

mod canary;
mod cases;
mod core;
mod deploy;
mod discovery;
mod drain;
mod grpc_health;
mod grpc_errors;
mod h2;
mod h2_abuse;
mod health;
mod operator;
mod redis;
mod reload;
mod status_page;
mod tls;
mod tls_reload;
mod websocket;
mod ws_fleet;
mod redis_sentinel;
mod store_common;
mod redis_cluster;
