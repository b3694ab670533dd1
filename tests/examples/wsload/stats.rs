//! Measurements: process memory and CPU from /proc, latency quantiles in milliseconds.

use std::time::Duration;

use serde_json::{json, Value};

/// CPU time (user + system, all threads) of `pid` so far in milliseconds, from `/proc/<pid>/stat`
/// (fields 14 and 15, in clock ticks of 10 ms: `CLK_TCK` is 100 on Linux); None when unreadable.
pub(crate) fn cpu_ms(pid: u32) -> Option<u64> {
    Some(cpu_ticks(pid)? * 10)
}

/// CPU time (user + system, all threads) of `pid` so far in clock ticks (`CLK_TCK`), from
/// `/proc/<pid>/stat` fields 14 and 15; None when unreadable.
pub(crate) fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after it follow its closing ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Sum of VmRSS (KiB) over `pids` (from /proc/<pid>/status, unreadable ones count 0); 0 when
/// none given.
pub(crate) fn rss_kib(pids: &[u32]) -> u64 {
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

/// The `p` quantile (0..=1, nearest rank) of the sorted `lat` in milliseconds, rounded to 1 µs;
/// null when `lat` is empty.
pub(crate) fn quantile_ms(lat: &[Duration], p: f64) -> Value {
    if lat.is_empty() {
        return Value::Null;
    }
    let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
    json!(ms(lat[i]))
}

/// First, p50, p99 and max of the sorted `d`, milliseconds (nulls when empty).
pub(crate) fn spread(d: &[Duration]) -> Value {
    json!({
        "first": d.first().map_or(Value::Null, |x| json!(ms(*x))),
        "p50": quantile_ms(d, 0.50), "p99": quantile_ms(d, 0.99),
        "max": d.last().map_or(Value::Null, |x| json!(ms(*x))),
    })
}

/// The number `getconf NAME` prints; None when it cannot run or prints something else.
pub(crate) fn getconf(name: &str) -> Option<u64> {
    std::process::Command::new("getconf")
        .arg(name)
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
}

/// `d` in milliseconds, rounded to 1 µs.
pub(crate) fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0
}
