//! TOML text of a `[[clusters]]` entry and of a catch-all `[[routes]]` entry, written once for the
//! built-in defaults and for the config tests that need a small valid set-up around the key they test.

/// One `[[clusters]]` entry named `name`: `extra` (key lines right after `name`, may be empty) and one
/// `[[clusters.nodes]]` entry per `(id, addr)`. `extra` starts on the entry's third line, so tests
/// that check line numbers can count on it.
pub(crate) fn cluster_text(name: &str, extra: &str, nodes: &[(&str, &str)]) -> String {
    let mut text = format!("[[clusters]]\nname = \"{name}\"\n");
    if !extra.is_empty() {
        text.push_str(extra);
        text.push('\n');
    }
    for (id, addr) in nodes {
        text.push_str(&format!(
            "  [[clusters.nodes]]\n  id = \"{id}\"\n  addr = \"{addr}\"\n"
        ));
    }
    text
}

/// A `[[routes]]` entry `id` sending every path (`path_prefix = "/"`) to `cluster`.
pub(crate) fn catch_all_route_text(id: &str, cluster: &str) -> String {
    format!(
        "[[routes]]\nid = \"{id}\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"{cluster}\"\n"
    )
}
