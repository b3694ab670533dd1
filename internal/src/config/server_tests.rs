//! `[server] shutdown_spread` (SPEC section 5): its default, a value, and the values refused with
//! key, line and column.

use std::time::Duration;

use super::text::{catch_all_route_text, cluster_text};
use super::{load_str, ConfigError};

/// A valid config whose `[server]` table holds `server_lines`.
fn with_server(server_lines: &str) -> String {
    [
        format!("[server]\n{server_lines}\n"),
        cluster_text("c", "", &[("a", "127.0.0.1:1")]),
        catch_all_route_text("r", "c"),
    ]
    .join("\n")
}

/// The one issue of a refused config: (key, line, column, message).
fn one_issue(err: &ConfigError) -> (&str, usize, usize, &str) {
    assert_eq!(err.issues.len(), 1, "{err}");
    let e = &err.issues[0];
    (e.key.as_str(), e.line, e.column, e.message.as_str())
}

#[test]
fn shutdown_spread_is_off_by_default_and_at_0s() {
    for lines in ["", "shutdown_spread = \"0s\""] {
        let c = load_str(&with_server(lines), "g.toml").expect("valid");
        assert_eq!(c.server.shutdown_spread, None, "{lines:?}");
        assert_eq!(c.server.shutdown_timeout, Duration::from_secs(30));
    }
}

#[test]
fn shutdown_spread_takes_a_duration_beside_shutdown_timeout() {
    let lines = "shutdown_timeout = \"5s\"\nshutdown_spread = \"1m 30s\"";
    let c = load_str(&with_server(lines), "g.toml").expect("valid");
    assert_eq!(c.server.shutdown_spread, Some(Duration::from_secs(90)));
    // Longer than shutdown_timeout is fine: the spread comes before that wait.
    assert_eq!(c.server.shutdown_timeout, Duration::from_secs(5));
    let c = load_str(&with_server("shutdown_spread = \"24h\""), "g.toml").expect("valid");
    assert_eq!(c.server.shutdown_spread, Some(Duration::from_secs(86_400)));
}

#[test]
fn shutdown_spread_that_is_no_duration_is_refused_at_its_line() {
    let text = with_server("zone = \"z\"\nshutdown_spread = \"3 parsecs\"");
    let err = load_str(&text, "g.toml").expect_err("refused");
    let (key, line, column, message) = one_issue(&err);
    assert_eq!((key, line, column), ("server.shutdown_spread", 3, 1));
    assert!(
        message.starts_with("invalid duration \"3 parsecs\""),
        "{message}"
    );
}

#[test]
fn shutdown_spread_over_a_day_is_refused_at_its_line() {
    let err =
        load_str(&with_server("shutdown_spread = \"30days\""), "g.toml").expect_err("refused");
    let (key, line, column, message) = one_issue(&err);
    assert_eq!((key, line, column), ("server.shutdown_spread", 2, 1));
    assert_eq!(
        message,
        "must be at most 1day (got 30days): the gateway would stay up that long after SIGTERM"
    );
    assert!(
        err.to_string()
            .starts_with("g.toml:2:1: server.shutdown_spread: must be at most 1day"),
        "{err}"
    );
}
