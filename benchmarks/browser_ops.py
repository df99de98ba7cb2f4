"""Browser server vs direct Playwright: steps/s, page loads, the egress proxy's cost, memory, start time.

A step is what `WebEnv.step` asks of the browser: one click, then the next observation (the
screenshot; on MiniWoB also the page's own state, which the env reads for the reward). For N
concurrent sessions (N = 1, 2, 4, 8, 16 by default) on a local 1280x720 page and on MiniWoB
click-button (cropped screenshots) it measures steps/s

- direct: Playwright calls on browsers launched here (B browsers, sessions spread over them);
- act: ``webgym-rollout serve`` (a subprocess) driven by `BrowserClient`, one ``act`` call per step
  (the path `WebEnv.step` takes);
- split (``--split``): the same server, ``execute`` then ``screenshot`` (and ``env_state``): the
  calls a step made before ``act``.

The paths run one after another, alternating, ``--repeat`` times per (page set, N) in a rotating
order; the table shows each path's median steps/s and the server's overhead as the median of the
per-round ratios to direct, with their spread (min..max): the machine is shared, so single runs
are noisy. CPU-ms per step count this process's tree (the server is its child).

Page loads (N = ``--load-ns`` sessions navigating between two local pages, a new URL every time)
are measured three ways: direct; direct through an egress proxy started here (the proxy every
server browser uses, with the same guard); and through the server. direct vs proxied is the
proxy's cost per load, proxied vs server the server's own; the proxy's CPU-ms per load is read
from the server's ``/metrics``.

Also: the time from ``webgym-rollout serve`` to a healthy ``/health`` and the PSS of the server
with its browsers while 8 sessions are open. Targets: server at most 10 % below direct (steps and
loads); PSS < 600 MiB with 8 sessions; start < 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common import free_port, stop, tree_cpu_s  # noqa: E402  (benchmarks/common.py)

from webgym_rollout.browser.client import BrowserClient  # noqa: E402
from webgym_rollout.browser.egress import EgressProxy, MappingResolver  # noqa: E402
from webgym_rollout.browser.guard import UrlGuard  # noqa: E402
from webgym_rollout.browser.processes import (  # noqa: E402
    CHROMIUM_ARGS,
    DEFAULT_CHROMIUM,
    process_tree_pss_mib,
)
from webgym_rollout.browser.protocol import BrowserAction  # noqa: E402
from webgym_rollout.tasks.miniwob import MINIWOB_CLIP, MiniWobPage  # noqa: E402
from webgym_rollout.tasks.miniwob import task_url as miniwob_task_url  # noqa: E402
from webgym_rollout.tasks.sites import SiteServer  # noqa: E402

EXAMPLES = """examples:
  # the whole table (both page sets, N = 1..16, page loads), 3 alternating rounds each:
  OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/browser_ops.py
  # also the pre-act calls (execute + screenshot), more rounds, fewer sessions:
  OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/browser_ops.py --split --repeat 5 --ns 1,8
  # page loads only, at N = 4 and 8:
  OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/browser_ops.py --ns '' --load-ns 4,8
  # where one page load's time goes (goto, the URL guard, the title read, the HTTP hop):
  OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/browser_ops.py --ns '' --load-ns 1 --load-profile
"""

CHROMIUM = os.environ.get("WEBGYM_CHROMIUM", DEFAULT_CHROMIUM)
fresh = itertools.count()  # query strings that make every page load a new URL


def _serve_cmd() -> list[str]:
    """``webgym-rollout serve`` of this checkout (not the console script, which may import another)."""
    return [sys.executable, "-c", "from webgym_rollout.cli import main; main()"]


def start_server(port: int, browsers: int, contexts: int, allow: str,
                 tree: Path | None = None) -> tuple[subprocess.Popen, float]:
    """Start ``webgym-rollout serve`` (its pages may reach `allow`, the site server's host:port),
    of this checkout or of the checkout at `tree`; returns the process and the seconds until
    /health answered."""
    cmd = [*_serve_cmd(), "serve", "--port", str(port), "--allow-hosts", allow, "--browsers", str(browsers),
           "--contexts-per-browser", str(contexts)]
    start = time.perf_counter()
    env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tree, env=env)
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


@dataclass(frozen=True)
class PageSet:
    name: str
    start_url: str
    environment: str
    click: tuple[int, int]

    @property
    def miniwob(self) -> bool:
        return self.environment != "web"


@dataclass(frozen=True)
class Run:
    """One measured run of one path: rate (steps or loads per second) and CPU-ms per unit."""

    rate: float
    cpu_ms: float = float("nan")
    server_cpu_ms: float = float("nan")
    proxy_cpu_ms: float = float("nan")
    proxied_requests: float = float("nan")


async def _timed(pid: int, units: int, work: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """(units per second, CPU-ms per unit of process `pid`'s tree) of `work`."""
    cpu, start = tree_cpu_s(pid), time.perf_counter()
    await work()
    elapsed, cpu = time.perf_counter() - start, tree_cpu_s(pid) - cpu
    return units / elapsed, 1000 * cpu / units


class Direct:
    """Pages on browsers launched here (`browsers` of them, sessions spread over them), optionally
    through an egress proxy."""

    def __init__(self, playwright, browsers: int, proxy: EgressProxy | None = None):
        self.playwright, self.count, self.proxy = playwright, browsers, proxy
        self.browsers: list = []

    async def __aenter__(self) -> Direct:
        args = list(CHROMIUM_ARGS) + (self.proxy.chromium_args if self.proxy else [])
        self.browsers = [await self.playwright.chromium.launch(executable_path=CHROMIUM, args=args)
                         for _ in range(self.count)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for browser in self.browsers:
            await browser.close()

    async def pages(self, pages: PageSet, n: int) -> list:
        opened = []
        for i in range(n):
            context = await self.browsers[i % self.count].new_context(viewport={"width": 1280, "height": 720})
            page = await context.new_page()
            await page.goto(pages.start_url)
            if pages.miniwob:
                await MiniWobPage.start_page(page, "click-button", i, max_time_s=60, timeout_s=30)
            opened.append(page)
        return opened

    async def steps(self, pages: PageSet, n: int, steps: int) -> Run:
        """A step: the click, then the screenshot (and on MiniWoB the page's state, read beside it)."""
        opened = await self.pages(pages, n)
        clip = MINIWOB_CLIP if pages.miniwob else None

        async def step(page) -> None:
            await page.mouse.click(*pages.click)
            shot = page.screenshot(type="png", clip=clip, scale="css")
            if pages.miniwob:
                await asyncio.gather(shot, MiniWobPage.read_page(page))
            else:
                await shot

        async def loop(page, count: int) -> None:
            for _ in range(count):
                await step(page)

        try:
            await asyncio.gather(*(loop(p, 1) for p in opened))  # warm-up
            rate, cpu = await _timed(os.getpid(), n * steps,
                                     lambda: asyncio.gather(*(loop(p, steps) for p in opened)))
            return Run(rate, cpu)
        finally:
            await asyncio.gather(*(p.context.close() for p in opened))

    async def loads(self, two: tuple[str, str], n: int, count: int) -> Run:
        opened = []
        for i in range(n):
            context = await self.browsers[i % self.count].new_context(viewport={"width": 1280, "height": 720})
            page = await context.new_page()
            await page.goto(two[0])
            opened.append(page)

        async def loop(page, times: int) -> None:
            for i in range(times):  # a new query each time: the document is fetched, not cached
                await page.goto(f"{two[(i + 1) % 2]}?{next(fresh)}", wait_until="load")

        try:
            await asyncio.gather(*(loop(p, 2) for p in opened))
            rate, cpu = await _timed(os.getpid(), n * count,
                                     lambda: asyncio.gather(*(loop(p, count) for p in opened)))
            return Run(rate, cpu)
        finally:
            await asyncio.gather(*(p.context.close() for p in opened))


async def server_steps(url: str, pages: PageSet, n: int, steps: int, server_pid: int, split: bool) -> Run:
    """Steps through the server: one ``act`` call each (as `WebEnv.step`), or with `split` the
    calls a step made before it (``execute``, ``screenshot``, and ``env_state`` on MiniWoB)."""
    click = BrowserAction.click(*pages.click)
    async with BrowserClient(url) as client:
        sessions = await asyncio.gather(*(
            client.create_session(pages.start_url, environment=pages.environment, seed=i) for i in range(n)))

        async def step(session) -> None:
            if not split:
                await session.act(click)
                return
            await session.execute(click)
            if pages.miniwob:
                await asyncio.gather(session.screenshot(), session.env_state())
            else:
                await session.screenshot()

        async def loop(session, count: int) -> None:
            for _ in range(count):
                await step(session)

        try:
            await asyncio.gather(*(loop(s, 1) for s in sessions))  # warm-up
            proxy, server = egress_counters(url)[0], tree_cpu_s(server_pid)
            rate, cpu = await _timed(os.getpid(), n * steps,
                                     lambda: asyncio.gather(*(loop(s, steps) for s in sessions)))
            server = 1000 * (tree_cpu_s(server_pid) - server) / (n * steps)
            proxy = 1000 * (egress_counters(url)[0] - proxy) / (n * steps)
            return Run(rate, cpu, server, proxy)
        finally:
            await asyncio.gather(*(s.close() for s in sessions))


async def server_loads(url: str, two: tuple[str, str], n: int, count: int) -> Run:
    """Page loads through the server, with the proxy's CPU-ms and proxied requests per load."""
    async with BrowserClient(url) as client:
        sessions = await asyncio.gather(*(client.create_session(two[0]) for _ in range(n)))

        async def loop(session, times: int) -> None:
            for i in range(times):
                await session.navigate(f"{two[(i + 1) % 2]}?{next(fresh)}")

        try:
            await asyncio.gather(*(loop(s, 2) for s in sessions))  # warm-up
            cpu, forwarded = egress_counters(url)
            rate, total_cpu = await _timed(os.getpid(), n * count,
                                           lambda: asyncio.gather(*(loop(s, count) for s in sessions)))
            cpu_after, forwarded_after = egress_counters(url)
            done = n * count
            return Run(rate, total_cpu, proxy_cpu_ms=1000 * (cpu_after - cpu) / done,
                       proxied_requests=(forwarded_after - forwarded) / done)
        finally:
            await asyncio.gather(*(s.close() for s in sessions))


async def load_profile(browser, proxied, two: tuple[str, str], site: str, url: str, loads: int,
                       repeat: int) -> None:
    """Where a page load's time goes (one session, serial loads): Playwright's ``goto`` alone; with
    the server's URL guard on the page (`NavigationTracker`: every request paused and let through
    by Python); plus the title read the server makes after a load (``page.title()``, as before
    issue 42, and one DevTools evaluation, as now); the same on a browser whose connections pass
    the egress proxy (`proxied`); and the server's whole ``navigate`` over HTTP. The variants
    alternate ``repeat`` times; medians in ms per load."""
    from webgym_rollout.browser.navigation import NavigationTracker  # lazy: only for --load-profile

    async def page(guarded: bool, on=browser):
        context = await on.new_context(viewport={"width": 1280, "height": 720})
        opened = await context.new_page()
        tracker = NavigationTracker(opened, UrlGuard((site,)), "profile")
        if guarded:
            await tracker.install(context)
        await opened.goto(two[0])
        return opened, tracker

    async def loads_of(opened, tracker, read: str) -> None:
        for i in range(loads):
            await opened.goto(f"{two[(i + 1) % 2]}?{next(fresh)}", wait_until="load")
            if read == "playwright":
                await opened.title()
            elif read == "devtools":
                await tracker.read_title()

    plain, guarded, behind_proxy = await page(False), await page(True), await page(True, proxied)
    variants: dict[str, Callable[[], Awaitable[object]]] = {
        "goto": lambda: loads_of(*plain, ""),
        "goto, guarded": lambda: loads_of(*guarded, ""),
        "goto, guarded, page.title()": lambda: loads_of(*guarded, "playwright"),
        "goto, guarded, DevTools title": lambda: loads_of(*guarded, "devtools"),
        "the same through the egress proxy": lambda: loads_of(*behind_proxy, "devtools"),
    }
    async with BrowserClient(url) as client:
        session = await client.create_session(two[0])

        async def navigations() -> None:
            for i in range(loads):
                await session.navigate(f"{two[(i + 1) % 2]}?{next(fresh)}")

        variants["server navigate (HTTP)"] = navigations
        times: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(repeat):
            for name in names[r % len(names):] + names[:r % len(names)]:
                start = time.perf_counter()
                await variants[name]()
                times[name].append(1000 * (time.perf_counter() - start) / loads)
        await session.close()
    for opened, _ in (plain, guarded, behind_proxy):
        await opened.context.close()
    base = _median(times["goto"])
    print(f"\npage-load profile, one session, {loads} loads x {repeat} alternating rounds "
          "(median ms per load):")
    for name, values in times.items():
        print(f"  {name:34s} {_median(values):6.2f} ms  (+{_median(values) - base:5.2f} ms, "
              f"{100 * (_median(values) / base - 1):5.1f} % over goto)")


async def alternate(paths: dict[str, Callable[[], Awaitable[Run]]], repeat: int) -> dict[str, list[Run]]:
    """Run every path `repeat` times, in a rotating order (round r starts with path r mod k)."""
    names = list(paths)
    runs: dict[str, list[Run]] = {name: [] for name in names}
    for r in range(repeat):
        for name in names[r % len(names):] + names[:r % len(names)]:
            runs[name].append(await paths[name]())
    return runs


def _median(values) -> float:
    return statistics.median(values)


def _overhead(runs: dict[str, list[Run]], path: str, base: str = "direct") -> tuple[float, float, float]:
    """(median, min, max) over rounds of the % by which `path` is below `base` in the same round."""
    below = [100 * (1 - p.rate / b.rate) for p, b in zip(runs[path], runs[base], strict=True)]
    return _median(below), min(below), max(below)


async def measure_memory(url: str, start_url: str, server_pid: int, n: int = 8) -> float:
    async with BrowserClient(url) as client:
        sessions = await asyncio.gather(*(client.create_session(start_url) for _ in range(n)))
        for s in sessions:
            await s.screenshot()
        pss = process_tree_pss_mib(server_pid)
        await asyncio.gather(*(s.close() for s in sessions))
    return pss


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ns", default="1,2,4,8,16",
                        help="concurrent sessions of the step table ('' skips it)")
    parser.add_argument("--steps", type=int, default=10, help="measured steps per session and run")
    parser.add_argument("--min-steps", type=int, default=60,
                        help="measured steps per run at least (few sessions take more steps each)")
    parser.add_argument("--browsers", type=int, default=2, help="browser processes (every path)")
    parser.add_argument("--load-ns", default="8",
                        help="concurrent sessions of the page-load table ('' skips it)")
    parser.add_argument("--navigations", type=int, default=10, help="page loads per session and run")
    parser.add_argument("--repeat", type=int, default=3,
                        help="alternating rounds per setting; medians and spread are reported")
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                        help="also measure a server started from another checkout (e.g. a git worktree "
                             "of the commit before a change), side by side with this one")
    parser.add_argument("--load-profile", action="store_true",
                        help="also profile one session's page load: goto, the guard, the title read, HTTP")
    parser.add_argument("--split", action="store_true",
                        help="also measure the pre-act calls (execute, screenshot, env_state) per step")
    args = parser.parse_args()
    ns = [int(n) for n in args.ns.split(",") if n.strip()]
    load_ns = [int(n) for n in args.load_ns.split(",") if n.strip()]
    contexts = max(8, -(-max(ns + load_ns + [8]) // args.browsers))

    from playwright.async_api import async_playwright

    with SiteServer() as sites:
        site = f"{sites.host}:{sites.port}"
        local = f"{sites.base_url}/sandbox/form.html"
        page_sets = (PageSet("local 1280x720", local, "web", (300, 40)),
                     PageSet("miniwob click-button", miniwob_task_url(sites.base_url, "click-button"),
                             "miniwob:click-button", (80, 105)))
        two = (local, f"{sites.base_url}/sandbox/next.html")
        port = free_port()
        proc, startup_s = start_server(port, args.browsers, contexts, allow=site)
        url = f"http://127.0.0.1:{port}"
        baseline = None
        if args.baseline is not None:
            baseline = start_server(free_port(), args.browsers, contexts, allow=site,
                                    tree=args.baseline.resolve())[0]
        base_url = f"http://127.0.0.1:{baseline.args[baseline.args.index('--port') + 1]}" if baseline else ""
        # The proxy of the "proxied" loads: the server's kind, the same guard, no name lookups.
        proxy = EgressProxy(UrlGuard((site,)), MappingResolver({}))
        await proxy.start()
        step_rows, load_rows = [], []
        try:
            pss = await measure_memory(url, local, proc.pid)
            async with async_playwright() as playwright, Direct(playwright, args.browsers) as direct, \
                    Direct(playwright, args.browsers, proxy) as proxied:
                for pages in page_sets:
                    for n in ns:
                        steps = max(args.steps, -(-args.min_steps // n))
                        paths = {
                            "direct": lambda p=pages, n=n, k=steps: direct.steps(p, n, k),
                            "act": lambda p=pages, n=n, k=steps: server_steps(url, p, n, k, proc.pid, False),
                        }
                        if baseline is not None:
                            paths["baseline"] = lambda p=pages, n=n, k=steps: server_steps(
                                base_url, p, n, k, baseline.pid, False)
                        if args.split:
                            paths["split"] = lambda p=pages, n=n, k=steps: server_steps(
                                url, p, n, k, proc.pid, True)
                        runs = await alternate(paths, args.repeat)
                        step_rows.append((pages.name, n, runs))
                        _print_steps(pages.name, n, runs)
                for n in load_ns:
                    load_paths = {
                        "direct": lambda n=n: direct.loads(two, n, args.navigations),
                        "proxied": lambda n=n: proxied.loads(two, n, args.navigations),
                        "server": lambda n=n: server_loads(url, two, n, args.navigations),
                    }
                    if baseline is not None:
                        load_paths["baseline"] = lambda n=n: server_loads(base_url, two, n, args.navigations)
                    runs = await alternate(load_paths, args.repeat)
                    load_rows.append((n, runs))
                    _print_loads(n, runs)
                if args.load_profile:
                    await load_profile(direct.browsers[0], proxied.browsers[0], two, site, url,
                                       args.navigations * 3, args.repeat * 2)
        finally:
            await proxy.close()
            for server in (proc, baseline):
                if server is not None:
                    stop(server, timeout_s=15)
    print()
    print(f"start to healthy /health: {startup_s:.2f} s (target < 2 s)")
    print(f"PSS server + browsers with 8 sessions open: {pss:.0f} MiB (target < 600 MiB)")
    print(f"server below direct, median over {args.repeat} alternating rounds [min..max] (target <= 10 %):")
    for name, n, runs in step_rows:
        paths = [path for path in ("act", "baseline", "split") if path in runs]
        print(f"  {name:22s} N={n:<3d} " + "   ".join(
            "{} {:5.1f} % [{:5.1f}..{:5.1f}]".format(path, *_overhead(runs, path)) for path in paths)
            + (_BASELINE.format("act", *_overhead(runs, "act", "baseline")) if "baseline" in runs else ""))
    for n, runs in load_rows:
        print("  {:22s} N={:<3d} server {:5.1f} % [{:5.1f}..{:5.1f}]".format("page loads", n,
                                                                            *_overhead(runs, "server"))
              + "   of which the proxy (proxied vs direct) {:5.1f} % [{:5.1f}..{:5.1f}]".format(
                  *_overhead(runs, "proxied"))
              + ("   baseline {:5.1f} % [{:5.1f}..{:5.1f}]".format(*_overhead(runs, "baseline"))
                 + _BASELINE.format("server", *_overhead(runs, "server", "baseline"))
                 if "baseline" in runs else ""))


_BASELINE = "   {} below baseline {:5.1f} % [{:5.1f}..{:5.1f}]"
"""This checkout's server against the `--baseline` one's, per round (negative: faster)."""


def _print_steps(name: str, n: int, runs: dict[str, list[Run]]) -> None:
    direct = runs["direct"]
    line = (f"{name:22s} N={n:<3d} direct {_median(r.rate for r in direct):6.1f} steps/s "
            f"{_median(r.cpu_ms for r in direct):5.1f} CPU-ms/step")
    for path in ("act", "baseline", "split"):
        if path not in runs:
            continue
        served = runs[path]
        below = _overhead(runs, path)
        line += (f" | {path} {_median(r.rate for r in served):6.1f} steps/s "
                 f"{_median(r.cpu_ms for r in served):5.1f} CPU-ms/step "
                 f"({_median(r.server_cpu_ms for r in served):5.1f} server+browsers, "
                 f"{_median(r.proxy_cpu_ms for r in served):.3f} proxy) "
                 f"below direct {below[0]:5.1f} % [{below[1]:.1f}..{below[2]:.1f}]")
    print(line, flush=True)


def _print_loads(n: int, runs: dict[str, list[Run]]) -> None:
    rates = {path: _median(r.rate for r in runs[path]) for path in runs}
    server = runs["server"]
    proxied_below, server_below = _overhead(runs, "proxied"), _overhead(runs, "server")
    print(f"{'page loads':22s} N={n:<3d} direct {rates['direct']:6.1f} loads/s"
          f" | proxied {rates['proxied']:6.1f} loads/s, below direct {proxied_below[0]:5.1f} %"
          f" [{proxied_below[1]:.1f}..{proxied_below[2]:.1f}]"
          f" | server {rates['server']:6.1f} loads/s, below direct {server_below[0]:5.1f} %"
          f" [{server_below[1]:.1f}..{server_below[2]:.1f}],"
          f" proxy {_median(r.proxy_cpu_ms for r in server):.2f} CPU-ms and"
          f" {_median(r.proxied_requests for r in server):.1f} requests per load"
          + (f" | baseline {rates['baseline']:6.1f} loads/s, below direct "
             f"{_overhead(runs, 'baseline')[0]:5.1f} %" if "baseline" in runs else ""), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
