"""``webgym-rl loop``: the online RL loop, in Python: roll out, train, evaluate, repeat.

Each iteration ``i`` runs these phases, in order, and records each in ``OUT/loop_state.json``
(written atomically) as soon as it is finished::

    rollout   roll out the train tasks with the current checkpoint (iteration 0: the `random`
              bootstrap policy by default) -> OUT/iter-XXXX/trajectories (trajectory dataset)
    train     train the current checkpoint on the trajectories of the last K iterations
              (filtered_bc by default) -> OUT/iter-XXXX/train (trainer output) and
              OUT/iter-XXXX/checkpoint (the model and processor the next iteration uses)
    eval      every `eval_every` iterations: roll out the evaluation tasks (the test split by
              default) with the new checkpoint -> OUT/iter-XXXX/eval
    push      when `push_to` is set: upload OUT/iter-XXXX/checkpoint and its model card

Rerunning the same command resumes at the first unfinished phase: finished phases are skipped, an
interrupted rollout continues its trajectory dataset (nothing redone, nothing lost), an interrupted
training run restarts from its last complete trainer checkpoint. A failure stops the loop with one
`PhaseFailed` naming the iteration and the phase; earlier iterations stay as they are.

The policy endpoint is an OpenAI-compatible URL, picked by the settings:

- default: the CPU policy server (`webgym_rollout.policy_server`) runs in this process; it is
  started once (when a rollout first needs the model) and ``POST /reload``-ed with each new
  checkpoint.
- ``policy_command`` (e.g. ``vllm serve {checkpoint} --port {port} --served-model-name {name}``): the
  loop starts that command and, for each new checkpoint, stops it and starts it again, waiting
  until ``GET /v1/models`` answers. vLLM has no stable "load new weights" call, so a restart is the
  portable way to switch checkpoints.
- ``policy_base_url`` + ``reload_url``: an endpoint someone else runs; the loop POSTs
  ``{"model": CHECKPOINT}`` to ``reload_url`` for each new checkpoint (the CPU policy server's
  ``/reload`` speaks this; put a small hook of your own in front of a vLLM fleet).

Training runs in this process by default (one device). With ``train_launcher`` (e.g. ``accelerate
launch --config_file fsdp.yaml``) the loop runs ``webgym-rl train`` under that launcher instead, so
DDP / FSDP / DeepSpeed over several GPUs come from the Accelerate config, as for ``webgym-rl train``.

Browser servers: ``servers`` lists running ones (``webgym-rollout serve``, on any machine, with a
token off loopback); without any, the loop runs one on 127.0.0.1 (in a thread, from the first
rollout to the end, so Chromium stays warm). MiniWoB pages come from a site server the loop starts
unless ``sites_url`` is given; browsers on other machines need ``sites_url`` (a site server they
can reach). Everything the loop starts it stops again, also on Ctrl-C and on errors.

Exceptions::

    LoopError (RuntimeError)
     ├── LoopSettingsError   a bad setting (names the flag / YAML key)
     ├── LoopStateError      OUT/loop_state.json is unreadable or belongs to another run
     ├── PolicyEndpointError the policy endpoint could not be started, reached or reloaded
     └── PhaseFailed         a phase failed (names the iteration and the phase; the cause is chained)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from webgym.clitools import settings_options, settings_values

__all__ = [
    "LoopError",
    "LoopResult",
    "LoopServices",
    "LoopSettings",
    "LoopSettingsError",
    "LoopStateError",
    "PhaseFailed",
    "PolicyEndpointError",
    "loop_command",
    "run_loop",
    "trajectory_stats",
]

log = logging.getLogger(__name__)

STATE_FILE = "loop_state.json"
STATE_VERSION = 1
PHASES = ("rollout", "train", "eval", "push")
# Settings that define what a loop folder holds: a rerun with other values is another run.
_IDENTITY = ("tasks", "model", "objective", "bootstrap_policy", "attempts", "split", "only_environment",
             "seed")


class LoopError(RuntimeError):
    """Base of the loop's own errors."""


class LoopSettingsError(LoopError):
    """A setting that is missing, unknown or out of range."""


class LoopStateError(LoopError):
    """The loop folder's state file is unreadable or was written by a run with other settings."""


class PolicyEndpointError(LoopError):
    """The policy endpoint could not be started, reached or reloaded."""


class PhaseFailed(LoopError):
    """One phase of one iteration failed; earlier iterations are intact and a rerun resumes here."""

    def __init__(self, iteration: int, phase: str, cause: BaseException, out: Path):
        self.iteration, self.phase = iteration, phase
        detail = " ".join(str(cause).split()) or type(cause).__name__
        super().__init__(
            f"iteration {iteration}, phase '{phase}' failed: {type(cause).__name__}: {detail}. "
            f"Earlier iterations are intact in {out}; rerun the same command to resume at this phase.")


@dataclass
class LoopSettings:
    """Everything `run_loop` needs. Filled from defaults, then a YAML file, then CLI flags."""

    tasks: str = ""
    """Task source: a task dataset folder (``webgym-data build``) or a JSONL/parquet file of task rows."""
    model: str = ""
    """Starting checkpoint: a local folder or a Hub model id (Qwen2-VL / Qwen2.5-VL / Qwen3-VL)."""
    model_revision: str | None = None
    """Hub revision of --model."""
    out: str = ""
    """Loop folder: loop_state.json and one iter-XXXX/ folder per iteration."""
    iterations: int = 1
    """Iterations to have finished when the command ends (a rerun with a larger value continues)."""
    split: str = "train"
    """Task split rolled out for training."""
    only_environment: str = ""
    """Roll out only tasks of this environment kind: 'miniwob' or 'web' ('' = all tasks)."""
    limit: int | None = None
    """Roll out only the first N tasks of the split (after the environment filter)."""
    attempts: int = 1
    """Episodes per task and iteration."""
    concurrency: int = 4
    """Episodes running at once."""
    miniwob_horizon: int = 6
    """Step budget of MiniWoB episodes."""
    viewport: str = "1280x720"
    """Browser viewport WIDTHxHEIGHT."""
    bootstrap_policy: str = "random"
    """Policy of iteration 0's rollout: 'random' (no model; successes bootstrap training) or 'model'."""
    servers: list[str] = field(default_factory=list)
    """Running browser servers (repeat); none = the loop runs one on 127.0.0.1 for each rollout."""
    browser_token: str | None = None
    """Bearer token of the browser servers."""
    browsers: int = 1
    """Chromium processes of the loop's own browser server."""
    contexts_per_browser: int = 4
    """Sessions per Chromium of the loop's own browser server."""
    sites_url: str | None = None
    """Site server for MiniWoB tasks; none = the loop serves the MiniWoB pages on 127.0.0.1 itself."""
    judge: str = "programmatic"
    """programmatic (the environment's reward) or rubric (an LLM judge)."""
    judge_base_url: str | None = None
    """Judge endpoint (rubric judge)."""
    judge_model: str | None = None
    """Judge model name (rubric judge)."""
    policy_base_url: str | None = None
    """An OpenAI-compatible policy endpoint (vLLM, ...); none = the CPU policy server in this process."""
    policy_model: str = "webgym-policy"
    """Model name the policy is served under (vLLM: --served-model-name)."""
    policy_command: str = ""
    """Command that serves a checkpoint, restarted for each new one; placeholders {checkpoint},
    {port}, {name}. E.g. 'vllm serve {checkpoint} --port {port} --served-model-name {name}'."""
    reload_url: str | None = None
    """With --policy-base-url: URL the loop POSTs {"model": CHECKPOINT} to for each new checkpoint."""
    policy_start_timeout_s: float = 900.0
    """How long a started --policy-command may take until /v1/models answers."""
    policy_max_new_tokens: int = 256
    """CPU policy server: most tokens generated per reply."""
    objective: str = "filtered_bc"
    """Training objective: filtered_bc or reinforce."""
    last_k_iterations: int = 4
    """Train on the trajectories of the last K iterations (0 = all)."""
    recency_power: float | None = None
    """filtered_bc recency weighting power (trainer default if unset)."""
    learning_rate: float | None = None
    """Peak learning rate (trainer default if unset)."""
    max_steps: int | None = None
    """Optimizer steps per iteration (trainer default if unset)."""
    epochs: float | None = None
    """Passes over the samples per iteration when max_steps is 0 (trainer default if unset)."""
    per_device_batch_size: int | None = None
    """Samples per forward pass (trainer default if unset)."""
    gradient_accumulation_steps: int | None = None
    """Forward passes per optimizer step (trainer default if unset)."""
    log_with: str | None = None
    """Trainer metrics tracker: tensorboard, wandb, ... or none (trainer default if unset)."""
    train_config: str | None = None
    """YAML file of further `webgym-rl train` settings (model, data and out are set by the loop)."""
    train_launcher: str = ""
    """Run training as a child process under this launcher, e.g. 'accelerate launch --config_file
    fsdp.yaml' for several GPUs ('' = train in this process)."""
    skip_empty_train: bool = True
    """An iteration with nothing to train on (e.g. no success) keeps the checkpoint instead of failing."""
    eval_every: int = 0
    """Evaluate the new checkpoint every M iterations (0 = never)."""
    eval_tasks: str | None = None
    """Evaluation task source (default: --tasks)."""
    eval_split: str = "test"
    """Split of the evaluation tasks."""
    eval_limit: int | None = None
    """Evaluate on the first N tasks only."""
    push_to: str | None = None
    """Hub model repository to push each iteration's checkpoint to (none = no push)."""
    push_private: bool = False
    """Create the Hub repository as private."""
    seed: int = 0
    """Seed of the rollouts and the training data order (each iteration derives its own)."""
    progress: bool = True
    """Show progress (rich) on the terminal."""

    # ------------------------------------------------------------------------------- derived

    @property
    def out_dir(self) -> Path:
        return Path(self.out)

    @property
    def viewport_size(self) -> tuple[int, int]:
        width, _, height = self.viewport.lower().partition("x")
        return int(width), int(height)

    @property
    def policy_argv(self) -> list[str]:
        return shlex.split(self.policy_command)

    def iteration_dir(self, iteration: int) -> Path:
        return self.out_dir / f"iter-{iteration:04d}"

    def validate(self) -> None:
        for name in ("tasks", "model", "out"):
            if not getattr(self, name):
                raise LoopSettingsError(f"--{name} is required")
        if not Path(self.tasks).exists():
            raise LoopSettingsError(f"--tasks {self.tasks}: no such file or folder")
        if self.eval_tasks and not Path(self.eval_tasks).exists():
            raise LoopSettingsError(f"--eval-tasks {self.eval_tasks}: no such file or folder")
        for name in ("iterations", "attempts", "concurrency", "miniwob_horizon", "browsers",
                     "contexts_per_browser", "policy_max_new_tokens"):
            if getattr(self, name) < 1:
                raise LoopSettingsError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("last_k_iterations", "eval_every"):
            if getattr(self, name) < 0:
                raise LoopSettingsError(f"{name} must be >= 0, got {getattr(self, name)}")
        choices = {"split": ("train", "test"), "eval_split": ("train", "test"),
                   "only_environment": ("", "miniwob", "web"), "bootstrap_policy": ("random", "model"),
                   "judge": ("programmatic", "rubric"), "objective": ("filtered_bc", "reinforce")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise LoopSettingsError(f"{name} '{getattr(self, name)}' is unknown; choose one of "
                                        f"{', '.join(repr(a) for a in allowed)}")
        try:
            width, height = self.viewport_size
        except ValueError:
            raise LoopSettingsError(f"viewport {self.viewport!r}: expected WIDTHxHEIGHT, "
                                    "e.g. 1280x720") from None
        if width < 1 or height < 1:
            raise LoopSettingsError(f"viewport {self.viewport!r}: both sides must be >= 1")
        if self.policy_base_url and not (self.policy_command or self.reload_url):
            raise LoopSettingsError(
                "--policy-base-url needs a way to switch the endpoint to each new checkpoint: "
                "--policy-command (the loop restarts it) or --reload-url (the loop POSTs to it)")
        if self.reload_url and not self.policy_base_url:
            raise LoopSettingsError("--reload-url goes with --policy-base-url (the endpoint it reloads)")
        if self.policy_command:
            argv = self.policy_argv
            if not argv or not any("{checkpoint}" in arg for arg in argv):
                raise LoopSettingsError("--policy-command must contain {checkpoint} (where the checkpoint "
                                        f"folder goes), got {self.policy_command!r}")
        if self.judge == "rubric" and not (self.judge_base_url and self.judge_model):
            raise LoopSettingsError("judge 'rubric' needs --judge-base-url and --judge-model")

    @classmethod
    def from_sources(cls, yaml_path: str | Path | None = None, **overrides: Any) -> LoopSettings:
        """Defaults, then the YAML file's keys (field names), then `overrides` that are not None."""
        values = settings_values(cls, yaml_path, overrides, error=LoopSettingsError)
        settings = cls(**values)
        if isinstance(settings.servers, str):
            settings.servers = [settings.servers]
        for name in ("tasks", "model", "out"):
            setattr(settings, name, str(getattr(settings, name)))
        return settings


@dataclass
class LoopResult:
    """What the loop folder holds when `run_loop` returns."""

    out: Path
    checkpoint: str
    """The newest checkpoint (the starting model if no iteration trained)."""
    iterations: list[dict[str, Any]]
    """Per iteration: the record of each finished phase (as in loop_state.json)."""


# ------------------------------------------------------------------------------------ statistics

def trajectory_stats(folder: Path | str) -> dict[str, Any]:
    """Episode and step counts of a trajectory dataset folder, read from the shards of its manifest.

    ``valid_actions`` counts steps whose reply parsed into an action (an unparsed reply is a no-op
    step). Reads only the needed columns, in row batches, so screenshots never pile up in memory.
    """
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from webgym_rollout.dataset import read_manifest

    folder = Path(folder)
    manifest = read_manifest(folder)
    stats = {"episodes": 0, "successes": 0, "steps": 0, "valid_actions": 0, "errors": 0}
    for shard in manifest["shards"]:
        parquet = pq.ParquetFile(folder / shard["path"])
        for batch in parquet.iter_batches(batch_size=32, columns=["reward", "status", "steps"]):
            stats["episodes"] += batch.num_rows
            rewards = batch.column("reward").to_pylist()
            stats["successes"] += sum(1 for r in rewards if r is not None and r >= 1.0)
            stats["errors"] += sum(1 for s in batch.column("status").to_pylist()
                                   if s and (s.startswith("error:") or s == "blocked"))
            steps = pc.list_flatten(batch.column("steps"))
            actions = pc.struct_field(steps, "action")
            stats["steps"] += len(actions)
            stats["valid_actions"] += int(pc.sum(pc.not_equal(actions, "")).as_py() or 0)
    episodes, steps = stats["episodes"], stats["steps"]
    stats["success_rate"] = stats["successes"] / episodes if episodes else 0.0
    stats["valid_action_rate"] = stats["valid_actions"] / steps if steps else 0.0
    return stats


# -------------------------------------------------------------------------------------- services

def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _BrowserServerThread:
    """The browser server (`webgym_rollout.server.running_server`) on its own event loop in a thread,
    so that it outlives the rollouts (each runs its own ``asyncio.run``) and keeps Chromium warm."""

    def __init__(self, settings: LoopSettings):
        self._settings = settings
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
        from webgym_rollout.browser import PoolSettings
        from webgym_rollout.server import ServerSettings, running_server

        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        # Local sites (MiniWoB pages on 127.0.0.1) must get through the browser server's URL guard.
        pool = PoolSettings(browsers=self._settings.browsers,
                            contexts_per_browser=self._settings.contexts_per_browser,
                            allow_hosts=("127.0.0.1",))
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


class LoopServices:
    """The browser server, site server and policy endpoint of a loop; a context manager that stops
    everything it started.

    `serve(checkpoint)` makes the policy endpoint serve `checkpoint` (start, reload or restart, as
    the settings say) and returns ``(base_url, model_name)``. `on_event(kind, detail)` is told about
    each start, reload and stop (the demo prints them).
    """

    def __init__(self, settings: LoopSettings, *,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None):
        self.settings = settings
        self._on_event = on_event or (lambda kind, detail: None)
        self._stack = contextlib.ExitStack()
        self._sites_url: str | None = settings.sites_url
        self._browser: _BrowserServerThread | None = None
        self._base_url: str | None = None
        self._serving: str | None = None
        self._process: subprocess.Popen | None = None
        self._process_log: Any = None

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
        """The browser servers: `servers`, or one run here (started on first use)."""
        if self.settings.servers:
            return tuple(self.settings.servers)
        if self._browser is None:
            began = time.perf_counter()
            self._browser = self._stack.enter_context(_BrowserServerThread(self.settings))
            self._on_event("browser_started", {"url": self._browser.url,
                                               "seconds": time.perf_counter() - began})
        return (self._browser.url,)

    # -- sites
    def sites_url(self) -> str:
        """The MiniWoB site server's URL (started here on first use unless `sites_url` is set)."""
        if self._sites_url is None:
            from webgym_rollout.sites import SiteServer

            sites = self._stack.enter_context(SiteServer(host="127.0.0.1", port=0))
            self._sites_url = sites.base_url
            self._on_event("sites_started", {"url": sites.base_url})
        return self._sites_url

    # -- policy
    @property
    def serving(self) -> str | None:
        """The checkpoint the policy endpoint serves now (None before the first `serve`)."""
        return self._serving

    def serve(self, checkpoint: str) -> tuple[str, str]:
        """Make the endpoint serve `checkpoint`; returns ``(base_url, model_name)``."""
        settings = self.settings
        name = settings.policy_model
        if self._serving == checkpoint and self._base_url:
            return self._base_url, name
        if settings.policy_command:
            self._stop_process()
            self._start_process(checkpoint)
        elif settings.policy_base_url:
            self._base_url = settings.policy_base_url
            self._post_reload(str(settings.reload_url), checkpoint)
        elif self._base_url is None:
            from webgym_rollout.policy_server import PolicyServerSettings, running_policy_server

            began = time.perf_counter()
            server = PolicyServerSettings(model=checkpoint, host="127.0.0.1", port=0, served_model_name=name,
                                          revision=settings.model_revision if checkpoint == settings.model
                                          else None, max_new_tokens=settings.policy_max_new_tokens)
            try:
                self._base_url = self._stack.enter_context(running_policy_server(server))
            except Exception as exc:  # a model that does not load, a port that does not bind
                raise PolicyEndpointError(f"the CPU policy server could not serve {checkpoint}: "
                                          f"{exc}") from exc
            self._on_event("policy_started", {"url": self._base_url, "checkpoint": checkpoint,
                                              "seconds": time.perf_counter() - began})
        else:
            self._post_reload(self._base_url.removesuffix("/v1") + "/reload", checkpoint)
        self._serving = checkpoint
        return str(self._base_url), name

    def _post_reload(self, url: str, checkpoint: str) -> None:
        import httpx

        began = time.perf_counter()
        try:
            reply = httpx.post(url, json={"model": checkpoint}, timeout=self.settings.policy_start_timeout_s)
        except httpx.HTTPError as exc:
            raise PolicyEndpointError(f"reloading the policy at {url} failed: {exc}") from exc
        if reply.status_code >= 400:
            raise PolicyEndpointError(f"reloading the policy at {url} with {checkpoint} failed: "
                                      f"HTTP {reply.status_code}: {reply.text[:300]}")
        self._on_event("policy_reloaded", {"url": url, "checkpoint": checkpoint,
                                           "seconds": time.perf_counter() - began})

    def _start_process(self, checkpoint: str) -> None:
        import httpx

        settings = self.settings
        if settings.policy_base_url:
            base_url = settings.policy_base_url.rstrip("/")
            port = httpx.URL(base_url).port or 80
        else:
            port = _free_port()
            base_url = f"http://127.0.0.1:{port}/v1"
        # Plain replacement, not str.format: vLLM flags carry JSON with braces of their own.
        values = {"{checkpoint}": checkpoint, "{port}": str(port), "{name}": settings.policy_model}
        argv = []
        for arg in settings.policy_argv:
            for placeholder, value in values.items():
                arg = arg.replace(placeholder, value)
            argv.append(arg)
        log_path = settings.out_dir / "policy-server.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._process_log = log_path.open("ab")
        began = time.perf_counter()
        try:
            # Its own process group: stopping it also stops the workers it forks (vLLM does).
            self._process = subprocess.Popen(argv, stdout=self._process_log, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        except OSError as exc:
            raise PolicyEndpointError(f"--policy-command {argv[0]!r} could not start: {exc}") from exc
        deadline = time.monotonic() + settings.policy_start_timeout_s
        while True:
            if self._process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-1500:]
                code = self._process.returncode
                self._stop_process()
                raise PolicyEndpointError(f"--policy-command exited with status {code} before serving "
                                          f"{checkpoint}; last output ({log_path}):\n{tail}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base_url}/models", timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                self._stop_process()
                raise PolicyEndpointError(f"--policy-command did not answer {base_url}/models within "
                                          f"{settings.policy_start_timeout_s:.0f} s (log: {log_path})")
            time.sleep(0.5)
        self._base_url = base_url
        self._on_event("policy_started", {"url": base_url, "checkpoint": checkpoint, "pid": self._process.pid,
                                          "seconds": time.perf_counter() - began})

    def _stop_process(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
            self._on_event("policy_stopped", {"pid": process.pid})
        if self._process_log is not None:
            self._process_log.close()
            self._process_log = None
        if process is not None:
            self._base_url = self._serving = None


# ------------------------------------------------------------------------------------------ state

def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _load_state(settings: LoopSettings) -> dict[str, Any]:
    path = settings.out_dir / STATE_FILE
    record = {name: getattr(settings, name) for name in _IDENTITY}
    if not path.exists():
        if settings.out_dir.is_dir() and any(p.name.startswith("iter-") for p in settings.out_dir.iterdir()):
            raise LoopStateError(f"{settings.out_dir} holds iteration folders but no {STATE_FILE}; "
                                 "choose an empty or new --out folder")
        return {"version": STATE_VERSION, "identity": record, "settings": asdict(settings),
                "iterations": {}, "last_error": None}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise LoopStateError(f"{path} is unreadable: {exc}") from None
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise LoopStateError(f"{path}: not a webgym-rl loop state (version {STATE_VERSION})")
    for name, value in record.items():
        if state["identity"].get(name) != value:
            raise LoopStateError(
                f"{path} belongs to a run with {name}={state['identity'].get(name)!r}, not {value!r}; "
                "rerun with the same value to resume, or choose a new --out folder")
    state["settings"] = asdict(settings)
    return state


# ----------------------------------------------------------------------------------------- phases

def _task_source(settings: LoopSettings, source: str, split: str, label: str) -> Path:
    """The task file/folder a rollout reads: `source` itself, or its tasks of one environment kind
    written once to OUT/tasks/ (so that every rollout of the loop sees the very same rows)."""
    if not settings.only_environment:
        return Path(source)
    target = settings.out_dir / "tasks" / f"{label}-{split}-{settings.only_environment}.jsonl"
    if target.exists():
        return target
    from webgym_rollout.runner import load_tasks

    kind = settings.only_environment
    tasks = [t for t in load_tasks(source, split=split)
             if (t.environment.startswith("miniwob:") if kind == "miniwob" else t.environment == "web")]
    if not tasks:
        raise LoopSettingsError(f"{source} has no '{split}' tasks of environment kind '{kind}'")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text("".join(json.dumps(t.to_row(), ensure_ascii=False) + "\n" for t in tasks),
                   encoding="utf-8")
    os.replace(tmp, target)
    return target


def _needs_sites(tasks: Path, split: str) -> bool:
    from webgym_rollout.runner import load_tasks

    return any(t.environment.startswith("miniwob:") for t in load_tasks(tasks, split=split))


def _rollout(settings: LoopSettings, services: LoopServices, *, iteration: int, tasks: Path, split: str,
             out: Path, checkpoint: str | None, limit: int | None, seed: int) -> dict[str, Any]:
    """One rollout into `out` (resumed if it exists) with `checkpoint` (None: the random policy)."""
    from urllib.parse import urlsplit

    from webgym_rollout.guard import is_loopback_host
    from webgym_rollout.runner import RunSettings, run

    sites_url = None
    if _needs_sites(tasks, split):
        remote = [url for url in settings.servers if not is_loopback_host(urlsplit(url).hostname or "")]
        if remote and not settings.sites_url:
            # The browser opens the page, on its own machine: a site server here is out of its reach.
            raise LoopSettingsError(
                f"MiniWoB tasks on browser servers of other machines ({', '.join(remote)}) need "
                "--sites-url: run `webgym-rollout serve-sites` on those machines and pass its URL as "
                "they see it (e.g. http://127.0.0.1:8400)")
        sites_url = services.sites_url()
    policy: dict[str, Any] = {"policy": "random"}
    if checkpoint is not None:
        base_url, name = services.serve(checkpoint)
        policy = {"policy": "openai", "policy_base_url": base_url, "policy_model": name}
    run_settings = RunSettings(
        tasks=tasks, servers=services.browser_urls(), out=out, **policy,
        judge=settings.judge, judge_base_url=settings.judge_base_url, judge_model=settings.judge_model,  # type: ignore[arg-type]
        sites_url=sites_url, concurrency=settings.concurrency, attempts=settings.attempts,
        split=split, resume=True, seed=seed, limit=limit,  # type: ignore[arg-type]
        miniwob_horizon=settings.miniwob_horizon, viewport=settings.viewport_size, iteration=iteration,
        browser_token=settings.browser_token, progress=settings.progress)
    report = asyncio.run(run(run_settings))
    stats = trajectory_stats(out)
    return {"out": str(out), "checkpoint": checkpoint or "random", "steps_per_s": report.steps_per_s,
            "elapsed_s": report.elapsed_s, "episodes_this_run": report.episodes, **stats}


def _publish_checkpoint(source: Path, target: Path) -> None:
    """Put the model, processor and trainer_state.json of `source` at `target`, atomically.

    Files are hard-linked where the file system allows (an 8B checkpoint is not copied), and the
    optimizer state (training_state/) stays with the trainer's own folder."""
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for path in source.rglob("*"):
        relative = path.relative_to(source)
        if relative.parts[0] == "training_state" or not path.is_file():
            continue
        destination = tmp / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, destination)
        except OSError:
            shutil.copy2(path, destination)
    if target.exists():
        shutil.rmtree(target)
    os.replace(tmp, target)


def _train(settings: LoopSettings, iteration: int, model: str) -> dict[str, Any]:
    from webgym_rl.data import NoTrainingDataError
    from webgym_rl.modeling import merge_adapter
    from webgym_rl.train import CHECKPOINT_PREFIX, TrainSettings, train
    from webgym_rl.train import STATE_FILE as TRAINER_STATE

    first = 0 if settings.last_k_iterations == 0 else max(0, iteration - settings.last_k_iterations + 1)
    data = [str(settings.iteration_dir(j) / "trajectories") for j in range(first, iteration + 1)
            if (settings.iteration_dir(j) / "trajectories" / "manifest.json").is_file()]
    train_dir = settings.iteration_dir(iteration) / "train"
    if train_dir.exists() and not train_dir.is_dir():
        raise LoopError(f"{train_dir} exists and is not a folder; remove it to let the loop train")
    resume = any((p / TRAINER_STATE).is_file() for p in train_dir.glob(f"{CHECKPOINT_PREFIX}*"))
    overrides = {name: getattr(settings, name) for name in (
        "objective", "last_k_iterations", "recency_power", "learning_rate", "max_steps", "epochs",
        "per_device_batch_size", "gradient_accumulation_steps", "log_with")}
    train_settings = TrainSettings.from_sources(
        settings.train_config, **overrides, model=model, data=data, out=str(train_dir), resume=resume,
        seed=settings.seed * 1000 + iteration,
        model_revision=settings.model_revision if model == settings.model else None)
    try:
        if settings.train_launcher:
            checkpoint, trainer_state = _train_launched(settings, train_settings)
        else:
            result = train(train_settings)
            checkpoint = result.checkpoint
            trainer_state = json.loads((checkpoint / TRAINER_STATE).read_text(encoding="utf-8"))
    except NoTrainingDataError as exc:
        if not settings.skip_empty_train:
            raise
        log.warning("iteration %d: nothing to train on (%s); keeping %s", iteration, exc, model)
        return {"skipped": " ".join(str(exc).split()), "checkpoint": model, "data": data}
    target = settings.iteration_dir(iteration) / "checkpoint"
    if train_settings.lora:
        # The policy server, vLLM and the next iteration's trainer all load ordinary checkpoints.
        merge_adapter(checkpoint, target, base=model, revision=train_settings.model_revision)
    else:
        _publish_checkpoint(checkpoint, target)
    losses = [entry["loss"] for entry in trainer_state.get("log_history", [])]
    return {"checkpoint": str(target), "trainer_checkpoint": str(checkpoint), "steps": trainer_state["step"],
            "counts": trainer_state.get("counts", {}), "data": data,
            "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None}


def _train_launched(settings: LoopSettings, train_settings: Any) -> tuple[Path, dict[str, Any]]:
    """Run ``webgym-rl train`` under `settings.train_launcher` (e.g. ``accelerate launch --config_file
    fsdp.yaml``) in a child process; returns the final checkpoint and its trainer state."""
    import sys

    import yaml

    from webgym_rl.data import build_samples, load_trajectories
    from webgym_rl.train import CHECKPOINT_PREFIX
    from webgym_rl.train import STATE_FILE as TRAINER_STATE

    # Same selection as the trainer, here: "nothing to train on" must not look like a crash.
    build_samples(load_trajectories(train_settings.data, cache_dir=train_settings.cache_dir),
                  train_settings.objective, last_k_iterations=train_settings.last_k_iterations,
                  recency_power=train_settings.recency_power,
                  success_threshold=train_settings.success_threshold,
                  normalize_advantage=train_settings.normalize_advantage,
                  advantage_clip=train_settings.advantage_clip,
                  drop_same_as_next=train_settings.drop_same_as_next)
    out = Path(train_settings.out)
    config = out.parent / "train-settings.yaml"
    config.write_text(yaml.safe_dump(asdict(train_settings), sort_keys=False), encoding="utf-8")
    program = Path(sys.executable).with_name("webgym-rl")
    if not program.exists():
        program = Path(shutil.which("webgym-rl") or "webgym-rl")
    argv = [*shlex.split(settings.train_launcher), str(program), "train", "--config", str(config)]
    log.info("training: %s", shlex.join(argv))
    try:
        finished = subprocess.run(argv, check=False)
    except OSError as exc:
        raise LoopError(f"--train-launcher could not start {argv[0]!r}: {exc}") from exc
    if finished.returncode != 0:
        raise LoopError(f"the training command exited with status {finished.returncode}: {shlex.join(argv)}")
    complete = sorted((p for p in out.glob(f"{CHECKPOINT_PREFIX}*") if (p / TRAINER_STATE).is_file()),
                      key=lambda p: int(p.name[len(CHECKPOINT_PREFIX):]))
    if not complete:
        raise LoopError(f"the training command wrote no complete checkpoint to {out}")
    return complete[-1], json.loads((complete[-1] / TRAINER_STATE).read_text(encoding="utf-8"))


def _push(settings: LoopSettings, iteration: int, record: dict[str, Any]) -> dict[str, Any]:
    from webgym_rl.hub import PushSettings, push_checkpoint

    train = record["train"]
    if train.get("skipped"):
        return {"skipped": "no new checkpoint in this iteration"}
    rates = {}
    if "eval" in record and not record["eval"].get("skipped"):
        rates[f"eval ({settings.eval_split} split)"] = float(record["eval"]["success_rate"])
    commit = push_checkpoint(PushSettings(
        checkpoint=Path(train["checkpoint"]), repo_id=str(settings.push_to), success_rates=rates,
        private=settings.push_private, commit_message=f"webgym-rl loop: iteration {iteration}"))
    return {"repo_id": settings.push_to, "commit": str(getattr(commit, "oid", "") or commit)}


# -------------------------------------------------------------------------------------- the loop

def _current_checkpoint(settings: LoopSettings, state: dict[str, Any], before: int) -> str:
    """The checkpoint the iterations before `before` ended with (the starting model if none trained)."""
    checkpoint = settings.model
    for i in range(before):
        train = state["iterations"].get(str(i), {}).get("train")
        if train is not None:
            checkpoint = train["checkpoint"]
    return checkpoint


def run_loop(settings: LoopSettings, *, services: LoopServices | None = None,
             on_event: Callable[[str, dict[str, Any]], None] | None = None) -> LoopResult:
    """Run (or resume) the loop until `settings.iterations` iterations are finished.

    `services`: endpoints to use (the caller starts and stops them); by default the loop makes its
    own and stops them before returning. `on_event(kind, detail)` is told when each phase starts
    (``phase_started``) and ends (``phase_done``, ``phase_skipped`` for phases already done).
    """
    settings.validate()
    out = settings.out_dir
    emit = on_event or (lambda kind, detail: None)
    out.mkdir(parents=True, exist_ok=True)
    state = _load_state(settings)
    state_path = out / STATE_FILE
    _write_json_atomic(state_path, state)
    with contextlib.ExitStack() as stack:
        if services is None:
            services = stack.enter_context(LoopServices(settings, on_event=emit))
        for iteration in range(settings.iterations):
            record = state["iterations"].setdefault(str(iteration), {})
            folder = settings.iteration_dir(iteration)
            for phase in PHASES:
                if phase in record:
                    emit("phase_skipped", {"iteration": iteration, "phase": phase})
                    continue
                due = bool(settings.eval_every) and (iteration + 1) % max(1, settings.eval_every) == 0
                if phase == "eval" and not due:
                    continue
                if phase == "push" and not settings.push_to:
                    continue
                emit("phase_started", {"iteration": iteration, "phase": phase})
                began = time.perf_counter()
                try:
                    if phase == "rollout":
                        checkpoint = _current_checkpoint(settings, state, iteration)
                        bootstrap = iteration == 0 and settings.bootstrap_policy == "random"
                        tasks = _task_source(settings, settings.tasks, settings.split, "rollout")
                        result = _rollout(settings, services, iteration=iteration, tasks=tasks,
                                          split=settings.split, out=folder / "trajectories",
                                          checkpoint=None if bootstrap else checkpoint, limit=settings.limit,
                                          seed=settings.seed * 1000 + iteration)
                    elif phase == "train":
                        result = _train(settings, iteration, _current_checkpoint(settings, state, iteration))
                    elif phase == "eval":
                        tasks = _task_source(settings, settings.eval_tasks or settings.tasks,
                                             settings.eval_split, "eval")
                        result = _rollout(settings, services, iteration=iteration, tasks=tasks,
                                          split=settings.eval_split, out=folder / "eval",
                                          checkpoint=record["train"]["checkpoint"], limit=settings.eval_limit,
                                          seed=settings.seed * 1000 + iteration)
                    else:
                        result = _push(settings, iteration, record)
                except Exception as exc:
                    state["last_error"] = {"iteration": iteration, "phase": phase,
                                           "error": f"{type(exc).__name__}: {exc}", "at": time.time()}
                    _write_json_atomic(state_path, state)
                    raise PhaseFailed(iteration, phase, exc, out) from exc
                result["seconds"] = time.perf_counter() - began
                record[phase] = result
                state["last_error"] = None
                _write_json_atomic(state_path, state)
                emit("phase_done", {"iteration": iteration, "phase": phase, "result": result})
    return LoopResult(out=out, checkpoint=_current_checkpoint(settings, state, settings.iterations),
                      iterations=[state["iterations"][str(i)] for i in range(settings.iterations)])


# ------------------------------------------------------------------------------------------- CLI

def _echo_event(kind: str, detail: dict[str, Any]) -> None:
    if kind == "phase_started":
        click.echo(f"[loop] iteration {detail['iteration']}: {detail['phase']} ...", err=True)
    elif kind == "phase_skipped":
        click.echo(f"[loop] iteration {detail['iteration']}: {detail['phase']} already done", err=True)
    elif kind == "phase_done":
        result = detail["result"]
        if detail["phase"] in ("rollout", "eval"):
            extra = (f"{result['episodes']} episodes, success {result['success_rate']:.1%}, valid actions "
                     f"{result['valid_action_rate']:.1%}, {result['steps_per_s']:.2f} steps/s")
        elif detail["phase"] == "train":
            extra = (f"skipped: {result['skipped']}" if result.get("skipped")
                     else f"{result['steps']} steps, loss {result['first_loss']:.4f} -> "
                          f"{result['last_loss']:.4f}")
        else:
            extra = str(result)
        click.echo(f"[loop] iteration {detail['iteration']}: {detail['phase']} done ({extra})", err=True)
    elif kind.startswith("policy_"):
        click.echo(f"[loop] {kind.replace('_', ' ')}: {detail.get('checkpoint', detail)}", err=True)
    elif kind in ("browser_started", "sites_started"):
        click.echo(f"[loop] {kind.replace('_', ' ')}: {detail['url']}", err=True)


@click.command("loop", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config", type=click.Path(dir_okay=False, exists=True), default=None,
              help="YAML file of loop settings (keys = option names with underscores); flags override it.")
@settings_options(LoopSettings)
def loop_command(config: str | None, **flags: Any) -> None:
    """Run the online RL loop: roll out, train, evaluate, repeat; resumable.

    Each iteration rolls out the train tasks with the current checkpoint (iteration 0 with the
    random policy by default), writes OUT/iter-XXXX/trajectories, trains on the last K iterations
    (filtered_bc) into OUT/iter-XXXX/checkpoint, and evaluates every --eval-every iterations.
    Rerun the same command to resume at the first unfinished phase.

    \b
    Example:
      webgym-rl tiny-model out/tiny-qwen2vl
      webgym-rl loop --tasks out/tasks --only-environment miniwob --model out/tiny-qwen2vl \\
          --out out/loop --iterations 3 --eval-every 1 --max-steps 20
      # vLLM on a GPU machine, restarted with each new checkpoint (not tested without a GPU):
      webgym-rl loop --config loop.yaml --policy-base-url http://127.0.0.1:8000/v1 \\
          --policy-command 'vllm serve {checkpoint} --port {port} --served-model-name {name}'
    """
    from webgym_data.schema import TaskValidationError
    from webgym_rl.train import TrainingError

    try:
        settings = LoopSettings.from_sources(config, **flags)
        result = run_loop(settings, on_event=_echo_event if settings.progress else None)
    except (LoopError, TaskValidationError, TrainingError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{len(result.iterations)} iterations done in {result.out}; "
               f"newest checkpoint: {result.checkpoint}")

