"""Browser fleets on Ray: one browser server per node of a Ray cluster, placed and supervised by Ray.

Ray only places and restarts the servers; the data path stays as it is (the runner talks HTTP to
each browser server directly, so Ray adds nothing per step). Needs the ``ray`` extra
(``pip install 'webgym[ray]'``); Ray is imported only when a fleet is used.

``webgym-rollout fleet up --address HEAD:6379 --name NAME`` starts, in Ray namespace ``webgym``:

- a *controller* (detached actor ``webgym-fleet-NAME``) holding the fleet's settings and the token
  generated for it. Every `FleetUpSettings.poll_s` it places a server on each alive node that lacks
  one (a node that joins later gets a server) and forgets the servers of dead nodes;
- one *server* per selected node (detached actor ``webgym-fleet-NAME-<node id>``, pinned to its
  node, restarted by Ray whenever its process dies): a `webgym_rollout.browser.server` bound to the
  node's address with the fleet's token (and, with ``--sites``, the MiniWoB site server on
  ``127.0.0.1:--sites-port`` of the node). Each (re)start registers its URL with the controller.

``run`` / ``loop`` with ``--fleet NAME --ray-address ADDR`` ask the controller for the live
endpoints and the token at start and again whenever a server fails (`FleetEndpoints`).

Nothing may leave the machine in tests and demos: `ray_environment` is what the toolkit puts in
the environment before Ray starts or connects (usage statistics off, the "disabled" report and the
cloud-metadata probes pointed at nothing, loopback addresses kept as they are), and `LocalCluster`
is a several-node cluster on 127.0.0.1 without a dashboard (tests, benchmark, trying it out).

Errors::

    webgym_rollout.errors.RolloutError
     └── FleetError               no such fleet / Ray not reachable / the fleet did not come up
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import click

from webgym_core.settings import (
    SettingsCommand,
    load_settings,
    settings_from_dict,
    settings_options,
    settings_to_dict,
)
from webgym_rollout.browser.client import BrowserClient
from webgym_rollout.browser.guard import is_loopback_host
from webgym_rollout.browser.pool import PoolSettings
from webgym_rollout.errors import FleetError
from webgym_sites.errors import TruthUnavailable
from webgym_sites.facts import SessionFacts

__all__ = ["Endpoint", "FleetEndpoints", "FleetError", "FleetSettings", "FleetUpSettings", "LocalCluster",
           "fleet_down", "fleet_endpoints", "fleet_group", "fleet_up", "ray_environment"]

log = logging.getLogger(__name__)

NAMESPACE = "webgym"
"""The Ray namespace of every fleet actor."""


# ------------------------------------------------------------------------------------ settings

@dataclass(frozen=True)
class FleetSettings:
    """Which fleet ``run`` / ``loop`` take their browser servers from (instead of --servers)."""

    fleet: str = ""
    """Name of a browser fleet ('' = use --servers), as `webgym-rollout fleet up` started it."""
    ray_address: str = field(default="", metadata={"env": "RAY_ADDRESS"})
    """Address of the fleet's Ray cluster (HEAD:6379); the machine must be a node of it."""

    def __post_init__(self) -> None:
        if self.fleet and not self.ray_address:
            raise ValueError(f"ray_address: --fleet {self.fleet} needs the Ray cluster's address (HEAD:6379)")

    @property
    def enabled(self) -> bool:
        return bool(self.fleet)


@dataclass(frozen=True)
class FleetUpSettings:
    """Settings of ``webgym-rollout fleet up``: where the browser servers go and how they run."""

    address: str = field(default="", metadata={"env": "RAY_ADDRESS"})
    """Address of the running Ray cluster (HEAD:6379)."""
    name: str = "default"
    """Fleet name (`run --fleet NAME`); several fleets may share a cluster."""
    browsers_per_node: int = 2
    """Chromium processes of each node's browser server (replaces --pool-browsers)."""
    nodes_with_resource: str = ""
    """Only nodes offering this Ray resource get a server (`ray start --resources '{"browser": 1}'`);
    '' = every node."""
    port: int = 8300
    """Port of each node's browser server (0 = any free port, e.g. several nodes on one machine)."""
    sites: bool = False
    """Also run the MiniWoB++ site server on 127.0.0.1 of each node (webgym-rollout run reaches it
    with --sites-url http://127.0.0.1:SITES_PORT)."""
    sites_port: int = 8400
    """Port of each node's site server."""
    poll_s: float = 2.0
    """How often the controller looks for new and dead nodes."""
    wait_s: float = 180.0
    """`fleet up` waits this long for every selected node's server to register."""
    pool: PoolSettings = field(default_factory=PoolSettings)
    """Each node's browser pool (--pool-*)."""

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"name: letters, digits, '-' and '_' only, got {self.name!r}")
        if self.browsers_per_node < 1:
            raise ValueError(f"browsers_per_node: must be >= 1, got {self.browsers_per_node}")
        for name in ("port", "sites_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ValueError(f"{name}: must be in 0..65535, got {getattr(self, name)}")
        if self.poll_s <= 0:
            raise ValueError(f"poll_s: must be > 0, got {self.poll_s}")

    @property
    def server_pool(self) -> PoolSettings:
        """The pool each node runs: --browsers-per-node browsers; the local sites opened when served."""
        allow = tuple(self.pool.allow_hosts)
        if self.sites and f"127.0.0.1:{self.sites_port}" not in allow:
            allow += (f"127.0.0.1:{self.sites_port}",)
        return replace(self.pool, browsers=self.browsers_per_node, allow_hosts=allow)


@dataclass(frozen=True)
class Endpoint:
    """One registered browser server of a fleet."""

    node_id: str
    url: str
    """The browser server's base URL (the node's address)."""
    sites_url: str | None
    """The node's site server as its browsers see it (None: not served)."""
    starts: int
    """How many times a server started on this node (1 + restarts)."""
    alive: bool
    """Whether the node is alive (a dead node's server is listed until it is forgotten)."""

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)


# ------------------------------------------------------------------------------- Ray hygiene

def ray_environment(address: str = "") -> dict[str, str]:
    """Environment variables the toolkit sets (unless already set) before Ray starts or connects.

    - ``RAY_USAGE_STATS_ENABLED=0``: no usage statistics;
    - ``RAY_USAGE_STATS_REPORT_URL``: a head started in this environment still sends a one-off
      "usage stats disabled" report; it goes to a closed port on 127.0.0.1 instead of the Internet;
    - for a loopback `address` (a local cluster), ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: Ray then
      keeps 127.0.0.1 as the node's address instead of asking the routing table for the address that
      reaches 8.8.8.8 and rewriting 127.0.0.1 to it.
    """
    env = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/"}
    if address and is_loopback_host(address.rpartition(":")[0] or address):
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    return env


def _ray(address: str = "") -> Any:
    """Import Ray (the ``ray`` extra) with `ray_environment` in place."""
    for key, value in ray_environment(address).items():
        os.environ.setdefault(key, value)
    try:
        import ray  # optional: ray
    except ImportError as exc:
        raise FleetError("browser fleets need Ray: pip install 'webgym[ray]'") from exc
    return ray


@contextlib.contextmanager
def _connected(address: str) -> Iterator[Any]:
    """A Ray driver connection to `address` (reused when this process is connected already)."""
    ray = _ray(address)
    if ray.is_initialized():
        yield ray
        return
    host = address.rpartition(":")[0]
    extra = {"_node_ip_address": host} if host and is_loopback_host(host) else {}
    try:
        ray.init(address=address, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, **extra)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise FleetError(f"{address}: cannot connect to the Ray cluster: {exc}") from exc
    try:
        yield ray
    finally:
        ray.shutdown()


def _controller_name(name: str) -> str:
    return f"webgym-fleet-{name}"


def _controller(ray: Any, name: str) -> Any:
    try:
        return ray.get_actor(_controller_name(name), namespace=NAMESPACE)
    except ValueError:
        raise FleetError(f"no browser fleet {name!r} on this Ray cluster: start it with "
                         f"`webgym-rollout fleet up --name {name}`") from None


# ------------------------------------------------------------------------------------ actors

class _ServerActor:
    """One node's browser server (and site server), run on a thread of this actor's process.

    If the server stops on its own, the process exits so that Ray restarts the actor."""

    def __init__(self, spec: dict, token: str, controller_name: str):
        import ray  # optional: ray

        from webgym_rollout.browser.server import ServerSettings  # lazy: imports fastapi, starlette

        self.node_id = ray.get_runtime_context().get_node_id()
        host = ray.util.get_node_ip_address()
        fleet = _spec(spec)
        self.sites_url = self._start_sites(fleet)
        self.settings = ServerSettings(host=host, port=fleet.port, token=token, pool=fleet.server_pool)
        self.url = ""
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="webgym-fleet-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=300) or self._error is not None:
            raise FleetError(f"the browser server on node {self.node_id} did not start: {self._error}")
        controller = ray.get_actor(controller_name, namespace=NAMESPACE)
        controller.register.remote(self.node_id, self.url, self.sites_url)

    def _start_sites(self, fleet: FleetUpSettings) -> str | None:
        if not fleet.sites:
            return None
        from webgym_rollout.tasks.sites import SiteServer  # lazy: imports httpx

        try:
            self._sites: Any = SiteServer("127.0.0.1", fleet.sites_port).start()
        except OSError as exc:  # e.g. another node of a local cluster on this machine serves it
            log.warning("site server on 127.0.0.1:%d not started: %s", fleet.sites_port, exc)
        return f"http://127.0.0.1:{fleet.sites_port}"

    def _serve(self) -> None:
        from webgym_rollout.browser.server import running_server  # lazy: imports fastapi, starlette

        raylet = os.getppid()  # Ray's worker processes are children of their node's raylet

        async def main() -> None:
            async with running_server(self.settings) as (url, _pool):
                self.url = url
                self._ready.set()
                # Serve until the node's raylet is gone (the node was stopped or removed): then close
                # the browsers rather than leave them running outside the cluster.
                while os.getppid() == raylet:
                    await asyncio.sleep(0.5)
                self._error = FleetError("the node's raylet stopped")

        try:
            asyncio.run(main())
        except BaseException as exc:
            self._error = exc
        if os.getppid() != raylet:
            log.warning("browser server %s: the node's raylet is gone; exiting", self.url)
            os._exit(0)
        if not self._ready.is_set():
            self._ready.set()
            return
        log.error("browser server %s stopped (%s); exiting so that Ray restarts it", self.url, self._error)
        os._exit(1)

    def endpoint(self) -> tuple[str, str | None]:
        return self.url, self.sites_url

    def facts(self, session_id: str) -> dict | None:
        """The ground truth of a local-site session on this node's site server (None: it runs none)."""
        sites = getattr(self, "_sites", None)
        return sites.facts(session_id).model_dump(mode="json") if sites is not None else None

    def pid(self) -> int:
        return os.getpid()


class _Controller:
    """The fleet's controller: places a server on each selected node and lists the live ones."""

    def __init__(self, spec: dict, token: str):
        self.spec, self.fleet, self.token = spec, _spec(spec), token
        self._lock = threading.Lock()
        self._servers: dict[str, Any] = {}  # node id -> actor handle
        self._registered: dict[str, tuple[str, str | None]] = {}  # node id -> (url, sites url)
        self._starts: dict[str, int] = {}
        self._alive: set[str] = set()
        self._stopping = threading.Event()
        threading.Thread(target=self._watch, name="webgym-fleet-placement", daemon=True).start()

    def _server_name(self, node_id: str) -> str:
        return f"{_controller_name(self.fleet.name)}-{node_id[:16]}"

    def _selected(self, node: dict) -> bool:
        resource = self.fleet.nodes_with_resource
        return node.get("Alive", False) and (not resource or node.get("Resources", {}).get(resource, 0) > 0)

    def _watch(self) -> None:
        while not self._stopping.is_set():
            try:
                self._place()
            except Exception:  # the next round tries again; the cluster may be restarting
                log.exception("fleet %s: placing servers failed", self.fleet.name)
            self._stopping.wait(self.fleet.poll_s)

    def _place(self) -> None:
        import ray  # optional: ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # optional: ray

        nodes = [node for node in ray.nodes() if self._selected(node)]
        alive = {node["NodeID"] for node in nodes}
        with self._lock:
            self._alive = alive
            for node_id in list(self._servers):
                if node_id not in alive:  # its node is gone: Ray cannot restart it there
                    log.info("fleet %s: node %s left", self.fleet.name, node_id)
                    handle = self._servers.pop(node_id)
                    self._registered.pop(node_id, None)
                    with contextlib.suppress(Exception):
                        ray.kill(handle, no_restart=True)
            missing = [node_id for node_id in alive if node_id not in self._servers]
        for node_id in missing:
            if self._stopping.is_set():
                return
            name = self._server_name(node_id)
            try:
                handle = ray.get_actor(name, namespace=NAMESPACE)  # placed before a controller restart
                url, sites_url = ray.get(handle.endpoint.remote(), timeout=60)
                with self._lock:
                    self._registered.setdefault(node_id, (url, sites_url))
                    self._starts.setdefault(node_id, 1)
            except ValueError:
                handle = ray.remote(_ServerActor).options(
                    name=name, namespace=NAMESPACE, lifetime="detached", num_cpus=0, max_restarts=-1,
                    max_task_retries=-1,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                ).remote(self.spec, self.token, _controller_name(self.fleet.name))
                log.info("fleet %s: placing a browser server on node %s", self.fleet.name, node_id)
            with self._lock:
                self._servers[node_id] = handle

    def register(self, node_id: str, url: str, sites_url: str | None) -> None:
        with self._lock:
            self._registered[node_id] = (url, sites_url)
            self._starts[node_id] = self._starts.get(node_id, 0) + 1
        log.info("fleet %s: server on node %s at %s", self.fleet.name, node_id, url)

    def endpoints(self) -> list[dict]:
        with self._lock:
            return [asdict(Endpoint(node, url, sites, self._starts.get(node, 1), node in self._alive))
                    for node, (url, sites) in sorted(self._registered.items(), key=lambda kv: kv[1][0])]

    def credentials(self) -> str:
        return self.token

    def facts(self, session_id: str) -> dict | None:
        """The ground truth of a local-site session: from the node's site server that saw it (each
        node serves its own browsers), else the record of an unseen session; None without sites."""
        import ray  # optional: ray

        with self._lock:
            handles = list(self._servers.values())
        answers = ray.get([handle.facts.remote(session_id) for handle in handles], timeout=60)
        records = [record for record in answers if record is not None]
        return next((record for record in records if record.get("seen")), records[0] if records else None)

    def settings(self) -> dict:
        return self.spec

    def server_pids(self) -> dict[str, int]:
        """Process id of each node's server (tests kill one to see it come back)."""
        import ray  # optional: ray

        with self._lock:
            handles = dict(self._servers)
        return {node_id: ray.get(handle.pid.remote(), timeout=30) for node_id, handle in handles.items()}

    def stop(self) -> int:
        import ray  # optional: ray

        self._stopping.set()
        with self._lock:
            handles, self._servers = list(self._servers.values()), {}
            self._registered.clear()
        for handle in handles:
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)
        return len(handles)


def _spec(spec: dict) -> FleetUpSettings:
    return settings_from_dict(FleetUpSettings, spec)


# -------------------------------------------------------------------------------- operations

def fleet_up(settings: FleetUpSettings) -> list[Endpoint]:
    """Start fleet `settings.name` (or adopt the running one) and wait until every selected node's
    server has registered; returns the endpoints."""
    with _connected(settings.address) as ray:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # optional: ray

        try:
            controller = ray.get_actor(_controller_name(settings.name), namespace=NAMESPACE)
            if ray.get(controller.settings.remote()) != settings_to_dict(settings):
                log.warning("fleet %s is running already with other settings; `fleet down` first to "
                            "change them", settings.name)
        except ValueError:
            # Near this driver (usually the head), so that losing a browser node rarely moves it.
            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
            controller = ray.remote(_Controller).options(
                name=_controller_name(settings.name), namespace=NAMESPACE, lifetime="detached", num_cpus=0,
                max_restarts=-1, max_task_retries=-1, max_concurrency=8, scheduling_strategy=here,
            ).remote(settings_to_dict(settings), secrets.token_urlsafe(24))
        deadline = time.monotonic() + settings.wait_s
        while True:
            endpoints = [Endpoint(**e) for e in ray.get(controller.endpoints.remote())]
            wanted = _selected_nodes(ray, settings.nodes_with_resource)
            if wanted and wanted <= {e.node_id for e in endpoints if e.alive}:
                return endpoints
            if time.monotonic() > deadline:
                raise FleetError(f"fleet {settings.name}: {len(endpoints)} of {len(wanted)} nodes have a "
                                 f"browser server after {settings.wait_s:.0f} s (see the Ray logs of the "
                                 "webgym-fleet actors)" if wanted else
                                 f"fleet {settings.name}: no alive node offers resource "
                                 f"{settings.nodes_with_resource!r}")
            time.sleep(0.5)


def _selected_nodes(ray: Any, resource: str) -> set[str]:
    return {n["NodeID"] for n in ray.nodes()
            if n.get("Alive") and (not resource or n.get("Resources", {}).get(resource, 0) > 0)}


def fleet_endpoints(name: str, address: str) -> tuple[list[Endpoint], str]:
    """The registered endpoints of fleet `name` and its token."""
    with _connected(address) as ray:
        controller = _controller(ray, name)
        endpoints, token = ray.get([controller.endpoints.remote(), controller.credentials.remote()])
    return [Endpoint(**e) for e in endpoints], token


def fleet_down(name: str, address: str) -> int:
    """Stop every server of fleet `name` and its controller; returns the number of servers stopped."""
    with _connected(address) as ray:
        controller = _controller(ray, name)
        stopped = ray.get(controller.stop.remote())
        ray.kill(controller, no_restart=True)
    return stopped


class FleetEndpoints:
    """The runner's view of a fleet: live endpoint URLs and the token, asked again on failures.

    ::

        async with FleetEndpoints(settings.fleet) as fleet:
            async with BrowserClient(fleet.urls, token=fleet.token) as client:
                ...
                await fleet.refresh(client)   # after a server failed
    """

    min_interval_s = 1.0
    """Failures of many sessions at once (a node left) cause one question to the fleet a second."""

    def __init__(self, settings: FleetSettings):
        self.settings = settings
        self.urls: list[str] = []
        self.sites_urls: list[str] = []
        self.token = ""
        self.refreshes = 0
        self._controller: Any = None
        self._ray: Any = None
        self._connection: contextlib.ExitStack | None = None
        self._lock = asyncio.Lock()
        self._last = 0.0

    async def __aenter__(self) -> FleetEndpoints:
        self._open()  # on this thread: Ray's driver connection must be made (and closed) on the main one
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._connection is not None:
            self._connection.close()

    def _open(self) -> None:
        stack = contextlib.ExitStack()
        self._ray = stack.enter_context(_connected(self.settings.ray_address))
        self._connection = stack
        self._controller = _controller(self._ray, self.settings.fleet)
        self.token = self._ray.get(self._controller.credentials.remote())
        self._read()
        if not self.urls:
            raise FleetError(f"fleet {self.settings.fleet} has no live browser server")
        log.info("fleet %s: %d browser servers", self.settings.fleet, len(self.urls))

    def _read(self) -> None:
        endpoints = [Endpoint(**e) for e in self._ray.get(self._controller.endpoints.remote(), timeout=60)]
        live = [e for e in endpoints if e.alive]
        self.urls = [e.url for e in live]
        self.sites_urls = sorted({e.sites_url for e in live if e.sites_url})

    async def refresh(self, client: Any) -> None:
        """Ask the fleet again and point `client` at its live servers (at most once a second)."""
        async with self._lock:
            if time.monotonic() - self._last < self.min_interval_s:
                return
            await asyncio.to_thread(self._read)
            self._last = time.monotonic()
            self.refreshes += 1
            if self.urls and self.urls != client.urls:
                log.info("fleet %s: browser servers now %s", self.settings.fleet, ", ".join(self.urls))
                client.urls[:] = self.urls

    def facts(self, session_id: str) -> SessionFacts:
        """The ground truth of a local-site session, from the site server of the node whose browser
        played it (the fleet's site servers listen on each node's loopback, out of the runner's
        reach: the controller asks them through Ray). Raises `TruthUnavailable`."""
        try:
            record = self._ray.get(self._controller.facts.remote(session_id), timeout=60)
        except Exception as exc:  # a node or the controller failed: this episode's truth is lost
            raise TruthUnavailable(f"fleet {self.settings.fleet}: {type(exc).__name__}: {exc}") from exc
        if record is None:
            raise TruthUnavailable(f"fleet {self.settings.fleet} runs no site server (fleet up --sites)")
        return SessionFacts.model_validate(record)


# ----------------------------------------------------------------------------- local cluster

class LocalCluster:
    """A Ray cluster of `nodes` raylets on 127.0.0.1 of this machine, without a dashboard, with
    `ray_environment` applied; a context manager. For tests, the benchmark and trying fleets out.

    Each node offers `resources` (e.g. ``{"browser": 1}``) and `num_cpus` CPUs; the head offers
    ``head_resources``. Ray's head probes cloud-metadata addresses for its usage report even with
    statistics off unless it finds ``~/ray_bootstrap_config.yaml``: the head is started with HOME
    pointing at a temporary folder holding one that names the provider ``local``.
    """

    def __init__(self, nodes: int = 2, *, num_cpus: int = 1, resources: dict[str, float] | None = None,
                 head_resources: dict[str, float] | None = None):
        self.ray = _ray("127.0.0.1:0")
        from ray.cluster_utils import Cluster  # optional: ray

        self._home = tempfile.TemporaryDirectory(prefix="webgym-ray-home-")
        Path(self._home.name, "ray_bootstrap_config.yaml").write_text("provider: {type: local}\n")
        previous = os.environ.get("HOME")
        os.environ["HOME"] = self._home.name
        try:
            self.cluster = Cluster(initialize_head=True, shutdown_at_exit=True, head_node_args={
                "num_cpus": 0, "node_ip_address": "127.0.0.1", "include_dashboard": False,
                "resources": head_resources or {}})
        finally:
            if previous is None:
                os.environ.pop("HOME", None)
            else:
                os.environ["HOME"] = previous
        self.num_cpus, self.resources = num_cpus, dict(resources or {})
        self.nodes = [self.add_node() for _ in range(nodes)]

    @property
    def address(self) -> str:
        return self.cluster.address

    def add_node(self) -> Any:
        node = self.cluster.add_node(num_cpus=self.num_cpus, node_ip_address="127.0.0.1",
                                     resources=self.resources)
        return node

    def remove_node(self, node: Any) -> None:
        self.cluster.remove_node(node)
        self.nodes.remove(node)

    def shutdown(self) -> None:
        if self.ray.is_initialized():
            self.ray.shutdown()
        self.cluster.shutdown()
        self._home.cleanup()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


# ------------------------------------------------------------------------------------------ CLI

@click.group("fleet")
def fleet_group() -> None:
    """Browser fleets on a Ray cluster: one browser server per node, restarted by Ray.

    \b
    Example:
      ray start --head --port 6379 --include-dashboard false         # on one machine
      ray start --address HEAD:6379 --resources '{"browser": 1}'    # on each browser machine
      webgym-rollout fleet up --address HEAD:6379 --name web --browsers-per-node 8 \\
          --nodes-with-resource browser
      webgym-rollout fleet status --address HEAD:6379 --name web
      webgym-rollout run --fleet web --ray-address HEAD:6379 --tasks out/tasks --out out/iter-0
      webgym-rollout fleet down --address HEAD:6379 --name web
    """


@fleet_group.command("up", cls=SettingsCommand)
@settings_options(FleetUpSettings)
def up_command(config: str | None, **flags: Any) -> None:
    """Place a browser server (and, with --sites, a site server) on each selected node.

    \b
    Example:
      webgym-rollout fleet up --address 10.0.0.1:6379 --name web --browsers-per-node 8 \\
          --nodes-with-resource browser --sites --pool-contexts-per-browser 6
    """
    try:
        settings = load_settings(FleetUpSettings, config, flags)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if not settings.address:
        raise click.UsageError("address: the Ray cluster's address is required (--address HEAD:6379)")
    try:
        endpoints = fleet_up(settings)
    except FleetError as exc:
        raise click.ClickException(str(exc)) from exc
    for endpoint in endpoints:
        click.echo(f"{endpoint.url}  node {endpoint.node_id[:12]}" +
                   (f"  sites {endpoint.sites_url}" if endpoint.sites_url else ""))
    click.echo(f"fleet {settings.name}: {len(endpoints)} browser servers; use "
               f"`--fleet {settings.name} --ray-address {settings.address}`")


_address_option = click.option("--address", envvar="RAY_ADDRESS", required=True,
                               help="Address of the Ray cluster (HEAD:6379; env RAY_ADDRESS).")
_name_option = click.option("--name", default="default", show_default=True, help="Fleet name.")


@fleet_group.command("status")
@_address_option
@_name_option
def status_command(address: str, name: str) -> None:
    """List the fleet's endpoints with their health, sessions and restarts.

    \b
    Example:
      webgym-rollout fleet status --address 10.0.0.1:6379 --name web
    """
    try:
        endpoints, token = fleet_endpoints(name, address)
    except FleetError as exc:
        raise click.ClickException(str(exc)) from exc
    health = asyncio.run(_health([e.url for e in endpoints], token))
    click.echo(f"fleet {name}: {len(endpoints)} browser servers")
    rows = [("node", "url", "health", "sessions", "restarts", "sites")]
    for endpoint in endpoints:
        reading = health.get(endpoint.url)
        state = "node gone" if not endpoint.alive else (reading.status if reading else "unreachable")
        sessions = f"{reading.active_sessions}/{reading.max_sessions}" if reading else "-"
        rows.append((endpoint.node_id[:12], endpoint.url, state, sessions, str(endpoint.restarts),
                     endpoint.sites_url or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


async def _health(urls: list[str], token: str) -> dict[str, Any]:
    if not urls:
        return {}
    async with BrowserClient(urls, token=token, timeout_s=10, retries=0) as client:
        return {h.url: h for h in await client.health()}


@fleet_group.command("down")
@_address_option
@_name_option
def down_command(address: str, name: str) -> None:
    """Stop every browser server of the fleet and its controller.

    \b
    Example:
      webgym-rollout fleet down --address 10.0.0.1:6379 --name web
    """
    try:
        stopped = fleet_down(name, address)
    except FleetError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"fleet {name}: {stopped} browser servers stopped")
