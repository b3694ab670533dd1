//! Config texts shared by unit tests of several modules (hopper, selection).

/// The two-version set-up of SPEC section 7 as config text: cluster `c` with node `a`
/// (127.0.0.1:1, metadata `{ KEY_OF_A = "v1" }`) and node `b` (127.0.0.1:2, metadata
/// `{ version = "v2" }`), and one catch-all route `r` to it, ending inside the route table so
/// callers may append `[routes.*]` tables. `key_of_a` is the metadata key of node `a` (tests of
/// key-case warnings spell it differently).
pub(crate) fn two_versions(key_of_a: &str) -> String {
    format!(
        r#"
[[clusters]]
name = "c"
  [[clusters.nodes]]
  id = "a"
  addr = "127.0.0.1:1"
  metadata = {{ {key_of_a} = "v1" }}
  [[clusters.nodes]]
  id = "b"
  addr = "127.0.0.1:2"
  metadata = {{ version = "v2" }}

[[routes]]
id = "r"
match = {{ path_prefix = "/" }}
cluster = "c"
"#
    )
}
