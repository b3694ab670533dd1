//! A small W3C WebDriver client driving Debian's headless `chromium` through `chromedriver`
//! (started here on a free port, in its own process group so that chromium goes with it), for
//! tests of the status page in a real browser.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use base64::Engine;
use serde_json::{json, Value};
use tokio::process::{Child, Command};

use crate::http::request;
use crate::{free_port, wait_until};

/// The W3C element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// One browser session.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    _profile: tempfile::TempDir,
}

fn find_binary(names: &[&str]) -> Option<String> {
    let path = std::env::var("PATH").unwrap_or_default();
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.exists())
            .map(|p| p.display().to_string())
    })
}

impl Browser {
    /// Starts chromedriver and a headless chromium session with a fresh profile, window 1400x1000.
    ///
    /// # Panics
    /// If `chromium` or `chromedriver` is not installed (`scripts/test-deps.sh` installs them).
    pub async fn start() -> Browser {
        let chromium = find_binary(&["chromium", "chromium-browser"])
            .expect("chromium not on PATH (Debian package chromium; see scripts/test-deps.sh)");
        let chromedriver = find_binary(&["chromedriver"])
            .expect("chromedriver not on PATH (Debian package chromium-driver)");
        let port = free_port();
        let mut cmd = Command::new(chromedriver);
        cmd.arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        let driver = cmd.spawn().expect("spawn chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let status = format!("{base}/status");
        wait_until(Duration::from_secs(20), "chromedriver to answer", || {
            let status = status.clone();
            async move { crate::http::get(&status, &[]).await.is_ok() }
        })
        .await;
        let profile = tempfile::tempdir().expect("profile dir");
        let args = vec![
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1400,1000".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let mut b = Browser {
            driver,
            base,
            session: String::new(),
            _profile: profile,
        };
        let v = b
            .call("POST", "/session", caps)
            .await
            .expect("new WebDriver session");
        b.session = v["sessionId"]
            .as_str()
            .expect("sessionId in the new-session answer")
            .to_string();
        b
    }

    async fn call(&self, method: &str, path: &str, body: Value) -> anyhow::Result<Value> {
        let body = if method == "GET" || method == "DELETE" {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let r = request(
            method,
            &format!("{}{path}", self.base),
            &[("content-type", "application/json")],
            body,
        )
        .await?;
        let v: Value = serde_json::from_slice(&r.body).with_context(|| r.text())?;
        if r.status != 200 {
            bail!("WebDriver {method} {path}: {} {}", r.status, v["value"]);
        }
        Ok(v["value"].clone())
    }

    fn s(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Navigates to `url` and waits for the document to load.
    pub async fn goto(&self, url: &str) {
        self.call("POST", &self.s("/url"), json!({ "url": url }))
            .await
            .expect("navigate");
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page; returns its value.
    pub async fn exec(&self, script: &str, args: Value) -> anyhow::Result<Value> {
        self.call(
            "POST",
            &self.s("/execute/sync"),
            json!({"script": script, "args": args}),
        )
        .await
    }

    /// Polls `script` every 50 ms until it returns a truthy value, which it returns; panics
    /// with `what` after `timeout`.
    pub async fn wait_js(&self, script: &str, timeout: Duration, what: &str) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.exec(script, json!([])).await {
                Ok(v) if truthy(&v) => return v,
                Ok(v) => v,
                Err(e) => json!(e.to_string()),
            };
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting in the page for: {what} (last value {last})"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn element(&self, css: &str) -> anyhow::Result<String> {
        let v = self
            .call(
                "POST",
                &self.s("/element"),
                json!({"using": "css selector", "value": css}),
            )
            .await?;
        v[ELEMENT]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("no element reference for {css}: {v}"))
    }

    /// Clicks the element matching `css`.
    pub async fn click(&self, css: &str) -> anyhow::Result<()> {
        let id = self.element(css).await?;
        self.call("POST", &self.s(&format!("/element/{id}/click")), json!({}))
            .await
            .map(|_| ())
    }

    /// Types `text` into the element matching `css`.
    pub async fn type_into(&self, css: &str, text: &str) -> anyhow::Result<()> {
        let id = self.element(css).await?;
        self.call("POST", &self.s(&format!("/element/{id}/clear")), json!({}))
            .await?;
        self.call(
            "POST",
            &self.s(&format!("/element/{id}/value")),
            json!({ "text": text }),
        )
        .await
        .map(|_| ())
    }

    /// Saves a PNG screenshot of the viewport to `path` (parent directories created).
    pub async fn screenshot(&self, path: &Path) -> anyhow::Result<()> {
        let v = self
            .call("GET", &self.s("/screenshot"), Value::Null)
            .await?;
        let png = base64::engine::general_purpose::STANDARD.decode(
            v.as_str()
                .ok_or_else(|| anyhow!("screenshot is not a string"))?,
        )?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png)?;
        Ok(())
    }

    /// Ends the session (chromium exits) and stops chromedriver.
    pub async fn close(mut self) {
        let _ = self.call("DELETE", &self.s(""), Value::Null).await;
        let _ = self.driver.kill().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // After a failed test: chromedriver and the chromium it started share its process group.
        if let Some(pid) = self.driver.id() {
            let _ = std::process::Command::new("kill")
                .arg("-KILL")
                .arg(format!("-{pid}"))
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(_) => true,
    }
}
