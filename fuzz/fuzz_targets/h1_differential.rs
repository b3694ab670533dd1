//! Differential: the gateway's request-head verdict (`proxy::downstream::http1::request::parse`) against
//! hyper's HTTP/1.1 server on the same bytes (over `tokio::io::duplex`, a service that answers
//! 200, the client's write side closed after the bytes, hyper's `half_close` on so it answers a
//! head followed by the end of the stream).
//!
//! - Whatever hyper refuses (a 4xx, or no answer to a complete head), the gateway refuses too.
//! - What hyper accepts the gateway accepts, except where a documented rule of `proxy::http1_codec::head` is
//!   stricter (RFC 9112 sections 6.1 and 6.3, SPEC section 4 limits): each exception is listed in
//!   [`stricter`], and a refusal for any other reason fails the target.
#![no_main]
use std::sync::OnceLock;
use std::time::Duration;

use bytes::BytesMut;
use internal::proxy::http1_codec::head::{HeadLimits, Refusal};
use internal::proxy::downstream::http1::request;
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMITS: HeadLimits = HeadLimits {
    max_request_line: 16384,
    max_header_bytes: 32768,
    max_headers: 100,
};

#[derive(Debug, PartialEq)]
enum Verdict {
    Accepted,
    Refused,
    Incomplete,
}

/// The refusals where the gateway is stricter than hyper, on purpose.
fn stricter(why: &Refusal, data: &[u8]) -> bool {
    match why {
        // SPEC section 4 limits sit below hyper's own.
        Refusal::UriTooLong(_) | Refusal::HeadersTooLarge(_) => true,
        // RFC 9112 section 6.3: hyper frames CL + TE by TE alone; the gateway refuses (CASE-13).
        Refusal::BadRequest("Content-Length together with Transfer-Encoding") => true,
        // RFC 9112 section 6.1: hyper accepts any list ending in chunked, and repeated lines.
        Refusal::BadRequest("Transfer-Encoding other than a single \"chunked\"") => true,
        // hyper accepts a comma list of equal lengths ("5, 5"); the gateway wants digits only.
        Refusal::BadRequest("invalid Content-Length") => data.contains(&b','),
        _ => false,
    }
}

fn ours(data: &[u8]) -> (Verdict, Option<Refusal>) {
    match request::parse(&mut BytesMut::from(data), &LIMITS) {
        Ok(Some(_)) => (Verdict::Accepted, None),
        Ok(None) => (Verdict::Incomplete, None),
        Err(why) => (Verdict::Refused, Some(why)),
    }
}

fn hyper_verdict(data: &[u8]) -> Verdict {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let rt = RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    });
    rt.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let serve = tokio::spawn(async move {
            let svc = hyper::service::service_fn(|_req| async {
                Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Empty::<
                    bytes::Bytes,
                >::new()))
            });
            // The client's write side closes right after the bytes: without half_close, hyper
            // drops a connection whose read side ends mid-message (`mid_message_detect_eof`)
            // before its service answers, whatever the bytes; that is hyper's EOF policy, not
            // its parser's verdict.
            let _ = hyper::server::conn::http1::Builder::new()
                .half_close(true)
                .serve_connection(hyper_util::rt::TokioIo::new(server), svc)
                .await;
        });
        let _ = client.write_all(data).await;
        let _ = client.shutdown().await;
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut out)).await;
        serve.abort();
        // An HTTP/1.0 request is answered in HTTP/1.0.
        let status = out.get(9..12).filter(|_| out.starts_with(b"HTTP/1."));
        if status == Some(b"200") {
            Verdict::Accepted
        } else if status.is_some_and(|s| s[0] == b'4') {
            Verdict::Refused
        } else {
            Verdict::Incomplete
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let (ours, why) = ours(data);
    let theirs = hyper_verdict(data);
    match (&ours, &theirs) {
        (a, b) if a == b => {}
        (Verdict::Refused, Verdict::Accepted) => {
            let why = why.expect("refused");
            assert!(
                stricter(&why, data),
                "refused {why:?} what hyper accepts: {:?}",
                String::from_utf8_lossy(data)
            );
        }
        // hyper closes without an answer on some refusals (and on an incomplete head).
        (Verdict::Refused, Verdict::Incomplete) => {}
        // An incomplete head that hyper already refuses: ours refuses once the head is complete
        // or past its limits; a complete-looking refusal from hyper must be ours too.
        (Verdict::Incomplete, Verdict::Refused) => {}
        (a, b) => panic!(
            "gateway {a:?}, hyper {b:?}: {:?}",
            String::from_utf8_lossy(data)
        ),
    }
});
