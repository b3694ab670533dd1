#!/usr/bin/env python3
"""Turns bench/run.sh's raw measurements into bench/results/latest.md (and the README's latest table).

Raw file: one line per figure, `target<TAB>round<TAB>metric<TAB>value`; metrics per round are
`max.out`/`rate.out` (base64 of wrk's text / oha's JSON), `max.cpu_ticks`/`rate.cpu_ticks` (proxy
utime+stime delta), `max.backend`/`rate.backend` (backend stub_status "accepts requests" before and
after), `wsmsg` (base64 of wsload's message-rate JSON, from bench/ws-msg.sh); once per target
`peak_rss_kib` (VmHWM) and `ws` (base64 of wsload's JSON); from bench/h2-grpc.sh per round `grpc.cpu_us` (proxy
CPU µs per gRPC unary call), `grpc.rps`, `grpc.calls` and `grpc.failed` (calls not answered 2xx).
Every figure is the median over the rounds; ratios are computed from those medians.
"""

import argparse
import base64
import datetime
import json
import os
import platform
import re
import statistics
from collections import defaultdict

# "pingora": pingora-proxy with a round-robin LoadBalancer on one thread (bench/pingora), the best Rust peer.
ORDER = ["direct", "gateway", "gateway+accesslog", "gateway+connid-memory", "gateway+connid-redis", "nginx", "haproxy",
         "pingora"]
README_START = "<!-- bench:latest:start -->"
README_END = "<!-- bench:latest:end -->"


def parse_wrk(text):
    out = {"rps": None, "requests": None, "errors": 0}
    m = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if m:
        out["rps"] = float(m.group(1))
    m = re.search(r"(\d+) requests in", text)
    if m:
        out["requests"] = int(m.group(1))
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    if m:
        out["errors"] += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        out["errors"] += sum(int(x) for x in m.groups())
    return out


def parse_oha(text):
    d = json.loads(text)
    pct = d.get("latencyPercentiles", {})
    codes = d.get("statusCodeDistribution", {}) or {}
    ok = sum(v for k, v in codes.items() if str(k).startswith("2"))
    bad = sum(v for k, v in codes.items() if not str(k).startswith("2"))
    errs = sum((d.get("errorDistribution") or {}).values())

    def ms(key):
        v = pct.get(key)
        return None if v is None else v * 1000.0

    return {"requests": ok + bad, "errors": bad + errs, "p50": ms("p50"), "p99": ms("p99"), "p999": ms("p99.9"),
            "rps": d.get("summary", {}).get("requestsPerSec")}


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=1, suffix=""):
    if v is None:
        return "n/a"
    return f"{v:,.{digits}f}{suffix}"


def load(raw_path, clk_tck):
    rounds = defaultdict(lambda: defaultdict(dict))  # target -> round -> metric -> value
    once = defaultdict(dict)
    with open(raw_path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            target, rnd, metric, value = line.split("\t", 3)
            if rnd == "0":
                once[target][metric] = value
            else:
                rounds[target][int(rnd)][metric] = value
    figures = {}
    for target in ORDER:
        fig = defaultdict(list)
        for rnd, m in sorted(rounds.get(target, {}).items()):
            if "wsmsg" in m:
                try:
                    w = json.loads(base64.b64decode(m["wsmsg"]).decode() or "null") or {}
                except ValueError:
                    w = {}
                for k in ("cpu_us_per_msg", "msgs_per_sec", "p50_ms", "p99_ms", "p999_ms"):
                    fig[f"wsmsg.{k}"].append(w.get(k))
                fig["wsmsg.errors"].append(int(w.get("errors") or 0) + int(w.get("failed") or 0) if w else None)
                fig["wsmsg.conns"].append(w.get("conns"))
            for kind in ("max", "rate"):
                if f"{kind}.out" not in m:
                    continue
                text = base64.b64decode(m[f"{kind}.out"]).decode("utf-8", "replace")
                try:
                    p = parse_wrk(text) if kind == "max" else parse_oha(text)
                except (ValueError, KeyError):
                    p = {"requests": None, "errors": None}
                reqs = p.get("requests") or 0
                ticks = int(m.get(f"{kind}.cpu_ticks", "0"))
                if target != "direct" and reqs > 0:
                    fig[f"{kind}.cpu_us"].append(ticks / clk_tck * 1e6 / reqs)
                if f"{kind}.redis_cmds" in m and reqs > 0:
                    fig[f"{kind}.redis_per_req"].append(int(m[f"{kind}.redis_cmds"]) / reqs)
                fig[f"{kind}.errors"].append(p.get("errors"))
                if kind == "max":
                    fig["max.rps"].append(p.get("rps"))
                else:
                    for q in ("p50", "p99", "p999"):
                        fig[f"rate.{q}"].append(p.get(q))
                    fig["rate.rps"].append(p.get("rps"))
                b = m.get(f"{kind}.backend", "").split()
                if target != "direct" and len(b) == 4:
                    a0, r0, a1, r1 = (int(x) for x in b)
                    accepts, requests = a1 - a0 - 1, r1 - r0 - 1  # minus the second stub call itself
                    if requests > 0:
                        fig[f"{kind}.reuse"].append(100.0 * (1.0 - max(accepts, 0) / requests))
        for rnd, m in sorted(rounds.get(target, {}).items()):
            for k in ("grpc.cpu_us", "grpc.rps", "grpc.failed"):
                if k in m:
                    fig[k].append(float(m[k]))
        out = {k: med(v) for k, v in fig.items()}
        out["grpc.failed"] = sum(fig.get("grpc.failed", [])) if fig.get("grpc.failed") else None
        out["errors_total"] = sum(e for k, v in fig.items() if k.endswith(".errors") for e in v if e)
        out["rounds"] = len([r for r in rounds.get(target, {}).values() if "max.out" in r or "rate.out" in r])
        if "peak_rss_kib" in once.get(target, {}):
            out["peak_rss_mib"] = int(once[target]["peak_rss_kib"]) / 1024.0
        if "ws" in once.get(target, {}):
            try:
                out["ws"] = json.loads(base64.b64decode(once[target]["ws"]).decode() or "null")
            except ValueError:
                out["ws"] = None
        figures[target] = out
    return figures


def machine():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            kib = int(f.readline().split()[1])
            mem = f", {kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    load1 = os.getloadavg()[0]
    return f"{model}, {os.cpu_count()} cores{mem}, Linux {platform.release()}; load average at the end {load1:.2f}"


def render(fig, a):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"### Run of {now}", ""]
    lines.append(f"Machine: {machine()}.  ")
    lines.append(f"Tools: {a.versions}.  ")
    lines.append(f"Settings: {a.rounds} interleaved round(s) x {a.seconds} s per measurement; max load = wrk -t1 "
                 f"-c{a.conns}; fixed rate = oha -q {a.rate} -c {a.rate_conns}; each proxy one worker on its own core.")
    if a.note:
        lines.append("")
        lines.append(f"**{a.note}**")
    lines += ["", "#### HTTP/1.1 keep-alive (medians over rounds)", "",
              f"| target | max req/s | CPU µs/req @max | p50 ms @{a.rate}/s | p99 ms | p99.9 ms | CPU µs/req @{a.rate}/s "
              "| peak RSS MiB | upstream reuse % @max / @rate | errors |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t in ORDER:
        f = fig.get(t)
        if not f:
            continue
        reuse = "n/a" if t == "direct" else f"{fmt(f.get('max.reuse'), 2)} / {fmt(f.get('rate.reuse'), 2)}"
        lines.append(
            f"| {t} | {fmt(f.get('max.rps'), 0)} | {fmt(f.get('max.cpu_us'), 2)} | {fmt(f.get('rate.p50'), 3)} "
            f"| {fmt(f.get('rate.p99'), 3)} | {fmt(f.get('rate.p999'), 3)} | {fmt(f.get('rate.cpu_us'), 2)} "
            f"| {fmt(f.get('peak_rss_mib'), 1)} | {reuse} | {f.get('errors_total', 0)} |")
    rr = fig.get("gateway+connid-redis", {})
    if rr.get("max.redis_per_req") is not None:
        lines += ["", f"Redis commands per request (gateway+connid-redis): {fmt(rr.get('max.redis_per_req'), 3)} at max load, "
                  f"{fmt(rr.get('rate.redis_per_req'), 3)} at {a.rate}/s."]
    steps = [int(s) for s in a.ws_steps.split(",") if s]
    ws_rows = [(t, fig[t]["ws"]) for t in ("direct", "gateway", "nginx", "haproxy", "pingora")
               if fig.get(t, {}).get("ws") is not None]
    if ws_rows:
        head = " | ".join([f"KiB/conn @{s}" for s in steps] + [f"echo p50 / p99 / p99.9 ms @{s}" for s in steps])
        lines += ["", f"#### WebSocket (idle connections, then echo at {a.ws_rate} msg/s over all of them)", "",
                  f"| target | {head} | failed |", "|---|" + "---:|" * (2 * len(steps) + 1)]
        for t, w in ws_rows:
            by = {s.get("target"): s for s in w.get("steps", [])}
            cells, failed = [], 0
            for s in steps:
                st = by.get(s)
                cells.append("n/a" if not st or t == "direct" else fmt(st.get("kib_per_conn"), 1))
            for s in steps:
                st = by.get(s)
                e = (st or {}).get("echo") or {}
                cells.append("n/a" if not st else f"{fmt(e.get('p50_ms'), 3)} / {fmt(e.get('p99_ms'), 3)} / {fmt(e.get('p999_ms'), 3)}")
            for st in w.get("steps", []):
                failed += int(st.get("failed") or 0) + int(((st.get("echo") or {}).get("errors")) or 0)
            lines.append(f"| {t} | " + " | ".join(cells) + f" | {failed} |")
    msg_rows = [t for t in ("direct", "gateway", "nginx", "haproxy") if fig.get(t, {}).get("wsmsg.msgs_per_sec") is not None]
    if msg_rows:
        lines += ["", f"#### WebSocket messages (bench/ws-msg.sh: {a.ws_msg}, closed loop; a message = one client "
                  "message relayed to the node plus its echo relayed back)", "",
                  "| target | messages/s | CPU µs/message | round trip p50 ms | p99 ms | p99.9 ms | errors |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for t in msg_rows:
            f = fig[t]
            lines.append(f"| {t} | {fmt(f.get('wsmsg.msgs_per_sec'), 0)} | {'n/a' if t == 'direct' else fmt(f.get('wsmsg.cpu_us_per_msg'), 2)} "
                         f"| {fmt(f.get('wsmsg.p50_ms'), 3)} | {fmt(f.get('wsmsg.p99_ms'), 3)} | {fmt(f.get('wsmsg.p999_ms'), 3)} "
                         f"| {int(f.get('wsmsg.errors') or 0)} |")
    grpc_rows = [t for t in ("gateway", "nginx", "haproxy") if fig.get(t, {}).get("grpc.cpu_us") is not None]
    if grpc_rows:
        lines += ["", "#### h2/gRPC: unary calls over h2c (`h2load -c 8 -m 32`, bench/h2-grpc.sh; medians over rounds)", "",
                  "| target | CPU µs/call | calls/s | not 2xx |", "|---|---:|---:|---:|"]
        for t in grpc_rows:
            f = fig[t]
            lines.append(f"| {t} | {fmt(f.get('grpc.cpu_us'), 2)} | {fmt(f.get('grpc.rps'), 0)} | {fmt(f.get('grpc.failed'), 0)} |")
    lines += ["", "#### Goals (ratios within this run)", "", "| goal | measured | met |", "|---|---|---|"]

    def g(t, k):
        return fig.get(t, {}).get(k)

    def row(name, measured, ok):
        lines.append(f"| {name} | {measured} | {'n/a' if ok is None else ('yes' if ok else '**no**')} |")

    def ratio(x, y):
        return None if x is None or y in (None, 0) else x / y

    gw_cpu = g("gateway", "max.cpu_us")
    for other in ("nginx", "haproxy"):
        r = ratio(gw_cpu, g(other, "max.cpu_us"))
        row(f"CPU µs/req @max ≤ {other}", f"{fmt(gw_cpu, 2)} vs {fmt(g(other, 'max.cpu_us'), 2)} (×{fmt(r, 2)})",
            None if r is None else r <= 1.0)
    r = ratio(g("gateway", "max.rps"), g("nginx", "max.rps"))
    row("max req/s ≥ nginx", f"{fmt(g('gateway', 'max.rps'), 0)} vs {fmt(g('nginx', 'max.rps'), 0)} (×{fmt(r, 2)})",
        None if r is None else r >= 1.0)
    r = ratio(g("gateway", "rate.cpu_us"), g("nginx", "rate.cpu_us"))
    row(f"CPU µs/req @{a.rate}/s ≤ nginx", f"{fmt(g('gateway', 'rate.cpu_us'), 2)} vs {fmt(g('nginx', 'rate.cpu_us'), 2)} (×{fmt(r, 2)})",
        None if r is None else r <= 1.0)
    p99, n99 = g("gateway", "rate.p99"), g("nginx", "rate.p99")
    row(f"p99 @{a.rate}/s ≤ nginx", f"{fmt(p99, 3)} vs {fmt(n99, 3)} ms",
        None if p99 is None or n99 is None else p99 <= n99)
    p99, d99 = g("gateway", "rate.p99"), g("direct", "rate.p99")
    row(f"p99 @{a.rate}/s ≤ direct + 0.3 ms", f"{fmt(p99, 3)} vs {fmt(d99, 3)} (+{fmt(None if p99 is None or d99 is None else p99 - d99, 3)} ms)",
        None if p99 is None or d99 is None else p99 <= d99 + 0.3)
    for t, limit in (("gateway+connid-memory", 1.05), ("gateway+connid-redis", 1.10)):
        r = ratio(g(t, "max.cpu_us"), gw_cpu)
        row(f"{t} CPU/req ≤ unbound × {limit:.2f}", f"{fmt(g(t, 'max.cpu_us'), 2)} vs {fmt(gw_cpu, 2)} (×{fmt(r, 3)})",
            None if r is None else r <= limit)
    gws = (fig.get("gateway", {}).get("ws") or {}).get("steps", [])
    if gws:
        last = gws[-1]
        k = last.get("kib_per_conn")
        for limit in (16.0, 5.0):
            row(f"idle WebSocket ≤ {limit:.0f} KiB/conn", f"{fmt(k, 1)} KiB at {last.get('conns')} connections",
                None if k is None or last.get("failed") else k <= limit)

    def echo_p99(t):
        steps = (fig.get(t, {}).get("ws") or {}).get("steps", [])
        return ((steps[-1].get("echo") or {}).get("p99_ms")) if steps else None

    e_gw, e_ng = echo_p99("gateway"), echo_p99("nginx")
    row("WebSocket echo p99 ≤ nginx", f"{fmt(e_gw, 3)} vs {fmt(e_ng, 3)} ms (×{fmt(ratio(e_gw, e_ng), 2)})",
        None if e_gw is None or e_ng is None else e_gw <= e_ng)
    m_gw, m_ng, m_hp = g("gateway", "wsmsg.cpu_us_per_msg"), g("nginx", "wsmsg.cpu_us_per_msg"), g("haproxy", "wsmsg.cpu_us_per_msg")
    if m_gw is not None:
        row("CPU µs per WebSocket message ≤ nginx", f"{fmt(m_gw, 2)} vs {fmt(m_ng, 2)} (×{fmt(ratio(m_gw, m_ng), 2)}; HAProxy {fmt(m_hp, 2)})",
            None if m_ng is None else m_gw <= m_ng)
    gc = g("gateway", "grpc.cpu_us")
    for other, limit in (("nginx", 1.0), ("haproxy", 1.5)):
        r = ratio(gc, g(other, "grpc.cpu_us"))
        if r is not None:
            row(f"CPU µs/gRPC call ≤ {other}" + ("" if limit == 1.0 else f" × {limit}"),
                f"{fmt(gc, 2)} vs {fmt(g(other, 'grpc.cpu_us'), 2)} (×{fmt(r, 2)})", r <= limit)
    reuse = g("gateway", "max.reuse")
    row("upstream reuse ≥ 99 % @max", f"{fmt(reuse, 2)} %", None if reuse is None else reuse >= 99.0)
    # Pingora is a reference (the best Rust peer), not a goal: its rows say "reference", not yes/no.
    if fig.get("pingora"):
        for k, label in (("max.cpu_us", "CPU µs/req @max"), ("rate.cpu_us", f"CPU µs/req @{a.rate}/s"),
                         ("max.rps", "max req/s"), ("rate.p99", f"p99 ms @{a.rate}/s")):
            digits = 0 if k == "max.rps" else (3 if k == "rate.p99" else 2)
            r = ratio(g("gateway", k), g("pingora", k))
            lines.append(f"| reference: {label} vs Pingora | {fmt(g('gateway', k), digits)} vs "
                         f"{fmt(g('pingora', k), digits)} (×{fmt(r, 2)}) | reference |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    for k in ("raw", "out", "readme", "versions", "note", "ws-steps", "ws-msg"):
        ap.add_argument(f"--{k}", default="")
    for k in ("seconds", "rounds", "rate", "conns", "rate-conns", "ws-rate", "clk-tck"):
        ap.add_argument(f"--{k}", type=int, required=True)
    a = ap.parse_args()
    fig = load(a.raw, a.clk_tck)
    text = render(fig, a)
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("# hopping-gateway bench: latest run\n\nWritten by `make bench` (bench/run.sh); how to read it: bench/README.md.\n\n")
        f.write(text)
    if a.readme and os.path.exists(a.readme):
        with open(a.readme, encoding="utf-8") as f:
            readme = f.read()
        if README_START in readme and README_END in readme:
            before = readme.split(README_START)[0]
            after = readme.split(README_END, 1)[1]
            with open(a.readme, "w", encoding="utf-8") as f:
                f.write(before + README_START + "\n" + text + README_END + after)


if __name__ == "__main__":
    main()
