//! Empty DATA frames (CASE-39, RUSTSEC-2026-0258; SPEC section 4 "empty-frame floods"; RFC 9113
//! sections 6.1 and 10.5): a flood of length-0 DATA frames on a stream whose node reads slowly is
//! cut with GOAWAY after a budget, costs bounded memory and CPU, adds nothing upstream, and the
//! node's request is aborted, never completed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration_tests::h2raw::{self, *};
use integration_tests::load::{prober, rss_sampler};
use integration_tests::nodes::{reporting_node, request_head};
use integration_tests::{find, Config, Gateway, Health, Route};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// What node-a saw of the upload: whether the body's last chunk came, and whether the connection
/// ended (FIN or reset) before it.
#[derive(Debug, PartialEq, Eq)]
struct Upload {
    last_chunk: bool,
    closed: bool,
}

/// Reads the body on `s` at 100 octets a second until `fast` is set, then at full speed, until the
/// last chunk or the connection's end.
async fn read_upload(s: &mut TcpStream, mut body: Vec<u8>, fast: &AtomicBool) -> Upload {
    loop {
        if find(&body, b"\r\n0\r\n\r\n").is_some() || body.starts_with(b"0\r\n\r\n") {
            return Upload {
                last_chunk: true,
                closed: false,
            };
        }
        let slow = !fast.load(Ordering::Relaxed);
        let mut chunk = vec![0u8; if slow { 100 } else { 64 * 1024 }];
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                return Upload {
                    last_chunk: false,
                    closed: true,
                }
            }
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
        if slow {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// The total CPU time (user + system) process `pid` used so far (/proc, clock ticks of 10 ms).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .expect("comm")
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    Duration::from_millis(ticks * 10)
}

/// Sends 16 KiB DATA frames on stream 1 while the gateway's windows allow, until it grants
/// nothing for 0.5 s (flow control of RFC 9113 section 6.9, the gateway's initial windows).
async fn fill_windows(rd: &mut Reader, wr: &mut tokio::net::tcp::OwnedWriteHalf) {
    let (mut conn, mut stream) = (65_535i64, 65_535i64);
    // The gateway's SETTINGS come first: its initial stream window may differ from the default
    // (it sends only one).
    let settings = loop {
        let f = rd
            .next(Instant::now() + Duration::from_secs(3))
            .await
            .expect("SETTINGS");
        if f.kind == SETTINGS && f.flags & 1 == 0 {
            break f;
        }
    };
    for s in settings
        .payload
        .chunks(6)
        .filter(|s| s.len() == 6 && s[..2] == [0, 4])
    {
        stream = i64::from(u32::from_be_bytes(s[2..].try_into().expect("4")));
    }
    // The gateway holds the client to its window only once the client acknowledged it.
    wr.write_all(&frame(SETTINGS, 1, 0, &[]))
        .await
        .expect("write");
    loop {
        while conn.min(stream) > 0 {
            let n = conn.min(stream).min(16_384) as usize;
            wr.write_all(&frame(DATA, 0, 1, &vec![b'x'; n]))
                .await
                .expect("write");
            conn -= n as i64;
            stream -= n as i64;
        }
        let Some(f) = rd.next(Instant::now() + Duration::from_millis(500)).await else {
            return;
        };
        match (f.kind, f.stream) {
            (WINDOW_UPDATE, 0) => conn += i64::from(f.word(0)),
            (WINDOW_UPDATE, 1) => stream += i64::from(f.word(0)),
            (GOAWAY | RST_STREAM, _) => panic!("cut before the flood: {f:?}"),
            _ => {}
        }
    }
}

/// CASE-39: after the windows are full, 1,000,000 empty DATA frames are cut with GOAWAY
/// (ENHANCE_YOUR_CALM or PROTOCOL_ERROR) within 3 s and the connection closed; the gateway's RSS
/// grows by less than 16 MiB and it uses less than 3 s of CPU; node-a, reading at full speed
/// after the cut, finds its connection closed before any last chunk; other requests keep
/// answering within 1.1 s.
#[tokio::test]
async fn case_39_empty_data_flood_is_cut_and_adds_nothing_upstream() {
    let fast = Arc::new(AtomicBool::new(false));
    let flag = fast.clone();
    let (addr, mut uploads, _accepting) = reporting_node(4, move |mut s, tx| {
        let fast = flag.clone();
        async move {
            while let Some(h) = request_head(&mut s).await {
                if h.head.starts_with("post ") {
                    let _ = tx.send(read_upload(&mut s, Vec::new(), &fast).await).await;
                    return;
                }
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .await;
            }
        }
    })
    .await;
    let gw = Gateway::start(
        &Config::single_addrs(Health::tcp_fast(), &[("node-a", addr)], Route::api()).toml(),
    )
    .await;
    let pid = gw.pid().expect("running");
    let (cpu0, rss0) = (cpu_time(pid), gw.rss_kib());
    let (stop, probing) = prober(&gw);
    let (stop_rss, rss) = rss_sampler(pid);
    let (mut rd, mut wr) = h2raw::connect(&format!("127.0.0.1:{}", gw.port)).await;
    wr.write_all(&frame(HEADERS, END_HEADERS, 1, &hb("POST", "/upload")))
        .await
        .expect("write");
    fill_windows(&mut rd, &mut wr).await;
    let empty = frame(DATA, 0, 1, &[]);
    let started = Instant::now();
    let writer = flood(wr, empty.repeat(1_000_000));
    let mut seen = Vec::new();
    let g = rd
        .goaway(started + Duration::from_secs(3), &mut seen)
        .await
        .expect("GOAWAY within 3 s of the flood");
    assert!(
        [ENHANCE_YOUR_CALM, PROTOCOL_ERROR].contains(&g.code),
        "{g:?}"
    );
    assert!(
        rd.wait_closed(Instant::now() + Duration::from_secs(3))
            .await,
        "left open"
    );
    writer.abort();
    fast.store(true, Ordering::Relaxed);
    let upload = tokio::time::timeout(Duration::from_secs(5), uploads.recv())
        .await
        .expect("node-a's upload ended")
        .expect("report");
    assert_eq!(
        upload,
        Upload {
            last_chunk: false,
            closed: true
        }
    );
    let cpu1 = cpu_time(pid);
    stop_rss.store(true, Ordering::Relaxed);
    let rss1 = rss.await.expect("RSS sampler");
    stop.store(true, Ordering::Relaxed);
    let (n, bad, slowest) = probing.await.expect("prober");
    assert!(
        bad.is_empty() && slowest < Duration::from_millis(1100),
        "{n} probes, {bad:?}, slowest {slowest:?}"
    );
    assert!(
        rss1.saturating_sub(rss0) < 16 * 1024,
        "RSS grew {rss0} -> {rss1} KiB"
    );
    assert!(
        cpu1 - cpu0 < Duration::from_secs(3),
        "CPU {:?}",
        cpu1 - cpu0
    );
}
