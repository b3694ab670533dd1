use super::*;
use http::{header, HeaderMap, HeaderValue};

fn parsed(wire: &str, method: Method) -> (Result<Option<ResponseHead>, HeadError>, usize) {
    let mut buf = BytesMut::from(wire.as_bytes());
    let r = parse_response(&mut buf, &method);
    (r, buf.len())
}

fn head(wire: &str, method: Method) -> ResponseHead {
    parsed(wire, method).0.expect("valid").expect("complete")
}

/// The fields passed on, as a map.
fn map(h: ResponseHead) -> HeaderMap {
    h.fields.into_map(false).expect("valid")
}

/// The fields passed on, as the client's writer writes them.
fn written(h: &ResponseHead) -> String {
    let mut out = Vec::new();
    h.fields.write(&mut out);
    String::from_utf8(out).expect("ascii")
}

#[test]
fn a_sized_answer_is_reusable_and_leaves_its_body_in_the_buffer() {
    let (r, left) = parsed(
        "HTTP/1.1 200 OK\r\ncontent-length: 3\r\nx-a: 1\r\n\r\nabc",
        Method::GET,
    );
    let h = r.expect("valid").expect("complete");
    assert_eq!(h.status, StatusCode::OK);
    assert_eq!(h.framing, BodyFraming::Length(3));
    assert!(h.reusable);
    assert_eq!(left, 3);
    assert!(h.reason.is_none());
    let (parts, raw) = h.into_parts(false).expect("valid");
    assert!(raw.is_none());
    assert_eq!(parts.headers["x-a"], "1");
}

#[test]
fn a_partial_head_waits_and_an_endless_one_is_refused() {
    let (r, left) = parsed("HTTP/1.1 200 OK\r\ncontent-le", Method::GET);
    assert!(matches!(r, Ok(None)));
    assert_eq!(left, 27);
    let endless = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD));
    assert_eq!(
        parsed(&endless, Method::GET).0.err(),
        Some(HeadError::TooLarge)
    );
}

#[test]
fn chunked_wins_over_content_length_which_is_dropped_and_the_connection_not_reused() {
    let h = head(
        "HTTP/1.1 200 OK\r\ncontent-length: 10\r\ntransfer-encoding: chunked\r\n\r\n",
        Method::GET,
    );
    assert_eq!(h.framing, BodyFraming::Chunked);
    assert!(!h.reusable);
    assert_eq!(h.fields.content_length(), None);
    assert!(!map(h).contains_key(header::CONTENT_LENGTH));
    let h = head(
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
        Method::GET,
    );
    assert_eq!((h.framing, h.reusable), (BodyFraming::Chunked, true));
}

#[test]
fn a_coding_other_than_chunked_last_runs_to_the_close() {
    let h = head(
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n",
        Method::GET,
    );
    assert_eq!((h.framing, h.reusable), (BodyFraming::Close, false));
}

#[test]
fn no_framing_runs_to_the_close() {
    let h = head("HTTP/1.1 200 OK\r\n\r\n", Method::GET);
    assert_eq!((h.framing, h.reusable), (BodyFraming::Close, false));
}

#[test]
fn head_204_and_304_end_at_the_head_and_a_framed_204_is_not_reused() {
    let h = head(
        "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n",
        Method::HEAD,
    );
    assert_eq!((h.framing, h.reusable), (BodyFraming::Length(0), true));
    let h = head(
        "HTTP/1.1 304 Not Modified\r\ncontent-length: 10\r\n\r\n",
        Method::GET,
    );
    assert_eq!((h.framing, h.reusable), (BodyFraming::Length(0), true));
    let h = head("HTTP/1.1 204 No Content\r\n\r\n", Method::GET);
    assert_eq!((h.framing, h.reusable), (BodyFraming::Length(0), true));
    let h = head(
        "HTTP/1.1 204 No Content\r\ncontent-length: 4\r\n\r\n",
        Method::GET,
    );
    assert_eq!((h.framing, h.reusable), (BodyFraming::Length(0), false));
}

#[test]
fn content_length_repeated_with_one_value_counts_once_and_conflicts_are_refused() {
    let h = head(
        "HTTP/1.1 200 OK\r\ncontent-length: 4, 4\r\ncontent-length: 4\r\n\r\n",
        Method::GET,
    );
    assert_eq!(h.framing, BodyFraming::Length(4));
    // The client gets the value once, after the node's other fields, in either form.
    assert_eq!(h.fields.content_length(), Some(4));
    assert_eq!(written(&h), "content-length: 4\r\n");
    assert_eq!(
        map(h).get_all("content-length").iter().collect::<Vec<_>>(),
        ["4"]
    );
    let h = head(
        "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nx-a: 1\r\n\r\n",
        Method::GET,
    );
    assert_eq!(written(&h), "Content-Length: 4\r\nx-a: 1\r\n");
    let h = head(
        "HTTP/1.1 200 OK\r\nContent-Length: 4,4\r\nx-a: 1\r\n\r\n",
        Method::HEAD,
    );
    assert_eq!(written(&h), "x-a: 1\r\ncontent-length: 4\r\n");
    // A length beside chunked is dropped whatever its form.
    let mut h = head(
        "HTTP/1.1 200 OK\r\ncontent-length: 4, 4\r\ntransfer-encoding: chunked\r\n\r\n",
        Method::GET,
    );
    assert_eq!(
        (h.fields.content_length(), written(&h).as_str()),
        (None, "")
    );
    // The gateway dropping the field drops the replacement too.
    h = head(
        "HTTP/1.1 200 OK\r\ncontent-length: 4\r\ncontent-length: 4\r\n\r\n",
        Method::GET,
    );
    h.fields.drop_named(b"Content-Length");
    assert_eq!(
        (h.fields.content_length(), written(&h).as_str()),
        (None, "")
    );
    assert_eq!(
        parsed(
            "HTTP/1.1 200 OK\r\ncontent-length: 4\r\ncontent-length: 5\r\n\r\n",
            Method::GET
        )
        .0
        .err(),
        Some(HeadError::Malformed("conflicting Content-Length values"))
    );
    assert_eq!(
        parsed("HTTP/1.1 200 OK\r\ncontent-length: +4\r\n\r\n", Method::GET)
            .0
            .err(),
        Some(HeadError::Malformed("invalid Content-Length"))
    );
}

#[test]
fn persistence_follows_the_version_and_connection() {
    let h = head(
        "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
        Method::GET,
    );
    assert!(!h.reusable);
    let h = head("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n", Method::GET);
    assert!(!h.reusable);
    assert_eq!(
        h.into_parts(true).expect("valid").0.version,
        Version::HTTP_10
    );
    let h = head(
        "HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n",
        Method::GET,
    );
    assert!(h.reusable);
    assert_eq!(
        parsed(
            "HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            Method::GET
        )
        .0
        .err(),
        Some(HeadError::Malformed(
            "Transfer-Encoding in an HTTP/1.0 answer"
        ))
    );
}

#[test]
fn a_custom_reason_is_kept_and_a_canonical_one_is_not() {
    let h = head(
        "HTTP/1.1 200 Fine Thanks\r\ncontent-length: 0\r\n\r\n",
        Method::GET,
    );
    // A custom reason takes the map: the client's writer reads it from the extensions.
    let (parts, raw) = h.into_parts(true).expect("valid");
    assert!(raw.is_none());
    let r = parts
        .extensions
        .get::<hyper::ext::ReasonPhrase>()
        .expect("kept");
    assert_eq!(r.as_bytes(), b"Fine Thanks");
}

#[test]
fn malformed_heads_and_too_many_fields_are_refused() {
    assert_eq!(
        parsed("HTTP/1.1 200 OK\r\nx : 1\r\n\r\n", Method::GET)
            .0
            .err(),
        Some(HeadError::Malformed("invalid field name"))
    );
    assert_eq!(
        parsed("HTTP/2 200 OK\r\n\r\n", Method::GET).0.err(),
        Some(HeadError::Malformed("invalid HTTP version"))
    );
    let many: String = (0..=MAX_FIELDS).map(|i| format!("x-{i}: 1\r\n")).collect();
    assert_eq!(
        parsed(&format!("HTTP/1.1 200 OK\r\n{many}\r\n"), Method::GET)
            .0
            .err(),
        Some(HeadError::TooManyFields)
    );
}

#[test]
fn hop_by_hop_nominated_and_te_fields_are_not_passed_on_and_the_rest_keeps_its_spelling() {
    let h = head(
        "HTTP/1.1 200 OK\r\nServer: n\r\nConnection: keep-alive, X-Private\r\nKeep-Alive: timeout=5\r\n\
         x-private: secret\r\nTE: trailers\r\nTrailer: grpc-status\r\nUpgrade: h2c\r\n\
         Proxy-Connection: keep-alive\r\nContent-Length:  2 \r\nX-A: 1\r\n\r\nok",
        Method::GET,
    );
    assert_eq!(written(&h), "Server: n\r\nContent-Length: 2\r\nX-A: 1\r\n");
    assert_eq!(h.fields.content_length(), Some(2));
    assert!(!h.fields.has_date());
    assert_eq!(
        h.keep_alive_timeout,
        Some(std::time::Duration::from_secs(5))
    );
    // The map for other clients holds the same fields.
    let m = map(h);
    let names: Vec<&str> = m.keys().map(|n| n.as_str()).collect();
    assert_eq!(names, ["server", "content-length", "x-a"]);
}

#[test]
fn a_204s_framing_and_a_length_beside_chunked_are_not_passed_on() {
    let h = head(
        "HTTP/1.1 204 No Content\r\ncontent-length: 5\r\ndate: d\r\n\r\n",
        Method::GET,
    );
    assert_eq!(written(&h), "date: d\r\n");
    assert_eq!(h.fields.content_length(), None);
    assert!(h.fields.has_date());
    let h = head(
        "HTTP/1.1 200 OK\r\ncontent-length: 10\r\ntransfer-encoding: chunked\r\n\r\n",
        Method::GET,
    );
    assert_eq!(written(&h), "");
}

#[test]
fn a_field_the_gateway_sets_replaces_the_nodes_of_any_spelling() {
    let mut h = head(
        "HTTP/1.1 200 OK\r\nX-Conn-Id: node-made\r\nx-conn-id: again\r\ncontent-length: 0\r\n\r\n",
        Method::GET,
    );
    h.fields.drop_named(b"x-conn-id");
    assert_eq!(written(&h), "content-length: 0\r\n");
}

#[test]
fn raw_fields_are_kept_only_where_the_clients_writer_reads_them() {
    let wire = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
    let (parts, raw) = head(wire, Method::GET).into_parts(true).expect("valid");
    assert!(parts.headers.is_empty());
    assert_eq!(raw.expect("kept as bytes").content_length(), Some(0));
    let (parts, raw) = head(wire, Method::GET).into_parts(false).expect("valid");
    assert_eq!(parts.headers.len(), 1);
    assert!(raw.is_none());
    // gRPC answers and 101s always get the map (a 101 with every field).
    let grpc =
        "HTTP/1.1 200 OK\r\ncontent-type: application/grpc+proto\r\ncontent-length: 0\r\n\r\n";
    let h = head(grpc, Method::POST);
    assert!(h.grpc);
    let (parts, raw) = h.into_parts(true).expect("valid");
    assert_eq!((parts.headers.len(), raw.is_none()), (2, true));
    let up =
        "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n";
    let (parts, raw) = head(up, Method::GET).into_parts(true).expect("valid");
    assert!(raw.is_none());
    assert_eq!(parts.headers["upgrade"], "websocket");
    assert_eq!(parts.headers["connection"], "upgrade");
}

#[test]
fn every_value_byte_httparse_accepts_is_one_http_accepts() {
    // Either path must accept the same heads (module docs of crate::proxy::http1_codec::fields).
    for b in 0u8..=255 {
        if matches!(b, b'\r' | b'\n') {
            continue;
        }
        let mut wire = b"HTTP/1.1 200 OK\r\nx: a".to_vec();
        wire.push(b);
        wire.extend_from_slice(b"a\r\ncontent-length: 0\r\n\r\n");
        let mut buf = BytesMut::from(&wire[..]);
        let ours = matches!(parse_response(&mut buf, &Method::GET), Ok(Some(_)));
        let http_ok = HeaderValue::from_bytes(&[b'a', b, b'a']).is_ok();
        assert_eq!(ours, http_ok, "value byte {b:#04x}");
    }
    for b in 0u8..=255 {
        if matches!(b, b'\r' | b'\n' | b':') {
            continue;
        }
        let mut wire = b"HTTP/1.1 200 OK\r\nx".to_vec();
        wire.push(b);
        wire.extend_from_slice(b"x: 1\r\ncontent-length: 0\r\n\r\n");
        let mut buf = BytesMut::from(&wire[..]);
        let ours = matches!(parse_response(&mut buf, &Method::GET), Ok(Some(_)));
        let http_ok = http::HeaderName::from_bytes(&[b'x', b, b'x']).is_ok();
        assert_eq!(ours, http_ok, "name byte {b:#04x}");
    }
}
