"""The services the online loop runs beside its phases: browsers, local sites and the policy endpoint.

`LoopServices` starts each on first use and stops everything it started (a context manager; also
on Ctrl-C and on errors):

- browsers: the browser servers in ``LoopSettings.servers``, or one the loop runs on 127.0.0.1 (in a
  thread, from the first rollout to the end, so Chromium stays warm; `LoopSettings.pool` says how),
  whose pages may reach the site server's ``host:port`` and no other local port (not this browser
  server's API, nor the policy server);
- sites: the site server MiniWoB pages come from (``sites_url``), or one the loop runs on 127.0.0.1;
- the policy endpoint (`webgym_rl.loop.settings.PolicyEndpointSettings`), started once by
  `start_policy` and switched to each new version by the `webgym_rl.loop.updater.PolicyUpdater`
  that `updater()` makes (``--policy-updater``), while episodes may keep running:

  - default (no ``base_url``): the CPU policy server (`webgym_rl.policy_server`) runs as a child
    process (generation does not compete with the loop for this process's GIL), with the trainer's
    pixel bounds (``--min-pixels`` / ``--max-pixels``); new weights reach it in memory (``POST
    /weights``) or as a folder (``POST /reload``).
  - an endpoint the loop does not start must resize screenshots as the trainer does: give vLLM the
    same bounds as ``--mm-processor-kwargs`` (`webgym_rl.pixels.ImageSettings.vllm_processor_kwargs`).
  - ``command`` (e.g. ``vllm serve {checkpoint} --port {port} --served-model-name {name}``): the loop
    starts that command and, for each new version, stops it and starts it again on the version's
    folder, waiting until ``GET /v1/models`` answers (``--policy-updater restart``, the portable
    fallback).
  - ``base_url`` + ``reload_url``: an endpoint someone else runs; the loop POSTs
    ``{"model": CHECKPOINT, "version": N}`` to ``reload_url`` for each new version (the CPU policy
    server's ``/reload`` speaks this; put a small hook of your own in front of a vLLM fleet).
  - ``base_url`` + ``--policy-updater vllm_lora`` / ``vllm_weights``: vLLM's runtime LoRA loading or
    its weight-update endpoints (`webgym_rl.loop.updater`).

Child processes get SIGTERM when the loop dies, even by SIGKILL (Linux ``PR_SET_PDEATHSIG``).

Errors: `PolicyEndpointError` (the endpoint could not be started, reached or reloaded) and
`LoopError` (the browser server did not start), from `webgym_rl.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from webgym_core.lazy import moved_names
from webgym_rl.errors import LoopError, LoopSettingsError, PolicyEndpointError
from webgym_rl.loop.events import OnEvent, ServiceStarted
from webgym_rl.loop.updater import CpuPolicyUpdater, RestartUpdater, VllmLoraUpdater, VllmWeightUpdater
from webgym_rollout.tasks.sites import SiteServer

if TYPE_CHECKING:
    from webgym_rl.loop.settings import LoopSettings
    from webgym_rl.loop.updater import PolicyUpdater
    from webgym_rollout.browser.pool import PoolSettings

__all__ = ["LoopServices", "die_with_parent", "free_port"]

# Moved in 0.3.0 to the loop's settings module; the old import path goes in the next release.
__getattr__ = moved_names(__name__, {"PolicyEndpointSettings": "webgym_rl.loop.settings"})

log = logging.getLogger(__name__)

def die_with_parent() -> None:
    """In a child, before exec: get SIGTERM when the parent dies (Linux), so a SIGKILLed loop leaves
    no policy server or trainer behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _host_port(url: str) -> str:
    """The ``host:port`` allowlist entry of `url` (``http://127.0.0.1:8400`` -> ``127.0.0.1:8400``)."""
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError as exc:
        raise LoopSettingsError(f"sites_url: {url!r} is not a URL ({exc})") from None
    host = parts.hostname or ""
    if not host or port is None:
        raise LoopSettingsError(f"sites_url: {url!r} needs an http(s) scheme and a host")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _BrowserServerThread:
    """The browser server (`webgym_rollout.browser.server.running_server`) on its own event loop in a
    thread, so that it outlives the rollouts (each runs its own ``asyncio.run``) and keeps Chromium warm."""

    def __init__(self, pool: PoolSettings, allow: tuple[str, ...] = ()):
        self._pool = pool
        self._allow = allow
        """Exact ``host:port`` entries added to the pool's allowlist: the loop's site server."""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.url = ""
        self._thread = threading.Thread(target=self._main, name="webgym-browser-server", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        # lazy: imports fastapi, playwright, psutil ...
        from webgym_rollout.browser.server import ServerSettings, running_server

        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        # The site server (MiniWoB pages on 127.0.0.1) must get through the browser server's URL guard:
        # its host:port only, never the whole host, where this server's API and the policy server listen.
        allow = (*self._pool.allow_hosts, *(a for a in self._allow if a not in self._pool.allow_hosts))
        pool = dataclasses.replace(self._pool, allow_hosts=allow)
        async with running_server(ServerSettings(host="127.0.0.1", port=0, pool=pool)) as (url, _pool):
            self.url = url
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> _BrowserServerThread:
        self._thread.start()
        self._ready.wait(timeout=120)
        if self._error is not None or not self.url:
            self.__exit__(None, None, None)  # a slow start still gets stopped: nothing is left behind
            raise LoopError(f"the browser server did not start: {self._error or 'timed out after 120 s'}")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        # Closing the pool closes every Chromium; give it time before giving up on the thread.
        self._thread.join(timeout=60)


@dataclass
class _Process:
    """A started --policy-command: the process (its own process group) and its log file."""

    popen: subprocess.Popen
    log_file: Any = field(repr=False)


class LoopServices:
    """The browser server, site server and policy endpoint of a loop; a context manager that stops
    everything it started.

    `start_policy(checkpoint)` starts (or reaches) the policy endpoint serving `checkpoint` as
    version 0 and `updater()` gives the `PolicyUpdater` that switches it to later versions.
    `on_event(event)` is told about each service that starts (`ServiceStarted`; the demo prints them).
    """

    def __init__(self, settings: LoopSettings, *, on_event: OnEvent | None = None):
        self.settings = settings
        self._on_event = on_event or (lambda event: None)
        self._stack = contextlib.ExitStack()
        self._sites_url: str | None = settings.env.sites_url
        self._site_server: Any = None
        self._browser: _BrowserServerThread | None = None
        self._base_url: str | None = None
        self._serving: str | None = None
        self._process: _Process | None = None

    def __enter__(self) -> LoopServices:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop everything this object started (idempotent)."""
        try:
            self._stop_process()
        finally:
            self._stack.close()
            self._base_url = self._serving = None
            self._browser = None

    # -- browsers
    def browser_urls(self) -> tuple[str, ...]:
        """The browser servers: `servers`, none with a fleet (the runner asks it), or one run here
        (started on first use, after the site server, whose ``host:port`` alone it allowlists)."""
        if self.settings.servers or self.settings.fleet.enabled:
            return tuple(self.settings.servers)
        if self._browser is None:
            allow = (_host_port(self.sites_url()),)
            began = time.perf_counter()
            self._browser = self._stack.enter_context(_BrowserServerThread(self.settings.pool, allow=allow))
            self._on_event(ServiceStarted("browser", self._browser.url, time.perf_counter() - began))
        return (self._browser.url,)

    # -- sites
    def sites_url(self) -> str:
        """The site server's URL (started here on first use unless `sites_url` is set)."""
        if self._sites_url is None:
            began = time.perf_counter()
            sites = self._stack.enter_context(SiteServer(host="127.0.0.1", port=0))
            self._sites_url, self._site_server = sites.base_url, sites
            self._on_event(ServiceStarted("sites", sites.base_url, time.perf_counter() - began))
        return self._sites_url

    def site_truth(self) -> Callable[[str], Any] | None:
        """The ground truth of the local sites' sessions (`SiteServer.facts`) when the site server runs
        here; None for a site server elsewhere (its truth listener is `--truth-url` of a run)."""
        return self._site_server.facts if self._site_server is not None else None

    # -- policy
    @property
    def policy_pid(self) -> int | None:
        """Process id of the policy server this object started as a child (None: none running)."""
        return self._process.popen.pid if self._process is not None else None

    def check_policy(self) -> None:
        """Raise `PolicyEndpointError` (with its exit status and the end of its log) if the policy
        server this object started has exited; an endpoint run by someone else is not watched."""
        process = self._process
        if process is None or process.popen.poll() is None:
            return
        log_path = self.settings.out_dir / "policy-server.log"
        tail = log_path.read_text(errors="replace")[-1500:] if log_path.is_file() else ""
        raise PolicyEndpointError(
            f"the policy server (pid {process.popen.pid}) exited with status {process.popen.returncode} "
            f"while the loop ran; nothing committed is lost: rerun the same command to resume. Last "
            f"output ({log_path}):\n{tail}")

    @property
    def base_url(self) -> str:
        """The policy endpoint's OpenAI base URL (after `start_policy`)."""
        if self._base_url is None:
            raise PolicyEndpointError("the policy endpoint is not started (call start_policy)")
        return self._base_url

    def start_policy(self, checkpoint: str, version: int = 0) -> str:
        """Start (or reach) the policy endpoint serving `checkpoint` as `version`; returns its base
        URL. Without --policy-base-url / --policy-command the CPU policy server runs as a child
        process (`webgym-rl serve-policy`), switched in place by `updater()`."""
        policy = self.settings.policy
        if self._base_url is not None:
            return self._base_url
        if policy.command:
            self._start_process(checkpoint)
        elif policy.endpoint.base_url:
            self._base_url = policy.endpoint.base_url
            if policy.reload_url:  # an endpoint someone else runs: it starts at `version` with this model
                self._post_reload(str(policy.reload_url), checkpoint, version=version)
        else:
            revision = [] if checkpoint != self.settings.model or not self.settings.model_revision else \
                ["--revision", str(self.settings.model_revision)]
            self._start_process(checkpoint, [
                sys.executable, "-c", "from webgym_rl.cli import main; main()", "serve-policy",
                "--model", "{checkpoint}", "--host", "127.0.0.1", "--port", "{port}",
                "--served-model-name", "{name}", "--max-new-tokens", str(policy.max_new_tokens),
                "--policy-version", str(version), *revision,
                # The trainer's pixel bounds: the same image tokens in the rollout as in training.
                *self.settings.training.images.flags()])
        self._serving = checkpoint
        return str(self._base_url)

    def serve(self, checkpoint: str) -> str:
        """Restart --policy-command on `checkpoint` (`RestartUpdater`); returns the base URL."""
        if self._serving != checkpoint or self._base_url is None:
            self._stop_process()
            self._start_process(checkpoint)
            self._serving = checkpoint
        return str(self._base_url)

    def updater(self) -> PolicyUpdater:
        """The `PolicyUpdater` of the endpoint `start_policy` started (``--policy-updater``)."""
        policy = self.settings.policy
        base_url = self.base_url
        kind = policy.updater
        if kind == "auto":
            kind = "restart" if policy.command else "cpu"
        timeout = policy.start_timeout_s
        if kind == "restart":
            return RestartUpdater(self.serve, policy.served_name)
        if kind == "vllm_lora":
            return VllmLoraUpdater(base_url, policy.served_name, timeout_s=timeout)
        if kind == "vllm_weights":
            return VllmWeightUpdater(base_url, policy.served_name, timeout_s=timeout)
        return CpuPolicyUpdater(base_url, policy.served_name, timeout_s=timeout,
                                reload_url=str(policy.reload_url) if policy.reload_url else None)

    def _post_reload(self, url: str, checkpoint: str, version: int | None = None) -> None:
        body: dict[str, Any] = {"model": checkpoint} if version is None else {"model": checkpoint,
                                                                                "version": version}
        try:
            reply = httpx.post(url, json=body, timeout=self.settings.policy.start_timeout_s)
        except httpx.HTTPError as exc:
            raise PolicyEndpointError(f"reloading the policy at {url} failed: {exc}") from exc
        if reply.status_code >= 400:
            raise PolicyEndpointError(f"reloading the policy at {url} with {checkpoint} failed: "
                                      f"HTTP {reply.status_code}: {reply.text[:300]}")

    def _start_process(self, checkpoint: str, argv_template: list[str] | None = None) -> None:
        policy = self.settings.policy
        if policy.endpoint.base_url and argv_template is None:
            base_url = policy.endpoint.base_url.rstrip("/")
            port = httpx.URL(base_url).port or 80
        else:
            port = free_port()
            base_url = f"http://127.0.0.1:{port}/v1"
        # Plain replacement, not str.format: vLLM flags carry JSON with braces of their own.
        values = {"{checkpoint}": checkpoint, "{port}": str(port), "{name}": policy.served_name}
        argv = []
        for arg in argv_template if argv_template is not None else policy.argv:
            for placeholder, value in values.items():
                arg = arg.replace(placeholder, value)
            argv.append(arg)
        log_path = self.settings.out_dir / "policy-server.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = log_path.open("ab")
        began = time.perf_counter()
        try:
            # Its own process group: stopping it also stops the workers it forks (vLLM does).
            popen = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=die_with_parent)
        except OSError as exc:
            log_file.close()
            raise PolicyEndpointError(f"--policy-command {argv[0]!r} could not start: {exc}") from exc
        self._process = _Process(popen, log_file)
        deadline = time.monotonic() + policy.start_timeout_s
        while True:
            if popen.poll() is not None:
                tail = log_path.read_text(errors="replace")[-1500:]
                self._stop_process()
                raise PolicyEndpointError(f"--policy-command exited with status {popen.returncode} before "
                                          f"serving {checkpoint}; last output ({log_path}):\n{tail}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base_url}/models", timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                self._stop_process()
                raise PolicyEndpointError(f"--policy-command did not answer {base_url}/models within "
                                          f"{policy.start_timeout_s:.0f} s (log: {log_path})")
            time.sleep(0.5)
        self._base_url = base_url
        self._on_event(ServiceStarted("policy", base_url, time.perf_counter() - began, checkpoint=checkpoint,
                                      pid=popen.pid))

    def _stop_process(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        popen = process.popen
        try:
            if popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGTERM)
                try:
                    popen.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(popen.pid, signal.SIGKILL)
                    popen.wait(timeout=30)
        finally:
            process.log_file.close()
            self._base_url = self._serving = None
