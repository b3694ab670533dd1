//! Integration scenarios: one module per behaviour area, each starting real processes on
//! ephemeral loopback ports through `integration_tests` (tests/support).

#![allow(missing_docs)]

mod canary;
mod cases;
mod core;
mod drain;
mod fleet;
mod h2;
mod health;
mod redis;
mod reload;
mod shared_drain;
mod stable_selection;
mod websocket;
mod ws_fleet;
