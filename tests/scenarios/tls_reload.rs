//! Certificate reload under load (SPEC section 10): Kubernetes-style
//! symlink swaps seen by the directory watch while TLS requests run on fresh and kept-alive
//! connections, and refused reloads that keep the old certificate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration_tests::tls::{self, Ca, Leaf};
use integration_tests::{cluster_toml, free_port, request, Gateway, Mock, FAST_HEALTH};
use tokio::time::Instant;

/// Load counters: requests that passed and failed (handshake or request), by kind.
#[derive(Default)]
struct Load {
    ok: AtomicU64,
    failed: AtomicU64,
}

/// Runs `workers` loops of one request per `every` until `stop`: `fresh` opens a new TLS
/// connection per request, otherwise one connection is kept alive per worker.
fn spawn_load(
    port: u16,
    cfg: Arc<rustls::ClientConfig>,
    fresh: bool,
    workers: usize,
    every: Duration,
    load: Arc<Load>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..workers)
        .map(|_| {
            let (cfg, load, stop) = (cfg.clone(), load.clone(), stop.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                let mut kept = None;
                while !*stop.borrow() {
                    tick.tick().await;
                    let r = async {
                        if fresh || kept.is_none() {
                            let s = tls::connect(port, "localhost", cfg.clone()).await?;
                            kept = Some(tls::http1(s).await?);
                        }
                        let send = kept.as_mut().expect("connected above");
                        let (status, _, body) = tls::h1_get(send, "localhost", "/data").await?;
                        anyhow::ensure!(
                            status == 200 && body.starts_with("Data from Node"),
                            "{status} {body}"
                        );
                        Ok(())
                    }
                    .await;
                    match r {
                        Ok(()) => load.ok.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            eprintln!("load request failed (fresh={fresh}): {e:#}");
                            kept = None;
                            load.failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                    if fresh {
                        kept = None;
                    }
                }
            })
        })
        .collect()
}

/// The leaf new handshakes get for `localhost`.
async fn served_leaf(port: u16) -> Vec<u8> {
    let s = tls::connect(port, "localhost", tls::any_cert_config())
        .await
        .expect("handshake");
    tls::peer_leaf(&s)
}

async fn wait_leaf(port: u16, want: &Leaf, within: Duration, what: &str) -> Duration {
    let t0 = Instant::now();
    loop {
        if served_leaf(port).await == want.der {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < within,
            "{what}: new handshakes still get the old leaf after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reload under load: 50 certificate swaps (Kubernetes secret symlink swaps, seen by
/// the directory watch) while ~200 TLS requests/s run on fresh and kept-alive connections: no
/// handshake or request fails, and new handshakes get each new leaf within 2 s. Then a broken PEM
/// and a mismatched key are refused by `POST /admin/reload` (422 naming key and file), counted, and
/// the previous certificate stays.
/// Long on purpose: the load, the 50 swaps and the refusals are one scenario over one gateway.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn tls_cert_reload_under_load_drops_nothing_and_refuses_bad_files() {
    let a = Mock::start("node-a").await;
    let ca = Ca::new("reload CA");
    let leaves: Vec<Leaf> = (0..=50).map(|_| ca.leaf(&["localhost"])).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = dir.path().join("secret");
    std::fs::create_dir_all(&secret).expect("mkdir");
    tls::k8s_swap(&secret, 0, &leaves[0]);
    let port = free_port();
    let toml = format!(
        "{FAST_HEALTH}\n{}\n[[routes]]\nid = \"r\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\n\n[server.tls]\nlisten = \"127.0.0.1:{port}\"\n  [[server.tls.certs]]\n  cert = {:?}\n  key = {:?}\n  server_names = [\"localhost\"]\n",
        cluster_toml("c", &[("node-a", a.addr())], ""),
        secret.join("tls.crt").display().to_string(),
        secret.join("tls.key").display().to_string(),
    );
    let gw = Gateway::start(&toml).await;
    assert!(served_leaf(port).await == leaves[0].der);

    let cfg = tls::client_config(&ca.pem, &["http/1.1"], None);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let (fresh, kept) = (Arc::new(Load::default()), Arc::new(Load::default()));
    let mut tasks = spawn_load(
        port,
        cfg.clone(),
        true,
        2,
        Duration::from_millis(20),
        fresh.clone(),
        stop.clone(),
    );
    tasks.extend(spawn_load(
        port,
        cfg,
        false,
        2,
        Duration::from_millis(20),
        kept.clone(),
        stop,
    ));
    let t0 = Instant::now();
    let mut slowest = Duration::ZERO;
    for (i, leaf) in leaves.iter().enumerate().skip(1) {
        tls::k8s_swap(&secret, i, leaf);
        slowest =
            slowest.max(wait_leaf(port, leaf, Duration::from_secs(2), &format!("swap {i}")).await);
    }
    let took = t0.elapsed();
    stop_tx.send(true).expect("stop");
    for t in tasks {
        t.await.expect("load task");
    }
    let (f_ok, k_ok) = (
        fresh.ok.load(Ordering::Relaxed),
        kept.ok.load(Ordering::Relaxed),
    );
    println!(
        "50 swaps in {took:?} (slowest {slowest:?}); {f_ok} fresh-connection and {k_ok} kept-alive requests, {:.0}/s",
        (f_ok + k_ok) as f64 / took.as_secs_f64()
    );
    assert_eq!(
        fresh.failed.load(Ordering::Relaxed),
        0,
        "failed fresh-connection requests"
    );
    assert_eq!(
        kept.failed.load(Ordering::Relaxed),
        0,
        "failed kept-alive requests"
    );
    assert!(
        f_ok > 100 && k_ok > 100,
        "the load ran: {f_ok} fresh, {k_ok} kept"
    );
    assert_eq!(
        gw.metric("gateway_tls_handshakes_total{result=\"error\"}")
            .await,
        0.0
    );
    assert!(
        gw.metric("gateway_tls_cert_reloads_total{result=\"ok\"}")
            .await
            >= 50.0
    );
    let last = &leaves[50];

    // A broken PEM: refused, named, counted; the last good leaf stays.
    let invalid_before = gw
        .metric("gateway_tls_cert_reloads_total{result=\"invalid\"}")
        .await;
    let broken = Leaf {
        cert_pem: "-----BEGIN CERTIFICATE-----\nMIIB%%%\n-----END CERTIFICATE-----\n".into(),
        ..last.clone()
    };
    let other_key = ca.leaf(&["localhost"]).key_pem;
    let mismatched = Leaf {
        key_pem: other_key,
        ..last.clone()
    };
    for (version, bad, key, words) in [
        (
            100,
            &broken,
            "server.tls.certs[0].cert",
            "not a PEM certificate chain",
        ),
        (
            101,
            &mismatched,
            "server.tls.certs[0].key",
            "does not match",
        ),
    ] {
        tls::k8s_swap(&secret, version, bad);
        let r = request("POST", &gw.admin("/admin/reload"), &[], Vec::new())
            .await
            .expect("reload");
        assert_eq!(r.status, 422, "{}", r.text());
        let errors = r.json()["errors"].clone();
        assert_eq!(errors[0]["key"], key, "{errors}");
        let message = errors[0]["message"].as_str().expect("message");
        assert!(
            message.contains(words) && message.contains("tls."),
            "{message}"
        );
        assert!(errors[0]["line"].as_u64().expect("line") > 1, "{errors}");
        assert!(
            served_leaf(port).await == last.der,
            "the previous certificate must stay"
        );
        gw.logs
            .wait_for(&["certificate reload refused", key], Duration::from_secs(5))
            .await;
    }
    assert!(
        gw.metric("gateway_tls_cert_reloads_total{result=\"invalid\"}")
            .await
            >= invalid_before + 2.0
    );
    // SIGHUP brings a good certificate in.
    let next = ca.leaf(&["localhost"]);
    tls::k8s_swap(&secret, 102, &next);
    gw.signal("HUP");
    wait_leaf(port, &next, Duration::from_secs(3), "after SIGHUP").await;
    assert!(
        gw.metric("gateway_tls_cert_expiry_seconds{name=\"localhost\"}")
            .await
            > 86_400.0
    );
}
