//! Scale mode (`bench/scale.sh`, `--mode scale`): one run over many idle sockets through a proxy
//! to several nodes, in three phases on the same open sockets.
//!
//! 1. Idle: opens `--steps` sockets (e.g. `25000,50000,100000`, spread over `--source-addrs`),
//!    and after each step (and `--settle-ms`) reads the proxies' resident memory (`--pid`, VmRSS
//!    summed), the kernel's TCP figures (`/proc/net/sockstat`: sockets in use, buffer pages)
//!    and the socket slab caches (`/proc/slabinfo`: `TCP`, `sock_inode_cache`, `filp`,
//!    `eventpoll_epi`, `eventpoll_pwq`, active objects × object size), and the proxies' CPU time
//!    spent while the step opened. The kernel figures are host-wide: one proxied WebSocket is four
//!    TCP sockets on this host (client, proxy front, proxy back, node).
//! 2. Messages (with `--msg-secs`): the message-rate measurement of `msg.rs` on `--msg-conns`
//!    sockets of its own, with every idle socket still open.
//! 3. Storm (with `--hop-kill PID`): SIGKILL to the node process PID (`--hop-node ID`, the id in
//!    its hellos), then, for each socket that node held, the time until it read a hello with
//!    `hopped_from: ID` (served again by another node: the gateway's `websocket = "hop"`) or was
//!    closed (what nginx and HAProxy do), up to `--hop-wait-secs`.
//!
//! Prints one JSON object:
//!
//! `{"mode":"scale","url":..,"sources":N,"base":{SNAPSHOT},"steps":[{"target":N,"conns":N,
//!   "failed":N,"first_error":..,"open_secs":F,"cpu_ms_open":N|null,"cpu_us_per_open":F|null,
//!   SNAPSHOT,"kib_per_conn":F|null,"kernel_kib_per_conn":F}],"per_node":{ID:N},"msg":{..}|null,
//!   "storm":{"hop_node":..,"on_hop_node":N,"hopped":N,"closed":N,"closed_elsewhere":N,
//!   "first_close":..,"waiting":N,"failed_tasks":N,"unexpected_messages":N,"hopped_to":{ID:N},
//!   "hop_ms":{"first","p50","p99","max"},"all_hopped_ms":F|null,"close_ms":{"first","p50","max"},
//!   "all_closed_ms":F|null,"settled_ms":F|null,"wait_secs":F,"pids":[PID],
//!   "cpu_ms_during_storm":[N|null]}|null}`
//!
//! where SNAPSHOT is `"rss_kib":N,"tcp_inuse":N,"tcp_mem_pages":N,"sock_slab_kib":N`;
//! `kib_per_conn` is the proxies' RSS growth since `base` per open socket, `kernel_kib_per_conn`
//! the growth of TCP buffer pages plus socket slab per open socket (host-wide, see above);
//! `cpu_us_per_open` is the proxies' CPU time while the step opened per socket it opened.
//! `settled_ms` is the time from the kill until the last socket of the node hopped or closed (null
//! when some were still waiting at the deadline).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::args::Args;
use crate::conn::{open_many, Ws};
use crate::hop::{cpu_since, kill_node, spawn_watchers, watch_socket, Outcome, Seen, Watched};
use crate::stats::{cpu_ms, getconf, ms, rss_kib, spread};

/// The slab caches every TCP socket of a process holds objects in (`/proc/slabinfo` names).
const SOCKET_SLABS: [&str; 5] = [
    "TCP",
    "sock_inode_cache",
    "filp",
    "eventpoll_epi",
    "eventpoll_pwq",
];

/// Memory figures at one moment: the proxies' and the kernel's.
#[derive(Clone, Copy, Default)]
struct Snapshot {
    rss_kib: u64,
    tcp_inuse: u64,
    tcp_mem_pages: u64,
    sock_slab_kib: u64,
}

impl Snapshot {
    fn take(pids: &[u32]) -> Snapshot {
        let (tcp_inuse, tcp_mem_pages) = sockstat_tcp();
        Snapshot {
            rss_kib: rss_kib(pids),
            tcp_inuse,
            tcp_mem_pages,
            sock_slab_kib: socket_slab_kib(),
        }
    }

    fn json(&self) -> Value {
        json!({"rss_kib": self.rss_kib, "tcp_inuse": self.tcp_inuse,
               "tcp_mem_pages": self.tcp_mem_pages, "sock_slab_kib": self.sock_slab_kib})
    }
}

/// `/proc/net/sockstat`'s `TCP: inuse N ... mem M`: (N, M pages); zeros when unreadable.
fn sockstat_tcp() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("TCP:")) else {
        return (0, 0);
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    let field = |name: &str| {
        words
            .iter()
            .position(|w| *w == name)
            .and_then(|i| words.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("inuse"), field("mem"))
}

/// Active objects × object size over [`SOCKET_SLABS`] in `/proc/slabinfo`, KiB; 0 when unreadable
/// (it needs root).
fn socket_slab_kib() -> u64 {
    let text = std::fs::read_to_string("/proc/slabinfo").unwrap_or_default();
    let bytes: u64 = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let name = f.next()?;
            if !SOCKET_SLABS.contains(&name) {
                return None;
            }
            let active: u64 = f.next()?.parse().ok()?;
            let _total = f.next()?;
            let size: u64 = f.next()?.parse().ok()?;
            Some(active * size)
        })
        .sum();
    bytes / 1024
}

/// The kernel's page size in KiB (`getconf PAGESIZE`; 4 when it cannot run).
fn page_kib() -> u64 {
    getconf("PAGESIZE").map_or(4, |b| (b / 1024).max(1))
}

/// The CPU milliseconds of all `pids` so far; None when one is unreadable or none given.
fn cpu_ms_sum(pids: &[u32]) -> Option<u64> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().map(|&p| cpu_ms(p)).sum()
}

/// `x` rounded to 0.01.
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Scale mode over `args` (see the module docs): prints the JSON object on stdout. Errors: the
/// kill of the storm phase failed.
pub(crate) async fn run(args: &Args) -> Result<()> {
    tokio::time::sleep(args.settle).await;
    let page_kib = page_kib();
    let base = Snapshot::take(&args.pids);
    let mut conns: Vec<(Ws, String)> = Vec::new();
    let mut steps = Vec::new();
    for &target in &args.steps {
        let want = target.saturating_sub(conns.len());
        let cpu0 = cpu_ms_sum(&args.pids);
        let t0 = Instant::now();
        let (opened, failed, first_error) = open_many(&args.target, want, args.concurrency).await;
        let open_secs = t0.elapsed().as_secs_f64();
        let cpu = cpu0.zip(cpu_ms_sum(&args.pids)).map(|(a, b)| b - a);
        let newly = opened.len();
        conns.extend(opened);
        tokio::time::sleep(args.settle).await;
        let s = Snapshot::take(&args.pids);
        let n = conns.len().max(1) as f64;
        let per_conn = (!args.pids.is_empty() && !conns.is_empty())
            .then(|| round2(s.rss_kib.saturating_sub(base.rss_kib) as f64 / n));
        let kernel_kib = s.tcp_mem_pages.saturating_sub(base.tcp_mem_pages) * page_kib
            + s.sock_slab_kib.saturating_sub(base.sock_slab_kib);
        let per_open = cpu
            .filter(|_| newly > 0)
            .map(|c| round2(c as f64 * 1000.0 / newly as f64));
        let mut step = json!({
            "target": target, "conns": conns.len(), "failed": failed, "first_error": first_error,
            "open_secs": (open_secs * 1000.0).round() / 1000.0, "cpu_ms_open": cpu,
            "cpu_us_per_open": per_open,
            "kib_per_conn": per_conn, "kernel_kib_per_conn": round2(kernel_kib as f64 / n),
        });
        if let (Some(o), Value::Object(snap)) = (step.as_object_mut(), s.json()) {
            o.extend(snap);
        }
        eprintln!("wsload scale: {step}");
        steps.push(step);
        if failed > 0 {
            break;
        }
    }
    let mut per_node: BTreeMap<String, u64> = BTreeMap::new();
    for (_, hello) in &conns {
        let hello: Value = serde_json::from_str(hello).unwrap_or(Value::Null);
        let id = hello["node"].as_str().unwrap_or("?").to_owned();
        *per_node.entry(id).or_default() += 1;
    }
    let msg = match args.msg_secs {
        Some(secs) => {
            let m = crate::msg::measure(args, secs).await;
            eprintln!("wsload scale: messages {m}");
            m
        }
        None => Value::Null,
    };
    let (storm, open) = match args.hop_kill {
        Some(pid) => storm(args, pid, conns).await?,
        None => (Value::Null, conns.into_iter().map(|(ws, _)| ws).collect()),
    };
    println!(
        "{}",
        json!({
            "mode": "scale", "url": args.url, "sources": args.sources.len(),
            "base": base.json(), "steps": steps, "per_node": per_node, "msg": msg, "storm": storm,
        })
    );
    tokio::time::sleep(args.hold).await;
    // The process exit closes the sockets; a polite close of each would only slow the teardown.
    drop(open);
    Ok(())
}

/// What the storm saw on the killed node's sockets and the others.
#[derive(Default)]
struct Storm {
    seen: Seen,
    /// Kill-to-close time of each socket of the node that closed.
    closes: Vec<Duration>,
    closed_elsewhere: usize,
    first_close: Option<String>,
    waiting: usize,
}

impl Storm {
    /// Adds one watcher's result (`r`, the instant its watch ended); `mine`: on the killed node.
    fn add(&mut self, r: (Watched, Instant), mine: bool, t0: Instant) {
        let (w, ended) = r;
        match self.seen.add(w, t0) {
            Some(Outcome::Closed(what)) => {
                if mine {
                    self.closes.push(ended.saturating_duration_since(t0));
                } else {
                    self.closed_elsewhere += 1;
                }
                self.first_close.get_or_insert(what);
            }
            Some(Outcome::Waiting) if mine => self.waiting += 1,
            _ => {}
        }
    }
}

/// The storm phase: watches every socket of `conns`, kills `pid`, and times each socket of that
/// node until it hops or closes. Returns the JSON and the sockets still open. Errors: the kill.
async fn storm(args: &Args, pid: u32, conns: Vec<(Ws, String)>) -> Result<(Value, Vec<Ws>)> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let (mut on_node, mut others) = spawn_watchers(conns, &args.hop_node, |ws, mine| {
        let watch = watch_socket(ws, mine, args.hop_node.clone(), stop_rx.clone());
        async move { (watch.await, Instant::now()) }
    });
    let on_hop_node = on_node.len();
    tokio::time::sleep(args.settle).await;
    let (t0, cpu_before) = kill_node(pid, &args.pids)
        .await
        .context("the storm's kill")?;
    let deadline = t0 + args.hop_wait;
    let mut s = Storm::default();
    let mut failed_tasks = 0usize;
    while let Ok(Some(r)) = tokio::time::timeout_at(deadline, on_node.join_next()).await {
        match r {
            Ok(r) => s.add(r, true, t0),
            Err(_) => failed_tasks += 1,
        }
    }
    let cpu = cpu_since(&cpu_before, &args.pids);
    let _ = stop_tx.send(true);
    while let Some(r) = on_node.join_next().await {
        match r {
            Ok(r) => s.add(r, true, t0),
            Err(_) => failed_tasks += 1,
        }
    }
    while let Some(r) = others.join_next().await {
        match r {
            Ok(r) => s.add(r, false, t0),
            Err(_) => failed_tasks += 1,
        }
    }
    s.seen.hops.sort_unstable();
    s.closes.sort_unstable();
    let hopped = s.seen.hops.len();
    let closed = s.closes.len();
    let last = |d: &[Duration]| d.last().copied().unwrap_or_default();
    let settled = (s.waiting == 0 && failed_tasks == 0 && on_hop_node > 0)
        .then(|| ms(last(&s.seen.hops).max(last(&s.closes))));
    let json = json!({
        "hop_node": args.hop_node, "on_hop_node": on_hop_node, "hopped": hopped, "closed": closed,
        "closed_elsewhere": s.closed_elsewhere, "first_close": s.first_close, "waiting": s.waiting,
        "failed_tasks": failed_tasks, "unexpected_messages": s.seen.unexpected, "hopped_to": s.seen.hopped_to,
        "hop_ms": spread(&s.seen.hops),
        "all_hopped_ms": (hopped == on_hop_node && hopped > 0).then(|| ms(last(&s.seen.hops))),
        "close_ms": spread(&s.closes),
        "all_closed_ms": (closed == on_hop_node && closed > 0).then(|| ms(last(&s.closes))),
        "settled_ms": settled, "wait_secs": args.hop_wait.as_secs_f64(),
        "pids": args.pids, "cpu_ms_during_storm": cpu,
    });
    Ok((json, s.seen.open))
}
