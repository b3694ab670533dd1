//! Every listening socket moves (SPEC section 13): data plane, TLS, admin and `health_listen`. The
//! new process cannot bind them itself while the old one listens, so serving on them after the old
//! one exited means it received them.

use integration_tests::tls::{https_request, Ca};
use integration_tests::upgrade::Upgradable;
use integration_tests::{free_port, get, Config, Health, Mock, Route};

use super::serves;

#[tokio::test]
async fn upgrade_moves_every_listener_tls_and_health_included() {
    let ca = Ca::new("upgrade test CA");
    let leaf = ca.leaf(&["127.0.0.1"]);
    let (tls_port, health_port) = (free_port(), free_port());
    let a = Mock::start("node-a").await;
    let toml = Config::single(Health::tcp_200ms(), &[&a], Route::api())
        .table("server", &format!("health_listen = \"127.0.0.1:{health_port}\""))
        .raw_top(&format!(
            "[server.tls]\nlisten = \"127.0.0.1:{tls_port}\"\n  [[server.tls.certs]]\n  cert = {:?}\n  key = {:?}\n  server_names = [\"127.0.0.1\"]\n",
            leaf.cert, leaf.key
        ))
        .toml();
    let mut gw = Upgradable::start(&toml, &[]).await;
    let tls_addr = format!("127.0.0.1:{tls_port}");
    let health = format!("http://127.0.0.1:{health_port}/healthz");
    let check = |what: &'static str| {
        let (ca, tls_addr, health) = (ca.pem.clone(), tls_addr.clone(), health.clone());
        async move {
            let r = https_request(&ca, &tls_addr, "GET", "/data")
                .await
                .expect("https");
            assert_eq!(r.status, 200, "{what}: {}", r.text());
            let r = get(&health, &[]).await.expect("health listener");
            assert_eq!(r.status, 200, "{what}: {}", r.text());
        }
    };
    check("before").await;
    let new = gw.upgrade().await;
    serves(&gw, new).await;
    check("after").await;
    let moved = gw
        .metric("gateway_upgrade_moved_total{kind=\"listener\"}")
        .await;
    // One data-plane and one TLS socket per worker, the admin and the health listener.
    assert!(
        moved >= 4.0 && moved % 2.0 == 0.0,
        "listeners moved: {moved}"
    );
    let line = gw
        .logs
        .wait_for(&["upgrade complete"], std::time::Duration::from_secs(5))
        .await;
    assert!(line.contains(&format!("listeners={moved}")), "{line}");
}
