//! Idle + echo mode (bench/run.sh, bench/ws-mem.sh, bench/tls.sh): idle sockets in steps, the
//! proxies' RSS after each step, then echo round trips at a fixed aggregate rate.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::{stream, SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::time::{timeout, Instant, MissedTickBehavior};
use tokio_tungstenite::tungstenite::Message;

use crate::args::Args;
use crate::conn::{open_many, Ws, IO_TIMEOUT};
use crate::stats::{quantile_ms, rss_kib};

/// At most this many echo workers (each owns a share of the connections).
const MAX_ECHO_WORKERS: usize = 64;

/// Sends one text message and waits for its echo; returns the round trip. Errors: the send, a
/// read error, a close, or no echo within [`IO_TIMEOUT`].
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

/// Echo round trips at `rate` messages/s in total for `secs`, over every connection in turn;
/// returns the connections and the summary `{"count","errors","p50_ms","p99_ms","p999_ms"}`.
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

/// Idle + echo mode over `args` (see the crate docs): prints the JSON object on stdout, then
/// closes the sockets. Never fails once the flags are parsed (failures are counted in the JSON).
pub(crate) async fn run(args: &Args) -> Result<()> {
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
