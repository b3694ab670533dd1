//! Path normalisation for route matching (README "Routing"; RFC 3986 section 5.2.4 and 6.2.2).
//!
//! The form matched against routes: percent-encoded unreserved characters decoded (so `%2e` is
//! `.`), dot segments removed, and runs of `/` kept as they are (a node resolves `//` as an empty
//! segment). An encoded slash `%2F` stays encoded and is never a separator, so it cannot move a
//! request into another route's prefix. The path forwarded to the node is the client's, untouched,
//! unless the normalised form differs in dot segments: then the normalised one is sent, so the
//! node resolves exactly the path that was matched.
//!
//! A node may read the same path differently: some decode `%2F`/`%5C` into separators, some merge
//! `//` into `/` (nginx `merge_slashes`, Go's `path.Clean`). [`node_reading`] gives that other
//! reading; the proxy matches both and refuses the request with `400` when they pick different
//! routes, so no node can resolve a path that the gateway would have routed elsewhere.

use std::borrow::Cow;

/// Normalises `path` as the module docs say. Always starts with `/`. Borrows `path` when it is
/// already normal (starts with `/`, no `%`, no segment starting with `.`): the common case costs no
/// allocation.
pub fn normalize(path: &str) -> Cow<'_, str> {
    if path.starts_with('/') && !path.contains('%') && !path.contains("/.") {
        return Cow::Borrowed(path);
    }
    Cow::Owned(normalize_slow(path))
}

fn normalize_slow(path: &str) -> String {
    let decoded = decode_unreserved(path);
    let out = remove_dot_segments(&decoded);
    if out.is_empty() {
        "/".to_string()
    } else {
        out
    }
}

/// The path as a node that decodes encoded slashes and backslashes (`%2F`, `%5C`, a raw backslash) into `/`,
/// merges runs of `/` and removes dot segments would resolve it; `None` when `path` has none of
/// those (then every reading equals [`normalize`]). Always starts with `/`.
pub fn node_reading(path: &str) -> Option<String> {
    let b = path.as_bytes();
    let encoded_slash =
        contains_ignore_ascii_case(b, b"%2f") || contains_ignore_ascii_case(b, b"%5c");
    if !(encoded_slash || path.contains('\\') || path.contains("//")) {
        return None;
    }
    let decoded = decode_unreserved(path)
        .replace("%2F", "/")
        .replace("%5C", "/")
        .replace('\\', "/");
    let mut merged = String::with_capacity(decoded.len());
    for c in decoded.chars() {
        if !(c == '/' && merged.ends_with('/')) {
            merged.push(c);
        }
    }
    let out = remove_dot_segments(&merged);
    Some(if out.is_empty() { "/".to_string() } else { out })
}

/// True if `hay` contains `needle`, ASCII case-insensitively (no allocation). A needle that
/// starts with a byte without case (an escape's `%`) is looked for from that byte's first
/// occurrence on: a path without one costs a single scan, not a comparison per window (the
/// window-by-window search cost more than the rest of the route phase).
pub fn contains_ignore_ascii_case(hay: &[u8], needle: &[u8]) -> bool {
    let from = match needle.first() {
        Some(&b) if !b.is_ascii_alphabetic() => match hay.iter().position(|&h| h == b) {
            Some(i) => i,
            None => return false,
        },
        _ => 0,
    };
    hay[from..]
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

fn decode_unreserved(p: &str) -> String {
    let b = p.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        // Byte-wise, so a `%` before a multi-byte character never splits it.
        if b[i] == b'%'
            && i + 2 < b.len()
            && b[i + 1].is_ascii_hexdigit()
            && b[i + 2].is_ascii_hexdigit()
        {
            let v = hex_value(b[i + 1]) * 16 + hex_value(b[i + 2]);
            if v.is_ascii_alphanumeric() || matches!(v, b'-' | b'.' | b'_' | b'~') {
                out.push(v);
            } else {
                // Keep other escapes, upper-cased (RFC 3986 section 6.2.2.1).
                out.extend_from_slice(&[
                    b'%',
                    b[i + 1].to_ascii_uppercase(),
                    b[i + 2].to_ascii_uppercase(),
                ]);
            }
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).expect("only ASCII escapes were replaced, by ASCII bytes")
}

fn hex_value(h: u8) -> u8 {
    match h {
        b'0'..=b'9' => h - b'0',
        b'a'..=b'f' => h - b'a' + 10,
        _ => h.to_ascii_uppercase() - b'A' + 10,
    }
}

/// RFC 3986 section 5.2.4.
fn remove_dot_segments(input: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let absolute = input.starts_with('/');
    let segs: Vec<&str> = input.split('/').collect();
    let n = segs.len();
    for (i, seg) in segs.iter().enumerate() {
        if i == 0 && absolute {
            continue;
        }
        match *seg {
            "." => {
                if i == n - 1 {
                    out.push("");
                }
            }
            ".." => {
                out.pop();
                if i == n - 1 {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::{node_reading, normalize};

    #[test]
    fn dot_segments_and_encodings() {
        assert_eq!(normalize("/a/b/../c"), "/a/c");
        assert_eq!(normalize("/a/%2e%2e/admin"), "/admin");
        assert_eq!(normalize("/a/%2E%2E/admin"), "/admin");
        assert_eq!(normalize("/../../etc"), "/etc");
        assert_eq!(normalize("/a/./b/."), "/a/b/");
        assert_eq!(normalize("/a%2Fb/../c"), "/c");
        assert_eq!(normalize("/a%2fb"), "/a%2Fb");
        assert_eq!(normalize("//admin"), "//admin");
        assert_eq!(normalize("/%7Euser"), "/~user");
        assert_eq!(normalize(""), "/");
        assert_eq!(normalize("/.well-known/x"), "/.well-known/x");
        assert!(matches!(
            normalize("/api/v1/users"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn contains_ignore_ascii_case_finds_a_needle_after_its_first_byte() {
        use super::contains_ignore_ascii_case as has;
        assert!(has(b"/a%2/%2E", b"%2e"));
        assert!(!has(b"/a%2/%2", b"%2e"));
        assert!(!has(b"/plain/path", b"%2e"));
        assert!(has(b"/API/x", b"api"));
        assert!(!has(b"%2", b"%2e"));
    }

    #[test]
    fn node_reading_decodes_slashes_and_merges_runs() {
        assert_eq!(node_reading("/api/x"), None);
        assert_eq!(node_reading("/a/../b"), None);
        assert_eq!(node_reading("/caf%C3%A9/%20x"), None);
        assert_eq!(node_reading("/a\\b").as_deref(), Some("/a/b"));
        assert_eq!(node_reading("/api%2F..%2Fadmin").as_deref(), Some("/admin"));
        assert_eq!(
            node_reading("/api%2f%2e%2e%2fadmin").as_deref(),
            Some("/admin")
        );
        assert_eq!(node_reading("//admin").as_deref(), Some("/admin"));
        assert_eq!(node_reading("/a//b/").as_deref(), Some("/a/b/"));
        assert_eq!(node_reading("/a%5Cb").as_deref(), Some("/a/b"));
        assert_eq!(node_reading("/a\\..\\b").as_deref(), Some("/b"));
        assert_eq!(node_reading("/p/g%2Fproj").as_deref(), Some("/p/g/proj"));
    }

    #[test]
    fn odd_escapes_and_non_ascii_never_panic_or_change_meaning() {
        assert_eq!(normalize("/a%"), "/a%");
        assert_eq!(normalize("/a%2"), "/a%2");
        assert_eq!(normalize("/a%+1b"), "/a%+1b");
        assert_eq!(normalize("/%é%2e"), "/%é.");
        assert_eq!(normalize("/é/../x"), "/x");
        assert_eq!(node_reading("/é%2F%2e%2e%2Fx").as_deref(), Some("/x"));
    }
}
