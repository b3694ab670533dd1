//! The command line (flags in the crate docs of `main.rs`).

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::conn::Target;

/// The parsed flags, with their defaults.
pub(crate) struct Args {
    pub(crate) url: String,
    pub(crate) ca: Option<String>,
    /// Built from `url` and `ca` once the flags are read.
    pub(crate) target: Target,
    pub(crate) steps: Vec<usize>,
    pub(crate) pids: Vec<u32>,
    pub(crate) concurrency: usize,
    pub(crate) echo_secs: f64,
    pub(crate) echo_rate: f64,
    pub(crate) settle: Duration,
    /// Hop mode: the PID of the node process to kill.
    pub(crate) hop_kill: Option<u32>,
    /// Hop mode: the id of the node that PID runs (its hello's `node`).
    pub(crate) hop_node: String,
    /// Hop mode: how long after the kill to wait for every hop.
    pub(crate) hop_wait: Duration,
    /// Message-rate mode: the measured window, seconds.
    pub(crate) msg_secs: Option<f64>,
    /// Message-rate mode: sockets.
    pub(crate) msg_conns: usize,
    /// Message-rate mode: messages in flight per socket.
    pub(crate) msg_inflight: usize,
    /// Message-rate mode: payload bytes per message.
    pub(crate) msg_bytes: usize,
    /// Message-rate mode: closed-loop warm-up before the window.
    pub(crate) msg_warmup: Duration,
    /// Hop mode: how long the sockets stay open after the JSON is printed.
    pub(crate) hold: Duration,
    /// `--mode scale` (bench/scale.sh): idle steps, then the message-rate and hop phases.
    pub(crate) scale: bool,
    /// `--source-addrs`: the client sockets' source addresses, taken in turn.
    pub(crate) sources: Vec<Ipv4Addr>,
    /// `--read-buffer`: the client's WebSocket read buffer per socket, bytes.
    pub(crate) read_buffer: Option<usize>,
}

/// Reads the flags from `std::env::args`. Errors: a flag without a value, an unknown flag, a
/// value that does not parse, no `--url`, decreasing `--steps`, or a bad `--ca` for `wss://`.
///
/// Kept as one function: one match arm per flag.
pub(crate) fn parse_args() -> Result<Args> {
    let mut a = Args {
        url: String::new(),
        ca: None,
        target: Target::new("", None)?,
        steps: vec![2000, 10000],
        pids: Vec::new(),
        concurrency: 256,
        echo_secs: 3.0,
        echo_rate: 1000.0,
        settle: Duration::from_millis(1000),
        hop_kill: None,
        hop_node: "node-1".to_owned(),
        hop_wait: Duration::from_secs(60),
        msg_secs: None,
        msg_conns: 64,
        msg_inflight: 4,
        msg_bytes: 64,
        msg_warmup: Duration::from_secs(1),
        hold: Duration::ZERO,
        scale: false,
        sources: Vec::new(),
        read_buffer: None,
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
            "--msg-secs" => a.msg_secs = Some(value.parse().context("--msg-secs")?),
            "--msg-conns" => a.msg_conns = value.parse().context("--msg-conns")?,
            "--msg-inflight" => a.msg_inflight = value.parse().context("--msg-inflight")?,
            "--msg-bytes" => a.msg_bytes = value.parse().context("--msg-bytes")?,
            "--msg-warmup-secs" => {
                a.msg_warmup = Duration::from_secs_f64(value.parse().context("--msg-warmup-secs")?)
            }
            "--hold-ms" => a.hold = Duration::from_millis(value.parse().context("--hold-ms")?),
            "--mode" => match value.as_str() {
                "scale" => a.scale = true,
                other => {
                    bail!("--mode {other}: only `scale` (the other modes follow from the flags)")
                }
            },
            "--source-addrs" => a.sources = parse_sources(&value).context("--source-addrs")?,
            "--read-buffer" => a.read_buffer = Some(value.parse().context("--read-buffer")?),
            other => bail!("unknown flag {other}"),
        }
    }
    if a.url.is_empty() {
        bail!("--url is required");
    }
    a.target = Target::new(&a.url, a.ca.as_deref())?.with_sources(a.sources.clone());
    if let Some(bytes) = a.read_buffer {
        a.target = a.target.with_read_buffer(bytes);
    }
    if a.msg_inflight == 0 {
        bail!("--msg-inflight must be at least 1");
    }
    if a.steps.windows(2).any(|w| w[1] < w[0]) {
        bail!("--steps must not decrease");
    }
    Ok(a)
}

/// `127.0.0.2-127.0.0.9` (inclusive), `127.0.0.2,127.0.0.5`, or both mixed: the addresses in
/// order. Errors: an address that does not parse, a range whose end is below its start, none.
fn parse_sources(value: &str) -> Result<Vec<Ipv4Addr>> {
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (first, last) = item.split_once('-').unwrap_or((item, item));
        let first: Ipv4Addr = first
            .trim()
            .parse()
            .with_context(|| format!("address {first}"))?;
        let last: Ipv4Addr = last
            .trim()
            .parse()
            .with_context(|| format!("address {last}"))?;
        if u32::from(last) < u32::from(first) {
            bail!("{item}: the range ends before it starts");
        }
        out.extend((u32::from(first)..=u32::from(last)).map(Ipv4Addr::from));
    }
    if out.is_empty() {
        bail!("no address");
    }
    Ok(out)
}
