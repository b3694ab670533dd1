//! Readiness that means ready (SPEC section 11): `/readyz` waits for the first probe round and fails
//! during shutdown.

use super::*;

/// Polls `f` every 20 ms until it gives a value; panics with `what` after `timeout`.
async fn poll<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn spawn_gateway(config: &std::path::Path, logs: &Logs) -> tokio::process::Child {
    let mut cmd = tokio::process::Command::new(bin("hopping-gateway"));
    cmd.arg("--config")
        .arg(config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn gateway");
    logs.capture(&mut child);
    child
}

/// SPEC 11: `/readyz` is 503 until the first round of active probes has finished (a node whose
/// health answers take 1.5 s), then 200; 503 while shutting down (still served until exit). The
/// `health_listen` listener serves only `/healthz` and `/readyz`, without the admin token.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn readyz_waits_for_the_first_probe_round_and_fails_during_shutdown() {
    let slow = Mock::start("node-slow").await;
    slow.delay(1500).await;
    let (port, admin, health) = (free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\nhealth_listen = \"127.0.0.1:{health}\"\nadmin_token = \"t0k\"\nshutdown_timeout = \"10s\"\n[health]\ninterval = \"5s\"\ntimeout = \"4s\"\n[[clusters]]\nname = \"c\"\n  [[clusters.nodes]]\n  id = \"node-slow\"\n  addr = \"{}\"\n[[routes]]\nid = \"r\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\n",
        slow.addr()
    )).expect("write");
    let logs = Logs::default();
    let t0 = Instant::now();
    let mut child = spawn_gateway(&path, &logs);
    let readyz = format!("http://127.0.0.1:{health}/readyz");
    let first = poll(
        Duration::from_secs(5),
        "the health listener to answer",
        || async { get(&readyz, &[]).await.ok() },
    )
    .await;
    assert_eq!(
        first.status,
        503,
        "not ready before the first probe round: {}",
        first.text()
    );
    assert_eq!(first.json()["status"], "probing");
    let ready_at = poll(Duration::from_secs(10), "readyz 200", || async {
        get(&readyz, &[])
            .await
            .ok()
            .filter(|r| r.status == 200)
            .map(|_| t0.elapsed())
    })
    .await;
    assert!(
        ready_at >= Duration::from_millis(1400),
        "ready only after the 1.5 s probe: {ready_at:?}"
    );
    let admin_readyz = get(&format!("http://127.0.0.1:{admin}/readyz"), &[])
        .await
        .expect("admin readyz");
    assert_eq!(admin_readyz.status, 200);
    for p in ["/metrics", "/admin/nodes", "/"] {
        let r = get(&format!("http://127.0.0.1:{health}{p}"), &[])
            .await
            .expect("health listener");
        assert_eq!(r.status, 404, "{p} on the health listener");
    }
    assert_eq!(
        get(&format!("http://127.0.0.1:{health}/healthz"), &[])
            .await
            .expect("healthz")
            .status,
        200
    );

    // Shutdown with a request in flight (1.5 s at the node): readyz says 503 meanwhile.
    let inflight = tokio::spawn({
        let url = format!("http://127.0.0.1:{port}/data");
        async move { get(&url, &[]).await }
    });
    wait_until(
        Duration::from_secs(5),
        "the request to be in flight",
        || async {
            get(
                &format!("http://127.0.0.1:{admin}/admin/nodes"),
                &[("authorization", "Bearer t0k")],
            )
            .await
            .is_ok_and(|r| r.json()[0]["inflight"] == 1)
        },
    )
    .await;
    let pid = child.id().expect("pid");
    assert!(std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .expect("kill")
        .success());
    let saw = poll(
        Duration::from_secs(5),
        "readyz 503 during shutdown",
        || async { get(&readyz, &[]).await.ok().filter(|r| r.status == 503) },
    )
    .await;
    assert_eq!(saw.json()["status"], "shutting down");
    let r = inflight.await.expect("join").expect("in-flight request");
    assert_eq!(r.status, 200, "the in-flight request finished");
    let code = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("exit")
        .expect("wait");
    assert!(code.success(), "{code:?}: {:?}", logs.lines());
}
