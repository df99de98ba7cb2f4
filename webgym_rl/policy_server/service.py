"""The policy service behind the HTTP app: the checkpoint serving now, the one generation worker,
and the counters.

Generation runs in one worker thread (one request at a time, in arrival order), so the event loop
keeps accepting requests and answering ``/health`` while the model works.

Versions and in-flight generations. A generation job reads the current model and its version on the
worker thread when it starts, and the reply carries that version. /reload builds a second model
beside the first (two models in memory for a moment) and swaps one reference; a failed load, or a
checkpoint whose image processor differs from the serving one, leaves the old model serving. The
copy or the pointing of pushed weights (`webgym_rl.policy_server.weights`) is a job on the same
single generation worker, so it never overlaps a generation: the one running finishes on the
weights it started with, every later one runs on the new weights, and each reply's
``system_fingerprint`` names the weights that produced it (a version snapshotted when a request is
accepted would be wrong for a request queued before a push and run after it). /reload and /weights
are serialised with each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import mmap
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from webgym_rl.errors import BadChatRequest, ReloadFailed, WeightsRejected
from webgym_rl.pixels import differing_field, image_processor_config
from webgym_rl.policy_server.generation import Generation, generate, prepare_messages
from webgym_rl.policy_server.model import load_policy
from webgym_rl.policy_server.protocol import (
    AssistantMessage,
    ChatCompletionRequest,
    ChatCompletionResponse,
    Choice,
    ChoiceLogprobs,
    ReloadRequest,
    ReloadResponse,
    Usage,
    WeightsResponse,
    version_fingerprint,
)
from webgym_rl.policy_server.settings import PolicyServerSettings
from webgym_rl.policy_server.weights import (
    WEIGHTS_HEADER_ALLOWANCE,
    KeptMappings,
    check_weights,
    copy_weights,
    map_shared_weights,
    point_weights,
    unlink_if_same,
)

__all__ = ["PolicyService"]

logger = logging.getLogger(__name__)


class PolicyService:
    """Owns the current checkpoint, the generation worker and the counters."""

    def __init__(self, settings: PolicyServerSettings):
        self.settings = settings
        self.policy = load_policy(settings, settings.model, settings.revision, settings.policy_version)
        # One worker: generation is serialised, and the event loop never runs model code.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy-generate")
        self._reload_lock = asyncio.Lock()
        self.requests_served = 0
        self.reloads = 0
        self.weight_pushes = 0
        self._kept = KeptMappings()

    def _generate_now(self, request: ChatCompletionRequest, messages: list[dict], images: list,
                      max_new_tokens: int) -> tuple[int, Generation]:
        """On the worker: the model and version serving now (a /weights copy runs on this thread
        too, so neither changes until this returns), and the generation with them."""
        policy = self.policy
        version = policy.version
        return version, generate(policy, request, messages, images, max_new_tokens, self.settings.device)

    def max_weights_bytes(self) -> int:
        """The largest /weights body accepted: the served weights plus room for the header."""
        return self.policy.weights_bytes + WEIGHTS_HEADER_ALLOWANCE

    def accepted_names(self) -> set[str]:
        return {self.settings.name, self.policy.checkpoint}

    async def complete(self, request: ChatCompletionRequest) -> ChatCompletionResponse:
        if request.model not in self.accepted_names():
            raise BadChatRequest(f"unknown model {request.model!r}; this server serves "
                                 f"{self.settings.name!r}", param="model")
        if request.n != 1:
            raise BadChatRequest(f"n={request.n} is not supported; only n=1", param="n")
        if request.stream:
            raise BadChatRequest("stream=true is not supported by this server", param="stream")
        max_new = request.max_completion_tokens or request.max_tokens or self.settings.max_new_tokens
        max_new = min(max_new, self.settings.max_new_tokens)
        messages, images = await asyncio.to_thread(prepare_messages, request)
        loop = asyncio.get_running_loop()
        version, result = await loop.run_in_executor(self._worker, self._generate_now, request, messages,
                                                     images, max_new)
        self.requests_served += 1
        ids = request.return_token_ids
        prompt_tokens, completion_tokens = len(result.prompt_ids), len(result.token_ids)
        return ChatCompletionResponse(
            id=f"chatcmpl-{uuid.uuid4().hex}", created=int(time.time()), model=request.model,
            system_fingerprint=version_fingerprint(version),
            choices=[Choice(message=AssistantMessage(content=result.text), finish_reason=result.finish_reason,
                            logprobs=ChoiceLogprobs(content=result.logprobs) if result.logprobs is not None
                            else None, token_ids=result.token_ids if ids else None)],
            usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                        total_tokens=prompt_tokens + completion_tokens),
            prompt_token_ids=result.prompt_ids if ids else None,
        )

    async def reload(self, request: ReloadRequest) -> ReloadResponse:
        from webgym_rl.modeling import ModelingError  # lazy: imports transformers

        async with self._reload_lock:
            previous, previous_version = self.policy.checkpoint, self.policy.version
            version = previous_version + 1 if request.version is None else request.version
            started = time.perf_counter()
            try:
                policy = await asyncio.to_thread(load_policy, self.settings, request.model, request.revision,
                                                 version)
            except (ModelingError, OSError, ValueError) as exc:
                raise ReloadFailed(f"cannot load {request.model!r}; still serving {previous!r}: "
                                   f"{exc}") from exc
            differs = differing_field(image_processor_config(self.policy.processor),
                                      image_processor_config(policy.processor))
            if differs is not None:
                raise ReloadFailed(f"{request.model!r} has another image processor than the one serving "
                                   f"({differs}, served vs new): screenshots would become other image "
                                   f"tokens; still serving {previous!r}. Give the trainer and the server the "
                                   "same --min-pixels / --max-pixels")
            # One reference swap: a generation already running holds the old `ServedPolicy` to its end;
            # each later one reads the new one (and its version) when it starts on the worker.
            self.policy = policy
            self._kept.clear()  # the new model's tensors are its own
            self.reloads += 1
            logger.info("reloaded: %s (v%d) -> %s (v%d)", previous, previous_version, request.model, version)
            return ReloadResponse(model=self.settings.name, checkpoint=request.model,
                                  previous_checkpoint=previous, version=version,
                                  previous_version=previous_version, load_s=time.perf_counter() - started)

    async def push(self, body: bytearray, version: int | None) -> WeightsResponse:
        """Check `body` (safetensors) against the served model, then copy it in on the worker."""
        self._kept.clear()
        return await self._take(body, version, "http", copy_weights, "the body")

    async def push_shared(self, path: str, version: int | None, keep: bool = False) -> WeightsResponse:
        """Map the shared-memory file `path`, check it against the served model, then point the
        model's tensors at it on the worker; the file's name is removed once the weights are in,
        unless `keep` (the client writes it again for a later push)."""
        started = time.perf_counter()
        if not keep:
            self._kept.clear()
        mapping, identity = await asyncio.to_thread(map_shared_weights, path, self.max_weights_bytes(),
                                                    self._kept if keep else None)
        retired: list = []
        point = functools.partial(point_weights, retired=retired)
        try:
            response = await self._take(mapping, version, "shm", point, f"shm {path!r}",
                                        time.perf_counter() - started)
        except WeightsRejected:
            self._kept.drop(identity)
            with contextlib.suppress(BufferError):
                mapping.close()  # refused before any tensor pointed into it
            raise
        if not keep:
            unlink_if_same(path, identity)
        # The old weights are freed on another thread, beside the next generation, not before it.
        asyncio.get_running_loop().run_in_executor(None, retired.clear)
        return response

    async def _take(self, source: bytearray | mmap.mmap, version: int | None,
                    transport: Literal["http", "shm"], job: Any, what: str,
                    mapped_s: float = 0.0) -> WeightsResponse:
        """Check `source` against the served model, then run `job` (copy or point) on the worker."""
        async with self._reload_lock:  # no /reload swaps the model between the check and the swap
            policy = self.policy
            previous_version = policy.version
            version = previous_version + 1 if version is None else version
            started = time.perf_counter()
            slots = await asyncio.to_thread(check_weights, source, policy, what)
            checked = time.perf_counter()
            loop = asyncio.get_running_loop()
            swap_start, swap_end = await loop.run_in_executor(self._worker, job, policy, source, slots,
                                                              version)
            self.weight_pushes += 1
            logger.info("weights pushed (%s): v%d -> v%d (%d tensors, %d bytes)", transport, previous_version,
                        version, len(slots), len(source))
            check_s, swap_s = mapped_s + checked - started, swap_end - swap_start
            return WeightsResponse(model=self.settings.name, checkpoint=policy.checkpoint, version=version,
                                   previous_version=previous_version, transport=transport,
                                   received_bytes=len(source), tensors=len(slots), check_s=check_s,
                                   queued_s=swap_start - checked, swap_s=swap_s, load_s=check_s + swap_s)

    def close(self) -> None:
        self._worker.shutdown(wait=True)
