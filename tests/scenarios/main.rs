//! Integration scenarios: one module per behaviour area, each starting real processes on
//! ephemeral loopback ports through `integration_tests` (tests/support).

#![allow(missing_docs)]

mod canary;
mod cases;
mod core;
mod drain;
mod grpc_errors;
mod h2;
mod h2_abuse;
mod health;
mod redis;
mod reload;
mod websocket;
mod ws_fleet;
mod ws_limits;
