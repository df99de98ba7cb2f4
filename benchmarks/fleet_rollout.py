"""A rollout through a browser fleet on Ray against the same browsers started directly, in one run.

Set-up (all on 127.0.0.1, started and stopped by this script): the MiniWoB site server and the
latency policy stand-in of ``rollout_async_vs_sync.py`` (its async phase: ``--concurrency``
episodes, log-normal policy latency); browsers: (a) ``webgym-rollout serve`` as a subprocess, (b) a
fleet (``fleet up``) on a local Ray cluster of one browser node, with the same browsers and contexts.
The phases alternate (direct, fleet, direct, fleet, ...) so that the machine's drift hits both.

Reported: steps/s of each (and the ratio fleet / direct, target >= 0.95: Ray is not on the data
path), the time to start the cluster and the fleet, and the resident memory of the plain server
(with its Chromium) beside the fleet's server actor (with its Chromium), its controller and Ray's
own processes.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fleet_rollout.py [--episodes 48] [--rounds 2]
        [--concurrency 8] [--browsers 2] [--latency-median 0.5 --latency-p95 2]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common import free_port, tree_rss_mb  # noqa: E402  (benchmarks/common.py)
from rollout_async_vs_sync import (  # noqa: E402
    DEFAULT_TASKS,
    LatencyPolicyServer,
    _TimedPolicy,
    start_browser_server,
    write_tasks,
)

from webgym_core.endpoint import Endpoint  # noqa: E402
from webgym_rollout.agent.policies import OpenAIPolicy, PolicySettings  # noqa: E402
from webgym_rollout.fleet import ray_environment  # noqa: E402
from webgym_rollout.runner import RolloutSettings, RunSettings, run  # noqa: E402
from webgym_rollout.settings import EnvSettings  # noqa: E402
from webgym_rollout.tasks.sites import SiteServer  # noqa: E402

for _key, _value in ray_environment("127.0.0.1:6379").items():
    os.environ.setdefault(_key, _value)


async def rollout(name: str, tasks: Path, out: Path, *, policy_url: str, sites_url: str, concurrency: int,
                  horizon: int, servers: tuple[str, ...] = (), fleet: dict | None = None) -> float:
    from webgym_rollout.fleet import FleetSettings

    endpoint = Endpoint(base_url=policy_url, model="random-latency", max_concurrency=concurrency)
    settings = RunSettings(
        tasks=tasks, servers=servers, out=out, progress=False, fleet=FleetSettings(**(fleet or {})),
        rollout=RolloutSettings(concurrency=concurrency, shard_episodes=1_000),
        env=EnvSettings(viewport="320x240", sites_url=sites_url, horizons={"miniwob": horizon}),
        policy=PolicySettings(kind="openai", endpoint=endpoint))
    report = await run(settings, policy=_TimedPolicy(OpenAIPolicy(endpoint)))
    errors = f", errors {report.errors}" if report.errors else ""
    print(f"  {name:<7} {report.episodes:>4} episodes {report.steps:>5} steps {report.elapsed_s:>7.1f} s "
          f"{report.steps_per_s:>6.2f} steps/s{errors}", flush=True)
    return report.steps_per_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=2, help="direct/fleet pairs, alternating")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--policy-concurrency", type=int, default=8)
    parser.add_argument("--browsers", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=6)
    parser.add_argument("--latency-median", type=float, default=0.5)
    parser.add_argument("--latency-p95", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from webgym_rollout.browser.pool import PoolSettings
    from webgym_rollout.fleet import FleetUpSettings, LocalCluster, fleet_down, fleet_up

    contexts = math.ceil(args.concurrency / args.browsers)
    kinds = list(DEFAULT_TASKS)
    began = time.monotonic()
    cluster = LocalCluster(nodes=1, num_cpus=1, resources={"browser": 1})
    cluster_s = time.monotonic() - began
    port = free_port()
    sites = SiteServer()  # bound now (served from the `with` below): the browser servers allowlist it
    allow = f"{sites.host}:{sites.port}"
    server = start_browser_server(port, args.browsers, contexts, allow=allow)
    try:
        cluster.ray.init(address=cluster.address, namespace="webgym", include_dashboard=False,
                         log_to_driver=False, configure_logging=False, _node_ip_address="127.0.0.1")
        began = time.monotonic()
        endpoints = fleet_up(FleetUpSettings(
            address=cluster.address, name="bench", browsers_per_node=args.browsers, port=0,
            nodes_with_resource="browser",
            pool=PoolSettings(contexts_per_browser=contexts, allow_hosts=(allow,), idle_timeout_s=60,
                              concurrency={"create": max(4, contexts), "screenshot": 8})))
        fleet_s = time.monotonic() - began
        controller = cluster.ray.get_actor("webgym-fleet-bench", namespace="webgym")
        (actor_pid,) = cluster.ray.get(controller.server_pids.remote()).values()
        print(f"local Ray cluster (head + 1 browser node) started in {cluster_s:.1f} s; fleet up "
              f"(1 server, {args.browsers} browsers x {contexts} contexts) in {fleet_s:.1f} s: "
              f"{endpoints[0].url}", flush=True)
        speeds: dict[str, list[float]] = {"direct": [], "fleet": []}
        with sites, LatencyPolicyServer(args.policy_concurrency, args.seed) as policy, \
                tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
            policy.set_latency(args.latency_median, args.latency_p95)
            common = dict(policy_url=policy.base_url, sites_url=sites.base_url, concurrency=args.concurrency,
                          horizon=args.horizon)
            for i in range(args.rounds):
                tasks = write_tasks(Path(tmp) / f"tasks-{i}.jsonl", kinds, args.episodes, args.seed + i)
                speeds["direct"].append(asyncio.run(rollout(
                    "direct", tasks, Path(tmp) / f"direct-{i}", servers=(f"http://127.0.0.1:{port}",),
                    **common)))
                speeds["fleet"].append(asyncio.run(rollout(
                    "fleet", tasks, Path(tmp) / f"fleet-{i}",
                    fleet={"fleet": "bench", "ray_address": cluster.address}, **common)))
        plain_mb, actor_mb = tree_rss_mb(server.pid), tree_rss_mb(actor_pid)
        browsers = {pid: psutil.Process(pid) for pid in (server.pid, actor_pid)}
        counted = {pid for pid, proc in browsers.items()} | {
            child.pid for proc in browsers.values() for child in proc.children(recursive=True)}
        ray_mb = sum(p.memory_info().rss for p in psutil.Process().children(recursive=True)
                     if p.pid not in counted) / 2**20
        direct, fleet = (sum(v) / len(v) for v in (speeds["direct"], speeds["fleet"]))
        print(f"steps/s: direct {direct:.2f}, fleet {fleet:.2f}; ratio fleet/direct {fleet / direct:.3f} "
              f"(target >= 0.95)")
        print(f"memory (RSS): plain server + Chromium {plain_mb:.0f} MiB; fleet server actor + Chromium "
              f"{actor_mb:.0f} MiB; Ray's processes (GCS, raylets, controller, workers) {ray_mb:.0f} MiB")
        fleet_down("bench", cluster.address)
    finally:
        server.terminate()
        server.wait(timeout=30)
        cluster.shutdown()


if __name__ == "__main__":
    main()
