//! [`super::TextFields`] writes what tracing-subscriber's `DefaultFields` writes, byte for byte.

use std::sync::{Arc, Mutex};

use tracing_subscriber::fmt::MakeWriter;

use super::TextFields;

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("buffer").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Buf {
    type Writer = Buf;
    fn make_writer(&'a self) -> Buf {
        self.clone()
    }
}

/// The lines `emit` logs, formatted with the default field formatter and with ours.
fn both(emit: impl Fn()) -> (String, String) {
    let (theirs, ours) = (Buf::default(), Buf::default());
    let default = tracing_subscriber::fmt()
        .without_time()
        .with_ansi(false)
        .with_writer(theirs.clone())
        .finish();
    tracing::subscriber::with_default(default, &emit);
    let text = tracing_subscriber::fmt()
        .without_time()
        .with_ansi(false)
        .fmt_fields(TextFields)
        .with_writer(ours.clone())
        .finish();
    tracing::subscriber::with_default(text, &emit);
    let s = |b: Buf| String::from_utf8(b.0.lock().expect("buffer").clone()).expect("utf-8");
    (s(theirs), s(ours))
}

#[derive(Debug)]
struct Odd;

#[derive(Debug, thiserror::Error)]
#[error("outer")]
struct Outer(#[source] std::io::Error);

#[test]
fn every_kind_of_field_is_written_as_the_default_writes_it() {
    let (theirs, ours) = both(|| {
        let span = tracing::info_span!("websocket", conn_id = "c \"1\"", n = 3u64);
        let _g = span.enter();
        tracing::info!(
            target: "access",
            client = %"127.0.0.1:5",
            method = "GET",
            path = %"/a b",
            status = 200u16,
            duration_ms = format_args!("{:.3}", 1.5f64),
            quoted = "say \"hi\"\\ \t\n\u{7f}\u{1b}é",
            neg = -4i64,
            yes = true,
            f = 0.25f64,
            big = u128::MAX,
            odd = ?Odd,
            none = Option::<&str>::None,
            some = Some("x"),
            r#type = "raw",
            err = &Outer(std::io::Error::other("inner")) as &(dyn std::error::Error + 'static),
            "message with \u{1b}[31m escape {}", 7
        );
        tracing::warn!("only a message");
        tracing::info!(a = 1u64, "message last");
        span.record("n", 4u64);
        tracing::info!(b = "after record");
    });
    assert_eq!(ours, theirs);
    assert!(
        ours.contains("quoted=\"say \\\"hi\\\"\\\\ \\t\\n\\u{7f}\\u{1b}é\""),
        "{ours}"
    );
    assert!(
        ours.contains("websocket{conn_id=\"c \\\"1\\\"\" n=3}"),
        "{ours}"
    );
}

#[test]
fn the_hop_line_reads_as_before() {
    let (theirs, ours) = both(|| {
        tracing::info!(
            conn_id = "c-1",
            from = "node-1",
            to = "node-2",
            reason = "node_lost",
            latency_ms = 12u64,
            served = true,
            "Hopping triggered for conn c-1 from node-1 to node-2"
        );
    });
    assert_eq!(ours, theirs);
    assert!(ours.contains("Hopping triggered for conn c-1 from node-1 to node-2 conn_id=\"c-1\""));
}

#[test]
fn messages_are_sanitised_as_the_default_sanitises_them() {
    let (theirs, ours) = both(|| {
        tracing::info!("plain message {} with {:?}", "text", "debug");
        tracing::info!("bell \u{7} bs \u{8} ff \u{c} del \u{7f} esc \u{1b}[1m");
        tracing::info!(n = 1u64, "c1 \u{85} and \u{9f}, not c1 \u{a0} é \u{c2}");
        tracing::info!("{}", "\u{1b}\u{1b}");
        tracing::info!(message = "a message as a str \u{1b}", k = "v");
        tracing::info!(message = ?"a message as debug \u{1b}");
    });
    assert_eq!(ours, theirs);
    assert!(ours.contains("esc \\x1b[1m"), "{ours}");
    assert!(ours.contains("c1 \\u{85} and \\u{9f}"), "{ours}");
}
