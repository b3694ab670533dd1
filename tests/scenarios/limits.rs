//! The gateway's size and count limits (SPEC section 3 `[limits]`, section 4): request line and
//! header block (HTTP/1.1 and an h2 `:path`), `max_body` for known and chunked lengths, and
//! `max_connections`. Each limit answers its own JSON status and forwards nothing; what is under
//! the limit passes byte for byte.

use std::time::Duration;

use integration_tests::check::{echo_header, json_error};
use integration_tests::load::{pattern, sha_hex};
use integration_tests::raw::{
    body_of, both_permits_taken, get_data, read_while_writing, refused, Raw,
};
use integration_tests::{request, Config, Gateway, Health, Mock, Route};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{timeout, Instant};

/// CASE-16: an over-long target gets 414 and an over-large header block 431 (JSON, nothing
/// forwarded); an 8,000-byte target and ~15 KiB of fields pass byte for byte.
/// Long on purpose: the refusals and the positive control run on one gateway, whose node count
/// proves nothing was forwarded.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case16_long_target_and_header_block_get_414_431_and_control_passes_byte_for_byte() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&Config::single(Health::tcp_fast(), &[&a], Route::api()).toml()).await;

    // Past hyper's own URI limit (65,534 bytes): still the gateway's JSON 414, judged before
    // hyper reads the head. Past the 16 KiB request-line limit: the gateway's JSON 414.
    for fill in [70_000 - 8, 17 * 1024] {
        let target = format!("/echo?q={}", "a".repeat(fill));
        let (h, body) = refused(
            gw.port,
            format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(h.status, 414);
        assert_eq!(json_error(&body), "request line longer than 16384 bytes");
    }
    // A 64 KiB cookie: 431.
    let (h, body) = refused(
        gw.port,
        format!(
            "GET /echo HTTP/1.1\r\nHost: x\r\nCookie: c={}\r\n\r\n",
            "b".repeat(64 * 1024)
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(h.status, 431);
    assert_eq!(
        json_error(&body),
        "request header block larger than 32768 bytes"
    );
    // 200 header fields: 431.
    let fields: String = (0..200).map(|i| format!("X-F{i}: v\r\n")).collect();
    let (h, body) = refused(
        gw.port,
        format!("GET /echo HTTP/1.1\r\nHost: x\r\n{fields}\r\n").as_bytes(),
    )
    .await;
    assert_eq!(h.status, 431);
    assert_eq!(
        json_error(&body),
        "request header block larger than 100 fields"
    );
    assert_eq!(a.requests().await, 0, "nothing forwarded");

    // Positive control: an 8,000-byte target and a ~15 KiB header block pass byte for byte.
    let query: String = (0..8000 - "/echo/ctl?q=".len())
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let target = format!("/echo/ctl?q={query}");
    assert_eq!(target.len(), 8000);
    let values: Vec<String> = (0..10)
        .map(|i| {
            pattern(1500, i + 1)
                .iter()
                .map(|b| (b'!' + b % 90) as char)
                .collect()
        })
        .collect();
    let mut wire = format!("GET {target} HTTP/1.1\r\nHost: x\r\n");
    for (i, v) in values.iter().enumerate() {
        wire.push_str(&format!("X-Fill-{i}: {v}\r\n"));
    }
    wire.push_str("\r\n");
    let mut c = Raw::connect(gw.port).await;
    c.send(wire.as_bytes()).await;
    let (h, body) = c.response(Duration::from_secs(5)).await;
    assert_eq!(h.status, 200);
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo");
    assert_eq!(
        format!(
            "{}?{}",
            echo["path"].as_str().expect("path"),
            echo["query"].as_str().expect("query")
        ),
        target
    );
    for (i, v) in values.iter().enumerate() {
        assert_eq!(
            echo_header(&echo, &format!("x-fill-{i}")),
            std::slice::from_ref(v)
        );
    }
    assert_eq!(a.requests().await, 1);
}

/// CASE-16 (h2): a `:path` past the request-line limit gets the gateway's JSON 414 on its stream;
/// a 60,000-byte `:path` (past the h2 header list limit too) is refused on its stream only (414,
/// 431 or a stream reset), never 502; nothing is forwarded and the connection keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case16_h2_long_path_is_refused_on_its_stream_only() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&Config::single(Health::tcp_fast(), &[&a], Route::api()).toml()).await;
    let mut c = integration_tests::h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let long = format!("/echo?q={}", "a".repeat(20_000));
    let r = c.get(&long, &[]).await.expect("an answer on the stream");
    assert_eq!(r.status, 414, "{}", r.text());
    assert_eq!(json_error(&r.body), "request line longer than 16384 bytes");
    // `http::Uri` (hyper's and this client's) caps a target at 65,534 bytes, so a 70,000-byte
    // `:path` cannot even be built here; hyper's h2 server refuses one on its stream before the
    // gateway runs. 60,000 bytes is past the gateway's h2 header list limit (48 KiB) too.
    let huge = format!("/echo?q={}", "a".repeat(60_000 - 8));
    match c.get(&huge, &[]).await {
        Ok(r) => assert!(
            matches!(r.status, 414 | 431),
            "60,000-byte :path got {} {}",
            r.status,
            r.text()
        ),
        // A stream-level refusal (RST_STREAM), or the client itself declining to send a header
        // list past the gateway's advertised limit: either way that stream only.
        Err(e) => eprintln!("FIGURE case16 h2 60,000-byte :path refused on its stream: {e}"),
    }
    let r = c.get("/echo/after", &[]).await.expect("the next stream");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        !c.send.is_closed() && !c.conn.is_finished(),
        "the connection was closed"
    );
    assert_eq!(
        a.requests().await,
        1,
        "only the control request was forwarded"
    );
}

/// CASE-23: `max_body` answers 413 before any body for a known length and cuts a chunked body at
/// the limit; a smaller body passes whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case23_max_body_is_413_up_front_for_a_known_length_and_at_the_limit_for_chunked() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(
        &Config::single(
            Health::tcp_fast(),
            &[&a],
            Route::api().line("max_body = 1048576"),
        )
        .toml(),
    )
    .await;

    // Known length over the limit: 413 before a byte of body is sent, nothing forwarded.
    let mut c = Raw::connect(gw.port).await;
    let t0 = Instant::now();
    c.send(b"PUT /echo/f HTTP/1.1\r\nHost: x\r\nContent-Length: 2097152\r\n\r\n")
        .await;
    let (h, body) = c.response(Duration::from_secs(2)).await;
    assert_eq!(h.status, 413);
    assert_eq!(json_error(&body), "request body larger than 1048576 bytes");
    assert!(t0.elapsed() < Duration::from_millis(500));
    assert!(c.closed_within(Duration::from_secs(2)).await);
    assert_eq!(a.requests().await, 0);

    // Chunked over the limit: streamed up to the limit, then cut with 413.
    let (raw, _) = read_while_writing(gw.port, Duration::from_secs(5), |mut wr| async move {
        if wr
            .write_all(b"PUT /echo/f HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
        let chunk = vec![b'z'; 64 * 1024];
        for _ in 0..32 {
            let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
            frame.extend_from_slice(&chunk);
            frame.extend_from_slice(b"\r\n");
            if wr.write_all(&frame).await.is_err() {
                return;
            }
        }
        let _ = wr.write_all(b"0\r\n\r\n").await;
    })
    .await;
    let text = String::from_utf8_lossy(&raw).to_string();
    assert!(text.starts_with("HTTP/1.1 413 "), "{text}");
    assert_eq!(
        json_error(body_of(&raw)),
        "request body larger than 1048576 bytes"
    );
    // Whether the node's handler saw the head before the abort is a race; it never sees a second
    // request, and the cut body never completes there.
    let seen = a.requests().await;
    assert!(
        seen <= 1,
        "at most the one aborted upstream request reaches the node, got {seen}"
    );

    // Under the limit: passes whole.
    let body = pattern(512 * 1024, 231);
    let r = request("PUT", &gw.url("/echo/f"), &[], body.clone())
        .await
        .expect("put");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["body_sha256"], sha_hex(&body));
}

/// `[limits] max_connections`: when every permit is taken the gateway logs it once at WARN with
/// the limit, further connections wait in the accept queue (not refused, not served), and a
/// waiting connection is served as soon as one closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_full_logs_once_and_new_connections_wait_for_a_free_slot() {
    let (a, gw, mut open) = both_permits_taken(&[]).await;
    gw.logs
        .wait_for(
            &[
                "connection limit reached; new connections wait",
                "max_connections=2",
            ],
            Duration::from_secs(2),
        )
        .await;
    // A third connection: accepted by the kernel, but the gateway takes no request from it.
    let mut third = get_data(gw.port).await;
    let mut byte = [0u8; 1];
    assert!(
        timeout(Duration::from_millis(800), third.s.read(&mut byte))
            .await
            .is_err(),
        "a connection past max_connections was served"
    );
    // One closes: the waiting one is served.
    drop(open.remove(0));
    let t0 = Instant::now();
    let (h, body) = third.response(Duration::from_secs(5)).await;
    assert_eq!(h.status, 200);
    assert_eq!(
        String::from_utf8_lossy(&body),
        format!("Data from Node node-a (Port {})", a.port)
    );
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(
        gw.logs
            .matching(&["connection limit reached; new connections wait"])
            .len(),
        1,
        "logged once per time the limit is reached"
    );
}
