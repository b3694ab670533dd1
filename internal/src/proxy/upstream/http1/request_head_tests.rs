use super::*;
use crate::proxy::upstream::request::{ForwardedFields, NodeRequest};
use http::{HeaderMap, HeaderValue};

fn headers(fields: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in fields {
        h.append(*n, HeaderValue::from_static(v));
    }
    h
}

/// The head of a request with `method`, target `target`, `fields`, and `forwarded` fields with
/// `host`, as [`encode_request`] writes it, and its framing.
fn encoded_with(
    method: Method,
    target: &'static str,
    fields: &[(&'static str, &'static str)],
    forwarded: Option<&ForwardedFields>,
    host: Option<&HeaderValue>,
    exact: Option<u64>,
    empty: bool,
) -> (String, Option<u64>) {
    let target = http::uri::PathAndQuery::from_static(target);
    let fields = headers(fields);
    let req = NodeRequest {
        method: &method,
        target: &target,
        headers: &fields,
        forwarded,
        host,
        gate: None,
        raw_answer: false,
    };
    let mut dst = Vec::new();
    let framing = encode_request(&mut dst, &req, exact, empty);
    (String::from_utf8(dst).expect("ascii"), framing)
}

fn encoded(
    method: Method,
    fields: &[(&'static str, &'static str)],
    exact: Option<u64>,
    empty: bool,
) -> (String, Option<u64>) {
    encoded_with(method, "/a?b=1", fields, None, None, exact, empty)
}

#[test]
fn a_get_without_body_gets_no_framing_field() {
    assert_eq!(
        encoded(Method::GET, &[("host", "x")], Some(0), true),
        ("GET /a?b=1 HTTP/1.1\r\nhost: x\r\n\r\n".to_owned(), Some(0))
    );
}

#[test]
fn forwarded_fields_kept_beside_the_map_follow_its_fields() {
    let forwarded = ForwardedFields {
        peer: HeaderValue::from_static("10.0.0.7"),
        proto: "https",
    };
    let host = HeaderValue::from_static("api.example");
    assert_eq!(
        encoded_with(
            Method::POST,
            "/up",
            &[("host", "api.example"), ("x-a", "1")],
            Some(&forwarded),
            Some(&host),
            Some(3),
            false,
        ),
        (
            "POST /up HTTP/1.1\r\nhost: api.example\r\nx-a: 1\r\nx-forwarded-for: 10.0.0.7\r\n\
             x-forwarded-proto: https\r\nx-forwarded-host: api.example\r\ncontent-length: 3\r\n\r\n"
                .to_owned(),
            Some(3)
        )
    );
    // Without a host, no X-Forwarded-Host line.
    let plain = ForwardedFields {
        proto: "http",
        ..forwarded
    };
    assert_eq!(
        encoded_with(Method::GET, "/", &[], Some(&plain), None, Some(0), true).0,
        "GET / HTTP/1.1\r\nx-forwarded-for: 10.0.0.7\r\nx-forwarded-proto: http\r\n\r\n"
    );
}

#[test]
fn an_empty_post_says_content_length_zero() {
    assert_eq!(
        encoded(Method::POST, &[], Some(0), true).0,
        "POST /a?b=1 HTTP/1.1\r\ncontent-length: 0\r\n\r\n"
    );
}

#[test]
fn a_given_content_length_frames_the_body_and_transfer_encoding_never_passes() {
    assert_eq!(
        encoded(
            Method::PUT,
            &[("content-length", "5"), ("transfer-encoding", "chunked")],
            None,
            false
        ),
        (
            "PUT /a?b=1 HTTP/1.1\r\ncontent-length: 5\r\n\r\n".to_owned(),
            Some(5)
        )
    );
}

#[test]
fn a_length_given_on_two_lines_goes_to_the_node_once() {
    assert_eq!(
        encoded(
            Method::POST,
            &[
                ("content-length", "5"),
                ("x-b", "2"),
                ("content-length", "5")
            ],
            Some(5),
            false
        ),
        (
            "POST /a?b=1 HTTP/1.1\r\ncontent-length: 5\r\nx-b: 2\r\n\r\n".to_owned(),
            Some(5)
        )
    );
}

#[test]
fn a_sized_body_gets_its_length_and_an_unsized_one_is_chunked() {
    assert_eq!(
        encoded(Method::POST, &[], Some(12), false),
        (
            "POST /a?b=1 HTTP/1.1\r\ncontent-length: 12\r\n\r\n".to_owned(),
            Some(12)
        )
    );
    assert_eq!(
        encoded(Method::POST, &[], None, false),
        (
            "POST /a?b=1 HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n".to_owned(),
            None
        )
    );
}
