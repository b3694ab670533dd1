#!/usr/bin/env python3
"""CPU per WebSocket message and memory per socket for compressed (permessage-deflate) sockets,
before and after a hop (SPEC section 5, "Extensions and subprotocols").

Three Python `websockets` nodes behind one gateway (`--workers 1 --access-log off`, route
`websocket = "hop"`): D and D2 accept permessage-deflate, N accepts no compression. Every client is a
`websockets` client with its default compression offer (as a browser's). The phases:

  1. `compressed`: every socket on D, frames relayed byte for byte;
  2. `inflated`: D drained, every socket hopped to N; the gateway inflates each client message for N
     (the translation);
  3. `deflate-hop`: N drained, every socket hopped to D2, which accepts the client's parameters: byte
     for byte again.

In each phase every socket sends MESSAGES messages of BYTES bytes (compressible text) one at a time
and checks each echo. CPU per message = the gateway's utime+stime (/proc/<pid>/stat) over the phase
divided by the round trips (one client message to the node plus its echo back). Memory per socket =
the gateway's VmRSS growth over the idle baseline, divided by the sockets.

Env: WS_DEFLATE_GW (gateway binary, default target/dist/hopping-gateway, else target/release),
WS_DEFLATE_SOCKETS (200), WS_DEFLATE_MESSAGES (100 per socket per phase), WS_DEFLATE_BYTES (1024).
Needs Python `websockets` (scripts/test-deps.sh installs it). Prints a Markdown table.

    python3 bench/ws-deflate.py
"""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from websockets.asyncio.client import connect

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOCKETS = int(os.environ.get("WS_DEFLATE_SOCKETS", "200"))
MESSAGES = int(os.environ.get("WS_DEFLATE_MESSAGES", "100"))
BYTES = int(os.environ.get("WS_DEFLATE_BYTES", "1024"))
TICK = os.sysconf("SC_CLK_TCK")

NODE = """
import asyncio, sys
from websockets.asyncio.server import serve
async def echo(ws):
    async for m in ws:
        await ws.send(m)
async def health(conn, req):
    if req.path == "/health":
        return conn.respond(200, "ok\\n")
async def main():
    async with serve(echo, "127.0.0.1", int(sys.argv[1]), max_size=None,
                     compression=None if sys.argv[2] == "none" else "deflate",
                     process_request=health):
        await asyncio.Future()
asyncio.run(main())
"""


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def gateway_binary():
    given = os.environ.get("WS_DEFLATE_GW")
    if given:
        return given
    dist = os.path.join(ROOT, "target/dist/hopping-gateway")
    return dist if os.path.exists(dist) else os.path.join(ROOT, "target/release/hopping-gateway")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def admin(port, method, path):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read().decode()


def hops(port):
    text = admin(port, "GET", "/metrics")
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("hopping_count_total{") and 'reason="draining"' in line
    )


def wait_for(what, cond, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit(f"ws-deflate: timed out waiting for {what}")


async def phase(sockets):
    """MESSAGES echoes on every socket, one at a time per socket; returns the round trips."""
    body = json.dumps({"text": "the quick brown fox " * (BYTES // 20)})[:BYTES]

    async def one(ws):
        for i in range(MESSAGES):
            msg = f"{i:06d}" + body[6:]
            await ws.send(msg)
            got = await asyncio.wait_for(ws.recv(), 10)
            if got != msg:
                raise SystemExit("ws-deflate: an echo differs from its message")

    await asyncio.gather(*(one(ws) for ws in sockets))
    return len(sockets) * MESSAGES


async def main():
    work = tempfile.mkdtemp(prefix="hopgw-wsdeflate.")
    listen, admin_port, d, n, d2 = free_ports(5)
    procs = []
    try:
        for port, comp in ((d, "deflate"), (n, "none"), (d2, "deflate")):
            procs.append(subprocess.Popen([sys.executable, "-c", NODE, str(port), comp]))
        for port in (d, n, d2):
            wait_for(f"the node on {port}", lambda: socket.create_connection(("127.0.0.1", port), 1).close() is None)
        config = os.path.join(work, "gw.toml")
        with open(config, "w") as f:
            f.write(
                f'[server]\nlisten = "127.0.0.1:{listen}"\nadmin_listen = "127.0.0.1:{admin_port}"\n'
                f'access_log = false\n[health]\ninterval = "500ms"\n'
                f'[[clusters]]\nname = "ws"\nnodes = [{{ id = "d", addr = "127.0.0.1:{d}" }}, '
                f'{{ id = "n", addr = "127.0.0.1:{n}" }}, {{ id = "d2", addr = "127.0.0.1:{d2}" }}]\n'
                f'[[routes]]\nid = "ws"\ncluster = "ws"\nwebsocket = "hop"\n'
            )
        gw = subprocess.Popen(
            [gateway_binary(), "--config", config, "--workers", "1", "--access-log", "off"],
            stdout=open(os.path.join(work, "gw.log"), "w"),
            stderr=subprocess.STDOUT,
        )
        procs.append(gw)
        wait_for("the gateway", lambda: admin(admin_port, "GET", "/readyz") is not None)
        for node in ("n", "d2"):
            admin(admin_port, "POST", f"/admin/nodes/{node}/drain?period=1s")
        base = rss_kib(gw.pid)
        sockets = []
        for i in range(SOCKETS):
            ws = await connect(
                f"ws://127.0.0.1:{listen}/ws",
                additional_headers={"X-Conn-Id": f"deflate-{i}"},
                max_size=None,
            )
            if "permessage-deflate" not in (ws.response.headers.get("Sec-WebSocket-Extensions") or ""):
                sys.exit("ws-deflate: a socket did not negotiate permessage-deflate")
            sockets.append(ws)
        rows = []
        moves = [None, ("n", "d"), ("d2", "n")]
        names = ["compressed", "inflated", "deflate-hop"]
        for name, move in zip(names, moves):
            if move:
                target, leaving = move
                before = hops(admin_port)
                admin(admin_port, "POST", f"/admin/nodes/{target}/undrain")
                admin(admin_port, "POST", f"/admin/nodes/{leaving}/drain?period=1s")
                wait_for(f"{SOCKETS} hops off {leaving}", lambda: hops(admin_port) - before >= SOCKETS)
            await phase(sockets[:1])  # warm the phase's path
            rss = rss_kib(gw.pid)
            cpu0 = cpu_seconds(gw.pid)
            trips = await phase(sockets)
            cpu = cpu_seconds(gw.pid) - cpu0
            rows.append((name, cpu * 1e6 / trips, (rss - base) / SOCKETS, trips))
        for ws in sockets:
            await ws.close()
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
    print(f"| phase ({SOCKETS} sockets, {BYTES} B messages) | gateway CPU µs per message | RSS per socket, KiB | round trips |")
    print("|---|---:|---:|---:|")
    for name, us, kib, trips in rows:
        print(f"| {name} | {us:.1f} | {kib:.1f} | {trips} |")


asyncio.run(main())
