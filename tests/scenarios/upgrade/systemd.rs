//! The upgrade's operator surface (SPEC section 13): the new process tells systemd `MAINPID` and
//! `READY=1`, and `POST /admin/upgrade` answers 202, or 409 while an upgrade runs.

use std::time::Duration;

use integration_tests::wait_until;
use tokio::net::UnixDatagram;

use super::{gateway, serves};

#[tokio::test]
async fn upgrade_new_process_notifies_mainpid_and_ready() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).expect("bind notify socket");
    let path = path.to_str().expect("utf-8 path").to_string();
    let (_mocks, mut gw) = gateway("", &[("NOTIFY_SOCKET", path.as_str())]).await;
    let mut buf = vec![0u8; 4096];
    let mut seen = Vec::new();
    // The first process's READY=1.
    while !seen.iter().any(|d: &String| d.contains("READY=1")) {
        let n = tokio::time::timeout(Duration::from_secs(10), sock.recv(&mut buf))
            .await
            .expect("a datagram")
            .expect("recv");
        seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    let new = gw.upgrade().await;
    seen.clear();
    while let Ok(Ok(n)) =
        tokio::time::timeout(Duration::from_millis(500), sock.recv(&mut buf)).await
    {
        seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    let want = format!("MAINPID={new}");
    assert!(
        seen.iter()
            .any(|d| d.lines().any(|l| l == want) && d.lines().any(|l| l == "READY=1")),
        "MAINPID={new} and READY=1 in one datagram: {seen:?}"
    );
    assert!(
        !seen.iter().any(|d| d.contains("STOPPING=1")),
        "the old process does not tell systemd it stops: {seen:?}"
    );
}

#[tokio::test]
async fn upgrade_by_admin_answers_202_then_409_while_running() {
    let (_mocks, mut gw) = gateway("upgrade_timeout = \"3s\"", &[]).await;
    let pid = gw.pid();
    gw.install_script("exec sleep 60");
    let r = gw.admin_post("/admin/upgrade").await;
    assert_eq!(r.status, 202, "{}", r.text());
    let r = gw.admin_post("/admin/upgrade").await;
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.json()["code"], -1);
    assert!(r.json()["message"]
        .as_str()
        .is_some_and(|m| m.contains("already running")));
    gw.logs
        .wait_for(
            &["upgrade refused: an upgrade is already running"],
            Duration::from_secs(5),
        )
        .await;
    // The sleeper is stopped at upgrade_timeout; then an upgrade by the admin API succeeds.
    wait_until(
        Duration::from_secs(20),
        "the upgrade to time out",
        || async {
            gw.metric("gateway_upgrades_total{result=\"timeout\"}")
                .await
                == 1.0
        },
    )
    .await;
    serves(&gw, pid).await;
    gw.install_gateway();
    let r = gw.admin_post("/admin/upgrade").await;
    assert_eq!(r.status, 202, "{}", r.text());
    let new = gw.wait_upgraded(Duration::from_secs(30)).await;
    serves(&gw, new).await;
}
