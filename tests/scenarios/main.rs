//! Integration scenarios: one module per behaviour area, each starting real processes on
//! ephemeral loopback ports through `integration_tests` (tests/support).

#![allow(missing_docs)]

mod canary;
mod cases;
mod core;
mod deploy;
mod discovery;
mod drain;
mod fleet;
mod grpc_early_answer;
mod grpc_errors;
mod grpc_health;
mod h2;
mod h2_abuse;
mod h2_upstream_cancel;
mod hard_http;
mod hard_ops;
mod health;
mod operator;
mod redis;
mod redis_cluster;
mod redis_outage;
mod redis_sentinel;
mod reload;
mod shared_drain;
mod stable_selection;
mod status_page;
mod store_common;
mod tls;
mod tls_grpc;
mod tls_redis;
mod tls_reload;
mod tls_upstream;
mod websocket;
mod ws_fleet;
mod ws_frames;
mod ws_limits;
