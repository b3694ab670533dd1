#!/usr/bin/env python3
"""A third-party WebSocket peer for the integration tests: the PyPI `websockets` library (asyncio API).

The gateway's WebSocket relay and hop (SPEC section 5) are tested here against an implementation
that is not ours, with its own permessage-deflate (RFC 7692) and subprotocol negotiation.
`scripts/test-deps.sh` installs the pinned `websockets` version.

server mode (a node):
    ws_peer.py server --name NAME [--compression deflate|none] [--subprotocols a,b] [--port P]
    Listens on 127.0.0.1 (port P, default an ephemeral one) and prints the port as its first line.
    Echoes every message exactly (text as text, binary as binary), except the text message
    `whoami`, answered with NAME. `GET /health` answers 200 (the gateway's HTTP probe).
    Subprotocols: selects the first of its own list the client offers; with none in common (or no
    list) it answers 101 without `Sec-WebSocket-Protocol`, i.e. it refuses the client's offer.
    Prints one line per accepted socket:
        conn {"conn_id": ..., "hopped_from": ..., "extensions": ..., "subprotocol": ...}

client mode:
    ws_peer.py client URL --conn-id ID [--compression deflate|none] [--subprotocol P]
    After the handshake prints `open {"extensions": ..., "subprotocol": ...}` (what the client
    negotiated; null when nothing), then runs commands read on stdin, one a line:
        send N SIZE KIND   N messages of SIZE bytes, KIND text (compressible text), random
                           (pseudo-random binary, incompressible) or mixed (the two alternating);
                           every message distinct. All are sent at once while the echoes are read;
                           prints `ok N` when each came back exactly and in order, else `fail <why>`.
        whoami             prints `node <name>` (the answer of the node the socket is on).
        close              closes with 1000 and exits.
    Whenever the socket closes, prints `closed <code> <reason>` (the moment it is seen).
    A handshake failure prints `error <why>` and exits 1.
"""

import argparse
import asyncio
import json
import random
import sys

from websockets.asyncio.client import connect
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

# Both ends accept messages up to the gateway's default `websocket_max_message` (16 MiB).
MAX_SIZE = 16 << 20
# How long `send` waits for the next echo before it reports a failure.
ECHO_TIMEOUT_S = 10.0


def say(line):
    """One line on stdout, flushed at once: the test reads it as it comes."""
    print(line, flush=True)


def compression_arg(value):
    """`deflate` -> the library's default permessage-deflate offer; `none` -> no extension."""
    return {"deflate": "deflate", "none": None}[value]


# === server ===


async def run_server(args):
    own = [p for p in (args.subprotocols or "").split(",") if p]

    def select_subprotocol(connection, offered):
        # Unlike the library's default, never a 400: a node without the client's subprotocol
        # accepts the socket without one, as RFC 6455 section 4.2.2 lets a server do.
        return next((p for p in own if p in offered), None)

    def process_request(connection, request):
        if request.path == "/health":
            return connection.respond(200, "ok\n")
        return None

    async def echo(ws):
        headers = ws.request.headers
        say(
            "conn "
            + json.dumps(
                {
                    "conn_id": headers.get("X-Conn-Id"),
                    "hopped_from": headers.get("X-Hopped-From"),
                    "extensions": ws.response.headers.get("Sec-WebSocket-Extensions"),
                    "subprotocol": ws.subprotocol,
                }
            )
        )
        try:
            async for message in ws:
                await ws.send(args.name if message == "whoami" else message)
        except ConnectionClosed:
            pass

    async with serve(
        echo,
        "127.0.0.1",
        args.port,
        compression=compression_arg(args.compression),
        subprotocols=own or None,
        select_subprotocol=select_subprotocol,
        process_request=process_request,
        max_size=MAX_SIZE,
    ) as server:
        say(server.sockets[0].getsockname()[1])
        await server.serve_forever()


# === client ===


def message(batch, i, size, kind):
    """Message `i` of command number `batch`: distinct, and exactly `size` bytes long.

    Text messages share most of their words, so with context takeover a message compresses
    against the ones before it; random ones are seeded pseudo-random bytes, which do not compress.
    """
    if kind == "mixed":
        kind = "text" if i % 2 == 0 else "random"
    tag = f"{batch}.{i}:"
    if kind == "text":
        words = "the quick brown fox jumps over the lazy dog; "
        body = tag + words * (size // len(words) + 1)
        return body[:size] if size >= len(tag) else tag
    return random.Random(tag).randbytes(size)


async def send_batch(ws, inbox, batch, n, size, kind):
    """Sends `n` messages while reading their echoes; returns `ok n` or `fail <why>`."""
    sent = [message(batch, i, size, kind) for i in range(n)]

    async def sender():
        try:
            for m in sent:
                await ws.send(m)
        except ConnectionClosed:
            pass  # the reader reports it

    task = asyncio.create_task(sender())
    try:
        for i, want in enumerate(sent):
            try:
                got = await asyncio.wait_for(inbox.get(), ECHO_TIMEOUT_S)
            except asyncio.TimeoutError:
                return f"fail no echo of message {i} of {n} within {ECHO_TIMEOUT_S}s"
            if got is None:
                return f"fail socket closed after {i} of {n} echoes"
            if got != want:
                return (
                    f"fail message {i} of {n} differs: sent {type(want).__name__} of "
                    f"{len(want)}, got {type(got).__name__} of {len(got)}"
                )
        return f"ok {n}"
    finally:
        task.cancel()


async def run_client(args):
    try:
        ws = await connect(
            args.url,
            additional_headers={"X-Conn-Id": args.conn_id},
            compression=compression_arg(args.compression),
            subprotocols=[args.subprotocol] if args.subprotocol else None,
            proxy=None,
            max_size=MAX_SIZE,
            open_timeout=5,
        )
    except Exception as e:  # the handshake failed: say why and stop
        say(f"error {e!r}")
        sys.exit(1)
    say(
        "open "
        + json.dumps(
            {
                "extensions": ws.response.headers.get("Sec-WebSocket-Extensions"),
                "subprotocol": ws.subprotocol,
            }
        )
    )

    # Every message received, in order; None once the socket is closed.
    inbox = asyncio.Queue()

    async def receiver():
        try:
            async for m in ws:
                inbox.put_nowait(m)
        finally:
            say(f"closed {ws.close_code} {ws.close_reason or ''}".rstrip())
            inbox.put_nowait(None)

    recv_task = asyncio.create_task(receiver())
    batch = 0
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        words = line.split()
        if not words:
            if not line:  # end of stdin
                break
            continue
        if words[0] == "send":
            batch += 1
            n, size, kind = int(words[1]), int(words[2]), words[3]
            say(await send_batch(ws, inbox, batch, n, size, kind))
        elif words[0] == "whoami":
            try:
                await ws.send("whoami")
                name = await asyncio.wait_for(inbox.get(), ECHO_TIMEOUT_S)
            except (ConnectionClosed, asyncio.TimeoutError) as e:
                name = None
                say(f"fail whoami: {e!r}")
            if name is not None:
                say(f"node {name}")
        elif words[0] == "close":
            break
        else:
            say(f"fail unknown command {words[0]}")
    await ws.close()
    await recv_task


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("server")
    s.add_argument("--name", required=True)
    s.add_argument("--compression", choices=["deflate", "none"], default="deflate")
    s.add_argument("--subprotocols", default="")
    s.add_argument("--port", type=int, default=0)
    c = sub.add_parser("client")
    c.add_argument("url")
    c.add_argument("--conn-id", required=True)
    c.add_argument("--compression", choices=["deflate", "none"], default="deflate")
    c.add_argument("--subprotocol", default="")
    args = p.parse_args()
    asyncio.run(run_server(args) if args.mode == "server" else run_client(args))


if __name__ == "__main__":
    main()
