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
//! Flags: `--url ws://HOST:PORT/ws` (required), `--steps 2000,10000`, `--pid PID` (repeatable),
//! `--concurrency 256` (handshakes in flight), `--echo-secs 3`, `--echo-rate 1000` (messages/s in total),
//! `--settle-ms 1000` (wait after a step before reading RSS).

use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::{stream, SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant, MissedTickBehavior};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Bound on one handshake plus hello, and on one echo round trip.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// At most this many echo workers (each owns a share of the connections).
const MAX_ECHO_WORKERS: usize = 64;

struct Args {
    url: String,
    steps: Vec<usize>,
    pids: Vec<u32>,
    concurrency: usize,
    echo_secs: f64,
    echo_rate: f64,
    settle: Duration,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        url: String::new(),
        steps: vec![2000, 10000],
        pids: Vec::new(),
        concurrency: 256,
        echo_secs: 3.0,
        echo_rate: 1000.0,
        settle: Duration::from_millis(1000),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--url" => a.url = value,
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
            other => bail!("unknown flag {other}"),
        }
    }
    if a.url.is_empty() {
        bail!("--url is required");
    }
    if a.steps.windows(2).any(|w| w[1] < w[0]) {
        bail!("--steps must not decrease");
    }
    Ok(a)
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

/// One connection: handshake, then the node's hello (any first data message).
async fn open(url: String) -> Result<Ws> {
    timeout(IO_TIMEOUT, async move {
        let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .context("handshake")?;
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(_) | Message::Binary(_))) => return Ok(ws),
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
    let q = |p: f64| -> Value {
        if lat.is_empty() {
            return Value::Null;
        }
        let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        json!((lat[i].as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0)
    };
    let summary = json!({"count": lat.len(), "errors": errors, "p50_ms": q(0.50), "p99_ms": q(0.99), "p999_ms": q(0.999)});
    (conns, summary)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    // Let the proxy settle before the baseline (its idle memory after start-up and warm-up).
    tokio::time::sleep(args.settle).await;
    let base = rss_kib(&args.pids);
    let mut conns: Vec<Ws> = Vec::new();
    let mut steps = Vec::new();
    for &target in &args.steps {
        let want = target.saturating_sub(conns.len());
        let url = args.url.clone();
        let results: Vec<Result<Ws>> = stream::iter(0..want)
            .map(|_| open(url.clone()))
            .buffer_unordered(args.concurrency.max(1))
            .collect()
            .await;
        let mut failed = 0usize;
        let mut first_error = None;
        for r in results {
            match r {
                Ok(ws) => conns.push(ws),
                Err(e) => {
                    failed += 1;
                    first_error.get_or_insert_with(|| format!("{e:#}"));
                }
            }
        }
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
