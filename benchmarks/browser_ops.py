"""Browser server vs direct Playwright: steps/s, server overhead, memory and start time, in one run.

A step is one screenshot + one click, the loop of a rollout. For N concurrent sessions
(N = 1, 2, 4, 8, 16 by default) on a local 1280x720 page and on MiniWoB click-button (cropped
screenshots), it measures steps/s through ``webgym-rollout serve`` (started as a subprocess, driven
by `BrowserClient`) and through direct Playwright calls on the same browser layout (B browsers,
sessions spread over them). It also reports the time from ``webgym-rollout serve`` to a healthy
``/health`` and the PSS of the server with its browsers while 8 sessions are open.

The server's browsers reach every page through its egress proxy (direct Playwright does not): the
proxy's CPU per step is read from the server's ``/metrics`` (``webgym_egress_cpu_seconds_total``,
the CPU time of the proxy's own thread). A step loads nothing, so the script also measures page
loads: N = 8 sessions navigating between two local pages, server (through the proxy) vs direct.

Targets: server overhead < 15 % at N = 8; PSS < 600 MiB with 8 sessions; start < 2 s.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/browser_ops.py [--ns 1,2,4,8,16] [--steps 10]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common import free_port, tree_cpu_s  # noqa: E402  (benchmarks/common.py)

from webgym_rollout.browser.client import BrowserClient  # noqa: E402
from webgym_rollout.browser.processes import (  # noqa: E402
    CHROMIUM_ARGS,
    DEFAULT_CHROMIUM,
    process_tree_pss_mib,
)
from webgym_rollout.browser.protocol import BrowserAction  # noqa: E402
from webgym_rollout.tasks.miniwob import MINIWOB_CLIP  # noqa: E402
from webgym_rollout.tasks.miniwob import task_url as miniwob_task_url  # noqa: E402
from webgym_rollout.tasks.sites import SiteServer  # noqa: E402

CHROMIUM = os.environ.get("WEBGYM_CHROMIUM", DEFAULT_CHROMIUM)
fresh = itertools.count()  # query strings that make every page load a new URL


def _serve_cmd() -> list[str]:
    script = shutil.which("webgym-rollout", path=str(Path(sys.executable).parent))
    if script:
        return [script]
    return [sys.executable, "-c", "from webgym_rollout.cli import main; main()"]


def start_server(port: int, browsers: int, contexts: int, allow: str) -> tuple[subprocess.Popen, float]:
    """Start ``webgym-rollout serve`` (its pages may reach `allow`, the site server's host:port);
    returns the process and the seconds until /health answered."""
    cmd = [
        *_serve_cmd(),
        "serve",
        "--port",
        str(port),
        "--allow-hosts",
        allow,
        "--browsers",
        str(browsers),
        "--contexts-per-browser",
        str(contexts),
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with httpx.Client(trust_env=False) as http:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            try:
                if http.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    return proc, time.perf_counter() - start
            except httpx.TransportError:
                pass
            time.sleep(0.01)


def egress_counters(url: str) -> tuple[float, float]:
    """(CPU seconds of the server's egress proxy, requests it forwarded) from its /metrics."""
    values = {}
    for line in httpx.get(f"{url}/metrics", timeout=10, trust_env=False).text.splitlines():
        name, _, value = line.rpartition(" ")
        values[name] = value
    cpu = float(values.get("webgym_egress_cpu_seconds_total", "nan"))
    return cpu, float(values.get('webgym_egress_requests_total{outcome="forwarded"}', "nan"))


async def run_server(
    url: str, start_url: str, env: str, n: int, steps: int, click: tuple[int, int], server_pid: int
) -> tuple[float, float, float, float]:
    """(steps/s, CPU-ms per step of everything, CPU-ms per step of the server and its browsers,
    CPU-ms per step of the server's egress proxy)."""
    async with BrowserClient(url) as client:
        sessions = await asyncio.gather(
            *(client.create_session(start_url, environment=env, seed=i) for i in range(n))
        )

        async def loop(session, count):
            for _ in range(count):
                await session.screenshot()
                await session.execute(BrowserAction.click(*click))

        await asyncio.gather(*(loop(s, 1) for s in sessions))  # warm-up
        proxy = egress_counters(url)[0]
        total, server, start = tree_cpu_s(os.getpid()), tree_cpu_s(server_pid), time.perf_counter()
        await asyncio.gather(*(loop(s, steps) for s in sessions))
        elapsed = time.perf_counter() - start
        total, server = tree_cpu_s(os.getpid()) - total, tree_cpu_s(server_pid) - server
        proxy = egress_counters(url)[0] - proxy
        await asyncio.gather(*(s.close() for s in sessions))
    per_step = 1000 / (n * steps)
    return n * steps / elapsed, total * per_step, server * per_step, proxy * per_step


async def navigate_server(url: str, pages: tuple[str, str], n: int, count: int) -> tuple[float, float, float]:
    """(navigations/s, CPU-ms of the egress proxy per navigation, proxied requests per navigation)
    for `n` sessions each loading the two `pages` in turn `count` times through the server."""
    async with BrowserClient(url) as client:
        sessions = await asyncio.gather(*(client.create_session(pages[0]) for _ in range(n)))

        async def loop(session, times):
            for i in range(times):  # a new query each time: the document is fetched, not cached
                await session.navigate(f"{pages[(i + 1) % 2]}?{next(fresh)}")

        await asyncio.gather(*(loop(s, 2) for s in sessions))  # warm-up
        cpu, forwarded = egress_counters(url)
        start = time.perf_counter()
        await asyncio.gather(*(loop(s, count) for s in sessions))
        elapsed = time.perf_counter() - start
        cpu_after, forwarded_after = egress_counters(url)
        await asyncio.gather(*(s.close() for s in sessions))
    done = n * count
    return done / elapsed, 1000 * (cpu_after - cpu) / done, (forwarded_after - forwarded) / done


async def navigate_direct(playwright, browsers: int, pages: tuple[str, str], n: int, count: int) -> float:
    """Navigations/s of the same work with direct Playwright calls (no server, no proxy)."""
    launched = [
        await playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        for _ in range(browsers)
    ]
    try:
        opened = []
        for i in range(n):
            context = await launched[i % browsers].new_context(viewport={"width": 1280, "height": 720})
            page = await context.new_page()
            await page.goto(pages[0])
            opened.append(page)

        async def loop(page, times):
            for i in range(times):
                await page.goto(f"{pages[(i + 1) % 2]}?{next(fresh)}", wait_until="load")

        await asyncio.gather(*(loop(p, 2) for p in opened))
        start = time.perf_counter()
        await asyncio.gather(*(loop(p, count) for p in opened))
        return n * count / (time.perf_counter() - start)
    finally:
        for browser in launched:
            await browser.close()


async def run_direct(
    playwright,
    browsers: int,
    start_url: str,
    miniwob_env: bool,
    n: int,
    steps: int,
    click: tuple[int, int],
) -> tuple[float, float]:
    """(steps/s, CPU-ms per step of this process, its Playwright driver and browsers)."""
    launched = [
        await playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        for _ in range(browsers)
    ]
    try:
        pages = []
        for i in range(n):
            context = await launched[i % browsers].new_context(viewport={"width": 1280, "height": 720})
            page = await context.new_page()
            await page.goto(start_url)
            if miniwob_env:
                await page.wait_for_selector("#sync-task-cover", state="attached")
                await page.evaluate(
                    f"() => {{ core.EPISODE_MAX_TIME = 60000; Math.seedrandom('{i}'); "
                    "core.startEpisodeReal(); }"
                )
            pages.append(page)
        clip = MINIWOB_CLIP if miniwob_env else None

        async def loop(page, count):
            for _ in range(count):
                await page.screenshot(type="png", clip=clip, scale="css")
                await page.mouse.click(*click)

        await asyncio.gather(*(loop(p, 1) for p in pages))
        cpu, start = tree_cpu_s(os.getpid()), time.perf_counter()
        await asyncio.gather(*(loop(p, steps) for p in pages))
        elapsed, cpu = time.perf_counter() - start, tree_cpu_s(os.getpid()) - cpu
        return n * steps / elapsed, 1000 * cpu / (n * steps)
    finally:
        for browser in launched:
            await browser.close()


async def measure_memory(url: str, start_url: str, server_pid: int, n: int = 8) -> float:
    async with BrowserClient(url) as client:
        sessions = await asyncio.gather(*(client.create_session(start_url) for _ in range(n)))
        for s in sessions:
            await s.screenshot()
        pss = process_tree_pss_mib(server_pid)
        await asyncio.gather(*(s.close() for s in sessions))
    return pss


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ns", default="1,2,4,8,16", help="concurrent sessions to measure")
    parser.add_argument("--steps", type=int, default=10, help="steps (screenshot + click) per session")
    parser.add_argument("--browsers", type=int, default=2, help="browser processes (both paths)")
    parser.add_argument("--navigations", type=int, default=10, help="page loads per session (N = 8)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="alternating runs per setting; the median is reported (the machine is shared)",
    )
    args = parser.parse_args()
    ns = [int(n) for n in args.ns.split(",")]
    contexts = max(8, -(-max(ns) // args.browsers))

    from playwright.async_api import async_playwright

    with SiteServer() as sites:
        local = f"{sites.base_url}/sandbox/form.html"
        click_button = miniwob_task_url(sites.base_url, "click-button")
        port = free_port()
        proc, startup_s = start_server(port, args.browsers, contexts, allow=f"{sites.host}:{sites.port}")
        url = f"http://127.0.0.1:{port}"
        try:
            pss = await measure_memory(url, local, proc.pid)
            rows = []
            async with async_playwright() as playwright:
                for site, start_url, env, click in (
                    ("local 1280x720", local, "web", (300, 40)),
                    ("miniwob click-button", click_button, "miniwob:click-button", (80, 105)),
                ):
                    for n in ns:
                        directs, serveds = [], []
                        for _ in range(args.repeat):
                            directs.append(
                                await run_direct(
                                    playwright,
                                    args.browsers,
                                    start_url,
                                    env != "web",
                                    n,
                                    args.steps,
                                    click,
                                )
                            )
                            serveds.append(
                                await run_server(url, start_url, env, n, args.steps, click, proc.pid)
                            )
                        direct = statistics.median(d[0] for d in directs)
                        served = statistics.median(r[0] for r in serveds)
                        direct_cpu = statistics.median(d[1] for d in directs)
                        served_cpu = statistics.median(r[1] for r in serveds)
                        server_cpu = statistics.median(r[2] for r in serveds)
                        proxy_cpu = statistics.median(r[3] for r in serveds)
                        rows.append((site, n, direct, served, direct_cpu, served_cpu, server_cpu, proxy_cpu))
                        overhead = 100 * (1 - served / direct)
                        print(
                            f"{site:22s} N={n:<3d} direct {direct:6.1f} steps/s {direct_cpu:5.1f} CPU-ms/step"
                            f"   server {served:6.1f} steps/s {served_cpu:5.1f} CPU-ms/step"
                            f" ({server_cpu:5.1f} in server+browsers, {proxy_cpu:.3f} in its egress proxy)"
                            f"   overhead {overhead:5.1f} %",
                            flush=True,
                        )
                two_pages = (local, f"{sites.base_url}/sandbox/next.html")
                directs, serveds = [], []
                for _ in range(args.repeat):
                    directs.append(await navigate_direct(playwright, args.browsers, two_pages, 8,
                                                         args.navigations))
                    serveds.append(await navigate_server(url, two_pages, 8, args.navigations))
                loads = (statistics.median(directs), statistics.median(r[0] for r in serveds),
                         statistics.median(r[1] for r in serveds), statistics.median(r[2] for r in serveds))
                print(
                    f"{'page loads':22s} N=8   direct {loads[0]:6.1f} loads/s"
                    f"   server {loads[1]:6.1f} loads/s, egress proxy {loads[2]:.2f} CPU-ms and"
                    f" {loads[3]:.1f} requests per load   overhead {100 * (1 - loads[1] / loads[0]):5.1f} %",
                    flush=True,
                )
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
    print()
    print(f"start to healthy /health: {startup_s:.2f} s (target < 2 s)")
    print(f"PSS server + browsers with 8 sessions open: {pss:.0f} MiB (target < 600 MiB)")
    for site, n, direct, served, direct_cpu, served_cpu, server_cpu, proxy_cpu in rows:
        if n == 8:
            print(
                f"server overhead at N=8, {site}: {100 * (1 - served / direct):.1f} % steps/s, "
                f"{100 * (served_cpu / direct_cpu - 1):.0f} % more CPU per step with the client on the "
                f"same machine, {100 * (server_cpu / direct_cpu - 1):.0f} % on the server machine alone "
                f"(target < 15 %); egress proxy {proxy_cpu:.3f} CPU-ms per step"
            )
    print(
        f"page loads at N=8: server {100 * (1 - loads[1] / loads[0]):.1f} % below direct Playwright; "
        f"egress proxy {loads[2]:.2f} CPU-ms per load ({loads[3]:.1f} proxied requests per load)"
    )


if __name__ == "__main__":
    asyncio.run(main())
