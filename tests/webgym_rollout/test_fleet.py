"""Tests of `webgym_rollout.fleet`: browser fleets on a real local Ray cluster (several raylets on
127.0.0.1, no dashboard, usage statistics off), real browser servers in Ray actors, real rollouts
through ``--fleet``. The cluster fixture checks that no process of the cluster outlives it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import socket
import sys
import time
import uuid
from pathlib import Path

import pytest

from webgym_rollout.fleet import FleetSettings, FleetUpSettings, ray_environment
from webgym_rollout.runner import RolloutSettings, RunSettings, run
from webgym_rollout.settings import EnvSettings

# Before Ray is imported: its constants read these once (loopback stays loopback, no usage report).
for _key, _value in ray_environment("127.0.0.1:6379").items():
    os.environ.setdefault(_key, _value)

FLEET = "test"


# ------------------------------------------------------------------------------ no cluster needed

def test_settings_name_the_field_at_fault(tmp_path):
    with pytest.raises(ValueError, match=r"^ray_address: --fleet web needs"):
        FleetSettings(fleet="web")
    with pytest.raises(ValueError, match=r"^servers: give browser server URLs or --fleet web, not both"):
        RunSettings(tasks=tmp_path / "t.jsonl", out=tmp_path / "out", servers=("http://127.0.0.1:1",),
                    fleet=FleetSettings(fleet="web", ray_address="127.0.0.1:6379"))
    settings = RunSettings(tasks=tmp_path / "t.jsonl", out=tmp_path / "out",
                           fleet=FleetSettings(fleet="web", ray_address="127.0.0.1:6379"))
    assert settings.servers == () and settings.fleet.enabled
    with pytest.raises(ValueError, match=r"^name: letters, digits"):
        FleetUpSettings(name="a b")
    with pytest.raises(ValueError, match=r"^browsers_per_node: must be >= 1"):
        FleetUpSettings(browsers_per_node=0)
    up = FleetUpSettings(browsers_per_node=3, sites=True, sites_port=8411)
    assert up.server_pool.browsers == 3 and "127.0.0.1:8411" in up.server_pool.allow_hosts


def test_ray_environment_keeps_everything_on_the_machine():
    local = ray_environment("127.0.0.1:6379")
    assert local["RAY_USAGE_STATS_ENABLED"] == "0"
    assert local["RAY_USAGE_STATS_REPORT_URL"].startswith("http://127.0.0.1:")
    assert local["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"  # 127.0.0.1 is not rewritten
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in ray_environment("10.0.0.1:6379")


# --------------------------------------------------------------------------------- the cluster

def _marked_processes(marker: str) -> list:
    import psutil

    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("WEBGYM_FLEET_TEST") == marker:
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture(scope="module")
def cluster(chromium_path):
    """Head (no CPUs) + two browser nodes on 127.0.0.1; the test process is the driver."""
    pytest.importorskip("ray")
    from webgym_rollout.fleet import LocalCluster

    marker = uuid.uuid4().hex  # every process of the cluster inherits it: found again after shutdown
    os.environ["WEBGYM_FLEET_TEST"] = marker
    local = None
    try:
        local = LocalCluster(nodes=2, num_cpus=1, resources={"browser": 1})
        local.ray.init(address=local.address, namespace="webgym", include_dashboard=False,
                       log_to_driver=False, configure_logging=False, _node_ip_address="127.0.0.1")
        yield local
    finally:
        os.environ.pop("WEBGYM_FLEET_TEST", None)
        if local is not None:
            local.shutdown()
        left = _marked_processes(marker)
        for _ in range(100):  # killed processes take a moment to be reaped
            if not left:
                break
            time.sleep(0.1)
            left = [p for p in left if p.is_running() and p.status() != "zombie"]
        for proc in left:
            proc.kill()
        assert not left, f"processes outlived the cluster: {[(p.pid, p.name()) for p in left]}"


@pytest.fixture(scope="module")
def fleet(cluster, sites_url):
    from webgym_rollout.browser.pool import PoolSettings
    from webgym_rollout.fleet import fleet_down, fleet_up

    settings = FleetUpSettings(address=cluster.address, name=FLEET, browsers_per_node=1, port=0, poll_s=0.5,
                               nodes_with_resource="browser",
                               pool=PoolSettings(contexts_per_browser=3,
                                                 allow_hosts=(sites_url.removeprefix("http://"),)))
    endpoints = fleet_up(settings)
    yield endpoints
    assert fleet_down(FLEET, cluster.address) >= 1
    with pytest.raises(ValueError):
        cluster.ray.get_actor(f"webgym-fleet-{FLEET}", namespace="webgym")


def _browser_nodes(ray) -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("browser")}


def _tasks(path: Path, count: int) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for seed in range(count):
            handle.write(json.dumps({"task_id": f"click-button-{seed}", "task_name": "MiniWoB click-button",
                                     "website": "miniwob:click-button", "benchmark_name": "miniwob",
                                     "environment": "miniwob:click-button", "env_seed": seed}) + "\n")
    return path


def _settings(tmp_path: Path, cluster, count: int, **rollout) -> RunSettings:
    return RunSettings(tasks=_tasks(tmp_path / "tasks.jsonl", count), out=tmp_path / "out", progress=False,
                       fleet=FleetSettings(fleet=FLEET, ray_address=cluster.address),
                       rollout=RolloutSettings(**rollout), env=EnvSettings(viewport="320x240"))


class _SlowRandom:
    """The random policy, waiting `delay` seconds per step (so episodes are mid-run for a while)."""

    observes_elements = True
    model_id = "slow-random"

    def __init__(self, delay: float):
        from webgym_rollout.agent.policies import RandomPolicy, RandomPolicySettings

        self.inner, self.delay = RandomPolicy(RandomPolicySettings(seed=0)), delay
        self.calls = 0

    async def act(self, observation):
        self.calls += 1
        await asyncio.sleep(self.delay)
        # no elements: the random policy scrolls, so the episode runs to its horizon
        return await self.inner.act(dataclasses.replace(observation, elements=(), instruction=""))


async def _wait_for(predicate, what: str, timeout_s: float = 120):
    deadline = time.monotonic() + timeout_s
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.25)


async def _endpoints(cluster):
    from webgym_rollout.fleet import fleet_endpoints

    return await asyncio.to_thread(fleet_endpoints, FLEET, cluster.address)


# ------------------------------------------------------------------------------------ the tests

@pytest.mark.browser
@pytest.mark.slow
async def test_one_server_per_node_behind_the_token_and_a_rollout_through_the_fleet(
        tmp_path, cluster, fleet, sites_url):
    from webgym_rollout.browser.client import BrowserClient
    from webgym_rollout.errors import Unauthorized
    from webgym_rollout.trajectory.reader import read_episodes

    assert {e.node_id for e in fleet} == _browser_nodes(cluster.ray)  # one per browser node, not the head
    assert len({e.url for e in fleet}) == 2 and all(e.url.startswith("http://127.0.0.1:") for e in fleet)
    urls = [e.url for e in fleet]
    async with BrowserClient(urls, retries=0) as anonymous:
        with pytest.raises(Unauthorized):
            await anonymous.health()
    _, token = await _endpoints(cluster)

    # the command a user runs, in a process of its own (a fresh Ray driver connection)
    out = tmp_path / "out"
    command = [sys.executable, "-c", "from webgym_rollout.cli import main; main()", "run",
               "--tasks", str(_tasks(tmp_path / "tasks.jsonl", 6)), "--fleet", FLEET,
               "--ray-address", cluster.address, "--sites-url", sites_url, "--out", str(out),
               "--concurrency", "4", "--viewport", "320x240", "--no-progress"]
    proc = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    output = (await proc.communicate())[0].decode()
    assert proc.returncode == 0, output
    assert "6 episodes" in output and "errors: none" in output, output
    episodes = list(read_episodes(out))
    assert sorted(e.task.task_id for e in episodes) == sorted(f"click-button-{s}" for s in range(6))
    async with BrowserClient(urls, token=token) as client:
        health = await client.health()
    assert sorted(h.url for h in health) == sorted(urls)


@pytest.mark.browser
@pytest.mark.slow
async def test_a_server_whose_process_dies_is_restarted_and_rejoins(cluster, fleet):
    controller = cluster.ray.get_actor(f"webgym-fleet-{FLEET}", namespace="webgym")
    pids = await asyncio.to_thread(cluster.ray.get, controller.server_pids.remote())
    node_id, pid = sorted(pids.items())[0]
    os.kill(pid, signal.SIGKILL)

    async def restarted():
        return [e for e in (await _endpoints(cluster))[0] if e.node_id == node_id and e.restarts == 1]

    (endpoint,) = await _wait_for(restarted, "the killed server to register again")
    assert endpoint.alive
    new_pids = await asyncio.to_thread(cluster.ray.get, controller.server_pids.remote())
    assert new_pids[node_id] != pid


@pytest.mark.browser
@pytest.mark.slow
async def test_a_removed_node_fails_only_its_sessions_and_a_new_node_gets_a_server(
        tmp_path, cluster, fleet, sites_url):
    from webgym_rollout.browser.client import BrowserClient
    from webgym_rollout.trajectory.reader import read_episodes

    endpoints, token = await _endpoints(cluster)
    victim = cluster.nodes[-1]
    victim_url = next(e.url for e in endpoints if e.node_id == victim.node_id)
    env = EnvSettings(viewport="320x240", sites_url=sites_url, horizons={"miniwob": 8})
    settings = dataclasses.replace(_settings(tmp_path, cluster, 12, concurrency=4, session_retries=2),
                                   env=env)
    policy = _SlowRandom(0.3)
    rollout = asyncio.create_task(run(settings, policy=policy))

    async with BrowserClient([victim_url], token=token, retries=0) as client:
        async def victim_busy():
            if rollout.done():
                pytest.fail(f"the run ended before the node was removed: {rollout.result()}")
            # the first four episodes have stepped (their sessions exist, none is being created)
            return policy.calls >= 6 and any(h.active_sessions for h in await client.health())

        await _wait_for(victim_busy, "sessions on the node to remove")
    await asyncio.to_thread(cluster.remove_node, victim)
    report = await rollout

    assert report.session_retries >= 1  # the victim's sessions failed and were restarted elsewhere
    episodes = list(read_episodes(settings.out))
    assert sorted((e.task.task_id, e.attempt) for e in episodes) == sorted(
        (f"click-button-{s}", 0) for s in range(12))  # every episode exactly once
    assert not [e.status for e in episodes if e.status.is_error]

    async def victim_gone():
        return all(e.node_id != victim.node_id for e in (await _endpoints(cluster))[0])

    await _wait_for(victim_gone, "the fleet to forget the removed node")
    added = cluster.add_node()  # in the main thread: Ray's node start installs signal handlers

    async def new_server():
        return [e for e in (await _endpoints(cluster))[0] if e.node_id == added.node_id and e.alive]

    (endpoint,) = await _wait_for(new_server, "a server on the added node")
    async with BrowserClient([endpoint.url], token=token) as client:
        (health,) = await client.health()
    assert health.status == "ok" and health.active_sessions == 0


@pytest.mark.browser
@pytest.mark.slow
def test_fleet_commands_up_status_down_with_site_servers(cluster):
    import httpx
    from click.testing import CliRunner

    from webgym_rollout.fleet import FleetEndpoints, FleetSettings, fleet_group

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sites_port = sock.getsockname()[1]
    runner = CliRunner()
    address = ["--address", cluster.address, "--name", "cli"]
    up = runner.invoke(fleet_group, ["up", *address, "--browsers-per-node", "1", "--port", "0",
                                     "--nodes-with-resource", "browser", "--poll-s", "0.5",
                                     "--sites", "--sites-port", str(sites_port)])
    try:
        assert up.exit_code == 0, up.output
        assert "fleet cli: 2 browser servers" in up.output
        assert up.output.count(f"sites http://127.0.0.1:{sites_port}") == 2
        page = httpx.get(f"http://127.0.0.1:{sites_port}/miniwob/click-test.html", trust_env=False)
        assert page.status_code == 200  # one node of the two on this machine serves the port
        # The sites' ground truth reaches the runner through the fleet (their truth is on each node's
        # loopback): a session seen by one node's site server, and one never seen.
        shop = httpx.get(f"http://127.0.0.1:{sites_port}/shop/search?q=lamp&session=fleet-truth-1",
                         trust_env=False)
        assert shop.status_code == 200
        async def truth():
            async with FleetEndpoints(FleetSettings(fleet="cli", ray_address=cluster.address)) as fleet:
                return fleet.facts("fleet-truth-1"), fleet.facts("never-seen-1")

        seen, unseen = asyncio.run(truth())
        assert seen.seen and seen.searches == ("shop: lamp",) and seen.shop is not None
        assert not unseen.seen

        status = runner.invoke(fleet_group, ["status", *address])
        assert status.exit_code == 0, status.output
        rows = [line for line in status.output.splitlines() if "http://127.0.0.1:" in line]
        assert len(rows) == 2 and all(" ok " in row and " 0/" in row for row in rows), status.output
    finally:
        down = runner.invoke(fleet_group, ["down", *address])
    assert down.exit_code == 0 and "fleet cli: 2 browser servers stopped" in down.output, down.output
    missing = runner.invoke(fleet_group, ["status", *address])
    assert missing.exit_code == 1 and "no browser fleet 'cli'" in missing.output
