//! Message-rate mode (`bench/ws-msg.sh`, `make bench`: CPU µs per WebSocket message),
//! selected by `--msg-secs N`: `--msg-conns` sockets (64), each with `--msg-inflight` (4) binary
//! messages of `--msg-bytes` (64) in flight, closed loop: every echo read sends the next message.
//! After `--msg-warmup-secs` (1) of warm-up it counts the round trips completed in `N` seconds and
//! the CPU ticks (user + system, `/proc/<pid>/stat`) of every `--pid` over exactly that window.
//!
//! A *message* is one client message relayed to the node plus its echo relayed back: one round
//! trip, two frames through the proxy. Prints one JSON object:
//!
//! `{"mode":"msg","url":..,"conns":N,"failed":N,"first_error":..,"inflight":N,"bytes":N,
//!   "secs":F,"messages":N,"total_messages":N,"msgs_per_sec":F,"errors":N,"p50_ms":F,"p99_ms":F,"p999_ms":F,
//!   "pids":[PID],"cpu_ticks":[N|null],"clk_tck":N,"cpu_us_per_msg":F|null}`
//!
//! `cpu_us_per_msg` is the summed CPU time of the pids over the window divided by `messages`
//! (null without `--pid`); `total_messages` counts every round trip, warm-up and drain included
//! (the divisor for a profile of the whole run). Latency is each message's send-to-echo time within the window.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::time::{timeout, Instant};
use tokio_tungstenite::tungstenite::Message;

use crate::args::Args;
use crate::conn::{open_many, Ws, IO_TIMEOUT};
use crate::stats::{cpu_ticks, getconf, quantile_ms};

/// The closed loop of one socket: keeps `inflight` messages of `payload` in flight until `stop`,
/// and returns the times of the round trips that ended while `counting` was set, and the number
/// of all round trips (warm-up and the drain after `stop` included). Echoes come back in order (one
/// TCP stream each way), so each echo is matched with the oldest send. Errors: a send or read
/// failure, a close, an echo that differs from what was sent, or no echo within [`IO_TIMEOUT`].
async fn closed_loop(
    ws: Ws,
    payload: bytes::Bytes,
    inflight: usize,
    counting: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> Result<(Vec<Duration>, u64)> {
    let (mut tx, mut rx) = ws.split();
    let mut sent: VecDeque<Instant> = VecDeque::with_capacity(inflight);
    let mut lat = Vec::new();
    let mut total = 0u64;
    for _ in 0..inflight {
        sent.push_back(Instant::now());
        tx.feed(Message::binary(payload.clone()))
            .await
            .context("send")?;
    }
    tx.flush().await.context("send")?;
    while !sent.is_empty() {
        let msg = timeout(IO_TIMEOUT, rx.next())
            .await
            .context("echo timed out")?;
        match msg {
            Some(Ok(Message::Binary(b))) => {
                if b != payload {
                    bail!("echo differs from the message sent");
                }
            }
            Some(Ok(Message::Text(_) | Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(m)) => bail!("unexpected {m:?}"),
            Some(Err(e)) => return Err(e).context("read"),
            None => bail!("closed"),
        }
        let at = sent
            .pop_front()
            .expect("an echo answers a message in flight");
        total += 1;
        if counting.load(Ordering::Relaxed) {
            lat.push(at.elapsed());
        }
        if !stop.load(Ordering::Relaxed) {
            sent.push_back(Instant::now());
            tx.send(Message::binary(payload.clone()))
                .await
                .context("send")?;
        }
    }
    let _ = timeout(Duration::from_secs(2), tx.close()).await;
    Ok((lat, total))
}

/// Message-rate mode over `args` (see the module docs): prints the JSON object on stdout. Never
/// fails once the flags are parsed (failures are counted in the JSON).
pub(crate) async fn run(args: &Args, secs: f64) -> Result<()> {
    tokio::time::sleep(args.settle).await;
    println!("{}", measure(args, secs).await);
    Ok(())
}

/// One message-rate measurement of `secs` over `args` on sockets of its own (also the message
/// phase of scale mode, next to the idle sockets): the JSON object of the module docs.
pub(crate) async fn measure(args: &Args, secs: f64) -> serde_json::Value {
    let (opened, failed, first_error) =
        open_many(&args.target, args.msg_conns, args.concurrency).await;
    let conns = opened.len();
    let payload = bytes::Bytes::from(vec![b'm'; args.msg_bytes]);
    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = opened
        .into_iter()
        .map(|(ws, _hello)| {
            tokio::spawn(closed_loop(
                ws,
                payload.clone(),
                args.msg_inflight,
                counting.clone(),
                stop.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(args.msg_warmup).await;
    let t0: Vec<Option<u64>> = args.pids.iter().map(|&p| cpu_ticks(p)).collect();
    let start = Instant::now();
    counting.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    counting.store(false, Ordering::Relaxed);
    let window = start.elapsed().as_secs_f64();
    let t1: Vec<Option<u64>> = args.pids.iter().map(|&p| cpu_ticks(p)).collect();
    stop.store(true, Ordering::Relaxed);
    let mut lat = Vec::new();
    let mut errors = 0u64;
    let mut total = 0u64;
    let mut first_error = first_error;
    for t in tasks {
        match t.await {
            Ok(Ok((l, n))) => {
                lat.extend(l);
                total += n;
            }
            Ok(Err(e)) => {
                errors += 1;
                first_error.get_or_insert_with(|| format!("{e:#}"));
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    lat.sort_unstable();
    let ticks: Vec<Option<u64>> = t0
        .iter()
        .zip(&t1)
        .map(|(a, b)| Some(b.as_ref()? - a.as_ref()?))
        .collect();
    let clk_tck = clk_tck();
    let messages = lat.len() as u64;
    let per_msg =
        (!ticks.is_empty() && messages > 0 && ticks.iter().all(Option::is_some)).then(|| {
            let total: u64 = ticks.iter().flatten().sum();
            let us = total as f64 * 1e6 / clk_tck as f64 / messages as f64;
            (us * 1000.0).round() / 1000.0
        });
    let q = |p: f64| quantile_ms(&lat, p);
    json!({
            "mode": "msg", "url": args.url, "conns": conns, "failed": failed,
            "first_error": first_error, "inflight": args.msg_inflight, "bytes": args.msg_bytes,
            "secs": (window * 1000.0).round() / 1000.0, "messages": messages, "total_messages": total,
            "msgs_per_sec": (messages as f64 / window).round(), "errors": errors,
            "p50_ms": q(0.50), "p99_ms": q(0.99), "p999_ms": q(0.999),
            "pids": args.pids, "cpu_ticks": ticks, "clk_tck": clk_tck, "cpu_us_per_msg": per_msg,
    })
}

/// Clock ticks per second of `/proc/<pid>/stat` times (`getconf CLK_TCK`; 100 on Linux).
fn clk_tck() -> u64 {
    getconf("CLK_TCK").unwrap_or(100)
}
