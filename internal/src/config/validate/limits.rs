//! `[limits]` (SPEC section 3): counts, sizes and timeouts of the request path.

use super::*;

/// A `[limits]` count of at least 1; reports a 0 and returns `default` for it and for none.
fn pos(c: &mut Check, key: &str, v: Option<u64>, default: usize) -> usize {
    match v {
        Some(0) => {
            c.err(key, "must be at least 1");
            default
        }
        Some(n) => n as usize,
        None => default,
    }
}

/// Validates `[limits]` (SPEC section 3): each key with its default when absent, checked in the
/// order the SPEC lists them.
pub(super) fn limits(c: &mut Check, f: &FileConfig) -> Limits {
    let l = &f.limits;
    // Each key is `limits.` and the name of its `LimitsFile` field: written once per key here.
    macro_rules! key {
        ($field:ident) => {
            concat!("limits.", stringify!($field))
        };
    }
    macro_rules! count {
        ($field:ident, $default:expr) => {
            pos(c, key!($field), l.$field, $default)
        };
    }
    macro_rules! duration {
        ($field:ident, $default:expr) => {
            c.duration(key!($field), l.$field.as_ref(), $default)
        };
    }
    let ws_idle = duration!(websocket_idle_timeout, Duration::ZERO);
    let body_min_rate = body_min_rate(c, l);
    Limits {
        max_request_line: count!(max_request_line, DEFAULT_MAX_REQUEST_LINE),
        max_header_bytes: count!(max_header_bytes, DEFAULT_MAX_HEADER_BYTES),
        max_headers: count!(max_headers, DEFAULT_MAX_HEADERS),
        header_read_timeout: duration!(header_read_timeout, DEFAULT_HEADER_READ_TIMEOUT),
        body_idle_timeout: duration!(body_idle_timeout, DEFAULT_BODY_IDLE_TIMEOUT),
        max_connections: count!(max_connections, DEFAULT_MAX_CONNECTIONS),
        websocket_idle_timeout: (!ws_idle.is_zero()).then_some(ws_idle),
        connect_timeout: duration!(connect_timeout, DEFAULT_CONNECT_TIMEOUT),
        upstream_idle_timeout: duration!(upstream_idle_timeout, DEFAULT_UPSTREAM_IDLE_TIMEOUT),
        body_min_rate,
        h2: h2_limits(c, l),
        websocket_max_message: size(
            c,
            key!(websocket_max_message),
            l.websocket_max_message.as_ref(),
            DEFAULT_WEBSOCKET_MAX_MESSAGE,
        ),
    }
}

/// `limits.body_min_rate` over `limits.body_rate_window`: `None` for a rate of 0 (no minimum); a
/// window of 0s is reported and the default window used.
fn body_min_rate(c: &mut Check, l: &super::file::LimitsFile) -> Option<BodyMinRate> {
    let rate_window = c.duration(
        "limits.body_rate_window",
        l.body_rate_window.as_ref(),
        DEFAULT_BODY_RATE_WINDOW,
    );
    if rate_window.is_zero() {
        c.err("limits.body_rate_window", "must be more than 0s");
    }
    match l.body_min_rate.unwrap_or(DEFAULT_BODY_MIN_RATE) {
        0 => None,
        bytes_per_sec => Some(BodyMinRate {
            bytes_per_sec,
            window: if rate_window.is_zero() {
                DEFAULT_BODY_RATE_WINDOW
            } else {
                rate_window
            },
        }),
    }
}

/// The `limits.h2_*` keys.
fn h2_limits(c: &mut Check, l: &super::file::LimitsFile) -> H2Limits {
    H2Limits {
        max_concurrent_streams: u32::try_from(pos(
            c,
            "limits.h2_max_concurrent_streams",
            l.h2_max_concurrent_streams,
            DEFAULT_H2_MAX_CONCURRENT_STREAMS as usize,
        ))
        .unwrap_or(u32::MAX),
        max_header_list: u32::try_from(size(
            c,
            "limits.h2_max_header_list",
            l.h2_max_header_list.as_ref(),
            u64::from(DEFAULT_H2_MAX_HEADER_LIST),
        ))
        .unwrap_or(u32::MAX),
        max_resets_per_second: NonZeroU32::new(
            u32::try_from(pos(
                c,
                "limits.h2_max_resets_per_second",
                l.h2_max_resets_per_second,
                DEFAULT_H2_MAX_RESETS_PER_SECOND as usize,
            ))
            .unwrap_or(u32::MAX),
        )
        .expect("pos() never returns 0"),
    }
}

/// A `[limits]` size of at least 1 byte; reports a bad one and returns `default`.
pub(super) fn size(
    c: &mut Check,
    key: &str,
    v: Option<&super::size::SizeFile>,
    default: u64,
) -> u64 {
    match v.map(super::size::SizeFile::bytes) {
        None => default,
        Some(Ok(0)) => {
            c.err(key, "must be at least 1 byte");
            default
        }
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            c.err(key, e);
            default
        }
    }
}
