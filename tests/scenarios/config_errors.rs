//! Config errors (SPEC section 3): `--check-config` and `POST /admin/reload` report every error
//! of a file at once, each with file, line, column and key, sorted by line; a bad reload keeps the
//! live table. The files here are written by hand: their line numbers are what is checked.

use integration_tests::{get, Config, Gateway, Health, Mock, Route};

/// Runs `hopping-gateway --check-config` on `toml` written to a temp file `name`; returns (exit
/// code, stdout, stderr, the file's path).
fn check_config(name: &str, toml: &str) -> (i32, String, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    std::fs::write(&path, toml).expect("write");
    let out = std::process::Command::new(integration_tests::bin("hopping-gateway"))
        .arg("--check-config")
        .arg(&path)
        .output()
        .expect("run");
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        path.display().to_string(),
    )
}

/// Asserts `--check-config` on `toml` (written as `name`) exits 2 with exactly one error line,
/// which starts with `{path}:{want}`.
fn assert_one_error(name: &str, toml: &str, want: &str) {
    let (code, _, err, path) = check_config(name, toml);
    assert_eq!(code, 2);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].starts_with(&format!("{path}:{want}")), "{err}");
}

/// `--check-config` exits 0 on a valid file and 2 otherwise, one `file:line:column: key: message`
/// line per error, in file order.
#[test]
fn check_config_reports_file_line_column_key() {
    let valid = "[[clusters]]\nname = \"c\"\n  [[clusters.nodes]]\n  id = \"a\"\n  addr = \"127.0.0.1:1\"\n\n[[routes]]\nid = \"r\"\ncluster = \"c\"\n";
    let (code, _, err, _) = check_config("ok.toml", valid);
    assert_eq!(code, 0, "valid file: {err}");
    assert_eq!(err, "");

    let unknown = "[server]\nzone = \"hz\"\n  bogus_key = 1\n";
    assert_one_error(
        "unknown.toml",
        unknown,
        "3:3: server.bogus_key: unknown field `bogus_key`",
    );

    let duration = format!("{valid}timeout = \"3 parsecs\"\n");
    assert_one_error(
        "duration.toml",
        &duration,
        "10:1: routes[0].timeout: invalid duration \"3 parsecs\"",
    );

    // Every error is reported, one a line, in file order.
    let many = "[health]\ninterval = \"2x\"\n[[clusters]]\nname = \"c\"\nlb = \"fastest\"\n  \
                [[clusters.nodes]]\n  id = \"a\"\n  addr = \"127.0.0.1:1\"\n[[routes]]\nid = \"r\"\n\
                cluster = \"nope\"\n";
    let (code, _, err, path) = check_config("many.toml", many);
    assert_eq!(code, 2);
    let prefixes: Vec<String> = err
        .lines()
        .map(|l| l.splitn(3, ": ").take(2).collect::<Vec<_>>().join(": "))
        .collect();
    assert_eq!(
        prefixes,
        [
            format!("{path}:2:1: health.interval"),
            format!("{path}:5:1: clusters[0].lb"),
            format!("{path}:11:1: routes[0].cluster")
        ],
        "{err}"
    );
}

/// A file with a bad duration on line 8, a wrongly typed value on line 14 and an unknown key on
/// line 20 (and nothing else wrong).
fn three_errors_file() -> String {
    "[[clusters]]\nname = \"c\"\n  [[clusters.nodes]]\n  id = \"a\"\n  addr = \"127.0.0.1:1\"\n\n\
        [health]\ninterval = \"2 parsecs\"\n\n\n\n\n\neject_after = \"three\"\n\n\
        [[routes]]\nid = \"r\"\ncluster = \"c\"\n\nbogus_key = 1\n\n"
        .to_string()
}

/// The (line, column, key, message start) of each error [`three_errors_file`] must report, in
/// order.
const THREE_ERRORS: [(usize, usize, &str, &str); 3] = [
    (8, 1, "health.interval", "invalid duration \"2 parsecs\""),
    (
        14,
        1,
        "health.eject_after",
        "invalid type: string \"three\", expected u32",
    ),
    (
        20,
        1,
        "routes[0].bogus_key",
        "unknown field `bogus_key`, expected one of",
    ),
];

/// Config errors: `--check-config` reports the serde-level errors (unknown key,
/// wrong type) and the semantic ones (bad duration) of one file together, sorted by line, exit 2.
#[test]
fn check_config_reports_every_error_sorted_by_line() {
    let (code, _, err, file) = check_config("three.toml", &three_errors_file());
    assert_eq!(code, 2);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    for (got, (line, col, key, msg)) in lines.iter().zip(THREE_ERRORS) {
        let prefix = format!("{file}:{line}:{col}: {key}: {msg}");
        assert!(
            got.starts_with(&prefix),
            "{got:?} should start with {prefix:?}"
        );
    }
}

/// Config errors: `POST /admin/reload` of the same file answers 422 with all
/// three errors, sorted by line, and the live table stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_reload_reports_every_error_sorted_by_line() {
    let a = Mock::start("node-a").await;
    let good = Config::new()
        .health(Health::tcp_200ms())
        .cluster("c", &[&a])
        .route(Route::catch_all("r", "c"))
        .toml();
    let gw = Gateway::start(&good).await;
    let generation = gw.admin_json("/admin/routes").await["generation"].clone();
    gw.write_config(&three_errors_file());
    let r = gw.admin_post("/admin/reload").await;
    assert_eq!(r.status, 422, "{}", r.text());
    let errors = r.json()["errors"].as_array().expect("errors").clone();
    assert_eq!(errors.len(), 3, "{errors:?}");
    for (e, (line, col, key, msg)) in errors.iter().zip(THREE_ERRORS) {
        assert_eq!(e["line"], line, "{e}");
        assert_eq!(e["column"], col, "{e}");
        assert_eq!(e["key"], key, "{e}");
        assert!(
            e["message"].as_str().expect("message").starts_with(msg),
            "{e}"
        );
    }
    assert_eq!(
        gw.admin_json("/admin/routes").await["generation"],
        generation
    );
    let r = get(&gw.url("/data"), &[]).await.expect("still served");
    assert_eq!(r.status, 200);
}
