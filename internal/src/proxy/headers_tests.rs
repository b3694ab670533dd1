//! Hop-by-hop stripping, forwarding fields and upgrade checks of [`super`], table-driven.

use super::*;

fn map(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).expect("valid"),
            HeaderValue::from_str(v).expect("valid"),
        );
    }
    h
}

#[test]
fn only_a_switch_to_websocket_alone_is_a_websocket_101() {
    let switches = |upgrade: &[&str], connection: &[&str]| {
        switches_to_websocket(
            upgrade.iter().map(|v| v.as_bytes()),
            connection.iter().map(|v| v.as_bytes()),
        )
    };
    assert!(switches(&["websocket"], &["Upgrade"]));
    assert!(switches(&["WebSocket"], &["keep-alive, upgrade"]));
    assert!(switches(&["websocket", " websocket "], &["upgrade"]));
    assert!(!switches(&["h2c"], &["Upgrade"]));
    assert!(!switches(&["websocket, h2c"], &["Upgrade"]));
    assert!(!switches(&[], &["Upgrade"]));
    assert!(!switches(&[" , "], &["Upgrade"]));
    assert!(!switches(&["websocket"], &[]));
    assert!(!switches(&["websocket"], &["keep-alive"]));
}

#[test]
fn strips_hop_by_hop_and_connection_named_headers() {
    let mut h = map(&[
        ("connection", "keep-alive, X-Custom"),
        ("connection", "x-other"),
        ("x-custom", "1"),
        ("x-other", "2"),
        ("keep-alive", "timeout=5"),
        ("transfer-encoding", "chunked"),
        ("te", "trailers, deflate"),
        ("upgrade", "h2c"),
        ("http2-settings", "AAMAAABkAARAAAAAAAIAAAAA"),
        ("x-keep", "3"),
    ]);
    strip_hop_by_hop(&mut h);
    // HeaderMap order after removals is not meaningful: compare the set.
    let mut names: Vec<_> = h.keys().map(|k| k.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["te", "x-keep"]);
    assert_eq!(h["te"], "trailers");
}

#[test]
fn stripped_index_matches_the_table() {
    for (i, name) in STRIPPED.iter().enumerate() {
        assert_eq!(stripped_index(name.as_str().as_bytes()), Some(i), "{name}");
    }
    assert_eq!(stripped_index(b"x-keep"), None);
}

#[test]
fn a_lone_te_trailers_stays_and_any_other_te_is_reduced_to_it() {
    let mut h = map(&[("te", "Trailers"), ("content-type", "application/grpc")]);
    strip_hop_by_hop(&mut h);
    assert_eq!(h.get_all("te").iter().collect::<Vec<_>>(), ["Trailers"]);
    assert_eq!(h.len(), 2);
    // Two TE lines are one list: reduced to one `trailers`.
    let mut h = map(&[("te", "trailers"), ("te", "gzip")]);
    strip_hop_by_hop(&mut h);
    assert_eq!(h.get_all("te").iter().collect::<Vec<_>>(), ["trailers"]);
    // Nominated by Connection, it is still the one TE kept (CASE-08).
    let mut h = map(&[("connection", "TE"), ("te", "trailers")]);
    strip_hop_by_hop(&mut h);
    assert_eq!(h.get_all("te").iter().collect::<Vec<_>>(), ["trailers"]);
    assert!(h.get("connection").is_none());
}

#[test]
fn is_forwarding_matches_the_table() {
    for name in &FORWARDING {
        assert!(is_forwarding(name.as_str().as_bytes()), "{name}");
    }
    assert_eq!(FORWARDING[0], X_FORWARDED_FOR);
    assert!(!is_forwarding(b"x-forwarded"));
}

#[test]
fn the_strip_reports_forwarding_fields_it_saw() {
    for name in [
        "x-forwarded-for",
        "X-Forwarded-Proto",
        "x-forwarded-host",
        "x-forwarded-port",
        "x-forwarded-prefix",
        "forwarded",
        "x-real-ip",
    ] {
        let mut h = map(&[("te", "trailers"), (name, "1")]);
        assert!(strip_hop_by_hop(&mut h).forwarding, "{name}");
    }
    let mut h = map(&[("connection", "close"), ("x-forwarded", "1"), ("host", "a")]);
    assert!(!strip_hop_by_hop(&mut h).forwarding);
    assert!(!strip_hop_by_hop(&mut HeaderMap::new()).forwarding);
}

#[test]
fn te_without_trailers_is_dropped() {
    let mut h = map(&[("te", "gzip")]);
    strip_hop_by_hop(&mut h);
    assert!(h.get("te").is_none());
}

#[test]
fn websocket_upgrade_variants() {
    for (c, u) in [
        ("keep-alive, Upgrade", "websocket"),
        ("upgrade", "WebSocket"),
        ("Upgrade, keep-alive", "websocket"),
    ] {
        assert!(
            is_websocket_upgrade(&map(&[("connection", c), ("upgrade", u)])),
            "{c} / {u}"
        );
    }
    assert!(is_websocket_upgrade(&map(&[
        ("connection", "keep-alive"),
        ("connection", "Upgrade"),
        ("upgrade", "websocket")
    ])));
    assert!(!is_websocket_upgrade(&map(&[
        ("connection", "Upgrade"),
        ("upgrade", "h2c")
    ])));
}

#[test]
fn xff_lines_join_and_peer_is_appended() {
    let peer: SocketAddr = "127.0.0.9:5000".parse().expect("valid");
    let mut h = map(&[
        ("x-forwarded-for", "10.0.0.1"),
        ("x-forwarded-for", "127.0.0.1"),
        ("forwarded", "for=192.0.2.1"),
    ]);
    set_forwarded(
        &mut h,
        &Peer::new(peer),
        Some(&HeaderValue::from_static("app.example.test")),
        None,
    );
    assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
    assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.1, 127.0.0.9");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-host"], "app.example.test");
}

#[test]
fn untrusted_peer_loses_forwarded_headers_trusted_keeps_them() {
    let peer: SocketAddr = "127.0.0.9:5000".parse().expect("valid");
    let outside = ["10.0.0.0/8".parse().expect("valid")];
    let mut h = map(&[
        ("x-forwarded-for", "203.0.113.7"),
        ("forwarded", "for=192.0.2.1"),
        ("x-real-ip", "10.0.0.2"),
    ]);
    set_forwarded(&mut h, &Peer::new(peer), None, Some(&outside));
    assert_eq!(h["x-forwarded-for"], "127.0.0.9");
    assert!(h.get("forwarded").is_none() && h.get("x-real-ip").is_none());
    let inside = ["127.0.0.0/8".parse().expect("valid")];
    let mut h = map(&[("x-forwarded-for", "203.0.113.7")]);
    set_forwarded(&mut h, &Peer::new(peer), None, Some(&inside));
    assert_eq!(h["x-forwarded-for"], "203.0.113.7, 127.0.0.9");
}
