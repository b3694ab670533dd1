//! A running `mock-backend` process and its `/control/*` knobs.

use std::time::Duration;

use tokio::process::{Child, Command};

use crate::{bin, free_port, get, request, wait_port, Logs, Resp};

/// A running `mock-backend`.
pub struct Mock {
    pub id: String,
    pub port: u16,
    pub grpc_port: Option<u16>,
    args: Vec<String>,
    child: Option<Child>,
    pub logs: Logs,
}

impl Mock {
    /// Starts `mock-backend <port> <id> [extra...]` on a free port and waits until it accepts.
    pub async fn start(id: &str) -> Mock {
        Mock::start_with(id, &[]).await
    }

    /// As [`Mock::start`] with extra flags (`--version v2`, `--zone z`); `--grpc-port` is added
    /// when `grpc` is in `extra` as the literal `"--grpc"`.
    pub async fn start_with(id: &str, extra: &[&str]) -> Mock {
        let port = free_port();
        let mut args: Vec<String> = Vec::new();
        let mut grpc_port = None;
        for e in extra {
            if *e == "--grpc" {
                let p = free_port();
                grpc_port = Some(p);
                args.push("--grpc-port".into());
                args.push(p.to_string());
            } else {
                args.push(e.to_string());
            }
        }
        let mut m = Mock {
            id: id.to_string(),
            port,
            grpc_port,
            args,
            child: None,
            logs: Logs::default(),
        };
        m.spawn().await;
        m
    }

    async fn spawn(&mut self) {
        let mut cmd = Command::new(bin("mock-backend"));
        cmd.arg(self.port.to_string())
            .arg(&self.id)
            .args(&self.args);
        self.child = Some(self.logs.spawn(&mut cmd, "spawn mock-backend"));
        wait_port(self.port, Duration::from_secs(10)).await;
        if let Some(p) = self.grpc_port {
            wait_port(p, Duration::from_secs(10)).await;
        }
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `host:port` of the node's gRPC port (SPEC section 9); panics unless it was started with
    /// `--grpc`.
    pub fn grpc_addr(&self) -> String {
        format!("127.0.0.1:{}", self.grpc_port.expect("started with --grpc"))
    }

    /// Base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, and wait for the process to be gone.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// Starts again on the same port.
    pub async fn restart(&mut self) {
        self.kill().await;
        self.spawn().await;
    }

    /// POSTs a `/control/...` knob (path with query) and asserts its 200.
    pub async fn control(&self, path: &str) -> Resp {
        let r = request("POST", &format!("{}{path}", self.url()), &[], Vec::new())
            .await
            .expect("control call");
        assert_eq!(r.status, 200, "control {path}: {}", r.text());
        r
    }

    /// Business health down (process stays alive).
    pub async fn set_down(&self) {
        self.control("/control/health?state=down").await;
    }

    /// Business health up.
    pub async fn set_up(&self) {
        self.control("/control/health?state=up").await;
    }

    /// Flapping health: `down` health answers down, then `up` answers up, repeating, counted per
    /// health request (so per probe); `set_up`/`set_down` end it.
    pub async fn flap(&self, down: u64, up: u64) {
        self.control(&format!("/control/health?state=flap&down={down}&up={up}"))
            .await;
    }

    /// Adds `ms` latency to every response.
    pub async fn delay(&self, ms: u64) {
        self.control(&format!("/control/delay?ms={ms}")).await;
    }

    /// Stops answering while keeping sockets open.
    pub async fn hang(&self) {
        self.control("/control/hang").await;
    }

    /// Requests received (excluding /control/*).
    pub async fn requests(&self) -> u64 {
        self.stats().await["requests"]
            .as_u64()
            .expect("requests count")
    }

    /// The node's `GET /control/stats` JSON.
    pub async fn stats(&self) -> serde_json::Value {
        get(&format!("{}/control/stats", self.url()), &[])
            .await
            .expect("stats")
            .json()
    }

    /// Zeroes the request counter.
    pub async fn reset_stats(&self) {
        self.control("/control/reset-stats").await;
    }
}
