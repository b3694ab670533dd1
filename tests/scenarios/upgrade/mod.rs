//! The gateway upgrades itself (SPEC section 13): the binary file is replaced and `SIGUSR2` (or
//! `POST /admin/upgrade`) hands the listeners, bindings and counters to a new process without a
//! refused or reset connect; a new binary that fails is stopped and the old process serves on.
//! Each test starts the gateway from a copy of its binary ([`Upgradable`]) so it can replace it.

mod bindings;
mod keepalive;
mod listeners;
mod load;
mod rollback;
mod supervisor;
mod systemd;

use integration_tests::upgrade::Upgradable;
use integration_tests::{get, Config, Health, Mock, Route};

/// Starts mocks `node-a` and `node-b` and an upgradable gateway over both (TCP probes, route
/// `api`), with the `[server]` lines `server` and the environment `env`.
async fn gateway(server: &str, env: &[(&str, &str)]) -> ([Mock; 2], Upgradable) {
    let mocks = [Mock::start("node-a").await, Mock::start("node-b").await];
    let toml = Config::single(Health::tcp_200ms(), &[&mocks[0], &mocks[1]], Route::api())
        .table("server", server)
        .toml();
    (mocks, Upgradable::start(&toml, env).await)
}

/// Asserts that the data plane and the admin API of `gw` answer, from process `pid`.
async fn serves(gw: &Upgradable, pid: u32) {
    let r = get(&gw.url("/data"), &[])
        .await
        .expect("data plane answers");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        gw.serving_pid().await,
        Some(pid),
        "the admin API answers from {pid}"
    );
}
