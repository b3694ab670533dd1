//! Which certificate a TLS client meets: SNI choice, client certificates required by
//! `client_ca`, and `--check-config` on certificate files.

use super::*;

/// SNI: with two certificates, a rustls client and `openssl s_client -servername` see
/// the exact-name leaf, the one-label wildcard's leaf, and the first (default) leaf for an unknown
/// name or no SNI at all.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
#[tokio::test]
async fn tls_sni_picks_exact_then_wildcard_then_the_first_certificate() {
    let a = Mock::start("node-a").await;
    let ca = Ca::new("sni test CA");
    let first = ca.leaf(&["a.test"]);
    let second = ca.leaf(&["b.test", "*.wild.test"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let gw = Gateway::start(&tls_config(
        dir.path(),
        port,
        &[(&first, &["a.test"]), (&second, &["b.test", "*.wild.test"])],
        "",
        &mock_nodes(&[&a]),
        "",
    ))
    .await;
    let any = tls::any_cert_config();
    for (sni, want, what) in [
        ("a.test", &first, "exact a.test"),
        ("b.test", &second, "exact b.test"),
        ("x.wild.test", &second, "wildcard *.wild.test"),
        ("y.x.wild.test", &first, "a wildcard covers one label only"),
        ("unknown.test", &first, "no match: the first"),
        ("127.0.0.1", &first, "no SNI (IP address): the first"),
    ] {
        let s = tls::connect(port, sni, any.clone())
            .await
            .expect("handshake");
        assert!(
            tls::peer_leaf(&s) == want.der,
            "{what}: wrong leaf for {sni}"
        );
    }
    // The verifying client accepts the leaf for its name, and HTTP flows.
    let cfg = tls::client_config(&ca.pem, &["http/1.1"], None);
    let s = tls::connect(port, "x.wild.test", cfg)
        .await
        .expect("verified handshake");
    let mut send = tls::http1(s).await.expect("h1");
    let (status, _, body) = tls::h1_get(&mut send, "x.wild.test", "/data")
        .await
        .expect("GET");
    assert_eq!(
        (status, body.as_str()),
        (
            200,
            format!("Data from Node node-a (Port {})", a.port).as_str()
        )
    );

    for (sni, cn) in [
        (Some("b.test"), "b.test"),
        (Some("q.wild.test"), "b.test"),
        (Some("a.test"), "a.test"),
        (None, "a.test"),
    ] {
        let mut cmd = std::process::Command::new("openssl");
        cmd.args(["s_client", "-connect", &format!("127.0.0.1:{port}")]);
        match sni {
            Some(n) => cmd.args(["-servername", n]),
            None => cmd.arg("-noservername"),
        };
        let out = cmd
            .stdin(std::process::Stdio::null())
            .output()
            .expect("openssl s_client runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let subject = text
            .lines()
            .find(|l| l.starts_with("subject="))
            .unwrap_or_else(|| panic!("no subject line in openssl output: {text}"));
        assert!(
            subject.ends_with(&format!("CN = {cn}")) || subject.ends_with(&format!("CN={cn}")),
            "SNI {sni:?}: {subject}"
        );
    }
    drop(gw);
}

/// mTLS downstream: with `client_ca` set, a client without a certificate, or with one
/// from another CA, fails the handshake; one signed by `client_ca` passes and its subject is in the
/// access log.
#[tokio::test]
async fn tls_client_ca_requires_a_certificate_it_signed() {
    let a = Mock::start("node-a").await;
    let ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let stranger = Ca::new("stranger CA");
    let leaf = ca.leaf(&["localhost"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_file = dir.path().join("client-ca.pem");
    std::fs::write(&ca_file, &client_ca.pem).expect("write");
    let port = free_port();
    let gw = Gateway::start(&tls_config(
        dir.path(),
        port,
        &[(&leaf, &["localhost"])],
        &format!("client_ca = {:?}", ca_file.display().to_string()),
        &mock_nodes(&[&a]),
        "",
    ))
    .await;

    async fn get_data(port: u16, cfg: std::sync::Arc<rustls::ClientConfig>) -> anyhow::Result<u16> {
        let s = tls::connect(port, "localhost", cfg).await?;
        let mut send = tls::http1(s).await?;
        Ok(tls::h1_get(&mut send, "localhost", "/data").await?.0)
    }
    let none = get_data(port, tls::client_config(&ca.pem, &["http/1.1"], None)).await;
    assert!(none.is_err(), "no client certificate must fail: {none:?}");
    let other = get_data(
        port,
        tls::client_config(&ca.pem, &["http/1.1"], Some(&stranger.client("mallory"))),
    )
    .await;
    assert!(
        other.is_err(),
        "a certificate of another CA must fail: {other:?}"
    );
    let ok = get_data(
        port,
        tls::client_config(&ca.pem, &["http/1.1"], Some(&client_ca.client("alice"))),
    )
    .await;
    assert_eq!(ok.expect("signed by client_ca"), 200);
    gw.logs
        .wait_for(
            &["access", "path=/data", "CN=alice"],
            Duration::from_secs(5),
        )
        .await;
    assert!(handshakes(&gw, "error").await >= 2.0);
}

/// SPEC section 10: `--check-config` reads the certificate files and names each problem
/// in the config-error shape: a broken PEM, a key that does not match, an expired leaf.
#[tokio::test]
async fn tls_check_config_names_bad_certificate_files() {
    let ca = Ca::new("check CA");
    let good = ca.leaf(&["a.test"]);
    let expired = ca.expired_leaf(&["b.test"]);
    let other = ca.leaf(&["c.test"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let broken = Leaf {
        cert_pem: "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n".into(),
        ..good.clone()
    };
    let mismatched = Leaf {
        key_pem: other.key_pem.clone(),
        ..good.clone()
    };
    let text = tls_config(
        dir.path(),
        free_port(),
        &[
            (&broken, &["a.test"]),
            (&mismatched, &["m.test"]),
            (&expired, &["b.test"]),
        ],
        "",
        &[("node-a", "127.0.0.1:1".into())],
        "",
    );
    let file = dir.path().join("gw.toml");
    std::fs::write(&file, &text).expect("write");
    let out = std::process::Command::new(bin("hopping-gateway"))
        .arg("--check-config")
        .arg(&file)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    let line_of = |needle: &str| {
        text.lines()
            .position(|l| l.contains(needle))
            .expect("in config")
            + 1
    };
    let name = file.display().to_string();
    let expected = [
        ("cert0.pem", "certs[0].cert", "not a PEM certificate chain"),
        ("cert1.key", "certs[1].key", "does not match"),
        ("cert2.pem", "certs[2].cert", "expired"),
    ];
    for (line, (needle, key, says)) in lines.iter().zip(expected) {
        let at = format!("{name}:{}:3: server.tls.{key}: ", line_of(needle));
        assert!(line.starts_with(&at) && line.contains(says), "{err}");
    }
}
