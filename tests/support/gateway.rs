//! A running `hopping-gateway` process: its ports, config file, admin API, metrics and signals.

use std::path::PathBuf;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::{bin, free_port, get, request, wait_until, Logs, Resp};
use crate::{Config, Health, Mock, Route};

/// A running `hopping-gateway`.
pub struct Gateway {
    pub port: u16,
    pub admin_port: u16,
    pub config_path: PathBuf,
    child: Option<Child>,
    pub logs: Logs,
    _dir: tempfile::TempDir,
    extra: Vec<String>,
    env: Vec<(String, String)>,
}

impl Gateway {
    /// Writes `toml` to a temp file and starts the gateway on free ports; waits for `/readyz`.
    pub async fn start(toml: &str) -> Gateway {
        Gateway::start_with(toml, &[]).await
    }

    /// As [`Gateway::start`] with extra CLI flags.
    pub async fn start_with(toml: &str, extra: &[&str]) -> Gateway {
        Gateway::start_with_env(toml, extra, &[]).await
    }

    /// As [`Gateway::start_with`], with extra environment variables for the process
    /// (e.g. `HOPGW_SECRET` for signed ids); they apply again on [`Gateway::restart`].
    pub async fn start_with_env(toml: &str, extra: &[&str], env: &[(&str, &str)]) -> Gateway {
        let dir = tempfile::tempdir().expect("tempdir");
        let config_path = dir.path().join("gateway.toml");
        std::fs::write(&config_path, toml).expect("write config");
        let mut g = Gateway {
            port: free_port(),
            admin_port: free_port(),
            config_path,
            child: None,
            logs: Logs::default(),
            _dir: dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        g.spawn().await;
        g
    }

    async fn spawn(&mut self) {
        let mut cmd = Command::new(bin("hopping-gateway"));
        cmd.arg("--config")
            .arg(&self.config_path)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--admin-listen")
            .arg(format!("127.0.0.1:{}", self.admin_port))
            .args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env(
                "RUST_LOG",
                std::env::var("HOPGW_TEST_LOG").unwrap_or_else(|_| "info".into()),
            );
        self.child = Some(self.logs.spawn(&mut cmd, "spawn hopping-gateway"));
        let url = self.admin("/readyz");
        let logs = self.logs.clone();
        wait_until(Duration::from_secs(15), "gateway /readyz", || {
            let url = url.clone();
            let logs = logs.clone();
            async move {
                match get(&url, &[]).await {
                    Ok(r) => r.status == 200,
                    Err(_) => {
                        let l = logs.lines();
                        assert!(
                            !l.iter().any(|x| x.contains("hopping-gateway: ")),
                            "gateway failed to start: {l:?}"
                        );
                        false
                    }
                }
            }
        })
        .await;
    }

    /// Starts mocks `node-a` and `node-b` and a gateway on [`Config::single`] over both with
    /// `health` and `route`: (the two mocks, the gateway). Panics as [`Gateway::start`] does.
    pub async fn over_node_a_and_b(health: Health, route: Route) -> ([Mock; 2], Gateway) {
        let mocks = [Mock::start("node-a").await, Mock::start("node-b").await];
        let toml = Config::single(health, &[&mocks[0], &mocks[1]], route).toml();
        (mocks, Gateway::start(&toml).await)
    }

    /// Data-plane URL for `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Admin URL for `path`.
    pub fn admin(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin_port)
    }

    /// `GET` an admin path as JSON.
    pub async fn admin_json(&self, path: &str) -> serde_json::Value {
        get(&self.admin(path), &[])
            .await
            .expect("admin call")
            .json()
    }

    /// `POST` an admin path (e.g. `/admin/nodes/a/drain?period=2s`, SPEC section 11) with an
    /// empty body; returns the answer whatever its status. Panics when the call fails.
    pub async fn admin_post(&self, path: &str) -> Resp {
        request("POST", &self.admin(path), &[], Vec::new())
            .await
            .expect("admin call")
    }

    /// The admin view of node `id`.
    pub async fn node(&self, id: &str) -> serde_json::Value {
        node_in(&self.admin_json("/admin/nodes").await, id)
    }

    /// Waits until node `id` is in `state`.
    pub async fn wait_node_state(&self, id: &str, state: &str, timeout: Duration) {
        wait_until(
            timeout,
            &format!("node {id} to be {state}"),
            || async move { self.node(id).await["state"] == state },
        )
        .await;
    }

    /// The admin `/metrics` text of this gateway (SPEC section 8). Panics if the request fails.
    pub async fn metrics_text(&self) -> String {
        get(&self.admin("/metrics"), &[])
            .await
            .expect("metrics")
            .text()
    }

    /// The value of the metric line starting with `series` (e.g. `hopping_count_total{reason="ejected"}`); 0 if absent.
    pub async fn metric(&self, series: &str) -> f64 {
        let text = self.metrics_text().await;
        metric_value(&text, series)
    }

    /// The metric lines whose series starts with `prefix` (e.g. `hopping_count_total{`), and the sum
    /// of their values (0 when there is none).
    pub async fn metric_series(&self, prefix: &str) -> (f64, Vec<String>) {
        let text = self.metrics_text().await;
        let series: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_string)
            .collect();
        let sum = series
            .iter()
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .sum();
        (sum, series)
    }

    /// Rewrites the config file (a reload trigger via file watch).
    pub fn write_config(&self, toml: &str) {
        // Write-then-rename so a watcher never sees a half file.
        let tmp = self.config_path.with_extension("tmp");
        std::fs::write(&tmp, toml).expect("write config");
        std::fs::rename(&tmp, &self.config_path).expect("rename config");
    }

    /// PID of the process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// Sends `signal` (e.g. `"HUP"`, `"TERM"`) to the gateway.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().expect("running");
        let ok = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill -{signal} {pid}");
    }

    /// Waits for the process to exit; returns its exit code.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let c = self.child.as_mut()?;
        tokio::time::timeout(timeout, c.wait())
            .await
            .ok()?
            .ok()?
            .code()
    }

    /// SIGKILL then start again on the same ports with the same config.
    pub async fn restart(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
        self.spawn().await;
    }

    /// Resident set size in KiB ([`crate::load::rss_kib_of`], from /proc); panics when the
    /// gateway is not running or /proc is unreadable.
    pub fn rss_kib(&self) -> u64 {
        crate::load::rss_kib_of(self.pid().expect("running"))
    }
}

/// Parses one series value out of Prometheus text; 0 if absent.
pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            l.strip_prefix(series)
                .filter(|rest| rest.starts_with(' '))
                .and_then(|rest| rest.trim().split(' ').next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0.0)
}

/// Scenario set-ups: mocks plus a gateway routing everything to them.
impl Gateway {
    /// Starts mock `node-a` and a gateway with it as cluster `c` behind [`crate::Route::api`],
    /// probed per `health` (SPEC section 3); returns (node-a, gateway) once `/readyz` answers.
    pub async fn one_node(health: crate::Health) -> (crate::Mock, Gateway) {
        let a = crate::Mock::start("node-a").await;
        let toml = crate::Config::single(health, &[&a], crate::Route::api()).toml();
        (a, Gateway::start(&toml).await)
    }

    /// Starts mock `node-a` and a gateway with it as cluster `c` behind a route `api` for
    /// everything, the TOML `head` (health, limits...) before them; returns (node-a, gateway).
    pub async fn one_node_after(head: &str) -> (crate::Mock, Gateway) {
        let a = crate::Mock::start("node-a").await;
        let toml = format!(
            "{head}\n{}\n[[routes]]\nid = \"api\"\ncluster = \"c\"\n",
            crate::cluster_toml("c", &[("node-a", a.addr())], "")
        );
        (a, Gateway::start(&toml).await)
    }

    /// Starts mocks `node-a` and `node-b` and a gateway with both as cluster `c` behind
    /// [`crate::Route::api`], probed per `health` (SPEC section 3); returns (node-a, node-b,
    /// gateway) once `/readyz` answers ([`Gateway::over_node_a_and_b`] with that route).
    pub async fn two_nodes(health: crate::Health) -> (crate::Mock, crate::Mock, Gateway) {
        let ([a, b], gw) = Gateway::over_node_a_and_b(health, crate::Route::api()).await;
        (a, b, gw)
    }
}

/// Node `id` in `nodes`, the array `GET /admin/nodes` answers; panics when it is not there.
pub fn node_in(nodes: &serde_json::Value, id: &str) -> serde_json::Value {
    nodes
        .as_array()
        .expect("array")
        .iter()
        .find(|n| n["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("node {id} not in {nodes}"))
}
