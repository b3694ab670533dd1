"""Load client of bench/store-costs.sh: N GET /data requests, each with its own X-Conn-Id
(<prefix><i>), over C keep-alive HTTP/1.1 connections (asyncio, raw sockets). Prints
`<requests/s> <p99 ms> <non-200 count>`."""
import asyncio, sys, time

async def worker(port, ids, lat, bad):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    for cid in ids:
        t = time.perf_counter()
        w.write(f"GET /data HTTP/1.1\r\nHost: b\r\nX-Conn-Id: {cid}\r\n\r\n".encode())
        head = await r.readuntil(b"\r\n\r\n")
        n = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
        await r.readexactly(n)
        lat.append(time.perf_counter() - t)
        if not head.startswith(b"HTTP/1.1 200"):
            bad.append(1)
    w.close()

async def main(port, n, prefix, c):
    lat, bad = [], []
    ids = [f"{prefix}{i}" for i in range(n)]
    t = time.perf_counter()
    await asyncio.gather(*(worker(port, ids[k::c], lat, bad) for k in range(c)))
    el = time.perf_counter() - t
    lat.sort()
    print(f"{n / el:.0f} {lat[int(len(lat) * 0.99) - 1] * 1000:.2f} {len(bad)}")

asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
