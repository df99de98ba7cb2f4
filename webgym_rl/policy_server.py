"""A CPU policy server: a `transformers` Qwen-VL model behind an OpenAI-compatible HTTP API.

``webgym-rl serve-policy --model DIR`` answers what the rollout runner's policy client sends
to vLLM in production, so tests, the demo and the CPU RL loop need no GPU:

- ``POST /v1/chat/completions``: chat messages whose ``image_url`` parts hold base64 data URLs.
  The images are decoded and really fed to the model through its processor (the stock
  ``transformers serve`` drops them without torchvision). Sampling is exactly what the request says
  and nothing else: ``temperature`` (below 1e-5 = greedy), ``top_p``, ``top_k`` (as vLLM takes it:
  0, -1 or absent = no limit), ``max_tokens``, ``seed``, ``stop``; ``n`` must be 1. The checkpoint's
  generation_config (its top_k, repetition penalty, suppressed tokens, ...) is never applied: only
  its end-of-turn and padding ids are read (vLLM's ``--generation-config vllm``). The vision
  placeholder tokens (``<|image_pad|>`` ...: `webgym_rl.modeling.VISION_PLACEHOLDERS`) are never
  sampled: in a reply the trainer would take one for an image's place.
  ``logprobs`` / ``top_logprobs`` return the log-probabilities of the distribution each token was
  sampled from: ``softmax(logits / temperature)`` without the placeholders, cut to ``top_k`` and
  ``top_p`` and renormalised (vLLM's ``--logprobs-mode processed_logprobs``); with temperature 1 and
  no cut, the model's own less the placeholders, what the trainer scores. Greedy replies get those
  of temperature 1. ``return_token_ids`` (vLLM's field) adds the
  sampled token ids to the choice (``token_ids``, one per log-probability, the end-of-turn token
  included when the reply stopped on it) and the prompt's (``prompt_token_ids``, image tokens
  included): what a trainer needs to train on exactly the tokens sampled. ``usage`` counts the
  prompt tokens (image tokens included) and the generated tokens. Fields of the OpenAI API that we
  do not implement (penalties, tools, ...) are ignored. ``max_tokens`` is capped at
  ``--max-new-tokens``.
- ``GET /v1/models``: the served model name, with the checkpoint it currently runs as ``root``.
- ``POST /reload {"model": DIR, "version": N}``: load another checkpoint and swap it in without a
  restart; the served model name stays the same. A generation already running finishes on the old
  model; a failed load leaves the old model serving. ``version`` (an integer the trainer
  publishes; default: the previous one + 1) names the weights: every chat reply carries the version
  that produced it as ``system_fingerprint`` (``v<N>``; the first checkpoint is ``v0``, or
  ``--policy-version``), so a trajectory step knows which weights wrote it.
- ``POST /weights``: new weights from memory, no disk, holding exactly the served model's
  ``state_dict()`` (same keys, shapes and dtypes) as a safetensors file, in one of two forms:
  ``Content-Type: application/json`` ``{"shm": "/dev/shm/webgym-weights-<name>.safetensors",
  "version": N}`` names a file in shared memory (a client on this machine): the server maps it and
  points the served model's tensors at it, no copy, then removes the name; or
  ``Content-Type: application/octet-stream`` with the file as the body (``?version=N``; a client
  on another machine): copied into the served model's own tensors. ``version`` as for /reload; the
  processor, config and ``root`` stay. Weights that are not safetensors or do not match are refused
  whole (HTTP 400 naming the first bad key, expected vs received) and the old weights keep
  serving, untouched. Weights whose header says they were made with another image processor (its
  ``__metadata__`` key ``webgym.image_processor``, which `push_weights` writes from the trainer's
  processor) are refused too, and so is a /reload of a checkpoint whose image processor differs
  from the serving one: the pixel bounds (`webgym_rl.pixels.ImageSettings`) must be the trainer's,
  or screenshots become other image tokens in training than in the rollout.
  `push_weights` is the client; it picks the form.
- ``GET /health``: liveness, the checkpoint, its version, the server's process id, and counters.
- ``GET /metrics``: the counters in the Prometheus text format (requests received, completions,
  reloads, weight pushes, the serving version, and the callers refused, by kind).

Generation runs in one worker thread (one request at a time, in arrival order), so the event loop
keeps accepting requests and answering ``/health`` while the model works. The checkpoint is loaded
with `webgym_rl.modeling` (image-only Qwen-VL processor, no torchvision). The command's flags
come from `PolicyServerSettings` (`webgym_core.settings`: one flag per field, its docstring as help).

Versions and in-flight generations. A generation job reads the current model and its version on the
worker thread when it starts, and the reply carries that version. /reload builds a second model
beside the first (two models in memory for a moment) and swaps one reference. /weights keeps one
model and checks the weights against it from the safetensors header alone (no tensor is built before
everything matches). An HTTP body (one buffer, preallocated from Content-Length) is then copied into
the served model's own tensors, read straight out of the buffer (views). A shared-memory file is
mapped (``MAP_SHARED``; its pages are faulted in while the header is checked, before the worker is
involved) and each tensor's ``.data`` is set to a view of its bytes: no copy; the old tensors are
freed on another thread, beside the next generation. A tied tensor's names all get the view of its
first name, so they stay one tensor. The views keep the mapping alive: it goes, and its memory with
it, when the next shared-memory push points the tensors elsewhere or a /reload drops the model. Once
the weights are in, the server removes the file's name, and the client removes it in any case, so
/dev/shm keeps nothing. Where views cannot stand in (a model not on the CPU, unaligned offsets,
tensors that overlap partially) the file is copied from like a body. The copy or the pointing is a
job on the same single generation worker, so it never overlaps a generation: the one running
finishes on the weights it started with, every later one runs on the new weights, and each reply's
``system_fingerprint`` names the weights that produced it (a version snapshotted when a request is
accepted would be wrong for a request queued before a push and run after it). /reload and /weights
are serialised with each other.

Shared (tied) tensors: ``state_dict()`` lists a tied tensor under each of its names, and the
server expects every name. ``safetensors.torch.save`` refuses tensors that share memory (and
builds the whole file in memory), so `push_weights` writes the safetensors format itself,
writing each tensor's bytes from the tensor: a tied tensor travels under each name; the server
copies both into the one shared tensor (a body) or points the shared tensor at the first copy (a
shared-memory file; the second stays mapped, unused, until the next push). Another client can
clone the shared tensors and use ``safetensors.torch.save``; the server reads any safetensors file.

Security: binds 127.0.0.1 by default; binding any other address requires ``--token`` and then every
endpoint but ``/health`` and ``/metrics`` needs ``Authorization: Bearer <token>`` (a /weights
request without it is refused before any file is looked at). Before that, every request passes the
caller check (`webgym_rollout.browser.callers`): a ``Host`` that is not one of the server's own
names (its bind address and port, on loopback also 127.0.0.1 / localhost / [::1], plus
``--server-names``) gets 421 (code ``misdirected``), and a request carrying a web page's
``Origin`` (unless in ``--allowed-origins``) or ``Sec-Fetch-Site: cross-site`` gets 403 (code
``foreign_origin``), so that no page, through DNS rebinding or straight to 127.0.0.1, drives it.
The server never fetches URLs: an image must be inline (``data:image/...;base64,...``). /weights
accepts only the two content types above, neither of which a web page can send to another origin
without a CORS preflight (which this server never grants), so a page in a browser cannot push
weights or name a file. The only files it maps are
`SHM_DIR` + ``/webgym-weights-<letters, digits, - or _>.safetensors``, compared as written (no
other directory, no ``..``, no relative path), opened without following a symbolic link, and
only a regular file of the server's own user with one link, no write permission for group or
others, and no larger than the weights allow; anything else is a 400 naming ``shm``, and the file
is neither read nor removed. A /weights body or file larger than the served model's weights (plus
16 MiB of header) is refused before it is read.

Errors (defined in `webgym_rl.errors`; HTTP 400 bodies use the OpenAI shape
``{"error": {"message", "type", "param", "code"}}``)::

    webgym_rl.errors.WebgymRLError, webgym_rollout.errors.PolicyError
     +-- PolicyServerError
          +-- BadChatRequest       the request is malformed: bad image data URL, unknown model name,
          |                        empty messages, n > 1, stream (HTTP 400; names the field)
          +-- ReloadFailed         /reload could not load the checkpoint (HTTP 400; old model kept)
          |    +-- WeightsRejected /weights: not safetensors, or a missing, unexpected, mis-shaped or
          |         |              mis-typed tensor, or a file the server does not read (HTTP 400;
          |         |              names the first bad key, or shm; old weights kept)
          |         +-- SharedMemoryUnavailable  the server sees no such file (it does not share
          |                        the client's /dev/shm), or the client cannot write one
          +-- PolicyUnauthorized   missing or wrong bearer token (HTTP 401)
          +-- WeightsPushFailed    `push_weights`: the server could not be reached, timed out or
                                   failed (HTTP 5xx); transient, the push may be retried

`push_weights` raises `WeightsRejected` (HTTP 400), `PolicyUnauthorized` (HTTP 401) or
`WeightsPushFailed` (anything else), each naming the URL and the server's message; in its
default ``auto`` mode it catches `SharedMemoryUnavailable` itself and sends an HTTP body instead.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import errno
import functools
import io
import json
import logging
import mmap
import os
import re
import socket
import stat
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import click
import httpx
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from webgym_core.errors import SettingsError
from webgym_core.settings import flat, load_settings, settings_options
from webgym_rl.errors import (
    BadChatRequest,
    PolicyServerError,
    PolicyUnauthorized,
    ReloadFailed,
    SharedMemoryUnavailable,
    WeightsPushFailed,
    WeightsRejected,
)
from webgym_rl.pixels import ImageSettings, differing_field, image_processor_config
from webgym_rollout.browser.callers import CallerCheck, CallerCheckMiddleware, Refusal
from webgym_rollout.browser.guard import is_loopback_host

__all__ = [
    "BadChatRequest",
    "PolicyServerError",
    "PolicyServerSettings",
    "PolicyUnauthorized",
    "ReloadFailed",
    "SHM_DIR",
    "SharedMemoryUnavailable",
    "SharedWeightsRequest",
    "WeightsPushFailed",
    "WeightsRejected",
    "WeightsResponse",
    "create_app",
    "push_weights",
    "version_fingerprint",
    "running_policy_server",
    "serve_policy_command",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PolicyServerSettings:
    """Settings of ``webgym-rl serve-policy``."""

    model: str = ""
    """Checkpoint to serve: a local folder or a Hub model id (Qwen2-VL, Qwen2.5-VL or Qwen3-VL)."""
    host: str = "127.0.0.1"
    """Address to bind. Anything but a loopback address requires --token."""
    port: int = 8500
    """TCP port to bind; 0 picks a free one."""
    token: str | None = field(default=None, metadata={"env": "WEBGYM_POLICY_TOKEN"})
    """Bearer token every endpoint but /health requires (clients send Authorization: Bearer
    <token>); none means no authentication."""
    served_model_name: str | None = None
    """Name clients pass as ``model`` (default: --model as given). Unchanged by /reload."""
    revision: str | None = None
    """Hub revision of --model (ignored for local folders)."""
    device: str = "cpu"
    """Torch device the model runs on."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights dtype; auto keeps the checkpoint's."""
    max_new_tokens: int = 512
    """Upper bound and default for a request's max_tokens."""
    images: ImageSettings = flat(ImageSettings)
    policy_version: int = 0
    """Version of --model (replies say ``system_fingerprint: v<N>``); /reload sets the next ones."""
    server_names: tuple[str, ...] = ()
    """More names clients reach the server by (the Host header): ``name`` (any port) or
    ``name:port``. Without them it answers only to its bind address and port (on loopback also
    127.0.0.1, localhost and [::1]; bound to 0.0.0.0 or ::, any IP address and localhost); any other
    Host gets 421, so that no web page reaches it through DNS rebinding."""
    allowed_origins: tuple[str, ...] = ()
    """Web origins (``https://dashboard.example``) whose pages may call the server; any other request
    carrying an Origin header (or Sec-Fetch-Site: cross-site / same-site) gets 403."""

    def caller_check(self) -> CallerCheck:
        """A new `CallerCheck` for these settings (its port is set once the server is bound)."""
        return CallerCheck(self.host, self.port, server_names=self.server_names,
                           allowed_origins=self.allowed_origins)

    def __post_init__(self) -> None:
        if self.policy_version < 0:
            raise ValueError(f"policy_version: must be >= 0, got {self.policy_version}")
        if not self.model:
            raise ValueError("model: a checkpoint folder or Hub model id is required")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port: must be in 0..65535, got {self.port}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: must be >= 1, got {self.max_new_tokens}")
        self.caller_check()  # a ValueError naming server_names / allowed_origins

    @property
    def name(self) -> str:
        """The model name served on /v1/models."""
        return self.served_model_name or self.model


# --------------------------------------------------------------------------------------------
# HTTP models (the subset of the OpenAI chat-completions API that we implement)


class ImageURL(BaseModel):
    url: str
    detail: str | None = None


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ImagePart(BaseModel):
    type: Literal["image_url"]
    image_url: ImageURL


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None


class ChatCompletionRequest(BaseModel):
    # OpenAI clients send fields we do not implement (user, penalties, ...): ignore, do not fail.
    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[ChatMessage]
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=-2**63, le=2**64 - 1)  # what torch.manual_seed takes
    n: int = 1
    stop: str | list[str] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stream: bool = False
    top_k: int | None = Field(None, ge=-1)
    """vLLM's field: sample among the k most likely tokens (0, -1 or None: no limit)."""
    return_token_ids: bool = False
    """vLLM's field: return the sampled token ids (``choices[0].token_ids``) and the prompt's
    (``prompt_token_ids``)."""


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob]


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop", "length"]
    logprobs: ChoiceLogprobs | None = None
    token_ids: list[int] | None = None
    """With ``return_token_ids``: the sampled token ids, one per ``logprobs`` entry."""


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str
    """``v<N>``: the version of the weights that produced this reply (`version_fingerprint`)."""
    choices: list[Choice]
    usage: Usage
    prompt_token_ids: list[int] | None = None
    """With ``return_token_ids``: the prompt's token ids as the model saw them (image tokens included)."""


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "webgym"
    root: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ReloadRequest(BaseModel):
    model: str
    revision: str | None = None
    version: int | None = Field(None, ge=0)
    """The version of the new weights (default: the serving version + 1)."""


class ReloadResponse(BaseModel):
    model: str
    checkpoint: str
    previous_checkpoint: str
    version: int
    previous_version: int
    load_s: float


class SharedWeightsRequest(BaseModel):
    """``POST /weights`` with ``Content-Type: application/json``: the weights are in a file in
    shared memory, ``/dev/shm/webgym-weights-<name>.safetensors`` (see `push_weights`)."""

    model_config = ConfigDict(extra="forbid")

    shm: str
    """The file: `SHM_DIR` + ``/webgym-weights-<letters, digits, - or _>.safetensors``, a regular
    file (not a link) of the server's user, mode 0600, holding a safetensors file."""
    version: int | None = Field(None, ge=0)
    """The version of the new weights (default: the serving version + 1)."""


class WeightsResponse(BaseModel):
    model: str
    checkpoint: str
    """The checkpoint the processor and config come from (a push replaces only the weights)."""
    version: int
    previous_version: int
    transport: Literal["http", "shm"] = "http"
    """How the weights came: an HTTP body (copied in) or a shared-memory file (mapped in)."""
    received_bytes: int
    """Size of the safetensors body or file."""
    tensors: int
    """Tensors taken in (every key of the served model's ``state_dict()``)."""
    check_s: float = 0.0
    """Time spent opening and mapping a shared-memory file and checking the header."""
    queued_s: float
    """Time the swap waited for the generation running when the weights arrived."""
    swap_s: float = 0.0
    """Time on the generation worker putting the weights in (copy, or pointing at the mapping)."""
    load_s: float
    """check_s + swap_s: time spent taking the weights in, waiting excluded."""
    client_write_s: float | None = None
    """Set by `push_weights`, not by the server: seconds the client spent writing the
    shared-memory file (None for an HTTP body)."""


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"
    model: str
    checkpoint: str
    version: int
    pid: int
    """The server's process id (a reload keeps it: the weights are swapped, the process stays)."""
    requests_served: int
    reloads: int
    weight_pushes: int = 0
    """Weights accepted on /weights (refused pushes are not counted)."""


def version_fingerprint(version: int) -> str:
    """The ``system_fingerprint`` of replies produced by weights of `version` (``v3``)."""
    return f"v{version}"


# --------------------------------------------------------------------------------------------
# Model side


@dataclass
class _Policy:
    """One loaded checkpoint: model + processor, swapped as a unit by /reload. /weights changes the
    model's tensors in place (shapes and dtypes stay) and `version`, on the generation worker."""

    checkpoint: str
    model: Any
    processor: Any
    version: int = 0
    loaded_at: int = field(default_factory=lambda: int(time.time()))

    @functools.cached_property
    def placeholders(self) -> list[int]:
        """The vision placeholder ids replies never get (`webgym_rl.modeling.placeholder_token_ids`)."""
        from webgym_rl.modeling import placeholder_token_ids

        return placeholder_token_ids(self.processor.tokenizer)

    @functools.cached_property
    def weights_spec(self) -> dict[str, tuple[str, tuple[int, ...], int]]:
        """``state_dict()`` key -> (safetensors dtype name, shape, bytes), in the model's order."""
        return {key: (_safetensors_dtype_name(tensor.dtype), tuple(tensor.shape),
                      tensor.numel() * tensor.element_size())
                for key, tensor in self.model.state_dict().items()}

    @functools.cached_property
    def weights_bytes(self) -> int:
        """Bytes of the weights in a safetensors body (header excluded)."""
        return sum(size for _, _, size in self.weights_spec.values())


# safetensors dtype names <-> torch dtype attribute names (the formats' own spellings).
_SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
    "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}
_WEIGHTS_HEADER_ALLOWANCE = 16 * 2**20
"""Bytes a /weights body may hold beyond the served weights: the safetensors header."""
SHM_DIR = "/dev/shm"
"""Where shared-memory weights files lie; the server reads no other directory."""
_SHM_NAME = re.compile(r"webgym-weights-[A-Za-z0-9_-]{1,128}\.safetensors")
"""The only file names the server maps (`SHM_DIR` + ``/`` + this, nothing else)."""


def _safetensors_dtype_name(dtype: Any) -> str:
    name = str(dtype).removeprefix("torch.")
    return next((key for key, value in _SAFETENSORS_DTYPES.items() if value == name), name)


def _describe(dtype: str, shape: tuple[int, ...]) -> str:
    return f"{dtype} {list(shape)}"


@dataclass(frozen=True)
class _TensorSlot:
    """Where one tensor of a /weights body lies: dtype name, shape, absolute byte range."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int


def _read_safetensors_header(body: bytes | bytearray | mmap.mmap,
                             what: str = "the body") -> tuple[dict[str, _TensorSlot], dict[str, Any]]:
    """Parse a safetensors file's header (8-byte little-endian length, then JSON) without building
    any tensor: (its tensor slots, its ``__metadata__``); raises `WeightsRejected` for anything that
    is not a well-formed safetensors file."""
    def refuse(why: str, key: str | None = None) -> WeightsRejected:
        return WeightsRejected(f"{what} is not a safetensors file ({len(body)} bytes): {why}; send a "
                               "safetensors file of the model's state_dict() (push_weights writes one)",
                               param=key)

    if len(body) < 8:
        raise refuse("shorter than the 8-byte header length")
    size = int.from_bytes(body[:8], "little")
    if size > len(body) - 8:
        raise refuse(f"its header length {size} runs past the end")
    try:
        header = json.loads(bytes(memoryview(body)[8:8 + size]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise refuse(f"its header is not JSON ({exc})") from None
    except RecursionError:  # e.g. "[[[[...": JSON nested past the parser's depth
        raise refuse("its header is JSON nested too deep to be a safetensors header") from None
    if not isinstance(header, dict):
        raise refuse("its header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if not isinstance(metadata, dict):
        metadata = {}
    base, data_size = 8 + size, len(body) - 8 - size
    slots = {}
    for key, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
            numbers = (*shape, begin, end)
            if not (isinstance(dtype, str) and all(isinstance(n, int) and n >= 0 for n in numbers)):
                raise TypeError
        except (KeyError, TypeError, ValueError):
            raise refuse(f"malformed header entry for {key!r}: {info!r}"[:300], key) from None
        if not begin <= end <= data_size:
            raise refuse(f"{key!r}: data_offsets [{begin}, {end}] outside the {data_size} data bytes", key)
        slots[key] = _TensorSlot(dtype=dtype, shape=shape, start=base + begin, end=base + end)
    return slots, metadata


IMAGE_PROCESSOR_METADATA = "webgym.image_processor"
"""The safetensors ``__metadata__`` key of a push's image processor settings
(`webgym_rl.pixels.image_processor_config` as JSON): the server refuses weights made for other ones."""


def _image_processor_problem(processor: Any, metadata: Mapping[str, Any]) -> str | None:
    """Why weights whose header carries `metadata` do not fit the served `processor`: its image
    processor settings differ (named); None when they agree or the push did not say."""
    sent = metadata.get(IMAGE_PROCESSOR_METADATA)
    if sent is None:
        return None
    try:
        theirs = json.loads(sent)
        if not isinstance(theirs, dict):
            raise ValueError("not an object")
    except (TypeError, ValueError, RecursionError) as exc:
        return f"its {IMAGE_PROCESSOR_METADATA} metadata is not a JSON object ({exc})"
    differs = differing_field(image_processor_config(processor), theirs)
    if differs is None:
        return None
    return (f"they were made with another image processor ({differs}, served vs pushed): screenshots would "
            "become other image tokens than the trainer's; give the trainer and the server the same "
            "--min-pixels / --max-pixels")


def _check_weights(body: bytes | bytearray | mmap.mmap, policy: _Policy,
                   what: str = "the body") -> dict[str, _TensorSlot]:
    """The body's tensor slots, checked against `policy`'s ``state_dict()``: every key present, no
    other key, same dtype and shape, the right number of bytes. Raises `WeightsRejected` naming the
    first bad key (in the model's order; unexpected keys after) and how many are bad in all."""
    refused = f"weights refused, still serving v{policy.version}"
    try:
        slots, metadata = _read_safetensors_header(body, what)
    except WeightsRejected as exc:
        raise WeightsRejected(f"{refused}: {exc}", param=exc.param) from None
    problem = _image_processor_problem(policy.processor, metadata)
    if problem:
        raise WeightsRejected(f"{refused}: {problem}", param=IMAGE_PROCESSOR_METADATA)
    spec = policy.weights_spec
    problems: list[tuple[str, str]] = []
    for key, (dtype, shape, size) in spec.items():
        slot = slots.get(key)
        if slot is None:
            problems.append((key, f"missing key {key!r} (expected {_describe(dtype, shape)})"))
        elif (slot.dtype, slot.shape) != (dtype, shape):
            problems.append((key, f"{key!r}: expected {_describe(dtype, shape)}, received "
                                  f"{_describe(slot.dtype, slot.shape)}"))
        elif slot.end - slot.start != size:
            problems.append((key, f"{key!r}: its data_offsets hold {slot.end - slot.start} bytes, "
                                  f"{_describe(dtype, shape)} needs {size}"))
    problems += [(key, f"unexpected key {key!r} ({_describe(slot.dtype, slot.shape)}): the served model has "
                       "no such tensor") for key, slot in slots.items() if key not in spec]
    if problems:
        key, first = problems[0]
        more = f" ({len(problems)} bad keys in all)" if len(problems) > 1 else ""
        raise WeightsRejected(f"{refused}: {first}{more}; {what} must hold exactly the served model's "
                              f"state_dict() ({len(spec)} tensors)", param=key)
    return slots


def _copy_weights(policy: _Policy, body: bytearray | mmap.mmap, slots: dict[str, _TensorSlot],
                  version: int) -> tuple[float, float]:
    """Copy checked weights into `policy`'s tensors in place and set its version. Runs on the
    generation worker, so no generation sees half of it. Returns (start, end) perf_counter times."""
    import torch

    started = time.perf_counter()
    with torch.no_grad():
        for key, target in policy.model.state_dict().items():
            if target.numel() == 0:
                continue
            slot = slots[key]  # views into the request buffer: no second copy of the weights
            source = torch.frombuffer(body, dtype=target.dtype, count=target.numel(), offset=slot.start)
            target.copy_(source.view(target.shape))
    policy.version = version
    policy.loaded_at = int(time.time())
    return started, time.perf_counter()


def _view_groups(targets: Mapping[str, Any], slots: dict[str, _TensorSlot]) -> list[list[str]] | None:
    """The served ``state_dict()`` keys grouped by the tensor they name (a tied tensor is one group
    of several keys), in the model's order; None where views of the file cannot stand in for the
    tensors: one not on the CPU, a slot not aligned to its element size, or tensors that overlap
    without being the same tensor (a view could not keep that aliasing)."""
    groups: dict[int, list[str]] = {}
    layouts: dict[int, tuple] = {}
    for key, tensor in targets.items():
        if tensor.device.type != "cpu" or slots[key].start % tensor.element_size():
            return None
        if tensor.numel() == 0:
            continue
        storage = tensor.untyped_storage().data_ptr()
        layout = (tensor.storage_offset(), tuple(tensor.shape), tensor.stride(), tensor.dtype)
        if layouts.setdefault(storage, layout) != layout:
            return None
        groups.setdefault(storage, []).append(key)
    return list(groups.values())


def _point_weights(policy: _Policy, mapping: mmap.mmap, slots: dict[str, _TensorSlot], version: int,
                   *, retired: list) -> tuple[float, float]:
    """Point `policy`'s tensors at views of `mapping` (a checked shared-memory file: no copy) and set
    its version; on the generation worker, like `_copy_weights`, which it falls back to where views
    cannot stand in (`_view_groups`). A tied tensor's names all get the view of its first name, so
    they stay one tensor. The views keep the mapping alive; it is unmapped (and the file's memory
    freed) when the last of them goes: when the next shared-memory push points the tensors elsewhere
    or a /reload drops this model (an HTTP push copies into them, in the mapping). The tensors the
    model held before go to `retired`, for the caller to free off the worker (unmapping and freeing
    a previous push's file takes ~20 ms for 400 MB)."""
    import torch

    targets = policy.model.state_dict(keep_vars=True)  # the Parameters themselves, not detached copies
    groups = _view_groups(targets, slots)
    if groups is None:
        return _copy_weights(policy, mapping, slots, version)
    started = time.perf_counter()
    with torch.no_grad():
        for keys in groups:
            first = targets[keys[0]]
            view = torch.frombuffer(mapping, dtype=first.dtype, count=first.numel(),
                                    offset=slots[keys[0]].start).view(first.shape)
            for tensor in {id(targets[key]): targets[key] for key in keys}.values():
                retired.append(tensor.data)
                tensor.data = view
    policy.version = version
    policy.loaded_at = int(time.time())
    return started, time.perf_counter()


def _map_shared_weights(path: str, limit: int) -> tuple[mmap.mmap, tuple[int, int]]:
    """Open and map the shared-memory weights file `path` (pages faulted in now, not during the
    next generation); returns the mapping and the file's (device, inode). Refuses with
    `WeightsRejected` (param ``shm``) a path other than `SHM_DIR`/webgym-weights-<name>.safetensors,
    a symbolic link, anything but a regular file of the server's user with one link and no write
    permission for others, and a file larger than `limit`; a missing file is
    `SharedMemoryUnavailable`. The file descriptor is closed before returning."""
    def refuse(why: str) -> WeightsRejected:
        return WeightsRejected(f"weights refused: shm {path!r} {why}", param="shm")

    directory, name = os.path.split(path)
    if directory != SHM_DIR or not _SHM_NAME.fullmatch(name):
        raise refuse(f"is not a file this server reads: it must be {SHM_DIR}/webgym-weights-<letters, "
                     "digits, - or _>.safetensors (push_weights writes one)")
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise SharedMemoryUnavailable(
            f"weights refused: shm {path!r} does not exist for the server; a server that does not share "
            f"the client's {SHM_DIR} (another machine or container) takes the weights as an HTTP body",
            param="shm") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refuse("is a symbolic link; write the weights into the file itself") from None
        raise refuse(f"cannot be opened: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise refuse("is not a regular file")
        if info.st_uid != os.geteuid():
            raise refuse(f"belongs to uid {info.st_uid}, not to the server's user ({os.geteuid()})")
        if info.st_nlink != 1:
            raise refuse(f"has {info.st_nlink} hard links; it must have one")
        if info.st_mode & 0o022:
            raise refuse(f"is writable by others (mode {stat.S_IMODE(info.st_mode):o}); create it with "
                         "mode 600")
        if not 8 <= info.st_size <= limit:
            raise refuse(f"holds {info.st_size} bytes; a safetensors file of the served model's weights "
                         f"holds 8 to {limit}")
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        return mmap.mmap(fd, info.st_size, flags=flags), (info.st_dev, info.st_ino)
    finally:
        os.close(fd)


def _unlink_if_same(path: str, identity: tuple[int, int]) -> None:
    """Remove `path` if it still names the file (device, inode) `identity`: the server has taken
    the weights (its mapping keeps the bytes), so the name is no longer needed."""
    with contextlib.suppress(FileNotFoundError):
        info = os.stat(path, follow_symlinks=False)
        if (info.st_dev, info.st_ino) == identity:
            os.unlink(path)


@dataclass
class _Generation:
    text: str
    finish_reason: Literal["stop", "length"]
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[TokenLogprob] | None


def _load_policy(settings: PolicyServerSettings, checkpoint: str, revision: str | None,
                 version: int) -> _Policy:
    import torch

    from webgym_rl.modeling import load_model, load_processor

    dtype = None if settings.dtype == "auto" else getattr(torch, settings.dtype)
    processor = load_processor(checkpoint, revision=revision, min_pixels=settings.images.min_pixels,
                               max_pixels=settings.images.max_pixels)
    model = load_model(checkpoint, revision=revision, dtype=dtype).to(settings.device)
    model.generation_config = _plain_generation_config(model.generation_config)
    logger.info("loaded %s on %s", checkpoint, settings.device)
    return _Policy(checkpoint=checkpoint, model=model, processor=processor, version=version)


def _plain_generation_config(found: Any) -> Any:
    """A generation config holding only the checkpoint's special token ids: transformers fills what a
    request's config leaves unset from the model's generation config (a checkpoint's top_k, top_p,
    repetition penalty or suppressed tokens would change the distribution sampled from)."""
    from transformers import GenerationConfig

    return GenerationConfig(**{name: getattr(found, name, None) for name in _SPECIAL_TOKEN_FIELDS})


_SPECIAL_TOKEN_FIELDS = ("eos_token_id", "pad_token_id", "bos_token_id")


def _decode_image_url(url: str, where: str):
    from PIL import Image, UnidentifiedImageError

    if not url.startswith("data:"):
        scheme = url.split(":", 1)[0] if ":" in url else "a bare path"
        raise BadChatRequest(f"{where}: only inline base64 data URLs (data:image/png;base64,...) are "
                             f"accepted, not {scheme} URLs: {url[:60]!r}", param=where)
    header, sep, payload = url.partition(",")
    if not sep or not header.endswith(";base64") or not header[5:].startswith("image/"):
        raise BadChatRequest(f"{where}: malformed image data URL; expected data:image/<type>;base64,<data>, "
                             f"got {url[:40]!r}...", param=where)
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadChatRequest(f"{where}: the image data URL is not valid base64 ({exc})",
                             param=where) from None
    try:
        image = Image.open(io.BytesIO(raw))
        image.load()
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise BadChatRequest(f"{where}: the image data URL does not hold a readable image ({exc})",
                             param=where) from None
    return image.convert("RGB")


def _prepare(request: ChatCompletionRequest) -> tuple[list[dict], list]:
    """OpenAI messages -> processor chat messages (image parts as {"type": "image"}) + PIL images."""
    if not request.messages:
        raise BadChatRequest("messages must not be empty", param="messages")
    messages, images = [], []
    for i, message in enumerate(request.messages):
        if message.content is None or isinstance(message.content, str):
            messages.append({"role": message.role, "content": message.content or ""})
            continue
        parts = []
        for j, part in enumerate(message.content):
            if isinstance(part, TextPart):
                parts.append({"type": "text", "text": part.text})
            else:
                images.append(_decode_image_url(part.image_url.url, f"messages[{i}].content[{j}].image_url"))
                parts.append({"type": "image"})
        messages.append({"role": message.role, "content": parts})
    return messages, images


@functools.cache
def _byte_decoder() -> dict[str, int]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {char: byte for byte, char in bytes_to_unicode().items()}


class _TokenText:
    """Token id -> (text, exact bytes). Byte-level BPE pieces can hold half a UTF-8 character, so the
    bytes come from the piece itself, not from its (lossy) decoded text."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._added = set(tokenizer.get_added_vocab())

    def entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        text = self._tokenizer.decode([token_id])
        piece = self._tokenizer.convert_ids_to_tokens(token_id)
        if piece is None:  # an id past the tokenizer's vocabulary (the model's rows are padded)
            return {"token": "", "logprob": logprob, "bytes": []}
        decoder = _byte_decoder()
        if piece not in self._added and all(char in decoder for char in piece):
            raw = bytes(decoder[char] for char in piece)
        else:
            raw = text.encode("utf-8")
        return {"token": text, "logprob": logprob, "bytes": list(raw)}


_GREEDY_BELOW = 1e-5
"""A temperature below this samples greedily (as vLLM does): dividing the logits by 1e-167 makes
them infinite, and sampling from that fails."""


def _sampling_config(request: ChatCompletionRequest, max_new_tokens: int, model_config: Any,
                     placeholders: list[int], *, scores: bool) -> Any:
    """The generation config of `request`: every setting that shapes the distribution set here,
    explicitly (transformers would fill the unset ones from its defaults: top_k 50). The vision
    placeholder tokens are never sampled (`webgym_rl.modeling.VISION_PLACEHOLDERS`)."""
    from transformers import GenerationConfig

    greedy = request.temperature < _GREEDY_BELOW
    top_k = request.top_k if request.top_k is not None and request.top_k > 0 else 0
    return GenerationConfig(
        **{name: getattr(model_config, name, None) for name in _SPECIAL_TOKEN_FIELDS},
        max_new_tokens=max_new_tokens, do_sample=not greedy,
        temperature=1.0 if greedy else request.temperature, top_p=1.0 if greedy else request.top_p,
        top_k=0 if greedy else top_k, min_p=None, typical_p=1.0, epsilon_cutoff=0.0, eta_cutoff=0.0,
        repetition_penalty=1.0, no_repeat_ngram_size=0, min_length=0, suppress_tokens=placeholders or None,
        return_dict_in_generate=True, output_scores=scores)


def _generate(policy: _Policy, request: ChatCompletionRequest, messages: list[dict], images: list,
              max_new_tokens: int, device: str) -> _Generation:
    import torch
    from jinja2 import TemplateError

    processor, model = policy.processor, policy.model
    tokenizer = processor.tokenizer
    try:
        prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        inputs = processor(text=[prompt], images=images or None, return_tensors="pt").to(device)
    except (ValueError, TemplateError) as exc:  # e.g. an image 3000 x 1: aspect ratio over 200
        raise BadChatRequest(f"messages: the model's processor cannot take them: {exc}",
                             param="messages") from None
    prompt_ids = inputs["input_ids"][0].tolist()
    want_logprobs = bool(request.logprobs or request.top_logprobs)
    config = _sampling_config(request, max_new_tokens, model.generation_config, policy.placeholders,
                              scores=want_logprobs)
    stops = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    if stops:
        config.stop_strings = stops
    if request.seed is not None:
        torch.manual_seed(request.seed)  # safe: generation is serialised on one worker thread
    with torch.inference_mode():
        out = model.generate(**inputs, generation_config=config, tokenizer=tokenizer if stops else None)
    new_ids = out.sequences[0, len(prompt_ids):].tolist()
    eos = config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    pad = config.pad_token_id
    # Batch of one: nothing is padded unless generation ended early; drop any trailing pad anyway.
    while new_ids and pad is not None and new_ids[-1] == pad and pad not in eos_ids:
        new_ids.pop()
    text = tokenizer.decode(new_ids, skip_special_tokens=True)
    finish: Literal["stop", "length"] = "length"
    if new_ids and new_ids[-1] in eos_ids:
        finish = "stop"
    for stop in stops:
        cut = text.find(stop)
        if cut >= 0:
            text, finish = text[:cut], "stop"
    logprobs = None
    if want_logprobs:
        # The distribution each token was drawn from: the processed scores (placeholders suppressed,
        # temperature, top-k, top-p applied; -inf outside the cut); greedy: the model's at temperature 1.
        rows = out.scores
        logprobs = []
        token_text = _TokenText(tokenizer)
        k = request.top_logprobs or 0
        for step, token_id in enumerate(new_ids):
            row = torch.log_softmax(rows[step][0].float(), dim=-1)
            top = torch.topk(row, k) if k else None
            alternatives = [] if top is None else [
                TopLogprob(**token_text.entry(int(i), float(v)))
                for v, i in zip(top.values, top.indices, strict=True)]
            logprobs.append(TokenLogprob(**token_text.entry(token_id, float(row[token_id])),
                                         top_logprobs=alternatives))
    return _Generation(text=text, finish_reason=finish, prompt_ids=prompt_ids, token_ids=new_ids,
                       logprobs=logprobs)


class _PolicyService:
    """Owns the current checkpoint, the generation worker and the counters."""

    def __init__(self, settings: PolicyServerSettings):
        self.settings = settings
        self.policy = _load_policy(settings, settings.model, settings.revision, settings.policy_version)
        # One worker: generation is serialised, and the event loop never runs model code.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy-generate")
        self._reload_lock = asyncio.Lock()
        self.requests_served = 0
        self.reloads = 0
        self.weight_pushes = 0

    def _generate_now(self, request: ChatCompletionRequest, messages: list[dict], images: list,
                      max_new_tokens: int) -> tuple[int, _Generation]:
        """On the worker: the model and version serving now (a /weights copy runs on this thread
        too, so neither changes until this returns), and the generation with them."""
        policy = self.policy
        version = policy.version
        return version, _generate(policy, request, messages, images, max_new_tokens, self.settings.device)

    def max_weights_bytes(self) -> int:
        """The largest /weights body accepted: the served weights plus room for the header."""
        return self.policy.weights_bytes + _WEIGHTS_HEADER_ALLOWANCE

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
        messages, images = await asyncio.to_thread(_prepare, request)
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
        from webgym_rl.modeling import ModelingError

        async with self._reload_lock:
            previous, previous_version = self.policy.checkpoint, self.policy.version
            version = previous_version + 1 if request.version is None else request.version
            started = time.perf_counter()
            try:
                policy = await asyncio.to_thread(_load_policy, self.settings, request.model, request.revision,
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
            # One reference swap: a generation already running holds the old `_Policy` to its end;
            # each later one reads the new one (and its version) when it starts on the worker.
            self.policy = policy
            self.reloads += 1
            logger.info("reloaded: %s (v%d) -> %s (v%d)", previous, previous_version, request.model, version)
            return ReloadResponse(model=self.settings.name, checkpoint=request.model,
                                  previous_checkpoint=previous, version=version,
                                  previous_version=previous_version, load_s=time.perf_counter() - started)

    async def push(self, body: bytearray, version: int | None) -> WeightsResponse:
        """Check `body` (safetensors) against the served model, then copy it in on the worker."""
        return await self._take(body, version, "http", _copy_weights, "the body")

    async def push_shared(self, path: str, version: int | None) -> WeightsResponse:
        """Map the shared-memory file `path`, check it against the served model, then point the
        model's tensors at it on the worker; the file's name is removed once the weights are in."""
        started = time.perf_counter()
        mapping, identity = await asyncio.to_thread(_map_shared_weights, path, self.max_weights_bytes())
        retired: list = []
        point = functools.partial(_point_weights, retired=retired)
        try:
            response = await self._take(mapping, version, "shm", point, f"shm {path!r}",
                                        time.perf_counter() - started)
        except WeightsRejected:
            with contextlib.suppress(BufferError):
                mapping.close()  # refused before any tensor pointed into it
            raise
        _unlink_if_same(path, identity)
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
            slots = await asyncio.to_thread(_check_weights, source, policy, what)
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


async def _read_weights_body(request: Request, limit: int) -> bytearray:
    """The request body in one buffer (preallocated from Content-Length: the weights are held once);
    refused before reading when it is larger than `limit`."""
    def too_large(size: int | str) -> WeightsRejected:
        return WeightsRejected(f"the body ({size} bytes) is larger than the served model's weights allow "
                               f"({limit} bytes at most); send exactly its state_dict()")

    declared = request.headers.get("content-length", "")
    if declared.isdigit():
        size = int(declared)
        if size > limit:
            raise too_large(size)
        body, filled = bytearray(size), 0
        async for chunk in request.stream():
            if filled + len(chunk) > size:
                raise WeightsRejected(f"the body is longer than its Content-Length ({size} bytes)")
            body[filled:filled + len(chunk)] = chunk
            filled += len(chunk)
        if filled != size:
            raise WeightsRejected(f"the body ended after {filled} of its {size} bytes (Content-Length)")
        return body
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large(f"more than {len(body)}")
    return body


async def _read_shared_request(request: Request) -> SharedWeightsRequest:
    """The JSON body of a shared-memory push (64 KiB at most), validated."""
    from pydantic import ValidationError

    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > 2**16:
            raise WeightsRejected("a JSON /weights body names a file ({\"shm\": path}); this one is "
                                  "over 64 KiB")
    try:
        return SharedWeightsRequest.model_validate_json(bytes(body))
    except ValidationError as exc:
        errors = exc.errors()
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in errors)
        first = errors[0]["loc"] if errors else ()
        raise WeightsRejected(f"invalid shared-memory weights request: {problems}",
                              param=str(first[0]) if first else None) from None


def _error_body(message: str, param: str | None, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": kind}}


def _refused(refusal: Refusal) -> JSONResponse:
    return JSONResponse(_error_body(refusal.message, None, refusal.kind), status_code=refusal.status)


def _metrics_text(service: _PolicyService, callers: CallerCheck) -> str:
    """The policy server's ``/metrics`` (Prometheus text format)."""
    refused = {"misdirected": 0, "foreign_origin": 0, **callers.refused}
    series = [
        ("http_requests_total", "counter", "HTTP requests received (refused ones included).",
         [("", callers.checked)]),
        ("callers_refused_total", "counter",
         "Requests refused for their Host (misdirected) or Origin (foreign_origin).",
         [(f'{{kind="{kind}"}}', count) for kind, count in sorted(refused.items())]),
        ("completions_total", "counter", "Chat completions answered.", [("", service.requests_served)]),
        ("reloads_total", "counter", "Checkpoints swapped in by /reload.", [("", service.reloads)]),
        ("weight_pushes_total", "counter", "Weights accepted on /weights.", [("", service.weight_pushes)]),
        ("version", "gauge", "Version of the weights serving now.", [("", service.policy.version)]),
    ]
    lines = []
    for name, kind, help_text, samples in series:
        lines += [f"# HELP webgym_policy_{name} {help_text}", f"# TYPE webgym_policy_{name} {kind}"]
        lines += [f"webgym_policy_{name}{labels} {value}" for labels, value in samples]
    return "\n".join(lines) + "\n"


def create_app(settings: PolicyServerSettings):
    """The FastAPI app; loads the checkpoint now, so a bad `--model` fails before anything binds."""
    service = _PolicyService(settings)

    async def check_token(request: Request) -> None:
        if settings.token is None:
            return
        if request.headers.get("authorization", "") != f"Bearer {settings.token}":
            raise PolicyUnauthorized("missing or wrong bearer token (send Authorization: Bearer <token>)")

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        try:
            yield
        finally:
            service.close()

    app = FastAPI(title="webgym policy server", version="1", lifespan=lifespan)
    app.state.service = service
    callers = app.state.callers = settings.caller_check()
    app.add_middleware(CallerCheckMiddleware, check=callers, respond=_refused)

    @app.exception_handler(PolicyServerError)
    async def _policy_error(_: Request, exc: PolicyServerError) -> JSONResponse:
        return JSONResponse(_error_body(str(exc), getattr(exc, "param", None), exc.kind),
                            status_code=exc.status_code)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # Routing and body parsing (no such route, a body that is not JSON): the OpenAI shape too.
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_chat_request")
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return JSONResponse(_error_body(message, None, kind), status_code=exc.status_code,
                            headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}"
                             for e in exc.errors())
        return JSONResponse(_error_body(f"invalid request: {problems}", None, "bad_chat_request"),
                            status_code=400)

    @app.post("/v1/chat/completions", response_model=ChatCompletionResponse,
              dependencies=[Depends(check_token)])
    async def chat_completions(body: ChatCompletionRequest) -> ChatCompletionResponse:
        return await service.complete(body)

    @app.get("/v1/models", response_model=ModelList, dependencies=[Depends(check_token)])
    async def models() -> ModelList:
        return ModelList(data=[ModelCard(id=settings.name, created=service.policy.loaded_at,
                                         root=service.policy.checkpoint)])

    @app.post("/reload", response_model=ReloadResponse, dependencies=[Depends(check_token)])
    async def reload(body: ReloadRequest) -> ReloadResponse:
        return await service.reload(body)

    @app.post("/weights", response_model=WeightsResponse, dependencies=[Depends(check_token)])
    async def weights(request: Request,
                      version: Annotated[int | None, Query(ge=0)] = None) -> WeightsResponse:
        """Body: a safetensors file of the served model's state_dict() (application/octet-stream),
        or {"shm": "/dev/shm/webgym-weights-....safetensors", "version": N} (application/json)."""
        kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind == "application/json":
            shared = await _read_shared_request(request)
            if None not in (version, shared.version) and version != shared.version:
                raise WeightsRejected(f"version {version} in the URL and {shared.version} in the body "
                                      "disagree; give it once", param="version")
            return await service.push_shared(shared.shm, shared.version if version is None else version)
        if kind != "application/octet-stream":
            # Not a content type a web page may send without asking first (CORS preflight).
            raise WeightsRejected(f"Content-Type {kind or 'none'!r}: send application/octet-stream (a "
                                  "safetensors body) or application/json ({\"shm\": path})",
                                  param="content-type")
        body = await _read_weights_body(request, service.max_weights_bytes())
        return await service.push(body, version)

    @app.get("/health", response_model=HealthResponse)
    async def health() -> HealthResponse:
        policy = service.policy
        return HealthResponse(model=settings.name, checkpoint=policy.checkpoint, version=policy.version,
                              pid=os.getpid(), requests_served=service.requests_served,
                              reloads=service.reloads, weight_pushes=service.weight_pushes)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(_metrics_text(service, callers), media_type="text/plain; version=0.0.4")

    return app


# --------------------------------------------------------------------------------------------
# Client


_PUSH_CHUNK_BYTES = 4 * 2**20
"""Size of the pieces a push sends: httpcore re-slices (copies) the unsent rest of each piece after
every socket write, which is quadratic in a piece's size (one 400 MB piece took 10 s, not 0.5 s)."""


def _safetensors_layout(state_dict: Mapping[str, Any],
                        metadata: Mapping[str, str] | None = None) -> tuple[bytes, list[Any], int]:
    """(header, tensors in file order, file size) of `state_dict` as a safetensors file, laid out
    here rather than by ``safetensors.torch.save``: that one refuses tensors sharing memory (tied
    weights) and builds the whole file in memory; here each tensor's bytes are written straight from
    the tensor, and a tied tensor is written under each of its names. The tensors go by falling
    element size, as safetensors orders them, so each starts aligned (the header is padded to 8).
    `metadata` becomes the header's ``__metadata__`` (text to text)."""
    if sys.byteorder != "little":
        raise WeightsPushFailed("safetensors is little-endian; this machine is not")
    tensors = sorted(((key, tensor.detach()) for key, tensor in state_dict.items()),
                     key=lambda item: -item[1].element_size())
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for key, tensor in tensors:
        size = tensor.numel() * tensor.element_size()
        header[key] = {"dtype": _safetensors_dtype_name(tensor.dtype), "shape": list(tensor.shape),
                       "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return len(text).to_bytes(8, "little") + text, [tensor for _, tensor in tensors], 8 + len(text) + offset


def _tensor_bytes(tensor: Any) -> memoryview:
    """The bytes of `tensor` (a copy only for a non-contiguous or non-CPU one)."""
    import torch

    return memoryview(tensor.to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy())


def _safetensors_stream(state_dict: Mapping[str, Any], metadata: Mapping[str, str] | None = None
                        ) -> tuple[int, Iterator[bytes | memoryview]]:
    """(size, pieces) of `state_dict` as a safetensors file (`_safetensors_layout`), in pieces of
    at most `_PUSH_CHUNK_BYTES` for an HTTP body."""
    header, tensors, size = _safetensors_layout(state_dict, metadata)

    def pieces() -> Iterator[bytes | memoryview]:
        yield header
        for tensor in tensors:
            if tensor.numel() == 0:
                continue
            data = _tensor_bytes(tensor)
            for start in range(0, len(data), _PUSH_CHUNK_BYTES):
                yield data[start:start + _PUSH_CHUNK_BYTES]

    return size, pieces()


def _safetensors_bytes(state_dict: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
    """`state_dict` as the bytes of a safetensors file (what `push_weights` sends, in one piece)."""
    return b"".join(_safetensors_stream(state_dict, metadata)[1])


def _write_shared_file(path: str, state_dict: Mapping[str, Any],
                       metadata: Mapping[str, str] | None = None) -> int:
    """Write `state_dict` as a safetensors file at `path` (created here, mode 600; an existing file
    or link is refused); returns its size. Plain ``write`` calls: on tmpfs they cost half of
    filling a fresh mapping, which pays a page fault per 4 KiB page."""
    header, tensors, size = _safetensors_layout(state_dict, metadata)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        for data in (memoryview(header), *(_tensor_bytes(t) for t in tensors if t.numel())):
            while data:
                data = data[os.write(fd, data):]
    finally:
        os.close(fd)
    return size


def _server_error(response: httpx.Response) -> tuple[str, str | None, str | None]:
    """(message, param, code) of an error reply: the OpenAI error shape, or the start of the raw text."""
    try:
        error = response.json()["error"]
        return str(error["message"]), error.get("param"), error.get("code")
    except (ValueError, KeyError, TypeError):
        return response.text[:500] or f"HTTP {response.status_code}", None, None


def _weights_answer(url: str, response: httpx.Response) -> WeightsResponse:
    """The server's `WeightsResponse`, or the typed error its answer stands for."""
    if response.status_code == 200:
        return WeightsResponse.model_validate(response.json())
    message, param, code = _server_error(response)
    if response.status_code == 401:
        raise PolicyUnauthorized(f"{url} refused the weights: {message}")
    if response.status_code == 400 and code == SharedMemoryUnavailable.kind:
        raise SharedMemoryUnavailable(f"{url} refused the weights: {message}", param=param)
    if response.status_code == 400:
        raise WeightsRejected(f"{url} refused the weights: {message}", param=param)
    raise WeightsPushFailed(f"{url} answered HTTP {response.status_code} to the weights: {message}")


def _post(http: httpx.Client, url: str, what: str, **kwargs: Any) -> httpx.Response:
    try:
        return http.post(url, **kwargs)
    except httpx.TransportError as exc:
        raise WeightsPushFailed(f"pushing {what} to {url} failed: {type(exc).__name__}: {exc}") from exc


def _push_shared(http: httpx.Client, url: str, state_dict: Mapping[str, Any], version: int | None,
                 headers: dict[str, str], timeout: httpx.Timeout,
                 metadata: Mapping[str, str] | None = None) -> WeightsResponse:
    """Write `state_dict` into a new file in `SHM_DIR`, name it to the server, remove the file."""
    path = f"{SHM_DIR}/webgym-weights-{uuid.uuid4().hex}.safetensors"
    try:
        started = time.perf_counter()
        try:
            size = _write_shared_file(path, state_dict, metadata)
        except OSError as exc:
            raise SharedMemoryUnavailable(f"cannot write the weights to {path}: {exc}", param="shm") from exc
        written = time.perf_counter() - started
        response = _post(http, url, f"the weights in {path} ({size} bytes)", headers=headers, timeout=timeout,
                         json={"shm": path, "version": version})
        return _weights_answer(url, response).model_copy(update={"client_write_s": written})
    finally:
        with contextlib.suppress(FileNotFoundError):  # the server removes it once it has the weights
            os.unlink(path)


def _shares_memory_with(url: str) -> bool:
    """Whether the server at `url` can read this process's `SHM_DIR` files: it is on a loopback
    address and the directory is there (a loopback server in another container may still not see
    them; it answers `SharedMemoryUnavailable`)."""
    return is_loopback_host(httpx.URL(url).host) and os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK)


def push_weights(base_url: str, state_dict: Mapping[str, Any], *, version: int | None = None,
                 token: str | None = None, timeout_s: float = 300.0, client: httpx.Client | None = None,
                 transport: Literal["auto", "shm", "http"] = "auto",
                 image_processor: Mapping[str, Any] | None = None) -> WeightsResponse:
    """Send `state_dict` (a torch model's ``state_dict()``) to the policy server at `base_url`
    (``http://HOST:PORT``, with or without ``/v1``) as new weights of `version` (default: the
    serving version + 1), from memory, nothing on disk. Returns the server's `WeightsResponse` once
    every later generation runs on them. `client`: an ``httpx.Client`` to reuse across pushes (a
    new one costs ~20 ms); by default one for this call.

    `transport`: ``shm`` writes the weights into a new file ``SHM_DIR/webgym-weights-<uuid>.safetensors``
    (mode 600) and sends only its name; the server maps the file and serves from it (no copy on
    its side) and removes the name; this function removes the file in any case (refused, failed or
    interrupted), so nothing is left in /dev/shm. ``http`` streams the same safetensors bytes as the
    request body (for a server on another machine). ``auto`` (default): ``shm`` when the server is on
    a loopback address and `SHM_DIR` is writable, falling back to ``http`` when the shared-memory
    handover turns out not to work (`SharedMemoryUnavailable`: the server sees no such file, or
    /dev/shm is full); ``http`` otherwise. ``response.client_write_s`` is the time spent writing
    the file.

    The dtypes must be the served ones (cast first, e.g. to bfloat16, if the server runs
    ``--dtype bfloat16``). Tied tensors go out under each of their names, as ``state_dict()``
    lists them (``safetensors.torch.save`` would refuse them; this writer does not use it).
    `image_processor` (`webgym_rl.pixels.image_processor_config` of the trainer's processor) travels
    in the file's ``__metadata__``: a server whose image processor differs refuses the weights.
    Raises `WeightsRejected` (HTTP 400: the weights do not match; the old weights keep serving),
    `SharedMemoryUnavailable` (``transport="shm"`` only), `PolicyUnauthorized` (HTTP 401: pass the
    server's `token`) or `WeightsPushFailed` (no connection, timeout, HTTP 5xx; retry), each naming
    the URL and the server's message.
    """
    url = base_url.rstrip("/").removesuffix("/v1") + "/weights"
    headers = {"authorization": f"Bearer {token}"} if token else {}
    metadata = {IMAGE_PROCESSOR_METADATA: json.dumps(dict(image_processor))} if image_processor else None
    timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0))
    with contextlib.ExitStack() as stack:
        http = client or stack.enter_context(httpx.Client(trust_env=False))
        if transport == "shm" or (transport == "auto" and _shares_memory_with(url)):
            try:
                return _push_shared(http, url, state_dict, version, headers, timeout, metadata)
            except SharedMemoryUnavailable as exc:
                if transport == "shm":
                    raise
                logger.warning("shared-memory push to %s not possible, sending an HTTP body: %s", url, exc)
        size, pieces = _safetensors_stream(state_dict, metadata)
        response = _post(http, url, f"{size} bytes of weights", content=pieces,
                         params={} if version is None else {"version": version}, timeout=timeout,
                         headers={**headers, "content-type": "application/octet-stream",
                                  "content-length": str(size)})
        return _weights_answer(url, response)


def _check_bind(settings: PolicyServerSettings) -> None:
    """Refuse to expose the model beyond this machine without a token."""
    if not is_loopback_host(settings.host) and not settings.token:
        raise PolicyServerError(f"binding {settings.host} exposes the policy beyond this machine; "
                                "pass --token (clients then send Authorization: Bearer <token>)")


@contextlib.contextmanager
def running_policy_server(settings: PolicyServerSettings) -> Iterator[str]:
    """Run the server in a background thread; yields its base URL ``http://HOST:PORT/v1``.

    With ``settings.port == 0`` the socket is bound to a free port first, so there is no race.
    """
    import uvicorn

    _check_bind(settings)
    app = create_app(settings)
    sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, settings.port))
    port = sock.getsockname()[1]
    app.state.callers.port = port
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="policy-server",
                              daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise PolicyServerError(f"the policy server did not start on {settings.host}:{port}")
            time.sleep(0.01)
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        yield f"http://{host}:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@click.command("serve-policy", context_settings={"help_option_names": ["-h", "--help"]})
@settings_options(PolicyServerSettings)
def serve_policy_command(config: str | None, **flags: Any) -> None:
    """Serve a transformers Qwen-VL checkpoint as an OpenAI-compatible endpoint (CPU).

    Images in requests must be inline base64 data URLs; they are really fed to the model.
    POST /reload {"model": DIR} swaps in a new checkpoint without a restart; POST /weights
    (a safetensors file in /dev/shm or as the body, see push_weights) takes new weights from memory.

    \b
    Example:
      webgym-rl tiny-model out/tiny-qwen2vl
      webgym-rl serve-policy --model out/tiny-qwen2vl --port 8500
      curl -s http://127.0.0.1:8500/v1/models
      curl -s -X POST http://127.0.0.1:8500/reload -H 'content-type: application/json' \\
          -d '{"model": "out/checkpoints/iter-0001"}'
    """
    import uvicorn

    from webgym_rl.modeling import ModelingError

    try:
        settings = load_settings(PolicyServerSettings, config, flags)
        _check_bind(settings)
    except (SettingsError, PolicyServerError) as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        app = create_app(settings)
    except (ModelingError, OSError) as exc:
        raise click.ClickException(f"cannot load --model {settings.model!r}: {exc}") from exc
    click.echo(f"serving {settings.name} on http://{settings.host}:{settings.port}/v1", err=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning")
