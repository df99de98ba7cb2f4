"""The egress proxy against mitmproxy in plain forwarding mode, side by side in one run.

Issue 13 asked for a well-kept proxy library if one fits. This script measures the two candidates
on the same work, both as their own process so that their CPU can be read with psutil:

- ``ours``: `webgym_rollout.browser.egress.EgressProxy` (allowlisting 127.0.0.1 on the origin's
  port, so every request passes the guard's decision and is forwarded);
- ``mitmdump``: mitmproxy's ``mitmdump`` in regular (forward proxy) mode with ``--ignore-hosts``
  for every host, so that CONNECT tunnels are relayed without TLS interception. It runs no addon,
  so it makes no egress decision: the figure is a lower bound of what a mitmproxy guard costs.

Each proxy serves C concurrent clients, each sending R requests of a local 20 kB page, once as
plain HTTP (absolute-form ``GET http://...``) and once through a ``CONNECT`` tunnel (the way
Chromium sends HTTPS and WebSockets; the tunnel carries plain HTTP here, bytes are bytes). A
direct run (no proxy) gives the floor. Printed: requests/s, the proxy process's CPU-ms per
request, its start-up time and its resident memory.

    .venv/bin/python benchmarks/egress_proxy.py [--clients 8] [--requests 200]
        [--mitmdump /path/to/mitmdump]   # default: $WEBGYM_MITMDUMP, else mitmdump on PATH

mitmproxy is not a dependency of the toolkit: install it in a separate virtualenv to compare
(``python -m venv /tmp/mitm && /tmp/mitm/bin/pip install mitmproxy``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import free_port

REPO = Path(__file__).resolve().parents[1]
BODY = b"x" * 20_000


async def origin_server() -> tuple[asyncio.base_events.Server, int]:
    """A keep-alive HTTP/1.1 server on 127.0.0.1 answering every request with BODY."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                close = b"connection: close" in head.lower()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             + f"Content-Length: {len(BODY)}\r\n".encode()
                             + (b"Connection: close\r\n" if close else b"") + b"\r\n" + BODY)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client left, or the benchmark ended
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def read_response(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"unexpected answer {head[:200]!r}")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    await reader.readexactly(length)


async def one_plain(proxy: int | None, origin: int) -> None:
    """One request, one connection (as Chromium's requests through the proxy: it answers each
    with Connection: close)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy or origin)
    target = f"http://127.0.0.1:{origin}/page" if proxy else "/page"
    writer.write(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{origin}\r\nConnection: close\r\n\r\n".encode())
    await read_response(reader)
    writer.close()


async def tunnel(proxy: int | None, origin: int, requests: int) -> None:
    """One CONNECT tunnel carrying `requests` keep-alive requests."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy or origin)
    if proxy:
        writer.write(f"CONNECT 127.0.0.1:{origin} HTTP/1.1\r\nHost: 127.0.0.1:{origin}\r\n\r\n".encode())
        answer = await reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in answer.split(b"\r\n")[0]:
            raise RuntimeError(f"CONNECT refused: {answer[:200]!r}")
    for _ in range(requests):
        writer.write(f"GET /page HTTP/1.1\r\nHost: 127.0.0.1:{origin}\r\n\r\n".encode())
        await read_response(reader)
    writer.close()


async def measure(proxy: int | None, pid: int | None, origin: int, clients: int, requests: int,
                  kind: str) -> tuple[float, float]:
    """(requests/s, proxy CPU-ms per request) of `clients` concurrent clients."""

    async def client() -> None:
        if kind == "plain":
            for _ in range(requests):
                await one_plain(proxy, origin)
        else:  # a tunnel per 20 requests: pages reuse their connections
            for _ in range(max(1, requests // 20)):
                await tunnel(proxy, origin, 20)

    total = clients * (requests if kind == "plain" else max(1, requests // 20) * 20)
    await asyncio.gather(*(client() for _ in range(2)))  # warm-up
    process = psutil.Process(pid) if pid else None
    cpu = sum(process.cpu_times()[:2]) if process else 0.0
    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - start
    cpu = (sum(process.cpu_times()[:2]) - cpu) if process else 0.0
    return total / elapsed, 1000 * cpu / total


def wait_listening(port: int, process: subprocess.Popen, what: str, limit_s: float = 60) -> float:
    import socket

    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return time.perf_counter() - start
        time.sleep(0.01)
    raise RuntimeError(f"{what} did not listen on {port} within {limit_s} s")


OURS = textwrap.dedent("""
    import asyncio, sys
    from webgym_rollout.browser.egress import EgressProxy
    from webgym_rollout.browser.guard import UrlGuard

    async def main():
        proxy = EgressProxy(UrlGuard(["127.0.0.1:" + sys.argv[1]]))
        await proxy.start()
        print(proxy.port, flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
""")


def start_ours(origin: int) -> tuple[subprocess.Popen, int, float]:
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", OURS, str(origin)], stdout=subprocess.PIPE,
                               text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert process.stdout is not None
    port = int(process.stdout.readline())
    return process, port, time.perf_counter() - start


def start_mitmdump(binary: str) -> tuple[subprocess.Popen, int, float]:
    port = free_port()
    confdir = tempfile.mkdtemp(prefix="mitm-conf-")
    process = subprocess.Popen(
        [binary, "--mode", "regular", "--listen-host", "127.0.0.1", "--listen-port", str(port),
         "--ignore-hosts", ".*", "--set", f"confdir={confdir}", "--set", "termlog_verbosity=error",
         "--set", "flow_detail=0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return process, port, wait_listening(port, process, "mitmdump")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=200, help="requests per client and kind")
    parser.add_argument("--mitmdump", default=os.environ.get("WEBGYM_MITMDUMP") or shutil.which("mitmdump"))
    args = parser.parse_args()
    server, origin = await origin_server()
    candidates: list[tuple[str, subprocess.Popen | None, int | None, float]] = [("direct", None, None, 0.0)]
    process, port, started = start_ours(origin)
    candidates.append(("ours", process, port, started))
    if args.mitmdump:
        process, port, started = start_mitmdump(args.mitmdump)
        candidates.append(("mitmdump", process, port, started))
    else:
        print("mitmdump not found (--mitmdump or $WEBGYM_MITMDUMP): measuring ours only")
    try:
        print(f"{args.clients} clients x {args.requests} requests of {len(BODY) // 1000} kB, per kind")
        print(f"{'proxy':<10}{'start s':>9}{'RSS MiB':>9}{'plain req/s':>13}{'CPU ms/req':>12}"
              f"{'tunnel req/s':>14}{'CPU ms/req':>12}")
        for name, process, port, started in candidates:
            pid = process.pid if process else None
            plain = await measure(port, pid, origin, args.clients, args.requests, "plain")
            tunnelled = await measure(port, pid, origin, args.clients, args.requests, "tunnel")
            rss = psutil.Process(pid).memory_info().rss / 2**20 if pid else 0.0
            print(f"{name:<10}{started:>9.2f}{rss:>9.0f}{plain[0]:>13.0f}{plain[1]:>12.3f}"
                  f"{tunnelled[0]:>14.0f}{tunnelled[1]:>12.3f}")
    finally:
        for _name, process, _port, _started in candidates:
            if process is not None:
                process.terminate()
                process.wait(10)
        server.close()


if __name__ == "__main__":
    asyncio.run(main())
