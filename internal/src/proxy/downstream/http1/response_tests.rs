//! Unit tests of [`super`]: each framing and connection rule of the module docs.

use super::*;
use http::HeaderValue;

fn head(
    status: u16,
    fields: &[(&str, &str)],
    method: Method,
    http10: bool,
    keep: bool,
    body: (Option<u64>, bool),
) -> (String, Encoding, bool) {
    let mut h = HeaderMap::new();
    for (k, v) in fields {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
            HeaderValue::from_str(v).expect("value"),
        );
    }
    let mut dst = Vec::new();
    let a = Answering {
        method: &method,
        http10,
        keep_alive: keep,
    };
    let out = encode_head(
        &mut dst,
        StatusCode::from_u16(status).expect("status"),
        None,
        Fields {
            node: None,
            map: &h,
        },
        a,
        BodyLen {
            exact: body.0,
            empty: body.1,
        },
    );
    let text = String::from_utf8(dst).expect("ascii");
    // The Date field is the cached clock: checked for its shape, then left out.
    let date = text
        .lines()
        .find(|l| l.starts_with("date: "))
        .expect("a Date field");
    assert_eq!(date.len(), "date: ".len() + 29);
    assert!(date.ends_with(" GMT"));
    let text = text.replace(&format!("{date}\r\n"), "");
    (text, out.encoding, out.keep_alive)
}

/// Each framing rule of the module docs, one row each.
///
/// Kept as one function: a table, one row per rule.
#[test]
fn framing_rules() {
    let get = || Method::GET;
    assert_eq!(
        head(200, &[("x", "1")], get(), false, true, (Some(5), false)),
        (
            "HTTP/1.1 200 OK\r\nx: 1\r\ncontent-length: 5\r\n\r\n".into(),
            Encoding::Length(5),
            true
        )
    );
    assert_eq!(
        head(200, &[], get(), false, true, (None, false)),
        (
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".into(),
            Encoding::Chunked,
            true
        )
    );
    assert_eq!(
        head(200, &[], get(), true, true, (None, false)),
        (
            "HTTP/1.0 200 OK\r\n\r\n".into(),
            Encoding::CloseDelimited,
            false
        ),
        "no chunked to 1.0: close-delimited, and the connection closes"
    );
    assert_eq!(
        head(404, &[], get(), false, true, (Some(0), true)),
        (
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".into(),
            Encoding::Empty,
            true
        )
    );
    assert_eq!(
        head(
            200,
            &[("content-length", "9")],
            get(),
            false,
            true,
            (None, false)
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n".into(),
            Encoding::Length(9),
            true
        ),
        "a given Content-Length frames the body"
    );
    // HEAD: the length is said, no body follows; unknown length adds nothing.
    assert_eq!(
        head(
            200,
            &[("content-length", "9")],
            Method::HEAD,
            false,
            true,
            (Some(0), true)
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n".into(),
            Encoding::Empty,
            true
        )
    );
    assert_eq!(
        head(200, &[], Method::HEAD, false, true, (None, false)),
        ("HTTP/1.1 200 OK\r\n\r\n".into(), Encoding::Empty, true)
    );
    for status in [204, 304] {
        let (text, enc, _) = head(status, &[], get(), false, true, (None, false));
        assert!(
            !text.contains("content-length") && !text.contains("transfer-encoding"),
            "{text}"
        );
        assert_eq!(enc, Encoding::Empty);
    }
    let (text, enc, _) = head(200, &[], Method::CONNECT, false, true, (Some(3), false));
    assert_eq!(
        (text.as_str(), enc),
        ("HTTP/1.1 200 OK\r\n\r\n", Encoding::Empty)
    );
}

#[test]
fn connection_rules() {
    let (text, _, keep) = head(200, &[], Method::GET, false, false, (Some(0), true));
    assert!(text.contains("connection: close\r\n") && !keep);
    let (text, _, keep) = head(
        200,
        &[("connection", "close")],
        Method::GET,
        false,
        true,
        (Some(0), true),
    );
    assert_eq!(text.matches("connection: close").count(), 1);
    assert!(!keep, "the answer's own close ends the connection");
    let (text, _, keep) = head(200, &[], Method::GET, true, true, (Some(2), false));
    assert!(
        text.starts_with("HTTP/1.0 200 OK\r\n")
            && text.contains("connection: keep-alive\r\n")
            && keep
    );
    let (text, _, keep) = head(200, &[], Method::GET, true, false, (Some(2), false));
    assert!(
        !text.contains("connection") && !keep,
        "1.0 closes by default"
    );
}

#[test]
fn status_lines_and_date() {
    let mut d = Vec::new();
    status_line(
        &mut d,
        StatusCode::from_u16(599).expect("code"),
        None,
        false,
    );
    assert_eq!(d, b"HTTP/1.1 599 <none>\r\n");
    d.clear();
    status_line(&mut d, StatusCode::OK, Some(b"Fine"), false);
    assert_eq!(d, b"HTTP/1.1 200 Fine\r\n");
    d.clear();
    date(&mut d);
    let parsed =
        httpdate::parse_http_date(std::str::from_utf8(&d).expect("ascii")).expect("IMF-fixdate");
    let off = SystemTime::now().duration_since(parsed).unwrap_or_default();
    assert!(off < Duration::from_secs(2));
}

#[test]
fn a_nodes_fields_go_first_as_sent_then_the_gateways_and_their_length_and_date_count() {
    let mut buf = bytes::BytesMut::from(
        &b"HTTP/1.1 200 OK\r\nServer: n\r\nDate: Tue, 01 Dec 2026 00:00:00 GMT\r\nContent-Length: 3\r\n\r\n"[..],
    );
    let node = crate::proxy::upstream::http1::head::parse_response(&mut buf, &Method::GET)
        .expect("valid")
        .expect("complete");
    let mut map = HeaderMap::new();
    map.insert("x-conn-id", HeaderValue::from_static("c-1"));
    let mut dst = Vec::new();
    let a = Answering {
        method: &Method::GET,
        http10: false,
        keep_alive: true,
    };
    let body = BodyLen {
        exact: None,
        empty: false,
    };
    let out = encode_head(
        &mut dst,
        StatusCode::OK,
        None,
        Fields {
            node: Some(&node.fields),
            map: &map,
        },
        a,
        body,
    );
    // The node's length frames the body and its Date stands: neither is added.
    assert_eq!(
        String::from_utf8(dst).expect("ascii"),
        "HTTP/1.1 200 OK\r\nServer: n\r\nDate: Tue, 01 Dec 2026 00:00:00 GMT\r\nContent-Length: 3\r\n\
         x-conn-id: c-1\r\n\r\n"
    );
    assert_eq!(out.encoding, Encoding::Length(3));
    assert!(out.keep_alive);
}
