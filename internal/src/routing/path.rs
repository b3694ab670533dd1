//! Path normalisation for route matching (README "Routing"; RFC 3986 section 5.2.4 and 6.2.2).
//!
//! The form matched against routes: percent-encoded unreserved characters decoded (so `%2e` is
//! `.`), dot segments removed, and runs of `/` kept as they are (a node resolves `//` as an empty
//! segment). An encoded slash `%2F` stays encoded and is never a separator, so it cannot move a
//! request into another route's prefix. The path forwarded upstream is the client's, untouched,
//! unless the normalised form differs in dot segments: then the normalised one is sent, so the
//! node resolves exactly the path that was matched.

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

fn decode_unreserved(p: &str) -> String {
    let b = p.as_bytes();
    let mut out = String::with_capacity(p.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = &p[i + 1..i + 3];
            if let Ok(v) = u8::from_str_radix(hex, 16) {
                if v.is_ascii_alphanumeric() || matches!(v, b'-' | b'.' | b'_' | b'~') {
                    out.push(v as char);
                    i += 3;
                    continue;
                }
                // Keep other escapes, upper-cased (RFC 3986 section 6.2.2.1).
                out.push('%');
                out.push_str(&hex.to_ascii_uppercase());
                i += 3;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
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
    use super::normalize;

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
}
