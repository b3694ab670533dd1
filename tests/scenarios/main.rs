//! Integration scenarios: one module per behaviour area, each starting real processes on
//! ephemeral loopback ports through `integration_tests` (tests/support).

#![allow(missing_docs)]

mod admin;
mod affinity;
mod bodiless;
mod canary;
mod chaos;
mod config_errors;
mod deploy;
mod discovery;
mod drain;
mod ejection;
mod expect;
mod fallback;
mod fleet;
mod forwarding;
mod framing;
mod goaway;
mod grpc_early_answer;
mod grpc_errors;
mod grpc_health;
mod h2;
mod h2_abuse;
mod h2_penalty;
mod h2_upstream_cancel;
mod health;
mod hop;
mod limits;
mod memory;
mod operator;
mod redis;
mod redis_cluster;
mod redis_outage;
mod redis_sentinel;
mod reload;
mod reload_streams;
mod retry;
mod shared_drain;
mod slow_clients;
mod stable_selection;
mod stale_pool;
mod status_page;
mod store_common;
mod streaming;
mod targets;
mod tls;
mod tls_grpc;
mod tls_redis;
mod tls_reload;
mod tls_upstream;
mod websocket;
mod workers;
mod ws_fleet;
mod ws_frames;
mod ws_limits;
