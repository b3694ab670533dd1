//! `rediss://` (SPEC section 7): the Redis affinity store over TLS to a `redis-server`
//! started by the test with `--tls-port` and a certificate signed by a test CA (`affinity.redis_ca`).

use std::process::Stdio;
use std::time::Duration;

use integration_tests::tls::Ca;
use integration_tests::{free_port, get, wait_port, wait_until, Gateway, Mock, FAST_HEALTH};
use tokio::process::{Child, Command};

/// `redis-server` serving TLS only on a free port with `ca`'s leaf for 127.0.0.1.
async fn tls_redis(ca: &Ca) -> (Child, u16) {
    let leaf = ca.leaf(&["127.0.0.1"]);
    let port = free_port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .arg("--tls-cert-file")
        .arg(&leaf.cert)
        .arg("--tls-key-file")
        .arg(&leaf.key)
        .arg("--tls-ca-cert-file")
        .arg(&ca.cert)
        .args([
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server on PATH");
    wait_port(port, Duration::from_secs(10)).await;
    (child, port)
}

/// `redis-cli --tls` with `args` against the TLS server; its trimmed stdout.
async fn cli(ca: &Ca, port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("--tls")
        .arg("--cacert")
        .arg(&ca.cert)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .await
        .expect("redis-cli on PATH");
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// With `redis_url = "rediss://…"` and `affinity.redis_ca`, the gateway writes a new
/// binding to Redis over TLS (seen with `redis-cli --tls`) and reads a binding written there.
#[tokio::test]
async fn rediss_store_writes_and_reads_bindings_over_tls() {
    let ca = Ca::new("redis CA");
    let (_redis, port) = tls_redis(&ca).await;
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let toml = format!(
        "[affinity]\nstore = \"redis\"\nredis_url = \"rediss://127.0.0.1:{port}/0\"\nredis_ca = \"{}\"\n\n{FAST_HEALTH}\n[[clusters]]\nname = \"svc\"\n  [[clusters.nodes]]\n  id = \"node-a\"\n  addr = \"{}\"\n  [[clusters.nodes]]\n  id = \"node-b\"\n  addr = \"{}\"\n\n[[routes]]\nid = \"api\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"svc\"\n",
        ca.cert.display(),
        a.addr(),
        b.addr()
    );
    let gw = Gateway::start(&toml).await;
    for id in ["node-a", "node-b"] {
        gw.wait_node_state(id, "healthy", Duration::from_secs(10))
            .await;
    }
    let r = get(&gw.url("/echo"), &[("x-conn-id", "tls-c1")])
        .await
        .expect("request");
    assert_eq!(r.status, 200, "{}", r.text());
    let node = r.header("x-node-id").expect("x-node-id");
    let (ca_ref, key) = (&ca, "hopgw:conn:tls-c1");
    wait_until(Duration::from_secs(5), "binding written over TLS", || {
        let node = node.clone();
        async move { cli(ca_ref, port, &["GET", key]).await == node }
    })
    .await;

    // A binding written to Redis by someone else is read through TLS.
    let other = if node == "node-a" { "node-b" } else { "node-a" };
    assert_eq!(
        cli(&ca, port, &["SET", "hopgw:conn:tls-c2", other, "EX", "600"]).await,
        "OK"
    );
    for _ in 0..3 {
        let r = get(&gw.url("/echo"), &[("x-conn-id", "tls-c2")])
            .await
            .expect("request");
        assert_eq!(r.header("x-node-id").as_deref(), Some(other));
    }
    assert_eq!(
        gw.metric("gateway_affinity_store_errors_total{op=\"get\"}")
            .await,
        0.0
    );
}
