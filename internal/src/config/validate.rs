//! `FileConfig` -> `Config`: every rule of SPEC section 3, collecting all problems with their keys.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use super::file::{FileConfig, HealthFile};
use super::spans::SpanIndex;
use super::*;

mod clusters;
mod discovery;
mod limits;
mod routes;
mod server;
mod server_tls;

use clusters::clusters;
use limits::limits;
use routes::routes;
use server::affinity;
use server::server;

/// Collects issues by key; spans are resolved once at the end.
pub(super) struct Check {
    issues: Vec<(String, String)>,
}

impl Check {
    /// Reports `msg` at `key`.
    pub(super) fn err(&mut self, key: impl Into<String>, msg: impl Into<String>) {
        self.issues.push((key.into(), msg.into()));
    }

    /// Reports `msg` at `key` unless `ok`: the shape of most single-key rules.
    pub(super) fn require(&mut self, ok: bool, key: String, msg: impl Into<String>) {
        if !ok {
            self.err(key, msg);
        }
    }

    /// A name or id that must be given and unique (SPEC section 3): reports `key` as "required"
    /// when `value` is empty, with the message `duplicate` makes when `seen` already holds it;
    /// otherwise adds `value` to `seen`.
    fn required_unique(
        &mut self,
        key: String,
        value: &str,
        seen: &mut HashSet<String>,
        duplicate: impl FnOnce() -> String,
    ) {
        if value.is_empty() {
            self.err(key, "required");
        } else if !seen.insert(value.to_string()) {
            self.err(key, duplicate());
        }
    }

    pub(super) fn duration(
        &mut self,
        key: &str,
        v: Option<&String>,
        default: Duration,
    ) -> Duration {
        match v {
            None => default,
            Some(s) => match humantime::parse_duration(s) {
                Ok(d) => d,
                Err(e) => {
                    self.err(
                        key,
                        format!("invalid duration {s:?}: {e} (use e.g. \"250ms\", \"2s\", \"1h\")"),
                    );
                    default
                }
            },
        }
    }

    /// [`Check::duration`] that must also be at least `min`: reports `msg` at `key` when shorter
    /// and returns it as it is (the config is rejected anyway).
    fn duration_at_least(
        &mut self,
        key: &str,
        v: Option<&String>,
        default: Duration,
        min: Duration,
        msg: &str,
    ) -> Duration {
        let d = self.duration(key, v, default);
        if d < min {
            self.err(key, msg);
        }
        d
    }

    fn addr(&mut self, key: &str, v: Option<&String>, default: &str) -> SocketAddr {
        let s = v.map(String::as_str).unwrap_or(default);
        match s.parse() {
            Ok(a) => a,
            Err(e) => {
                self.err(key, format!("invalid socket address {s:?}: {e}"));
                default
                    .parse()
                    .expect("defaults are valid socket addresses")
            }
        }
    }

    fn one_of<T: Spelled>(&mut self, key: &str, v: Option<&String>, default: T) -> T {
        let Some(s) = v else { return default };
        let options = T::SPELLINGS;
        match options.iter().find(|(name, _)| name == s) {
            Some((_, t)) => *t,
            None => {
                let names: Vec<_> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
                self.err(
                    key,
                    format!("unknown value {s:?}, expected one of {}", names.join(", ")),
                );
                default
            }
        }
    }

    fn header_name(&mut self, key: &str, s: &str) -> Option<http::HeaderName> {
        match http::HeaderName::from_bytes(s.as_bytes()) {
            Ok(h) => Some(h),
            Err(_) => {
                self.err(key, format!("invalid header name {s:?}"));
                None
            }
        }
    }
}

/// Parses TOML and validates; see [`super::load_str`].
pub(crate) fn load_str(text: &str, file: &str) -> Result<Config, ConfigError> {
    let index = SpanIndex::new(text);
    let mk = |issues: Vec<ConfigIssue>| ConfigError {
        file: file.to_string(),
        issues,
    };
    // A syntax error leaves no document to look further into: it is the one error reported.
    let doc: toml::Table = match text.parse() {
        Ok(doc) => doc,
        Err(e) => return Err(mk(vec![syntax_issue(&index, &e, "-".into())])),
    };
    let located = |(key, message): (String, String)| {
        let (line, column) = index.locate(&key);
        ConfigIssue {
            key,
            line,
            column,
            message,
        }
    };
    // Every serde-level error (unknown keys, wrong types), then every semantic one of what is left.
    let (parsed, serde_issues) = super::collect::deserialize_all(doc);
    let semantic = match &parsed {
        Some(f) => match from_file(f) {
            Ok(mut cfg) if serde_issues.is_empty() => {
                if let Some(t) = cfg.server.tls.as_mut() {
                    server_tls::locate(t, &index, file);
                }
                return Ok(cfg);
            }
            Ok(_) => Vec::new(),
            Err(issues) => issues,
        },
        None => Vec::new(),
    };
    let mut issues: Vec<ConfigIssue> = semantic
        .into_iter()
        .filter(|(key, _)| {
            !serde_issues
                .iter()
                .any(|(reported, _)| super::collect::covered(key, reported))
        })
        .chain(serde_issues.iter().cloned())
        .map(located)
        .collect();
    // File order (stable: issues on one key keep the order they were found in).
    issues.sort_by_key(|i| (i.line, i.column));
    Err(mk(issues))
}

fn syntax_issue(index: &SpanIndex, e: &toml::de::Error, key: String) -> ConfigIssue {
    let (line, column) = match e.span() {
        Some(span) => index.line_col(span.start),
        None => index.locate(&key),
    };
    ConfigIssue {
        key,
        line,
        column,
        message: e.message().trim().to_string(),
    }
}

/// Validates a parsed file into a [`Config`].
///
/// # Errors
/// Every problem as `(dotted key, message)`, in file order.
pub fn from_file(f: &FileConfig) -> Result<Config, Vec<(String, String)>> {
    let mut c = Check { issues: Vec::new() };
    let server = server(&mut c, f);
    let affinity = affinity(&mut c, f);
    let limits = limits(&mut c, f);
    let clusters = clusters(&mut c, f);
    let routes = routes(&mut c, f, &clusters);
    if c.issues.is_empty() {
        Ok(Config {
            server,
            affinity,
            limits,
            clusters,
            routes,
        })
    } else {
        Err(c.issues)
    }
}

#[cfg(test)]
mod tests {
    use super::super::load_str;

    #[test]
    fn unknown_key_is_refused_with_line_and_column() {
        let err = load_str("[server]\nlisten = \"127.0.0.1:1\"\nbogus = 1\n", "g.toml")
            .expect_err("the config is refused");
        assert_eq!(err.issues.len(), 1);
        let e = &err.issues[0];
        assert_eq!((e.line, e.column), (3, 1), "{e:?}");
        assert!(e.message.contains("unknown field `bogus`"), "{e:?}");
        assert!(err.to_string().starts_with("g.toml:3:1: "), "{err}");
    }

    #[test]
    fn bad_duration_names_its_key() {
        let err = load_str("[health]\ninterval = \"2 parsecs\"\n", "g.toml")
            .expect_err("the config is refused");
        assert_eq!(err.issues[0].key, "health.interval");
        assert_eq!((err.issues[0].line, err.issues[0].column), (2, 1));
    }

    #[test]
    fn every_semantic_error_is_reported() {
        let text = "[[clusters]]\nname = \"a\"\n[[clusters.nodes]]\nid = \"n\"\naddr = \"nope\"\n\n[[routes]]\nid = \"r\"\ncluster = \"missing\"\ntimeout = \"x\"\n";
        let err = load_str(text, "g.toml").expect_err("the config is refused");
        let keys: Vec<_> = err.issues.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "clusters[0].nodes[0].addr",
                "routes[0].cluster",
                "routes[0].timeout"
            ]
        );
        assert_eq!(err.issues[1].line, 9);
    }

    #[test]
    fn go_defaults_load() {
        let c = super::super::Config::go_defaults();
        assert_eq!(c.server.listen.to_string(), "0.0.0.0:8000");
        assert_eq!(c.clusters[0].nodes.len(), 2);
        assert_eq!(c.clusters[0].health.interval.as_secs(), 2);
    }
}
