//! `wsload`: the WebSocket load client of `make bench` (bench/run.sh). Built only there, with
//! `cargo build --release -p integration-tests --features bench --example wsload`.
//!
//! It opens idle WebSockets in steps (e.g. 2,000 then 10,000), reads the node's hello on each
//! (mock-backend `/ws` sends one, then echoes), and after each step reads the resident memory of
//! the proxy process(es) given by `--pid` (VmRSS from /proc/<pid>/status, summed) so the script can
//! report KiB per idle connection. Then it measures echo round trips at a fixed aggregate rate,
//! spread over all open connections, and prints one JSON object on stdout:
//!
//! `{"url":..,"base_rss_kib":N,"steps":[{"conns":N,"failed":N,"rss_kib":N,"kib_per_conn":F,
//!   "echo":{"count":N,"errors":N,"p50_ms":F,"p99_ms":F,"p999_ms":F}}]}`
//!
//! Flags: `--url ws://HOST:PORT/ws` or `wss://HOST:PORT/ws` (required), `--ca FILE` (PEM roots
//! for `wss://`, required with it; TLS via rustls with the ring provider, ALPN `http/1.1`, server
//! name = the URL's host), `--steps 2000,10000`, `--pid PID` (repeatable),
//! `--concurrency 256` (handshakes in flight), `--echo-secs 3`, `--echo-rate 1000` (messages/s in total),
//! `--settle-ms 1000` (wait after a step before reading RSS).
//!
//! Hop mode (`bench/ws-hop.sh`, issue 7: "the time to hop all of them after a kill"), selected by
//! `--hop-kill PID`: opens the last `--steps` count of idle sockets through a gateway route in
//! `websocket = "hop"` mode, counts those whose hello came from `--hop-node ID` (default `node-1`,
//! the node whose process is PID), waits `--settle-ms`, sends SIGKILL to PID (`kill -9`; the clock
//! starts when `kill` returns), and then waits up to `--hop-wait-secs` (default 60) for the next
//! hello on each of those sockets whose `hopped_from` is that node (the new node's hello, SPEC
//! section 9). Every socket, on the killed node or not, is watched for a close. Prints one JSON
//! object:
//!
//! `{"url":..,"target":N,"conns":N,"failed":N,"first_error":..,"hop_node":..,"on_hop_node":N,
//!   "hopped":N,"closed":N,"first_close":..,"waiting":N,"unexpected_messages":N,"hopped_to":{ID:N},
//!   "hop_ms":{"first":F,"p50":F,"p99":F,"max":F},"all_hopped_ms":F|null,"wait_secs":F,
//!   "pids":[PID],"cpu_ms_during_hops":[N|null]}`
//!
//! `hop_ms` is the time from the kill to each hop's hello as the client read it; `all_hopped_ms`
//! is the last of them when every socket of the node hopped (null otherwise); `closed` counts
//! sockets (on any node) that saw a Close or the end of the stream, and should be 0; `waiting`
//! counts sockets of the node still without a hop at the deadline. With `--pid PID` (repeatable),
//! `cpu_ms_during_hops` gives each process's CPU time (user + system) from the kill until the
//! last hop or the deadline, in the order of `pids`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::{stream, SinkExt, StreamExt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{timeout, Instant, MissedTickBehavior};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// A client byte stream: TCP for `ws://`, TLS over TCP for `wss://`.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

type Ws = WebSocketStream<Box<dyn Io>>;

/// Where and how to dial: the URL, and for `wss://` the TLS connector (trusting `--ca`).
#[derive(Clone)]
struct Target {
    url: String,
    tls: Option<tokio_rustls::TlsConnector>,
}

impl Target {
    /// `url` (`ws://` or `wss://`); `ca` (PEM file) is required for `wss://`.
    fn new(url: &str, ca: Option<&str>) -> Result<Target> {
        let tls = if url.starts_with("wss://") {
            let ca = ca.context("wss:// needs --ca FILE")?;
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).with_context(|| format!("read {ca}"))? {
                roots.add(c.context("CA PEM")?).context("add CA")?;
            }
            let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
            let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_no_client_auth();
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
            Some(tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg)))
        } else {
            None
        };
        Ok(Target {
            url: url.to_owned(),
            tls,
        })
    }

    /// TCP connect, the TLS handshake for `wss://`, then the WebSocket handshake.
    async fn connect(&self) -> Result<Ws> {
        let req = self.url.as_str().into_client_request().context("url")?;
        let host = req.uri().host().context("url has no host")?.to_owned();
        let port = req
            .uri()
            .port_u16()
            .unwrap_or(if self.tls.is_some() { 443 } else { 80 });
        let tcp = TcpStream::connect((host.as_str(), port))
            .await
            .context("connect")?;
        let io: Box<dyn Io> = match &self.tls {
            None => Box::new(tcp),
            Some(c) => {
                let name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned())
                    .context("server name")?;
                Box::new(c.connect(name, tcp).await.context("TLS handshake")?)
            }
        };
        let (ws, _) = tokio_tungstenite::client_async(req, io)
            .await
            .context("handshake")?;
        Ok(ws)
    }
}

/// Bound on one handshake plus hello, and on one echo round trip.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// At most this many echo workers (each owns a share of the connections).
const MAX_ECHO_WORKERS: usize = 64;

struct Args {
    url: String,
    ca: Option<String>,
    /// Built from `url` and `ca` once the flags are read.
    target: Target,
    steps: Vec<usize>,
    pids: Vec<u32>,
    concurrency: usize,
    echo_secs: f64,
    echo_rate: f64,
    settle: Duration,
    /// Hop mode: the PID of the node process to kill.
    hop_kill: Option<u32>,
    /// Hop mode: the id of the node that PID runs (its hello's `node`).
    hop_node: String,
    /// Hop mode: how long after the kill to wait for every hop.
    hop_wait: Duration,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        url: String::new(),
        ca: None,
        target: Target {
            url: String::new(),
            tls: None,
        },
        steps: vec![2000, 10000],
        pids: Vec::new(),
        concurrency: 256,
        echo_secs: 3.0,
        echo_rate: 1000.0,
        settle: Duration::from_millis(1000),
        hop_kill: None,
        hop_node: "node-1".to_owned(),
        hop_wait: Duration::from_secs(60),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--url" => a.url = value,
            "--ca" => a.ca = Some(value),
            "--steps" => {
                a.steps = value
                    .split(',')
                    .map(|s| s.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .context("--steps")?;
            }
            "--pid" => a.pids.push(value.parse().context("--pid")?),
            "--concurrency" => a.concurrency = value.parse().context("--concurrency")?,
            "--echo-secs" => a.echo_secs = value.parse().context("--echo-secs")?,
            "--echo-rate" => a.echo_rate = value.parse().context("--echo-rate")?,
            "--settle-ms" => {
                a.settle = Duration::from_millis(value.parse().context("--settle-ms")?)
            }
            "--hop-kill" => a.hop_kill = Some(value.parse().context("--hop-kill")?),
            "--hop-node" => a.hop_node = value,
            "--hop-wait-secs" => {
                a.hop_wait = Duration::from_secs_f64(value.parse().context("--hop-wait-secs")?)
            }
            other => bail!("unknown flag {other}"),
        }
    }
    if a.url.is_empty() {
        bail!("--url is required");
    }
    a.target = Target::new(&a.url, a.ca.as_deref())?;
    if a.steps.windows(2).any(|w| w[1] < w[0]) {
        bail!("--steps must not decrease");
    }
    Ok(a)
}

/// CPU time (user + system, all threads) of `pid` so far in milliseconds, from `/proc/<pid>/stat`
/// (fields 14 and 15, in clock ticks of 10 ms: `CLK_TCK` is 100 on Linux); None when unreadable.
fn cpu_ms(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after it follow its closing ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some((utime + stime) * 10)
}

/// Sum of VmRSS (KiB) over `pids`; 0 when none given.
fn rss_kib(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum()
}

/// One connection: handshake, then the node's hello (any first data message); returns the socket
/// and the hello's text (lossy UTF-8 for a binary one).
async fn open(target: Target) -> Result<(Ws, String)> {
    timeout(IO_TIMEOUT, async move {
        let mut ws = target.connect().await?;
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => return Ok((ws, t.as_str().to_owned())),
                Some(Ok(Message::Binary(b))) => {
                    return Ok((ws, String::from_utf8_lossy(&b).into_owned()))
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e).context("hello"),
                None => bail!("closed before the hello"),
            }
        }
    })
    .await
    .context("handshake timed out")?
}

/// Sends one text message and waits for its echo; returns the round trip.
async fn echo_once(ws: &mut Ws, seq: u64) -> Result<Duration> {
    let payload = format!("bench-echo-{seq}");
    let start = Instant::now();
    ws.send(Message::text(payload.clone()))
        .await
        .context("send")?;
    timeout(IO_TIMEOUT, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) if t.as_str() == payload => return Ok(start.elapsed()),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e).context("read"),
                None => bail!("closed"),
            }
        }
    })
    .await
    .context("echo timed out")?
}

/// The `p` quantile (0..=1, nearest rank) of the sorted `lat` in milliseconds, rounded to 1 µs;
/// null when `lat` is empty.
fn quantile_ms(lat: &[Duration], p: f64) -> Value {
    if lat.is_empty() {
        return Value::Null;
    }
    let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
    json!(ms(lat[i]))
}

/// `d` in milliseconds, rounded to 1 µs.
fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0
}

/// Opens `want` sockets to `url` with `concurrency` handshakes in flight; returns the open ones
/// (with their hellos), the number that failed and the first failure.
async fn open_many(
    target: &Target,
    want: usize,
    concurrency: usize,
) -> (Vec<(Ws, String)>, usize, Option<String>) {
    let results: Vec<Result<(Ws, String)>> = stream::iter(0..want)
        .map(|_| open(target.clone()))
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut open = Vec::with_capacity(want);
    let mut failed = 0usize;
    let mut first_error = None;
    for r in results {
        match r {
            Ok(c) => open.push(c),
            Err(e) => {
                failed += 1;
                first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
    (open, failed, first_error)
}

/// Echo round trips at `rate` messages/s in total for `secs`, over every connection in turn.
async fn echo_phase(conns: Vec<Ws>, rate: f64, secs: f64) -> (Vec<Ws>, Value) {
    let workers = conns.len().clamp(1, MAX_ECHO_WORKERS);
    let mut shares: Vec<Vec<Ws>> = (0..workers).map(|_| Vec::new()).collect();
    for (i, ws) in conns.into_iter().enumerate() {
        shares[i % workers].push(ws);
    }
    let period = Duration::from_secs_f64(workers as f64 / rate.max(1.0));
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for (w, mut share) in shares.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0u64;
            if share.is_empty() {
                return (share, lat, errors);
            }
            // Stagger the workers over one period so the aggregate rate is smooth.
            tokio::time::sleep(period.mul_f64(w as f64 / workers as f64)).await;
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let mut seq = 0u64;
            while Instant::now() < deadline {
                tick.tick().await;
                let idx = (seq as usize) % share.len();
                match echo_once(&mut share[idx], seq).await {
                    Ok(d) => lat.push(d),
                    Err(_) => errors += 1,
                }
                seq += 1;
            }
            (share, lat, errors)
        }));
    }
    let mut conns = Vec::new();
    let mut lat = Vec::new();
    let mut errors = 0u64;
    for t in tasks {
        match t.await {
            Ok((share, l, e)) => {
                conns.extend(share);
                lat.extend(l);
                errors += e;
            }
            Err(_) => errors += 1,
        }
    }
    lat.sort_unstable();
    let q = |p: f64| quantile_ms(&lat, p);
    let summary = json!({"count": lat.len(), "errors": errors, "p50_ms": q(0.50), "p99_ms": q(0.99), "p999_ms": q(0.999)});
    (conns, summary)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    if let Some(pid) = args.hop_kill {
        return hop_mode(&args, pid).await;
    }
    // Let the proxy settle before the baseline (its idle memory after start-up and warm-up).
    tokio::time::sleep(args.settle).await;
    let base = rss_kib(&args.pids);
    let mut conns: Vec<Ws> = Vec::new();
    let mut steps = Vec::new();
    for &target in &args.steps {
        let want = target.saturating_sub(conns.len());
        let (opened, failed, first_error) = open_many(&args.target, want, args.concurrency).await;
        conns.extend(opened.into_iter().map(|(ws, _)| ws));
        tokio::time::sleep(args.settle).await;
        let rss = rss_kib(&args.pids);
        let per_conn = if conns.is_empty() || args.pids.is_empty() {
            Value::Null
        } else {
            json!(((rss.saturating_sub(base)) as f64 / conns.len() as f64 * 100.0).round() / 100.0)
        };
        let (back, echo) =
            echo_phase(std::mem::take(&mut conns), args.echo_rate, args.echo_secs).await;
        conns = back;
        steps.push(json!({
            "target": target, "conns": conns.len(), "failed": failed, "first_error": first_error,
            "rss_kib": rss, "kib_per_conn": per_conn, "echo": echo,
        }));
        if failed > 0 {
            break;
        }
    }
    println!(
        "{}",
        json!({"url": args.url, "base_rss_kib": base, "steps": steps})
    );
    // Close politely but without waiting long: the script tears the proxies down next.
    let closing = stream::iter(conns).for_each_concurrent(256, |mut ws| async move {
        let _ = timeout(Duration::from_secs(2), ws.close(None)).await;
    });
    let _ = timeout(Duration::from_secs(10), closing).await;
    Ok(())
}

/// What one watched socket saw after the kill.
enum Outcome {
    /// A hello whose `hopped_from` is the killed node: when it was read and the new node's id.
    Hopped(Instant, Option<String>),
    /// A Close frame (code) or the end of the stream (error, if any).
    Closed(String),
    /// Neither before the watch stopped.
    Waiting,
}

/// Reads `ws` until a hello with `hopped_from == from` (only when `expect_hop`), a close, or
/// `stop`; also returns the number of other data messages read (none are expected on idle sockets).
async fn watch_socket(
    mut ws: Ws,
    expect_hop: bool,
    from: String,
    mut stop: watch::Receiver<bool>,
) -> (Outcome, u64) {
    let mut unexpected = 0u64;
    loop {
        let msg = tokio::select! {
            m = ws.next() => m,
            _ = stop.wait_for(|s| *s) => return (Outcome::Waiting, unexpected),
        };
        let at = Instant::now();
        let text = match msg {
            Some(Ok(Message::Text(t))) => t.as_str().to_owned(),
            Some(Ok(Message::Binary(b))) => String::from_utf8_lossy(&b).into_owned(),
            Some(Ok(Message::Close(c))) => {
                let what = c.map_or_else(
                    || "close frame without a code".to_owned(),
                    |c| format!("close {} {}", u16::from(c.code), c.reason),
                );
                return (Outcome::Closed(what), unexpected);
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return (Outcome::Closed(format!("error: {e}")), unexpected),
            None => return (Outcome::Closed("end of stream".to_owned()), unexpected),
        };
        let hello: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if expect_hop && hello["hopped_from"].as_str() == Some(from.as_str()) {
            let to = hello["node"].as_str().map(str::to_owned);
            return (Outcome::Hopped(at, to), unexpected);
        }
        unexpected += 1;
    }
}

/// Hop mode (see the module docs): opens the sockets, kills `pid`, times every hop off its node.
/// Long on purpose: open, kill and time are one measurement over the same sockets.
async fn hop_mode(args: &Args, pid: u32) -> Result<()> {
    let target = *args.steps.last().context("--steps is empty")?;
    let (conns, failed, first_error) = open_many(&args.target, target, args.concurrency).await;
    let open_count = conns.len();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut on_node = JoinSet::new();
    let mut others = JoinSet::new();
    for (ws, hello) in conns {
        let hello: Value = serde_json::from_str(&hello).unwrap_or(Value::Null);
        let mine = hello["node"].as_str() == Some(args.hop_node.as_str());
        let task = watch_socket(ws, mine, args.hop_node.clone(), stop_rx.clone());
        if mine {
            on_node.spawn(task);
        } else {
            others.spawn(task);
        }
    }
    let on_hop_node = on_node.len();
    // Let the handshakes' last bytes settle: the sockets are idle when the node dies.
    tokio::time::sleep(args.settle).await;
    let status = tokio::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .await
        .context("running kill")?;
    let t0 = Instant::now();
    let cpu_before: Vec<Option<u64>> = args.pids.iter().map(|&p| cpu_ms(p)).collect();
    if !status.success() {
        bail!("kill -9 {pid} failed: {status}");
    }
    let deadline = t0 + args.hop_wait;

    let mut hops: Vec<Duration> = Vec::with_capacity(on_hop_node);
    let mut hopped_to: BTreeMap<String, u64> = BTreeMap::new();
    let mut closed = 0usize;
    let mut first_close: Option<String> = None;
    let mut waiting = 0usize;
    let mut unexpected = 0u64;
    // `mine`: the socket was on the killed node (only there is a missing hop counted as waiting).
    let mut tally = |r: Result<(Outcome, u64), tokio::task::JoinError>, mine: bool| match r {
        Ok((outcome, extra)) => {
            unexpected += extra;
            match outcome {
                Outcome::Hopped(at, to) => {
                    hops.push(at.saturating_duration_since(t0));
                    *hopped_to
                        .entry(to.unwrap_or_else(|| "?".to_owned()))
                        .or_default() += 1;
                }
                Outcome::Closed(what) => {
                    closed += 1;
                    first_close.get_or_insert(what);
                }
                Outcome::Waiting if mine => waiting += 1,
                Outcome::Waiting => {}
            }
        }
        Err(e) => {
            closed += 1;
            first_close.get_or_insert_with(|| format!("watch task failed: {e}"));
        }
    };
    // The killed node's sockets end when they hop or close; the deadline stops the rest.
    while let Ok(Some(r)) = tokio::time::timeout_at(deadline, on_node.join_next()).await {
        tally(r, true);
    }
    let cpu_after: Vec<Option<u64>> = args.pids.iter().map(|&p| cpu_ms(p)).collect();
    let cpu: Vec<Value> = cpu_before
        .iter()
        .zip(&cpu_after)
        .map(|(b, a)| match (b, a) {
            (Some(b), Some(a)) => json!(a.saturating_sub(*b)),
            _ => Value::Null,
        })
        .collect();
    let _ = stop_tx.send(true);
    while let Some(r) = on_node.join_next().await {
        tally(r, true);
    }
    // Sockets on the other nodes: only a close counts (a hop is not expected there).
    while let Some(r) = others.join_next().await {
        tally(r, false);
    }
    hops.sort_unstable();
    let hopped = hops.len();
    let all = if hopped == on_hop_node && hopped > 0 {
        json!(ms(hops[hopped - 1]))
    } else {
        Value::Null
    };
    println!(
        "{}",
        json!({
            "url": args.url, "target": target, "conns": open_count, "failed": failed,
            "first_error": first_error, "hop_node": args.hop_node, "on_hop_node": on_hop_node,
            "hopped": hopped, "closed": closed, "first_close": first_close, "waiting": waiting,
            "unexpected_messages": unexpected, "hopped_to": hopped_to,
            "hop_ms": {
                "first": hops.first().map_or(Value::Null, |d| json!(ms(*d))),
                "p50": quantile_ms(&hops, 0.50), "p99": quantile_ms(&hops, 0.99),
                "max": hops.last().map_or(Value::Null, |d| json!(ms(*d))),
            },
            "all_hopped_ms": all, "wait_secs": args.hop_wait.as_secs_f64(),
            "pids": args.pids, "cpu_ms_during_hops": cpu,
        })
    );
    Ok(())
}
