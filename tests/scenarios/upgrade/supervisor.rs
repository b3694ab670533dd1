//! A supervisor that starts the new process itself (SPEC section 13): `hopping-gateway
//! --upgrade-from <socket>` takes over through the old process's `[server] upgrade_socket`, then
//! upgrades on `SIGUSR2` like any other process.

use std::time::Duration;

use integration_tests::wait_until;

use super::{gateway, serves};

#[tokio::test]
async fn upgrade_by_a_supervisor_through_upgrade_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("upgrade.sock");
    let server = format!("upgrade_socket = \"{}\"", sock.display());
    let (_mocks, mut gw) = gateway(&server, &[]).await;
    wait_until(Duration::from_secs(5), "upgrade_socket to listen", || {
        let exists = sock.exists();
        async move { exists }
    })
    .await;
    let new = gw.upgrade_from(&sock).await;
    serves(&gw, new).await;
    assert_eq!(
        gw.metric("gateway_upgrades_total{result=\"success\"}")
            .await,
        1.0
    );
    // The new process listens on upgrade_socket in turn, and upgrades on SIGUSR2 too.
    let newer = gw.upgrade().await;
    serves(&gw, newer).await;
    assert_eq!(
        gw.metric("gateway_upgrades_total{result=\"success\"}")
            .await,
        2.0
    );
}
