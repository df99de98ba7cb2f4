"""Asynchronous vs synchronous rollout: steps/s of ``webgym-rollout run`` (asynchronous) and
``--lockstep`` on the same tasks, browsers and policy, measured side by side in one run.

Set-up (all on 127.0.0.1, started and stopped by this script):

- the MiniWoB site server, and one browser server (``webgym-rollout serve``, a subprocess) shared by
  every phase, so both modes use the same browsers;
- the policy: a small OpenAI-compatible server answering with the random policy's replies (a click
  at a random point of the 0-1000 grid, sometimes a scroll) after an added per-request latency drawn
  from a log-normal (median 1 s, p95 5 s by default) that stands in for a GPU model; it serves at
  most ``--policy-concurrency`` requests at once, like a GPU server with a fixed batch. The runner
  talks to it through `OpenAIPolicy` (``--policy openai``), the production path;
- tasks: MiniWoB pages of several kinds and seeds, so episodes have varied lengths (a wrong click
  ends some at once, others run to the horizon).

Phases: (1) browser capacity: async with no added latency (the browsers are the bottleneck);
(2) asynchronous with ``--concurrency`` episodes; (3) ``--lockstep`` with batches of the same
size. Reported: steps/s of each, the ratio async/sync (target >= 5x), and async steps/s as a
fraction of the bound min(browser capacity, policy concurrency / mean latency) (target >= 80 %).
The async run keeps a few more episodes in flight than the policy serves at once, so the policy
is never idle while some episodes are busy in their browsers. Steps/s are end to end (first
session to last row); "steady state" counts only until the last episode started, i.e. without the
drain at the end of a short run, which a long run amortises. Per phase it also prints where an
episode's time went per step and the CPU seconds per step of the runner and of the browser server.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rollout_async_vs_sync.py [--episodes 480]
        [--concurrency 40] [--policy-concurrency 32] [--horizon 8] [--latency-median 1 --latency-p95 5]
        [--orders given,longest --rounds 2]

``--orders`` plays the async phase once per start order (``--start-order``) and round, alternated,
and prints each order's figures (means over the rounds) and their ratio.

A finite run ends with a drain: after the last episode starts, fewer and fewer episodes remain
and the policy idles. It lasts about as long as the slowest remaining episodes (~30 s here with
heavy-tailed latencies), whatever the run's length, so short runs understate the asynchronous
mode; the default of 480 episodes keeps the drain to about a sixth of the async phase.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import logging
import math
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common import free_port, tree_cpu_s  # noqa: E402  (benchmarks/common.py)

from webgym_core.endpoint import Endpoint  # noqa: E402
from webgym_rollout.actions import GRID_SIZE, AgentAction  # noqa: E402
from webgym_rollout.agent.policies import OpenAIPolicy, PolicySettings, RandomPolicySettings  # noqa: E402
from webgym_rollout.agent.protocol import format_response  # noqa: E402
from webgym_rollout.runner import RolloutSettings, RunSettings, run  # noqa: E402
from webgym_rollout.settings import EnvSettings  # noqa: E402
from webgym_rollout.tasks.sites import SiteServer  # noqa: E402
from webgym_rollout.trajectory.reader import read_episodes  # noqa: E402

DEFAULT_TASKS = ("click-button", "click-link", "click-dialog", "click-tab", "click-checkboxes",
                 "click-option", "focus-text", "click-test-2")


class LatencyPolicyServer:
    """OpenAI-compatible chat endpoint: random-policy replies after a log-normal delay.

    At most `concurrency` requests are served at once (the rest queue); the delay is taken while
    holding a slot, as a GPU server's batch slot would be held while generating. Subclasses answer
    more paths by overriding `get` / `post` (benchmarks/loop_async_vs_sync.py adds /reload).
    """

    served_name = "random-latency"

    def __init__(self, concurrency: int, seed: int):
        self.concurrency = concurrency
        self._slots = threading.BoundedSemaphore(concurrency)
        self._seed = seed
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.mu, self.sigma = 0.0, 0.0
        self.enabled = False
        self.latencies: list[float] = []
        self.requests = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args):  # noqa: A002 - stdlib signature
                pass

            def _send(self, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(server.get(self.path))

            def do_POST(self):
                self._send(server.post(self.path, json.loads(
                    self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")))

        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def get(self, path: str) -> dict[str, Any]:
        """A GET: the model list."""
        return {"object": "list", "data": [{"id": self.served_name, "object": "model"}]}

    def post(self, path: str, request: dict[str, Any]) -> dict[str, Any]:
        """A POST: a chat completion, answered after its delay (taken holding a slot)."""
        extra = self.completion_fields()  # what the endpoint is when the request arrives
        with self._slots:
            delay, reply = self._draw()
            if delay > 0:
                time.sleep(delay)
        return {"id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()),
                "model": request.get("model", self.served_name), **extra,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": reply}}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}

    def completion_fields(self) -> dict[str, Any]:
        """Extra fields of a completion (none here)."""
        return {}

    def set_latency(self, median_s: float, p95_s: float) -> None:
        self._rng = random.Random(self._seed)  # every phase draws the same latency sequence
        self.enabled = median_s > 0
        if self.enabled:
            self.mu = math.log(median_s)
            self.sigma = math.log(p95_s / median_s) / 1.6448536269514722  # z of the 95th percentile
        self.latencies = []

    @property
    def mean_latency_s(self) -> float:
        """The analytic mean of the log-normal (what a long run converges to)."""
        return math.exp(self.mu + self.sigma ** 2 / 2) if self.enabled else 0.0

    def _draw(self) -> tuple[float, str]:
        with self._lock:
            self.requests += 1
            delay = self._rng.lognormvariate(self.mu, self.sigma) if self.enabled else 0.0
            self.latencies.append(delay)
            if self._rng.random() < 0.1:
                action = AgentAction(name="scroll", direction="down")
            else:
                action = AgentAction(name="left_click", coordinate=(self._rng.randint(0, GRID_SIZE),
                                                                    self._rng.randint(0, GRID_SIZE)))
        return delay, format_response(action, memory="-", progress="-", intention="random")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def __enter__(self) -> LatencyPolicyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._http.shutdown()
        self._http.server_close()


def start_browser_server(port: int, browsers: int, contexts: int, allow: str) -> subprocess.Popen:
    """``webgym-rollout serve`` on 127.0.0.1:`port`, its pages allowed to reach `allow` (the site
    server's host:port) and no other local port."""
    script = shutil.which("webgym-rollout", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-c", "from webgym_rollout.cli import main; main()"]
    command += ["serve", "--port", str(port), "--allow-hosts", allow, "--browsers", str(browsers),
                "--contexts-per-browser", str(contexts), "--idle-timeout-s", "60",
                "--concurrency", f"create={max(4, contexts)}", "--concurrency", "screenshot=8"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with httpx.Client(trust_env=False) as client:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                detail = proc.stderr.read().decode() if proc.stderr else ""
                raise SystemExit(f"browser server exited: {detail}")
            try:
                if client.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    return proc
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("browser server did not start within 60 s")


def write_tasks(path: Path, kinds: list[str], episodes: int, seed: int) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for i in range(episodes):
            kind = kinds[i % len(kinds)]
            handle.write(json.dumps({
                "task_id": f"{kind}-{seed}-{i}", "task_name": f"MiniWoB {kind}", "website": f"miniwob:{kind}",
                "benchmark_name": "miniwob", "environment": f"miniwob:{kind}", "env_seed": seed * 100_000 + i,
            }) + "\n")
    return path


class _TimedPolicy:
    """The runner's policy, noting when each step's reply arrived."""

    def __init__(self, inner):
        self.inner, self.model_id = inner, inner.model_id
        self.done_at: list[float] = []

    async def act(self, observation):
        output = await self.inner.act(observation)
        self.done_at.append(time.monotonic())
        return output

    async def close(self) -> None:
        await self.inner.close()


def _column(out: Path, name: str) -> list:
    return [v for batch in read_episodes(out).batches(columns=[name]) for v in batch.column(name).to_pylist()]


def _breakdown(out: Path, wall_s: float) -> dict:
    """Where an episode's time went, per step, from the rows written (policy = waiting for the
    policy server, queueing included; browser = execute + screenshot; other = session start,
    env_state, bookkeeping), and the mean number of episodes in flight."""
    batches = read_episodes(out).batches(columns=["duration_s", "steps"])
    rows = [r for batch in batches for r in batch.to_pylist()]
    steps = [s for r in rows for s in r["steps"]]
    n = max(1, len(steps))
    policy = sum(s["latency"]["policy_s"] for s in steps) / n
    browser = sum(s["latency"]["execute_s"] + s["latency"]["screenshot_s"] for s in steps) / n
    total = sum(r["duration_s"] for r in rows)
    return {"policy_s": policy, "browser_s": browser, "other_s": total / n - policy - browser,
            "in_flight": total / wall_s if wall_s else 0.0}


def _steps_by_kind(out: Path) -> dict[str, float]:
    """Mean steps per episode of each MiniWoB kind (what a longest-first start order can tell apart)."""
    steps: dict[str, list[int]] = {}
    for batch in read_episodes(out).batches(columns=["website", "num_steps"]):
        for row in batch.to_pylist():
            steps.setdefault(row["website"].removeprefix("miniwob:"), []).append(row["num_steps"])
    return {kind: statistics.fmean(values) for kind, values in sorted(steps.items())}


def _own_cpu_s() -> float:
    """CPU seconds used so far by this process (the runner and the in-process policy stand-in)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def phase(name: str, tasks: Path, work: Path, *, server_url: str, server_pid: int, sites_url: str,
                policy_url: str, mode: str, concurrency: int, horizon: int, seed: int,
                start_order: str = "longest") -> dict:
    endpoint = Endpoint(base_url=policy_url, model="random-latency", max_concurrency=concurrency)
    settings = RunSettings(
        tasks=tasks, servers=(server_url,), out=work / name, progress=False,
        rollout=RolloutSettings(concurrency=concurrency, batch_size=concurrency, lockstep=mode == "sync",
                                shard_episodes=1_000, start_order=start_order),
        env=EnvSettings(viewport="320x240", sites_url=sites_url, horizons={"miniwob": horizon}),
        policy=PolicySettings(kind="openai", endpoint=endpoint, random=RandomPolicySettings(seed=seed)))
    policy = _TimedPolicy(OpenAIPolicy(endpoint))
    began_wall, began = time.time(), time.monotonic()
    cpu_runner, cpu_server = _own_cpu_s(), tree_cpu_s(server_pid)
    report = await run(settings, policy=policy)
    cpu_runner, cpu_server = _own_cpu_s() - cpu_runner, tree_cpu_s(server_pid) - cpu_server
    # Steady state: from the start until the last episode began (every slot busy; no drain tail).
    last_start = max(_column(work / name, "started_at"), default=began_wall) - began_wall
    steady = sum(1 for t in policy.done_at if t - began <= last_start) / last_start if last_start > 0 else 0.0
    drain_steps = sum(1 for t in policy.done_at if t - began > last_start)
    result = {**_breakdown(work / name, report.elapsed_s), "steady_steps_per_s": steady,
              "drain_s": report.elapsed_s - last_start, "drain_steps": drain_steps,
              "cpu_runner_s": cpu_runner, "cpu_browser_server_s": cpu_server,
              "phase": name, "mode": mode, "start_order": start_order, "episodes": report.episodes,
              "steps": report.steps, "steps_by_kind": _steps_by_kind(work / name),
              "wall_s": report.elapsed_s, "steps_per_s": report.steps_per_s, "errors": report.errors,
              "successes": report.successes}
    errors = f", errors {report.errors}" if report.errors else ""
    print(f"  {name:<9} {mode:<5} {report.episodes:>4} episodes {report.steps:>5} steps "
          f"{report.elapsed_s:>7.1f} s  {report.steps_per_s:>6.2f} steps/s  "
          f"reward-1 {report.successes}{errors}", flush=True)
    if report.episodes > concurrency:
        steady_text = (f"steady state (until the last episode started) {steady:.2f} steps/s; "
                       f"drain after it {result['drain_s']:.1f} s, {drain_steps} steps")
    else:
        steady_text = "every episode started at once (no steady state)"
    print(f"  {'':<15} per step: policy {result['policy_s']:.2f} s, browser {result['browser_s']:.2f} s, "
          f"other {result['other_s']:.2f} s; episodes in flight on average {result['in_flight']:.1f}; "
          f"{steady_text}", flush=True)
    print(f"  {'':<15} CPU: runner + policy stand-in {cpu_runner:.1f} s, browser server + Chromium "
          f"{cpu_server:.1f} s ({1000 * (cpu_runner + cpu_server) / max(1, report.steps):.0f} ms per step)",
          flush=True)
    print(f"  {'':<15} mean steps by kind: "
          + ", ".join(f"{k} {v:.1f}" for k, v in result["steps_by_kind"].items()), flush=True)
    return result


async def main_async(args: argparse.Namespace) -> None:
    kinds = [k.strip() for k in args.tasks.split(",") if k.strip()]
    orders = [o.strip() for o in args.orders.split(",") if o.strip()]
    args.capacity_concurrency = args.capacity_concurrency or args.concurrency
    port = free_port()
    contexts = math.ceil(max(args.concurrency, args.capacity_concurrency) / args.browsers)
    sites = SiteServer()  # bound now (served from the `with` below): the browser server allowlists it
    server = start_browser_server(port, args.browsers, contexts, allow=f"{sites.host}:{sites.port}")
    server_url = f"http://127.0.0.1:{port}"
    try:
        with sites, LatencyPolicyServer(args.policy_concurrency, args.seed) as policy, \
                tempfile.TemporaryDirectory(prefix="rollout-bench-") as tmp:
            work = Path(tmp)
            common = dict(server_url=server_url, server_pid=server.pid, sites_url=sites.base_url,
                          policy_url=policy.base_url, horizon=args.horizon, seed=args.seed)
            print(f"tasks {', '.join(kinds)}; horizon {args.horizon}; browsers {args.browsers} x {contexts} "
                  f"contexts; policy concurrency {args.policy_concurrency}", flush=True)

            # (1) browser capacity: no added latency, so the browsers (and this 2-core machine) limit.
            policy.set_latency(0, 0)
            capacity_tasks = write_tasks(work / "capacity.jsonl", kinds, args.capacity_episodes,
                                         args.seed + 1)
            capacity = await phase("capacity", capacity_tasks, work, mode="async",
                                   concurrency=args.capacity_concurrency, **common)

            tasks = write_tasks(work / "tasks.jsonl", kinds, args.episodes, args.seed)
            runs: list[tuple[str, str, str]] = [(f"async-{order}-{r}" if len(orders) > 1 or args.rounds > 1
                                                 else "async", "async", order)
                                                for r in range(args.rounds) for order in orders]
            if not args.skip_sync:
                runs.append(("sync", "sync", "given"))
            results = {}
            for name, mode, order in runs:
                policy.set_latency(args.latency_median, args.latency_p95)
                results[name] = await phase(name, tasks, work, mode=mode, concurrency=args.concurrency,
                                            start_order=order, **common)
                drawn = policy.latencies
                results[name]["latency_mean_s"] = statistics.fmean(drawn) if drawn else 0.0
                results[name]["latency_p95_s"] = (statistics.quantiles(drawn, n=20)[-1]
                                                  if len(drawn) >= 20 else float("nan"))
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()

    summary(args, orders, capacity, results, policy)


def _mean(results: dict, order: str, key: str) -> float:
    values = [r[key] for r in results.values() if r["mode"] == "async" and r["start_order"] == order]
    return statistics.fmean(values)


def summary(args: argparse.Namespace, orders: list[str], capacity: dict, results: dict,
            policy: LatencyPolicyServer) -> None:
    """The figures of each start order (means over the rounds), against sync and the bound."""
    sync = results.get("sync")
    asyncs = [r for r in results.values() if r["mode"] == "async"]
    # The bound of this run: the latencies the async phases actually drew (the analytic mean is printed).
    mean_latency = statistics.fmean(r["latency_mean_s"] for r in asyncs) or policy.mean_latency_s
    policy_bound = args.policy_concurrency / mean_latency if mean_latency else float("inf")
    bound = min(capacity["steps_per_s"], policy_bound)
    print()
    print(f"latency drawn: async mean {mean_latency:.2f} s (log-normal mean {policy.mean_latency_s:.2f} s)"
          + (f"; sync mean {sync['latency_mean_s']:.2f} s" if sync else ""))
    print(f"bound = min(browser capacity {capacity['steps_per_s']:.2f}, policy {args.policy_concurrency} / "
          f"{mean_latency:.2f} s = {policy_bound:.2f}) = {bound:.2f} steps/s")
    figures = {}
    for order in orders:
        rate, steady = _mean(results, order, "steps_per_s"), _mean(results, order, "steady_steps_per_s")
        drain, wall = _mean(results, order, "drain_s"), _mean(results, order, "wall_s")
        ratio = rate / sync["steps_per_s"] if sync and sync["steps_per_s"] else float("nan")
        figures[order] = {"steps_per_s": rate, "ratio": ratio, "fraction_of_bound": rate / bound,
                          "steady_fraction": steady / bound, "drain_s": drain, "drain_share": drain / wall}
        print(f"start order {order:<8} async {rate:.2f} steps/s ({args.rounds} round(s)): "
              f"{100 * rate / bound:.0f}% of the bound end to end, {100 * steady / bound:.0f}% in steady "
              f"state; drain {drain:.1f} s = {100 * drain / wall:.0f}% of the run"
              + (f"; async/sync {ratio:.2f}x (target >= 5x)" if sync else ""))
    if sync:
        print(f"sync {sync['steps_per_s']:.2f} steps/s; bound / sync = {bound / sync['steps_per_s']:.2f}x: "
              "the largest ratio these browsers and this policy allow")
    if len(orders) == 2:
        a, b = (figures[o]["steps_per_s"] for o in orders)
        print(f"{orders[1]} / {orders[0]}: {b / a:.3f}x in end-to-end steps/s")
    if args.json:
        Path(args.json).write_text(json.dumps({"capacity": capacity, "phases": results, "orders": figures,
                                               "bound": bound, "args": vars(args)}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=480,
                        help="Episodes per mode (default 480: about 20 min; 48 gives a quick look).")
    parser.add_argument("--concurrency", type=int, default=40,
                        help="Episodes in flight: async concurrency and sync batch size (default 40).")
    parser.add_argument("--policy-concurrency", type=int, default=32,
                        help="Requests the policy server serves at once (default 32).")
    parser.add_argument("--horizon", type=int, default=8, help="Most steps per episode (default 8).")
    parser.add_argument("--latency-median", type=float, default=1.0, help="Median latency, s (default 1).")
    parser.add_argument("--latency-p95", type=float, default=5.0, help="p95 latency, s (default 5).")
    parser.add_argument("--tasks", default=",".join(DEFAULT_TASKS), help="MiniWoB tasks, comma-separated.")
    parser.add_argument("--browsers", type=int, default=2, help="Chromium processes of the browser server.")
    parser.add_argument("--capacity-episodes", type=int, default=40,
                        help="Episodes of the no-latency capacity phase (default 40).")
    parser.add_argument("--capacity-concurrency", type=int, default=None,
                        help="Episodes in flight in the capacity phase (default: --concurrency).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of tasks, latencies and actions.")
    parser.add_argument("--orders", default="longest",
                        help="Start orders of the async phase, comma-separated (given,longest compares "
                             "them side by side; default longest, the runner's default).")
    parser.add_argument("--rounds", type=int, default=1,
                        help="Async phases per start order, alternated (default 1).")
    parser.add_argument("--skip-sync", action="store_true", help="Run only capacity and async (diagnostics).")
    parser.add_argument("--json", default=None, help="Also write the figures to this JSON file.")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
