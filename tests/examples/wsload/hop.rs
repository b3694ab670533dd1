//! Hop mode (bench/ws-hop.sh, `--hop-kill PID`): idle sockets through a `websocket = "hop"`
//! route, SIGKILL to one node, and the time until each of its sockets reads the new node's hello
//! (SPEC section 9).

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use crate::args::Args;
use crate::conn::{open_many, Ws};
use crate::stats::{cpu_ms, ms, spread};

/// What one watched socket saw after the kill.
pub(crate) enum Outcome {
    /// A hello whose `hopped_from` is the killed node: when it was read and the new node's id.
    Hopped(Instant, Option<String>),
    /// A Close frame (code) or the end of the stream (error, if any).
    Closed(String),
    /// Neither before the watch stopped.
    Waiting,
}

/// What a watcher returns: the outcome, the number of other data messages read (none are expected
/// on idle sockets), and the socket unless it ended. The socket is kept open past its hop: a client
/// that closed each socket as it hopped would add the gateway's teardown of it to the CPU time
/// measured for the hops.
pub(crate) type Watched = (Outcome, u64, Option<Ws>);

/// Reads `ws` until a hello with `hopped_from == from` (only when `expect_hop`), a close, or
/// `stop`.
pub(crate) async fn watch_socket(
    mut ws: Ws,
    expect_hop: bool,
    from: String,
    mut stop: watch::Receiver<bool>,
) -> Watched {
    let mut unexpected = 0u64;
    loop {
        let msg = tokio::select! {
            m = ws.next() => m,
            _ = stop.wait_for(|s| *s) => return (Outcome::Waiting, unexpected, Some(ws)),
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
                return (Outcome::Closed(what), unexpected, None);
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return (Outcome::Closed(format!("error: {e}")), unexpected, None),
            None => {
                return (
                    Outcome::Closed("end of stream".to_owned()),
                    unexpected,
                    None,
                )
            }
        };
        let hello: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if expect_hop && hello["hopped_from"].as_str() == Some(from.as_str()) {
            let to = hello["node"].as_str().map(str::to_owned);
            return (Outcome::Hopped(at, to), unexpected, Some(ws));
        }
        unexpected += 1;
    }
}

/// The watchers' results so far.
#[derive(Default)]
struct Tally {
    seen: Seen,
    closed: usize,
    first_close: Option<String>,
    /// Sockets of the killed node without a hop when the watch stopped.
    waiting: usize,
}

/// What hop and scale mode count alike of every watched socket.
#[derive(Default)]
pub(crate) struct Seen {
    /// Kill-to-hello time of each hop.
    pub(crate) hops: Vec<Duration>,
    /// Hops per new node id (`?` when the hello named none).
    pub(crate) hopped_to: BTreeMap<String, u64>,
    pub(crate) unexpected: u64,
    /// The sockets still open, dropped only after the figures are taken.
    pub(crate) open: Vec<Ws>,
}

impl Seen {
    /// Counts a watcher's messages, open socket and hop (`t0`: the kill); returns the outcome
    /// when it is not a hop.
    pub(crate) fn add(&mut self, (outcome, extra, ws): Watched, t0: Instant) -> Option<Outcome> {
        self.unexpected += extra;
        self.open.extend(ws);
        let Outcome::Hopped(at, to) = outcome else {
            return Some(outcome);
        };
        self.hops.push(at.saturating_duration_since(t0));
        *self
            .hopped_to
            .entry(to.unwrap_or_else(|| "?".to_owned()))
            .or_default() += 1;
        None
    }
}

/// Spawns `task` of each socket of `conns` (with whether its hello names `hop_node`), the killed
/// node's sockets in the first set, the others in the second.
pub(crate) fn spawn_watchers<F, Fut>(
    conns: Vec<(Ws, String)>,
    hop_node: &str,
    task: F,
) -> (JoinSet<Fut::Output>, JoinSet<Fut::Output>)
where
    F: Fn(Ws, bool) -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let mut on_node = JoinSet::new();
    let mut others = JoinSet::new();
    for (ws, hello) in conns {
        let hello: Value = serde_json::from_str(&hello).unwrap_or(Value::Null);
        let mine = hello["node"].as_str() == Some(hop_node);
        if mine {
            on_node.spawn(task(ws, mine));
        } else {
            others.spawn(task(ws, mine));
        }
    }
    (on_node, others)
}

impl Tally {
    /// Adds one watcher's result `r`; `mine`: the socket was on the killed node (only there is a
    /// missing hop counted as waiting); `t0`: the kill.
    fn add(&mut self, r: Result<Watched, JoinError>, mine: bool, t0: Instant) {
        match r {
            Ok(w) => match self.seen.add(w, t0) {
                Some(Outcome::Closed(what)) => {
                    self.closed += 1;
                    self.first_close.get_or_insert(what);
                }
                Some(Outcome::Waiting) if mine => self.waiting += 1,
                _ => {}
            },
            Err(e) => {
                self.closed += 1;
                self.first_close
                    .get_or_insert_with(|| format!("watch task failed: {e}"));
            }
        }
    }
}

/// Sends SIGKILL to `pid` (`kill -9`); returns the instant `kill` returned and the CPU time of
/// each of `pids` then. Errors: `kill` could not run or failed.
pub(crate) async fn kill_node(pid: u32, pids: &[u32]) -> Result<(Instant, Vec<Option<u64>>)> {
    let status = tokio::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .await
        .context("running kill")?;
    let t0 = Instant::now();
    let cpu_before: Vec<Option<u64>> = pids.iter().map(|&p| cpu_ms(p)).collect();
    if !status.success() {
        bail!("kill -9 {pid} failed: {status}");
    }
    Ok((t0, cpu_before))
}

/// The CPU milliseconds each of `pids` used since `before` (null where either read failed).
pub(crate) fn cpu_since(before: &[Option<u64>], pids: &[u32]) -> Vec<Value> {
    let cpu_after: Vec<Option<u64>> = pids.iter().map(|&p| cpu_ms(p)).collect();
    before
        .iter()
        .zip(&cpu_after)
        .map(|(b, a)| match (b, a) {
            (Some(b), Some(a)) => json!(a.saturating_sub(*b)),
            _ => Value::Null,
        })
        .collect()
}

/// Hop mode (see the crate docs): opens the sockets, kills `pid`, times every hop off its node
/// and prints the JSON object. Errors: empty `--steps`, or the kill failed.
pub(crate) async fn run(args: &Args, pid: u32) -> Result<()> {
    let target = *args.steps.last().context("--steps is empty")?;
    let (conns, failed, first_error) = open_many(&args.target, target, args.concurrency).await;
    let open_count = conns.len();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (mut on_node, mut others) = spawn_watchers(conns, &args.hop_node, |ws, mine| {
        watch_socket(ws, mine, args.hop_node.clone(), stop_rx.clone())
    });
    let on_hop_node = on_node.len();
    // Let the handshakes' last bytes settle: the sockets are idle when the node dies.
    tokio::time::sleep(args.settle).await;
    let (t0, cpu_before) = kill_node(pid, &args.pids).await?;
    let deadline = t0 + args.hop_wait;
    let mut t = Tally::default();
    // The killed node's sockets end when they hop or close; the deadline stops the rest.
    while let Ok(Some(r)) = tokio::time::timeout_at(deadline, on_node.join_next()).await {
        t.add(r, true, t0);
    }
    let cpu = cpu_since(&cpu_before, &args.pids);
    let _ = stop_tx.send(true);
    while let Some(r) = on_node.join_next().await {
        t.add(r, true, t0);
    }
    // Sockets on the other nodes: only a close counts (a hop is not expected there).
    while let Some(r) = others.join_next().await {
        t.add(r, false, t0);
    }
    t.seen.hops.sort_unstable();
    let hops = &t.seen.hops;
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
            "hopped": hopped, "closed": t.closed, "first_close": t.first_close, "waiting": t.waiting,
            "unexpected_messages": t.seen.unexpected, "hopped_to": t.seen.hopped_to,
            "hop_ms": spread(hops),
            "all_hopped_ms": all, "wait_secs": args.hop_wait.as_secs_f64(),
            "pids": args.pids, "cpu_ms_during_hops": cpu,
        })
    );
    // A profiler of the gateway stops now, before the sockets close (`--hold-ms`).
    tokio::time::sleep(args.hold).await;
    drop(t.seen.open);
    Ok(())
}
