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
//! Hop mode (`bench/ws-hop.sh`: the time to hop all of them after a kill), selected by
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
//! last hop or the deadline, in the order of `pids`. Every socket stays open until the JSON is
//! printed, and `--hold-ms N` (default 0) more, so a profiler of the gateway can stop first.
//!
//! Message-rate mode (`bench/ws-msg.sh`), selected by `--msg-secs N`: `--msg-conns 64`
//! sockets with `--msg-inflight 4` messages of `--msg-bytes 64` in flight each, closed loop, and
//! the proxies' CPU per round trip over the window (`msg.rs` documents its JSON).
//!
//! Scale mode (`bench/scale.sh`), selected by `--mode scale`: idle sockets in `--steps` with the
//! proxies' RSS, the kernel's socket memory and the CPU to open them after each step, then (with
//! `--msg-secs`) the message-rate measurement beside them, then (with `--hop-kill PID`) a node
//! kill and the time until each of its sockets hopped or closed (`scale.rs` documents its JSON).
//!
//! Any mode: `--source-addrs 127.0.0.2-127.0.0.9` (or a comma list, ranges allowed) binds each
//! client socket to the next of these addresses in turn (the port is picked at connect time per
//! 4-tuple, IP_BIND_ADDRESS_NO_PORT), so one host opens more than the ~64k sockets one source
//! address allows towards one listener; `--read-buffer BYTES` sets the client's WebSocket read
//! buffer per socket (tokio-tungstenite's default, 128 KiB, is allocated up front).
//!
//! Modules: `args` (the flags), `conn` (dialing `ws://`/`wss://` and the hello), `idle` (idle +
//! echo mode), `hop` (hop mode), `msg` (message-rate mode), `scale` (scale mode), `stats` (/proc
//! reads and quantiles).

mod args;
mod conn;
mod hop;
mod idle;
mod msg;
mod scale;
mod stats;

use anyhow::Result;

#[tokio::main]
async fn main() -> Result<()> {
    let args = args::parse_args()?;
    if args.scale {
        return scale::run(&args).await;
    }
    match (args.hop_kill, args.msg_secs) {
        (Some(pid), _) => hop::run(&args, pid).await,
        (None, Some(secs)) => msg::run(&args, secs).await,
        (None, None) => idle::run(&args).await,
    }
}
