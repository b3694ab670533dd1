//! A gateway started from a copy of its binary in a temp dir, so that a test can replace the file
//! (with a new copy, or with a script standing in for a broken binary) and upgrade the running
//! gateway (SPEC section 13). The process serving changes with each upgrade: [`Upgradable::pid`]
//! follows it, and the last one (not a child of the test) is killed on drop.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::{bin, free_port, get, metric_value, request, wait_until, Logs, Resp};

/// A gateway that can be upgraded by replacing its binary file.
pub struct Upgradable {
    pub port: u16,
    pub admin_port: u16,
    /// The binary file the gateway was started from (replaced by the `install_*` calls).
    pub exe: PathBuf,
    pub dir: tempfile::TempDir,
    pub logs: Logs,
    first: Child,
    first_pid: u32,
    pid: u32,
    /// The arguments the gateway was started with.
    args: Vec<String>,
    /// Processes the test started as a supervisor would ([`Upgradable::upgrade_from`]).
    started: Vec<Child>,
}

/// True once `pid` has exited (no such process, or a zombie waiting to be reaped).
pub fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

impl Upgradable {
    /// Copies the gateway binary into a temp dir, writes `toml` there and starts the copy on free
    /// ports with `env`; waits for `/readyz`.
    pub async fn start(toml: &str, env: &[(&str, &str)]) -> Upgradable {
        let dir = tempfile::tempdir().expect("tempdir");
        let exe = dir.path().join("hopping-gateway");
        std::fs::copy(bin("hopping-gateway"), &exe).expect("copy the gateway binary");
        let config = dir.path().join("gateway.toml");
        std::fs::write(&config, toml).expect("write config");
        let (port, admin_port) = (free_port(), free_port());
        let logs = Logs::default();
        let args = vec![
            "--config".to_string(),
            config.display().to_string(),
            "--listen".to_string(),
            format!("127.0.0.1:{port}"),
            "--admin-listen".to_string(),
            format!("127.0.0.1:{admin_port}"),
        ];
        let mut cmd = Command::new(&exe);
        cmd.args(&args).envs(env.iter().copied()).env(
            "RUST_LOG",
            std::env::var("HOPGW_TEST_LOG").unwrap_or_else(|_| "info".into()),
        );
        let first = logs.spawn(&mut cmd, "spawn hopping-gateway");
        let pid = first.id().expect("running");
        let g = Upgradable {
            port,
            admin_port,
            exe,
            dir,
            logs,
            first,
            first_pid: pid,
            pid,
            args,
            started: Vec::new(),
        };
        let url = g.admin("/readyz");
        wait_until(Duration::from_secs(15), "gateway /readyz", || {
            let url = url.clone();
            async move { get(&url, &[]).await.is_ok_and(|r| r.status == 200) }
        })
        .await;
        g
    }

    /// Data-plane URL for `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Admin URL for `path`.
    pub fn admin(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin_port)
    }

    /// The pid of the process serving now (as far as the test knows).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Replaces the binary file with a fresh copy of the gateway, as a package manager does
    /// (written beside it, then renamed over it).
    pub fn install_gateway(&self) {
        let next = self.dir.path().join(".next");
        std::fs::copy(bin("hopping-gateway"), &next).expect("copy the gateway binary");
        std::fs::rename(&next, &self.exe).expect("rename over the binary");
    }

    /// Replaces the binary file with a shell script of `body` (after `#!/bin/sh`).
    pub fn install_script(&self, body: &str) {
        let next = self.dir.path().join(".next");
        std::fs::write(&next, format!("#!/bin/sh\n{body}\n")).expect("write script");
        std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::rename(&next, &self.exe).expect("rename over the binary");
    }

    /// Sends `SIGUSR2` to the serving process.
    pub fn usr2(&self) {
        self.signal("USR2");
    }

    /// Sends `sig` (`"USR2"`, `"TERM"`) to the serving process.
    pub fn signal(&self, sig: &str) {
        let ok = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &self.pid.to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill -{sig} {}", self.pid);
    }

    /// `POST` an admin path; panics when the call fails.
    pub async fn admin_post(&self, path: &str) -> Resp {
        request("POST", &self.admin(path), &[], Vec::new())
            .await
            .expect("admin call")
    }

    /// The pid `GET /admin/upgrade` names, if the admin listener answers.
    pub async fn serving_pid(&self) -> Option<u32> {
        let r = get(&self.admin("/admin/upgrade"), &[]).await.ok()?;
        r.json()["pid"].as_u64().map(|p| p as u32)
    }

    /// The value of metric `series` in the `/metrics` of whichever process answers (0 if absent).
    pub async fn metric(&self, series: &str) -> f64 {
        let text = get(&self.admin("/metrics"), &[])
            .await
            .expect("metrics")
            .text();
        metric_value(&text, series)
    }

    /// Waits (up to `timeout`) until another process answers the admin API and the old one has
    /// exited; returns the new pid. The first process must exit with status 0.
    pub async fn wait_upgraded(&mut self, timeout: Duration) -> u32 {
        let old = self.pid;
        let deadline = tokio::time::Instant::now() + timeout;
        let new = loop {
            if let Some(p) = self.serving_pid().await.filter(|p| *p != old) {
                break p;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {timeout:?} waiting for a new process to answer the admin API"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        wait_until(
            timeout,
            &format!("the old process {old} to exit"),
            || async move { gone(old) },
        )
        .await;
        if old == self.first_pid {
            let status = self.first.wait().await.expect("wait");
            assert_eq!(status.code(), Some(0), "the old process exits with 0");
        }
        self.pid = new;
        new
    }

    /// Starts the binary file as a supervisor would, with the gateway's arguments and
    /// `--upgrade-from socket`, and waits for it to take over (within 30 s); returns its pid.
    pub async fn upgrade_from(&mut self, socket: &std::path::Path) -> u32 {
        let mut cmd = Command::new(&self.exe);
        cmd.args(&self.args).arg("--upgrade-from").arg(socket).env(
            "RUST_LOG",
            std::env::var("HOPGW_TEST_LOG").unwrap_or_else(|_| "info".into()),
        );
        let mut child = self
            .logs
            .spawn(&mut cmd, "spawn hopping-gateway --upgrade-from");
        let pid = child.id().expect("running");
        let new = self.wait_upgraded(Duration::from_secs(30)).await;
        assert_eq!(new, pid, "the process started with --upgrade-from serves");
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "still running"
        );
        self.started.push(child);
        new
    }

    /// Installs a fresh gateway binary, sends `SIGUSR2` and waits for the upgrade (within 30 s).
    pub async fn upgrade(&mut self) -> u32 {
        self.install_gateway();
        self.usr2();
        self.wait_upgraded(Duration::from_secs(30)).await
    }
}

impl Drop for Upgradable {
    fn drop(&mut self) {
        // The first process is killed on drop by its handle; a later one is not the test's child.
        if self.pid != self.first_pid {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .status();
        }
    }
}
