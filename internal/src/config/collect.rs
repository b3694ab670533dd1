//! Every serde-level problem of a config file, not only the first (SPEC section 3: "every error").
//!
//! serde stops at the first unknown key or wrongly typed value. To report them all, the document
//! is parsed into a plain TOML table first; deserializing it into [`FileConfig`] is then repeated,
//! each time recording the error with its dotted key and removing the offending key from the table,
//! until it deserializes (or [`MAX_SERDE_ERRORS`] is reached). What remains is validated as usual, so
//! semantic problems of the same file are reported too. A removed key takes its default, and a
//! semantic complaint about a key already reported here (its default may be invalid, e.g. a
//! required name) is dropped: one error per key. Spawns nothing, touches no file.

use serde_path_to_error::Segment;

use super::file::FileConfig;

/// Most serde-level errors collected from one file; past this the rest are not looked for.
pub(crate) const MAX_SERDE_ERRORS: usize = 100;

/// One serde-level problem: the dotted key (`-` for the document itself) and the message.
pub(crate) type SerdeIssue = (String, String);

/// Deserializes `doc`, collecting every serde error (module docs).
///
/// Returns the file (with offending keys removed and defaulted) when it could be built, and the
/// problems in the order found.
pub(crate) fn deserialize_all(doc: toml::Table) -> (Option<FileConfig>, Vec<SerdeIssue>) {
    let mut doc = toml::Value::Table(doc);
    let mut issues = Vec::new();
    while issues.len() < MAX_SERDE_ERRORS {
        match serde_path_to_error::deserialize::<_, FileConfig>(doc.clone()) {
            Ok(f) => return (Some(f), issues),
            Err(e) => {
                let segments: Vec<Segment> = e.path().iter().cloned().collect();
                let path = e.path().to_string();
                let key = if path == "." { "-".to_string() } else { path };
                issues.push((key, e.inner().message().trim().to_string()));
                if !remove(&mut doc, &segments) {
                    return (None, issues);
                }
            }
        }
    }
    (None, issues)
}

/// Removes the value at `path` from `v`; false if there is nothing to remove (the error is not
/// about one key, e.g. a missing field), so the loop cannot make progress.
fn remove(v: &mut toml::Value, path: &[Segment]) -> bool {
    match path {
        [] => false,
        [last] => match (v, last) {
            (toml::Value::Table(t), Segment::Map { key }) => t.remove(key.as_str()).is_some(),
            (toml::Value::Array(a), Segment::Seq { index }) if *index < a.len() => {
                a.remove(*index);
                true
            }
            _ => false,
        },
        [first, rest @ ..] => {
            let child = match (v, first) {
                (toml::Value::Table(t), Segment::Map { key }) => t.get_mut(key.as_str()),
                (toml::Value::Array(a), Segment::Seq { index }) => a.get_mut(*index),
                _ => None,
            };
            child.is_some_and(|c| remove(c, rest))
        }
    }
}

/// True if `key` is `reported` or lies inside it (`a.b` covers `a.b.c` and `a.b[0]`).
pub(crate) fn covered(key: &str, reported: &str) -> bool {
    key == reported
        || key
            .strip_prefix(reported)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_every_unknown_key_and_type_error() {
        let text = "[server]\nbogus = 1\nlisten = 5\n[[clusters]]\nname = \"c\"\nweird = true\n  [[clusters.nodes]]\n  id = \"a\"\n  addr = \"x:1\"\n  weight = \"heavy\"\n";
        let doc: toml::Table = text.parse().expect("valid TOML");
        let (file, issues) = deserialize_all(doc);
        // Found in serde's order (keys sorted); the caller sorts them by line.
        let mut keys: Vec<&str> = issues.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "clusters[0].nodes[0].weight",
                "clusters[0].weird",
                "server.bogus",
                "server.listen"
            ],
            "{issues:?}"
        );
        let file = file.expect("the rest deserializes");
        assert_eq!(file.clusters[0].nodes[0].id, "a");
    }

    #[test]
    fn covered_means_same_key_or_inside_it() {
        assert!(covered("routes[0].timeout", "routes[0].timeout"));
        assert!(covered("routes[0].timeout", "routes[0]"));
        assert!(covered("routes[0].match.path", "routes[0].match"));
        assert!(!covered("routes[0].timeouts", "routes[0].timeout"));
        assert!(!covered("routes[1].id", "routes[0]"));
    }
}
