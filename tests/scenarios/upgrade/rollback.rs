//! A failed upgrade changes nothing (SPEC section 13): a new binary that exits, one that is never
//! ready within `upgrade_timeout`, and one that speaks an unknown handover version are each
//! stopped; the old process serves on, counts the failure, and a following real upgrade succeeds.
//! A SIGTERM during an upgrade stops the new process with the old one.

use std::time::Duration;

use integration_tests::upgrade::{gone, Upgradable};
use integration_tests::wait_until;
use integration_tests::Mock;

use super::{gateway, serves};

/// Waits until `gateway_upgrades_total{result}` is 1 in the old process `gw`.
async fn counted(gw: &Upgradable, result: &str) {
    let series = format!("gateway_upgrades_total{{result=\"{result}\"}}");
    wait_until(Duration::from_secs(20), &series, || {
        let s = series.clone();
        async move { gw.metric(&s).await == 1.0 }
    })
    .await;
}

/// After a rollback: the same process serves on every listener, with no upgrade running, and a
/// real upgrade then succeeds.
async fn serves_on_then_upgrades(mut gw: Upgradable, reason: &[&str]) {
    let pid = gw.pid();
    gw.logs
        .wait_for(&["upgrade failed; serving on"], Duration::from_secs(5))
        .await;
    gw.logs.wait_for(reason, Duration::from_secs(5)).await;
    serves(&gw, pid).await;
    let r = integration_tests::get(&gw.admin("/admin/upgrade"), &[])
        .await
        .expect("admin");
    assert_eq!(r.json()["running"], false);
    let new = gw.upgrade().await;
    assert_ne!(new, pid);
    serves(&gw, new).await;
    assert_eq!(
        gw.metric("gateway_upgrades_total{result=\"success\"}")
            .await,
        1.0
    );
}

#[tokio::test]
async fn upgrade_to_a_binary_that_exits_is_rolled_back() {
    let (_mocks, gw) = rolled_back("", "exit 1", "failed").await;
    serves_on_then_upgrades(gw, &["exited", "exit status: 1"]).await;
}

#[tokio::test]
async fn upgrade_to_a_binary_never_ready_is_stopped_at_upgrade_timeout() {
    // `exec`: the pid the old process started is the sleeper itself.
    let (_mocks, gw) = rolled_back("upgrade_timeout = \"2s\"", "exec sleep 60", "timeout").await;
    let line = gw
        .logs
        .wait_for(&["upgrade failed; serving on"], Duration::from_secs(5))
        .await;
    let sleeper = new_pid(&line);
    assert!(gone(sleeper), "the new process {sleeper} was stopped");
    serves_on_then_upgrades(gw, &["not ready within upgrade_timeout"]).await;
}

/// A gateway (`server` lines as in [`gateway`]) whose upgrade to `script` was just rolled back
/// and counted with `result`.
async fn rolled_back(server: &str, script: &str, result: &str) -> ([Mock; 2], Upgradable) {
    let (mocks, gw) = gateway(server, &[]).await;
    gw.install_script(script);
    gw.usr2();
    counted(&gw, result).await;
    (mocks, gw)
}

/// The `new_pid=Some(<pid>)` field of a log line.
fn new_pid(line: &str) -> u32 {
    line.split("new_pid=Some(")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("new pid in {line}"))
}

/// The new "binary" says hello with handover version 999 on its channel (standard input), then
/// waits to be stopped.
fn unknown_version_script() -> String {
    let msg = r#"{"type":"hello","version":999,"pid":1}"#;
    let len = (msg.len() as u32).to_be_bytes();
    let prefix: String = len.iter().map(|b| format!("\\{b:03o}")).collect();
    format!("printf '{prefix}%s' '{msg}' >&0\nexec sleep 60")
}

#[tokio::test]
async fn upgrade_to_an_unknown_handover_version_is_refused() {
    let (_mocks, gw) = rolled_back("", &unknown_version_script(), "failed").await;
    serves_on_then_upgrades(gw, &["unknown handover version 999"]).await;
}

#[tokio::test]
async fn sigterm_during_an_upgrade_stops_the_new_process_too() {
    let (_mocks, gw) = gateway("", &[]).await;
    gw.install_script("exec sleep 60");
    gw.usr2();
    let line = gw
        .logs
        .wait_for(&["upgrade: new process started"], Duration::from_secs(5))
        .await;
    let sleeper = new_pid(&line);
    let old = gw.pid();
    gw.signal("TERM");
    let stopped = "upgrade stopped: the gateway is shutting down";
    gw.logs.wait_for(&[stopped], Duration::from_secs(10)).await;
    let exited = || async move { gone(old) };
    wait_until(Duration::from_secs(20), "the gateway to exit", exited).await;
    assert!(
        gone(sleeper),
        "the new process {sleeper} was stopped with the gateway"
    );
}
