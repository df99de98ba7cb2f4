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
  points the served model's tensors at it, no copy, then removes the name (with ``"keep": true``
  it leaves the name: the client writes the file again for a later push, never while it is
  served from); or
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

The package, one concept per module; each imports only modules listed above it (an import-linter
layers contract in pyproject.toml checks it)::

    settings.py    PolicyServerSettings: the flags of ``webgym-rl serve-policy``
    protocol.py    the wire: typed requests and replies (pydantic), version_fingerprint, SHM_DIR
    codec.py       the safetensors format, read from a header and written from tensors
    model.py       the served checkpoint (model + processor + version) and its loading
    weights.py     new weights from memory: checked, then copied in or pointed at (shared memory)
    generation.py  one request -> one sampled reply, its token ids and log-probabilities
    service.py     the checkpoint serving now, the one generation worker, /reload, the counters
    app.py         the FastAPI app (routes, errors, caller check, token) and running_policy_server
    client.py      push_weights
    cli.py         the ``serve-policy`` command

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

from webgym_rl.errors import (
    BadChatRequest,
    PolicyServerError,
    PolicyUnauthorized,
    ReloadFailed,
    SharedMemoryUnavailable,
    WeightsPushFailed,
    WeightsRejected,
)
from webgym_rl.policy_server.app import create_app, running_policy_server
from webgym_rl.policy_server.cli import serve_policy_command
from webgym_rl.policy_server.client import push_weights
from webgym_rl.policy_server.protocol import (
    IMAGE_PROCESSOR_METADATA,
    SHM_DIR,
    ChatCompletionRequest,
    ChatCompletionResponse,
    HealthResponse,
    ModelList,
    ReloadRequest,
    ReloadResponse,
    SharedWeightsRequest,
    WeightsResponse,
    version_fingerprint,
)
from webgym_rl.policy_server.settings import PolicyServerSettings

__all__ = [
    "IMAGE_PROCESSOR_METADATA",
    "SHM_DIR",
    "BadChatRequest",
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "HealthResponse",
    "ModelList",
    "PolicyServerError",
    "PolicyServerSettings",
    "PolicyUnauthorized",
    "ReloadFailed",
    "ReloadRequest",
    "ReloadResponse",
    "SharedMemoryUnavailable",
    "SharedWeightsRequest",
    "WeightsPushFailed",
    "WeightsRejected",
    "WeightsResponse",
    "create_app",
    "push_weights",
    "running_policy_server",
    "serve_policy_command",
    "version_fingerprint",
]
