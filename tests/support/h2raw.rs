//! A frame-level HTTP/2 client for abuse and malformed-request tests (CASE-25, CASE-26, CASE-35 …
//! CASE-40): writes frames byte for byte (no flow control, no HPACK state), and reads what the
//! gateway sends back as frames, with how one stream ended ([`Reader::stream_end`]).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Client connection preface (RFC 9113 section 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Frame types.
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
/// Flags.
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
/// Error codes.
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const FLOW_CONTROL_ERROR: u32 = 0x3;
pub const STREAM_CLOSED: u32 = 0x5;
pub const FRAME_SIZE_ERROR: u32 = 0x6;
pub const CANCEL: u32 = 0x8;
pub const COMPRESSION_ERROR: u32 = 0x9;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One frame: 9-octet head + payload.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = u32::to_be_bytes(payload.len() as u32)[1..].to_vec();
    v.push(kind);
    v.push(flags);
    v.extend_from_slice(&stream.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// An HPACK integer with an `n`-bit prefix and the high bits `first`.
fn hpack_int(out: &mut Vec<u8>, first: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A literal header field without indexing, new name (RFC 7541 section 6.2.2), no Huffman.
pub fn hpack_literal(name: &str, value: &[u8]) -> Vec<u8> {
    let mut out = vec![0x00];
    hpack_int(&mut out, 0, 7, name.len());
    out.extend_from_slice(name.as_bytes());
    hpack_int(&mut out, 0, 7, value.len());
    out.extend_from_slice(value);
    out
}

/// `HB(METHOD path)` of CASES-R2: `:method` (GET and POST indexed, any other a literal with
/// the indexed name), `:scheme http`, `:path`, `:authority app.example.test`, all without
/// dynamic-table indexing so it can be repeated.
pub fn hb(method: &str, path: &str) -> Vec<u8> {
    let mut out = match method {
        "GET" => vec![0x82],
        "POST" => vec![0x83],
        other => {
            let mut m = vec![0x02];
            hpack_int(&mut m, 0, 7, other.len());
            m.extend_from_slice(other.as_bytes());
            m
        }
    };
    out.push(0x86);
    if path == "/" {
        out.push(0x84);
    } else {
        hpack_int(&mut out, 0x00, 4, 4);
        hpack_int(&mut out, 0, 7, path.len());
        out.extend_from_slice(path.as_bytes());
    }
    out.extend_from_slice(&[0x01, 0x10]);
    out.extend_from_slice(b"app.example.test");
    out
}

/// One frame the gateway sent.
#[derive(Debug, Clone)]
pub struct Got {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Got {
    /// The 32-bit word at `at` in the payload.
    pub fn word(&self, at: usize) -> u32 {
        u32::from_be_bytes(self.payload[at..at + 4].try_into().expect("4 bytes"))
    }
}

/// The `:status` a response HEADERS frame `block` opens with: indexed from the static table
/// (RFC 7541 appendix A: 200, 204, 206, 304, 400, 404, 500), or a literal with name index 8 whose
/// value is three digits, raw or Huffman-coded (the only codes a status needs). `None` otherwise.
pub fn status(block: &[u8]) -> Option<u16> {
    const INDEXED: [u16; 7] = [200, 204, 206, 304, 400, 404, 500];
    let first = *block.first()?;
    if (0x88..=0x8e).contains(&first) {
        return Some(INDEXED[usize::from(first - 0x88)]);
    }
    // Literal with incremental indexing (01), without indexing (0000) or never indexed (0001).
    if ![0x48, 0x08, 0x18].contains(&first) {
        return None;
    }
    let (huffman, len) = (block.get(1)? & 0x80 != 0, usize::from(block.get(1)? & 0x7f));
    let value = block.get(2..2 + len)?;
    let digits = if huffman {
        huffman_digits(value)?
    } else {
        String::from_utf8(value.to_vec()).ok()?
    };
    digits.parse().ok()
}

/// Decodes a Huffman string of digits (RFC 7541 appendix B: `0`–`2` are 5-bit codes 0–2, `3`–`9`
/// 6-bit codes 0x19–0x1f), ignoring the all-ones padding.
fn huffman_digits(bytes: &[u8]) -> Option<String> {
    let bits: Vec<u8> = bytes
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
        .collect();
    let (mut at, mut out) = (0, String::new());
    while at + 5 <= bits.len() {
        let code = |n: usize| bits[at..at + n].iter().fold(0u8, |v, b| v << 1 | b);
        if code(5) <= 2 {
            out.push(char::from(b'0' + code(5)));
            at += 5;
        } else if at + 6 <= bits.len() && (0x19..=0x1f).contains(&code(6)) {
            out.push(char::from(b'3' + code(6) - 0x19));
            at += 6;
        } else if bits[at..].iter().all(|b| *b == 1) {
            break;
        } else {
            return None;
        }
    }
    Some(out)
}

/// How one stream ended, as the gateway told the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEnd {
    /// RST_STREAM with this code (after `status`, if a response head came first).
    Reset { status: Option<u16>, code: u32 },
    /// A response with this `:status` that ended with END_STREAM; `body` is its DATA.
    Answer { status: u16, body: Vec<u8> },
    /// GOAWAY (after `status`, if a response head came first).
    GoAway { status: Option<u16>, goaway: GoAway },
    /// The connection closed, or the deadline passed, first.
    Nothing,
}

impl StreamEnd {
    /// True for the ending of a malformed request (RFC 9113 section 8.1.1): RST_STREAM or GOAWAY
    /// with PROTOCOL_ERROR, either possibly after a `400`; with `answer_400`, a `400` that ends
    /// the stream as well.
    pub fn malformed(&self, answer_400: bool) -> bool {
        match self {
            StreamEnd::Reset { status, code } => {
                *code == PROTOCOL_ERROR && matches!(status, None | Some(400))
            }
            StreamEnd::GoAway { status, goaway } => {
                goaway.code == PROTOCOL_ERROR && matches!(status, None | Some(400))
            }
            StreamEnd::Answer { status, .. } => answer_400 && *status == 400,
            StreamEnd::Nothing => false,
        }
    }
}

/// A GOAWAY's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoAway {
    pub last_stream: u32,
    pub code: u32,
    pub debug: String,
}

impl GoAway {
    /// The fields of `f` if it is a GOAWAY frame.
    pub fn of(f: &Got) -> Option<GoAway> {
        (f.kind == GOAWAY && f.stream == 0 && f.payload.len() >= 8).then(|| GoAway {
            last_stream: f.word(0) & 0x7fff_ffff,
            code: f.word(4),
            debug: String::from_utf8_lossy(&f.payload[8..]).into_owned(),
        })
    }
}

/// The read half: frames as they come.
pub struct Reader {
    rd: OwnedReadHalf,
    buf: Vec<u8>,
    /// True once the socket reached EOF or an error.
    pub closed: bool,
}

impl Reader {
    /// The next frame, or `None` at EOF / error / `deadline`.
    pub async fn next(&mut self, deadline: Instant) -> Option<Got> {
        loop {
            if self.buf.len() >= 9 {
                let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
                if self.buf.len() >= 9 + len {
                    let f = Got {
                        kind: self.buf[3],
                        flags: self.buf[4],
                        stream: u32::from_be_bytes(self.buf[5..9].try_into().expect("4"))
                            & 0x7fff_ffff,
                        payload: self.buf[9..9 + len].to_vec(),
                    };
                    self.buf.drain(..9 + len);
                    return Some(f);
                }
            }
            if self.closed {
                return None;
            }
            let mut chunk = vec![0u8; 64 * 1024];
            match tokio::time::timeout_at(deadline, self.rd.read(&mut chunk)).await {
                Err(_) => return None,
                Ok(Ok(0)) | Ok(Err(_)) => self.closed = true,
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Reads until a GOAWAY arrives (returned with every frame seen before it), or `None` by
    /// `deadline` / at a close without one.
    pub async fn goaway(&mut self, deadline: Instant, seen: &mut Vec<Got>) -> Option<GoAway> {
        while let Some(f) = self.next(deadline).await {
            if let Some(g) = GoAway::of(&f) {
                return Some(g);
            }
            seen.push(f);
        }
        None
    }

    /// Reads until stream `id` ends (a reset, a response with END_STREAM) or the connection is
    /// told to go away, by `deadline`; frames of other streams are skipped.
    pub async fn stream_end(&mut self, id: u32, deadline: Instant) -> StreamEnd {
        let (mut status, mut body) = (None, Vec::new());
        while let Some(f) = self.next(deadline).await {
            if let Some(goaway) = GoAway::of(&f) {
                return StreamEnd::GoAway { status, goaway };
            }
            match f.kind {
                _ if f.stream != id => continue,
                RST_STREAM => {
                    return StreamEnd::Reset {
                        status,
                        code: f.word(0),
                    }
                }
                HEADERS if status.is_none() => status = self::status(&f.payload),
                DATA => body.extend_from_slice(&f.payload),
                _ => {}
            }
            if f.flags & END_STREAM != 0 && matches!(f.kind, HEADERS | DATA) {
                if let Some(status) = status {
                    return StreamEnd::Answer { status, body };
                }
            }
        }
        StreamEnd::Nothing
    }

    /// Waits until the gateway closed the connection (EOF or reset) by `deadline`; true if it did.
    pub async fn wait_closed(&mut self, deadline: Instant) -> bool {
        while self.next(deadline).await.is_some() {}
        self.closed
    }
}

/// A connection that has sent the preface and an empty SETTINGS frame.
pub async fn connect(addr: &str) -> (Reader, OwnedWriteHalf) {
    let tcp = TcpStream::connect(addr).await.expect("connect to gateway");
    hello(tcp).await
}

/// As [`connect`], from source address `src` (a loopback address such as `127.0.0.2`, so that
/// one test can be several clients).
pub async fn connect_from(addr: &str, src: std::net::IpAddr) -> (Reader, OwnedWriteHalf) {
    let sock = tokio::net::TcpSocket::new_v4().expect("socket");
    sock.bind(std::net::SocketAddr::new(src, 0))
        .expect("bind the source address");
    let tcp = sock
        .connect(addr.parse().expect("gateway address"))
        .await
        .expect("connect to gateway");
    hello(tcp).await
}

async fn hello(tcp: TcpStream) -> (Reader, OwnedWriteHalf) {
    tcp.set_nodelay(true).expect("nodelay");
    let (rd, mut wr) = tcp.into_split();
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    wr.write_all(&hello).await.expect("preface");
    (
        Reader {
            rd,
            buf: Vec::new(),
            closed: false,
        },
        wr,
    )
}

/// Writes `bytes` in a background task (a flood the gateway may cut mid-way: write errors end it).
pub fn flood(mut wr: OwnedWriteHalf, bytes: Vec<u8>) -> tokio::task::JoinHandle<OwnedWriteHalf> {
    tokio::spawn(async move {
        for chunk in bytes.chunks(64 * 1024) {
            if wr.write_all(chunk).await.is_err() {
                break;
            }
        }
        wr
    })
}

/// Writes `frames()` again and again for at most `limit` (a flood without a fixed size).
pub fn flood_for(
    mut wr: OwnedWriteHalf,
    block: Vec<u8>,
    limit: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if wr.write_all(&block).await.is_err() {
                break;
            }
        }
    })
}
