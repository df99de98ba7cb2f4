"""Switching a running policy endpoint to new weights: one small interface, `PolicyUpdater`.

The loop (both schedules) publishes integer policy versions (0 = the starting model, then 1, 2, ...
one per training round) while episodes may keep running. Two paths:

- in memory, where the endpoint takes weights over its API (`PolicyUpdater.weights_url`: the CPU
  policy server's ``POST /weights``): the resident trainer sends the weights there itself
  (`webgym_rl.policy_server.push_weights`), no disk involved;
- through a folder: the trainer writes the version's checkpoint (or LoRA adapter) folder and the
  loop calls ``updater.update(weights, version)``: `weights` is the checkpoint folder, or, for an
  updater that ``loads_adapters``, the adapter folder (an adapter of the starting model the
  endpoint serves; None for a version that is the starting model itself).

Either way, new requests are then answered by `version`; requests already running finish on the
weights they started with. ``updater.model_name(version)`` is the model name a request must ask
for to get that version (the served name, except for LoRA adapters).

- `CpuPolicyUpdater`: the CPU policy server (`webgym_rl.policy_server`): ``POST /weights``
  (in memory) or ``POST /reload {"model", "version"}`` (a folder) swaps the weights between
  generations in the same process; its replies carry ``system_fingerprint: v<N>``.
- `VllmLoraUpdater` (LoRA runs on vLLM serving the starting model, started with ``--enable-lora``
  and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``): ``POST /v1/load_lora_adapter {"lora_name":
  "<name>-v<N>", "lora_path": ADAPTER}``, then ``POST /v1/unload_lora_adapter`` of the adapter
  `keep` versions older (requests still running on recent ones are not cut off). A reply's ``model``
  (the adapter name) says which version answered it. Adapters named ``<name>-v<N>`` that the
  endpoint already holds when the first update comes (loaded by a run of the loop that crashed) are
  unloaded first: vLLM refuses to load a name twice.
- `VllmWeightUpdater` (full fine-tunes on vLLM started with ``VLLM_SERVER_DEV_MODE=1``): ``POST
  /pause?mode=wait`` (running requests finish, new ones queue), ``POST /collective_rpc`` with the
  worker method that loads the weights from the checkpoint folder, ``POST /resume``. vLLM's replies
  do not name the weights; the loop's client stamps each step with the version it asked for.
- `RestartUpdater`: the fallback, restart the serve command with the new checkpoint
  (`webgym_rl.loop.services.LoopServices.serve`); requests running at that moment fail and their
  episodes are recorded as policy errors.

The vLLM updaters are tested at the HTTP boundary only (against a stand-in that speaks those
endpoints): vLLM needs GPUs. Errors: `PolicyEndpointError` (`webgym_rl.errors`) naming the URL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import httpx

from webgym_rl.errors import PolicyEndpointError
from webgym_rollout.trajectory.contract import version_number

__all__ = [
    "CpuPolicyUpdater",
    "PolicyUpdater",
    "RestartUpdater",
    "VllmLoraUpdater",
    "VllmWeightUpdater",
    "version_of",
]

log = logging.getLogger(__name__)

version_of = version_number
"""The integer version an endpoint's name for its weights says (``v3``, ``policy-v3``), or None
when it names none (`webgym_rollout.trajectory.contract.version_number`)."""


class PolicyUpdater(Protocol):
    """Switches a running endpoint to new weights without stopping the rollouts."""

    stamps_versions: bool
    """True when the endpoint's replies do not name the version, so the client must stamp each step
    with the version current when it sent the request (`VllmWeightUpdater`, `RestartUpdater`, a
    reload hook); the loop then fences each publish (`webgym_rl.loop.fence.VersionFence`) so that
    this version is the one that answered."""
    loads_adapters: bool
    """True when `update` is given each version's LoRA adapter folder instead of its checkpoint
    (`VllmLoraUpdater`)."""
    weights_url: str | None
    """Where the trainer may send a version's weights in memory (None: folders only)."""

    def update(self, weights: str | None, version: int) -> None:
        """Serve `weights` (a checkpoint folder; a LoRA adapter folder or None where the updater
        `loads_adapters`) as `version` from now on; raises `PolicyEndpointError` on failure."""

    def model_name(self, version: int) -> str:
        """The model name requests use to be answered by `version`."""


def _request(method: str, url: str, *, timeout: float, **kwargs: Any) -> Any:
    try:
        reply = httpx.request(method, url, timeout=timeout, **kwargs)
    except httpx.HTTPError as exc:
        raise PolicyEndpointError(f"{method} {url} failed: {exc}") from exc
    if reply.status_code >= 400:
        raise PolicyEndpointError(f"{method} {url} failed: HTTP {reply.status_code}: {reply.text[:300]}")
    return reply


def _post(url: str, *, timeout: float, json: Any = None, params: dict[str, Any] | None = None) -> Any:
    return _request("POST", url, timeout=timeout, json=json, params=params)


def _root(base_url: str) -> str:
    """``http://host:port`` of an OpenAI base URL (``http://host:port/v1``)."""
    return base_url.rstrip("/").removesuffix("/v1")


class CpuPolicyUpdater:
    """The CPU policy server: ``/weights`` (in memory, from the trainer) or ``/reload`` (a folder);
    same process, weights swapped between generations. `reload_url` replaces ``/reload`` (an
    endpoint someone else runs behind a hook of its own: folders only, and its replies may not
    name their version, so the loop stamps them)."""

    loads_adapters = False

    def __init__(self, base_url: str, served_name: str, *, timeout_s: float = 900.0,
                 reload_url: str | None = None):
        self.stamps_versions = reload_url is not None
        self.url = reload_url or _root(base_url) + "/reload"
        self.weights_url = None if reload_url else _root(base_url) + "/weights"
        self.served_name = served_name
        self.timeout_s = timeout_s

    def update(self, checkpoint: str, version: int) -> None:
        _post(self.url, json={"model": checkpoint, "version": version}, timeout=self.timeout_s)
        log.info("policy server now serves v%d (%s)", version, checkpoint)

    def model_name(self, version: int) -> str:
        return self.served_name


class VllmLoraUpdater:
    """vLLM's runtime LoRA loading: one adapter per version, named ``<served_name>-v<N>``, on the
    starting model vLLM serves under ``served_name`` (version 0, and any version without an adapter)."""

    stamps_versions = False
    loads_adapters = True
    weights_url = None

    def __init__(self, base_url: str, served_name: str, *, keep: int = 2, timeout_s: float = 900.0):
        if keep < 1:
            raise ValueError(f"keep: must be >= 1, got {keep}")
        self.base_url = base_url.rstrip("/")
        self.served_name = served_name
        self.keep = keep
        self.timeout_s = timeout_s
        self.loaded: list[int] = []
        self._base_versions: set[int] = {0}
        self._updated = False

    def model_name(self, version: int) -> str:
        return self.served_name if version in self._base_versions else f"{self.served_name}-v{version}"

    def update(self, weights: str | None, version: int) -> None:
        if not self._updated:
            self._unload_earlier_runs()
            self._updated = True
        if weights is None:  # no training yet: the version is the starting model itself
            self._base_versions.add(version)
            log.info("vLLM serves v%d as the base model %s", version, self.served_name)
            return
        _post(f"{self.base_url}/load_lora_adapter", timeout=self.timeout_s,
              json={"lora_name": self.model_name(version), "lora_path": weights})
        self.loaded.append(version)
        while len(self.loaded) > self.keep:
            self._unload(self.model_name(self.loaded.pop(0)))
        log.info("vLLM serves LoRA adapter %s (%s)", self.model_name(version), weights)

    def _unload(self, name: str) -> None:
        _post(f"{self.base_url}/unload_lora_adapter", timeout=self.timeout_s, json={"lora_name": name})

    def _unload_earlier_runs(self) -> None:
        """Unload the adapters of this name that an earlier run of the loop left loaded (vLLM outlives
        a crashed loop, and refuses to load a name it holds)."""
        served = _request("GET", f"{self.base_url}/models", timeout=self.timeout_s).json().get("data", [])
        for model in served:
            name = str(model.get("id", ""))
            version = version_of(name)
            if version is not None and name == f"{self.served_name}-v{version}":
                log.info("unloading %s, left by an earlier run of the loop", name)
                self._unload(name)


class VllmWeightUpdater:
    """vLLM's RL weight-update endpoints (``VLLM_SERVER_DEV_MODE=1``): pause, load, resume."""

    stamps_versions = True
    loads_adapters = False
    weights_url = None

    def __init__(self, base_url: str, served_name: str, *, rpc_method: str = "reload_weights",
                 timeout_s: float = 900.0):
        self.root = _root(base_url)
        self.served_name = served_name
        self.rpc_method = rpc_method
        self.timeout_s = timeout_s

    def model_name(self, version: int) -> str:
        return self.served_name

    def update(self, checkpoint: str, version: int) -> None:
        # mode=wait: running requests finish on the old weights; new ones wait for /resume.
        # (vLLM before the ``mode`` parameter spelled it wait_for_inflight_requests=true.)
        _post(f"{self.root}/pause", params={"mode": "wait", "wait_for_inflight_requests": "true"},
              timeout=self.timeout_s)
        try:
            _post(f"{self.root}/collective_rpc", timeout=self.timeout_s,
                  json={"method": self.rpc_method, "kwargs": {"weights_path": checkpoint}})
        finally:
            _post(f"{self.root}/resume", timeout=self.timeout_s)
        log.info("vLLM weights updated to v%d (%s)", version, checkpoint)


class RestartUpdater:
    """The fallback: restart the serve command on the new checkpoint (`serve(checkpoint)`)."""

    stamps_versions = True
    loads_adapters = False
    weights_url = None

    def __init__(self, serve: Callable[[str], Any], served_name: str):
        self._serve = serve
        self.served_name = served_name

    def model_name(self, version: int) -> str:
        return self.served_name

    def update(self, checkpoint: str, version: int) -> None:
        self._serve(checkpoint)
