//! Deployment (SPEC section 11): systemd `Type=notify` datagrams, the unit, the
//! kustomize base, the Dockerfile, `--version` and `gateway_build_info`.

use std::os::unix::net::UnixDatagram;
use std::process::{Command as StdCommand, Stdio};
use std::time::Duration;

use integration_tests::http::{get, request};
use integration_tests::{bin, free_port, metric_value, root, Logs, Mock};

/// Receives the next datagram on `sock` within `timeout` (blocking read on a helper thread).
async fn recv(sock: &std::sync::Arc<UnixDatagram>, timeout: Duration) -> Option<String> {
    let s = sock.clone();
    tokio::task::spawn_blocking(move || {
        s.set_read_timeout(Some(timeout)).expect("timeout");
        let mut buf = [0u8; 4096];
        s.recv(&mut buf)
            .ok()
            .map(|n| String::from_utf8_lossy(&buf[..n]).trim().to_string())
    })
    .await
    .expect("join")
}

/// SPEC 11 systemd: with `NOTIFY_SOCKET` set, READY=1 comes only once the data and admin
/// listeners accept; every reload (SIGHUP of an unchanged file, `POST /admin/reload`) sends
/// RELOADING=1 then READY=1 as separate datagrams; SIGTERM sends STOPPING=1.
/// Long on purpose: the datagrams of one process life, start to stop, in order.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn systemd_notify_ready_reloading_stopping() {
    let a = Mock::start("node-a").await;
    let dir = tempfile::tempdir().expect("dir");
    let sock_path = dir.path().join("notify.sock");
    let sock = std::sync::Arc::new(UnixDatagram::bind(&sock_path).expect("bind notify socket"));
    let (port, admin) = (free_port(), free_port());
    let cfg = dir.path().join("gateway.toml");
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n[[clusters]]\nname = \"c\"\n  [[clusters.nodes]]\n  id = \"node-a\"\n  addr = \"{}\"\n[[routes]]\nid = \"r\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\n",
        a.addr()
    );
    std::fs::write(&cfg, toml).expect("write");
    let logs = Logs::default();
    let mut child = tokio::process::Command::new(bin("hopping-gateway"))
        .arg("--config")
        .arg(&cfg)
        .env("NOTIFY_SOCKET", &sock_path)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    logs.capture(&mut child);
    let ready = recv(&sock, Duration::from_secs(15)).await;
    assert_eq!(ready.as_deref(), Some("READY=1"), "{:?}", logs.lines());
    // Right at READY=1 both listeners accept (no retry).
    for p in [port, admin] {
        std::net::TcpStream::connect(("127.0.0.1", p))
            .unwrap_or_else(|e| panic!("port {p} accepts at READY=1: {e}"));
    }
    let r = get(&format!("http://127.0.0.1:{port}/data"), &[])
        .await
        .expect("data");
    assert_eq!(r.status, 200);

    let pid = child.id().expect("pid").to_string();
    let kill = |sig: &str| {
        assert!(StdCommand::new("kill")
            .arg(format!("-{sig}"))
            .arg(&pid)
            .status()
            .expect("kill")
            .success())
    };
    for round in 0..2 {
        // SIGHUP of the same file (applied the first time, unchanged the second).
        kill("HUP");
        assert_eq!(
            recv(&sock, Duration::from_secs(10)).await.as_deref(),
            Some("RELOADING=1"),
            "SIGHUP round {round}"
        );
        assert_eq!(
            recv(&sock, Duration::from_secs(10)).await.as_deref(),
            Some("READY=1"),
            "SIGHUP round {round}"
        );
    }
    let r = request(
        "POST",
        &format!("http://127.0.0.1:{admin}/admin/reload"),
        &[],
        Vec::new(),
    )
    .await
    .expect("reload");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        recv(&sock, Duration::from_secs(10)).await.as_deref(),
        Some("RELOADING=1")
    );
    assert_eq!(
        recv(&sock, Duration::from_secs(10)).await.as_deref(),
        Some("READY=1")
    );

    kill("TERM");
    assert_eq!(
        recv(&sock, Duration::from_secs(10)).await.as_deref(),
        Some("STOPPING=1")
    );
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("exit")
        .expect("wait");
    assert!(status.success(), "{status:?}");
}

/// `systemd-analyze verify` accepts the unit (its binary path pointed at the built one).
#[test]
fn systemd_unit_verifies() {
    let unit = std::fs::read_to_string(root().join("deploy/systemd/hopping-gateway.service"))
        .expect("unit");
    assert!(unit.contains("Type=notify") && unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    let dir = tempfile::tempdir().expect("dir");
    // verify checks that ExecStart's binary exists: point it at the one cargo built.
    let local = unit.replace(
        "/usr/local/bin/hopping-gateway",
        &bin("hopping-gateway").display().to_string(),
    );
    let path = dir.path().join("hopping-gateway.service");
    std::fs::write(&path, local).expect("write unit");
    let out = StdCommand::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian package systemd) runs");
    let text = integration_tests::check::output_text(&out);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed: {text}"
    );
    let ours: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("hopping-gateway.service"))
        .collect();
    assert!(ours.is_empty(), "warnings about the unit: {ours:?}");
}

fn kustomize(dir: &std::path::Path) -> String {
    let out = StdCommand::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl (Debian package kubernetes-client) runs");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// `kubectl kustomize deploy/kubernetes` renders a Deployment probing `/readyz` and
/// `/healthz` on the health port (with the `shutdown_spread` recipe: a preStop sleep and a grace
/// period longer than it, the spread and `shutdown_timeout`), a Service, a headless Service and the
/// ConfigMap; the optional Redis component renders too.
#[test]
fn kustomize_base_renders() {
    let base = root().join("deploy/kubernetes");
    let y = kustomize(&base);
    for want in [
        "kind: Deployment",
        "kind: Service",
        "kind: ConfigMap",
        "clusterIP: None",
        "path: /readyz",
        "path: /healthz",
        "port: health",
        "health_listen = \"0.0.0.0:9902\"",
        "runAsNonRoot: true",
        // The shutdown_spread recipe: preStop 5 s + spread 20 s + shutdown_timeout 25 s < 60 s.
        "seconds: 5",
        "shutdown_spread = \"20s\"",
        "shutdown_timeout = \"25s\"",
        "terminationGracePeriodSeconds: 60",
    ] {
        assert!(y.contains(want), "{want} in the rendered base:\n{y}");
    }
    assert!(!y.contains("redis"), "Redis is optional");
    let dir = tempfile::tempdir().expect("dir");
    let copy = dir.path().join("kubernetes");
    assert!(StdCommand::new("cp")
        .arg("-r")
        .arg(&base)
        .arg(&copy)
        .status()
        .expect("cp")
        .success());
    let k = copy.join("kustomization.yaml");
    let text = std::fs::read_to_string(&k).expect("kustomization");
    std::fs::write(
        &k,
        text.replace("#components:", "components:")
            .replace("#  - components/redis", "  - components/redis"),
    )
    .expect("write");
    let y = kustomize(&copy);
    assert!(
        y.contains("image: redis:7-alpine") && y.contains("store = \"redis\""),
        "{y}"
    );
}

/// Hadolint passes on the Dockerfile when it is installed (it is not a Debian package:
/// skipped with a note otherwise); the Dockerfile is multi-stage and runs as non-root.
#[test]
fn dockerfile_lints() {
    let path = root().join("deploy/docker/Dockerfile");
    let text = std::fs::read_to_string(&path).expect("Dockerfile");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("FROM ")).count(),
        2,
        "multi-stage"
    );
    assert!(text.contains("USER nonroot") && text.contains("HOPGW_ADMIN_LISTEN"));
    match StdCommand::new("hadolint").arg(&path).output() {
        Ok(out) => assert!(
            out.status.success(),
            "hadolint: {}",
            String::from_utf8_lossy(&out.stdout)
        ),
        Err(_) => eprintln!("note: hadolint not on PATH; Dockerfile lint skipped"),
    }
}

/// SPEC 11: `--version` prints the version and `gateway_build_info{version}` is 1.
#[tokio::test]
async fn version_flag_and_build_info() {
    let out = StdCommand::new(bin("hopping-gateway"))
        .arg("--version")
        .output()
        .expect("run");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("hopping-gateway {version}")
    );
    let a = Mock::start("node-a").await;
    let gw = integration_tests::Gateway::start(&format!(
        "[[clusters]]\nname = \"c\"\n  [[clusters.nodes]]\n  id = \"node-a\"\n  addr = \"{}\"\n[[routes]]\nid = \"r\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\n", a.addr()
    )).await;
    let text = get(&gw.admin("/metrics"), &[])
        .await
        .expect("metrics")
        .text();
    assert_eq!(
        metric_value(
            &text,
            &format!("gateway_build_info{{version=\"{version}\"}}")
        ),
        1.0,
        "{text}"
    );
}
