//! Config checks of TLS to nodes (SPEC section 3 `clusters[].tls`, `protocol = "h2"`,
//! `affinity.redis_ca`): bad files and combinations are errors with their key, line and column.

use std::path::Path;

use super::text::cluster_text;
use super::*;

/// A fresh directory under the system temp dir with a CA certificate (`ca.pem`), a leaf for
/// `127.0.0.1` and its key; returns the directory.
fn certs(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("hopgw-tls-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = params.self_signed(&key).expect("CA");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write");
    std::fs::write(dir.join("client.key"), key.serialize_pem()).expect("write");
    std::fs::write(dir.join("garbage.pem"), "not a certificate\n").expect("write");
    dir
}

/// Cluster `c` with `lines` on its third line and one node, and a route to it.
fn cluster(lines: &str) -> String {
    let route = "[[routes]]\nid = \"r\"\ncluster = \"c\"\n";
    cluster_text("c", lines, &[("n", "127.0.0.1:1")]) + "\n" + route
}

/// A `tls = { .. }` line: `literal` keys as written, then each `(key, file)` naming `file` in `dir`.
fn tls_line(literal: &str, dir: &Path, files: &[(&str, &str)]) -> String {
    let paths = files
        .iter()
        .map(|(key, file)| format!("{key} = \"{}\"", dir.join(file).display()));
    let keys: Vec<String> = (!literal.is_empty())
        .then(|| literal.to_string())
        .into_iter()
        .chain(paths)
        .collect();
    format!("tls = {{ {} }}", keys.join(", "))
}

fn issues(text: &str) -> Vec<ConfigIssue> {
    load_str(text, "t.toml").expect_err("invalid").issues
}

#[test]
fn h2_needs_tls_and_h2c_refuses_it() {
    let e = issues(&cluster("protocol = \"h2\""));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        (e[0].key.as_str(), e[0].line, e[0].column),
        ("clusters[0].protocol", 3, 1)
    );
    assert!(e[0].message.contains("needs tls"), "{}", e[0].message);

    let dir = certs("h2c");
    let tls = tls_line("", &dir, &[("ca", "ca.pem")]);
    let text = cluster(&format!("protocol = \"h2c\"\n{tls}"));
    assert_eq!(issues(&text)[0].key, "clusters[0].protocol");
}

#[test]
fn bad_tls_files_are_named_with_their_key_and_position() {
    let dir = certs("bad");
    let text = cluster(&tls_line(
        "",
        &dir,
        &[
            ("ca", "missing.pem"),
            ("client_cert", "garbage.pem"),
            ("client_key", "client.key"),
        ],
    ));
    let e = issues(&text);
    let keys: Vec<&str> = e.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(
        keys,
        ["clusters[0].tls.ca", "clusters[0].tls.client_cert"],
        "{e:?}"
    );
    assert!(e[0].message.contains("cannot read"), "{}", e[0].message);
    assert!(
        e[1].message.contains("holds no PEM certificate"),
        "{}",
        e[1].message
    );
    assert_eq!(e[0].line, 3);
    assert!(
        e[0].column > 1,
        "points at the ca key inside the inline table: {e:?}"
    );

    let half = cluster(&tls_line("", &dir, &[("client_cert", "ca.pem")]));
    assert_eq!(issues(&half)[0].key, "clusters[0].tls.client_key");
}

#[test]
fn valid_tls_loads_and_h2_is_accepted() {
    let dir = certs("ok");
    let tls = tls_line("sni = \"backend.internal\"", &dir, &[("ca", "ca.pem")]);
    let text = cluster(&format!("protocol = \"h2\"\n{tls}"));
    let cfg = load_str(&text, "t.toml").expect("valid");
    let c = &cfg.clusters[0];
    assert_eq!(c.protocol, Protocol::H2);
    let tls = c.tls.as_ref().expect("tls loaded");
    assert_eq!(tls.spec.sni.as_deref(), Some("backend.internal"));
    assert!(tls.spec.verify);
    // The same files load equal (the health checker keeps its probe task on a no-op reload).
    let again = load_str(&text, "t.toml").expect("valid");
    assert_eq!(again.clusters[0].tls, c.tls);
}

#[test]
fn redis_ca_must_be_readable_pem() {
    let dir = certs("redis");
    let text = format!(
        "[affinity]\nstore = \"redis\"\nredis_url = \"rediss://127.0.0.1:6380/0\"\nredis_ca = \"{}\"\n",
        dir.join("garbage.pem").display()
    );
    let e = issues(&text);
    assert_eq!(
        (e[0].key.as_str(), e[0].line),
        ("affinity.redis_ca", 4),
        "{e:?}"
    );
    let ok = text.replace("garbage.pem", "ca.pem");
    let cfg = load_str(&ok, "t.toml").expect("valid");
    assert!(cfg.affinity.redis_ca.is_some());
}
