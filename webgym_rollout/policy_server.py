"""A CPU policy server: a `transformers` Qwen-VL model behind an OpenAI-compatible HTTP API.

``webgym-rollout serve-policy --model DIR`` answers what the rollout runner's policy client sends
to vLLM in production, so tests, the demo and the CPU RL loop need no GPU:

- ``POST /v1/chat/completions``: chat messages whose ``image_url`` parts hold base64 data URLs.
  The images are decoded and really fed to the model through its processor (the stock
  ``transformers serve`` drops them without torchvision). Sampling: ``temperature`` (0 = greedy),
  ``top_p``, ``max_tokens``, ``seed``, ``stop``; ``n`` must be 1; ``logprobs`` / ``top_logprobs``
  return the raw model log-probabilities of the chosen tokens. ``usage`` counts the prompt tokens
  (image tokens included) and the generated tokens. Fields of the OpenAI API that we do not
  implement (penalties, tools, ...) are ignored; sampling settings a request does not set (top_k,
  repetition penalty) come from the checkpoint's generation_config, as in vLLM. ``max_tokens`` is
  capped at ``--max-new-tokens``.
- ``GET /v1/models``: the served model name, with the checkpoint it currently runs as ``root``.
- ``POST /reload {"model": DIR, "version": N}``: load another checkpoint and swap it in without a
  restart; the served model name stays the same. A request already handed to the model finishes on
  the old one; a failed load leaves the old model serving. ``version`` (an integer the trainer
  publishes; default: the previous one + 1) names the weights: every chat reply carries the version
  that produced it as ``system_fingerprint`` (``v<N>``; the first checkpoint is ``v0``, or
  ``--policy-version``), so a trajectory step knows which weights wrote it.
- ``GET /health``: liveness, the checkpoint, its version, the server's process id, and counters.

Generation runs in one worker thread (one request at a time, in arrival order), so the event loop
keeps accepting requests and answering ``/health`` while the model works. The checkpoint is loaded
with `webgym_rollout.modeling` (image-only Qwen-VL processor, no torchvision). The command's flags
come from `PolicyServerSettings` (`webgym_core.settings`: one flag per field, its docstring as help).

Security: binds 127.0.0.1 by default; binding any other address requires ``--token`` and then every
endpoint but ``/health`` needs ``Authorization: Bearer <token>``. The server never fetches URLs: an
image must be inline (``data:image/...;base64,...``).

Errors (HTTP 400 bodies use the OpenAI shape ``{"error": {"message", "type", "param", "code"}}``)::

    webgym_rollout.errors.PolicyError
     +-- PolicyServerError
          +-- BadChatRequest       the request is malformed: bad image data URL, unknown model name,
                                   empty messages, n > 1, stream (HTTP 400; names the field)
          +-- ReloadFailed         /reload could not load the checkpoint (HTTP 400; old model kept)
          +-- PolicyUnauthorized   missing or wrong bearer token (HTTP 401)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import functools
import io
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import click
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from webgym_core.errors import SettingsError
from webgym_core.settings import load_settings, settings_options
from webgym_rollout.browser.guard import is_loopback_host
from webgym_rollout.errors import PolicyError

__all__ = [
    "BadChatRequest",
    "PolicyServerError",
    "PolicyServerSettings",
    "PolicyUnauthorized",
    "ReloadFailed",
    "create_app",
    "version_fingerprint",
    "running_policy_server",
    "serve_policy_command",
]

logger = logging.getLogger(__name__)


class PolicyServerError(PolicyError):
    """Base of the policy server's errors."""

    kind = "policy_server_error"
    status_code = 500


class BadChatRequest(PolicyServerError):
    """A chat request the server cannot answer as sent; the message names the field."""

    kind = "bad_chat_request"
    status_code = 400

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class PolicyUnauthorized(PolicyServerError):
    """A request without the right bearer token (HTTP 401)."""

    kind = "unauthorized"
    status_code = 401


class ReloadFailed(PolicyServerError):
    """``/reload`` could not load the new checkpoint; the old one keeps serving."""

    kind = "reload_failed"
    status_code = 400


@dataclass(frozen=True)
class PolicyServerSettings:
    """Settings of ``webgym-rollout serve-policy``."""

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
    min_pixels: int | None = None
    """Smallest image area after resizing (default: the checkpoint's value)."""
    max_pixels: int | None = None
    """Largest image area after resizing (default: the checkpoint's value)."""
    policy_version: int = 0
    """Version of --model (replies say ``system_fingerprint: v<N>``); /reload sets the next ones."""

    def __post_init__(self) -> None:
        if self.policy_version < 0:
            raise ValueError(f"policy_version: must be >= 0, got {self.policy_version}")
        if not self.model:
            raise ValueError("model: a checkpoint folder or Hub model id is required")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port: must be in 0..65535, got {self.port}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: must be >= 1, got {self.max_new_tokens}")
        for name in ("min_pixels", "max_pixels"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name}: must be >= 1, got {value}")

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
    seed: int | None = None
    n: int = 1
    stop: str | list[str] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stream: bool = False


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


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"
    model: str
    checkpoint: str
    version: int
    pid: int
    """The server's process id (a reload keeps it: the weights are swapped, the process stays)."""
    requests_served: int
    reloads: int


def version_fingerprint(version: int) -> str:
    """The ``system_fingerprint`` of replies produced by weights of `version` (``v3``)."""
    return f"v{version}"


# --------------------------------------------------------------------------------------------
# Model side


@dataclass
class _Policy:
    """One loaded checkpoint: model + processor, swapped as a unit by /reload."""

    checkpoint: str
    model: Any
    processor: Any
    version: int = 0
    loaded_at: int = field(default_factory=lambda: int(time.time()))


@dataclass
class _Generation:
    text: str
    finish_reason: Literal["stop", "length"]
    prompt_tokens: int
    completion_tokens: int
    logprobs: list[TokenLogprob] | None


def _load_policy(settings: PolicyServerSettings, checkpoint: str, revision: str | None,
                 version: int) -> _Policy:
    import torch

    from webgym_rollout.modeling import load_model, load_processor

    dtype = None if settings.dtype == "auto" else getattr(torch, settings.dtype)
    processor = load_processor(checkpoint, revision=revision, min_pixels=settings.min_pixels,
                               max_pixels=settings.max_pixels)
    model = load_model(checkpoint, revision=revision, dtype=dtype).to(settings.device)
    logger.info("loaded %s on %s", checkpoint, settings.device)
    return _Policy(checkpoint=checkpoint, model=model, processor=processor, version=version)


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
    except (UnidentifiedImageError, OSError) as exc:
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
        decoder = _byte_decoder()
        if piece not in self._added and all(char in decoder for char in piece):
            raw = bytes(decoder[char] for char in piece)
        else:
            raw = text.encode("utf-8")
        return {"token": text, "logprob": logprob, "bytes": list(raw)}


def _generate(policy: _Policy, request: ChatCompletionRequest, messages: list[dict], images: list,
              max_new_tokens: int, device: str) -> _Generation:
    import torch

    processor, model = policy.processor, policy.model
    tokenizer = processor.tokenizer
    prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[prompt], images=images or None, return_tensors="pt").to(device)
    prompt_tokens = int(inputs["input_ids"].shape[1])

    config = model.generation_config.__class__.from_dict(model.generation_config.to_dict())
    config.max_new_tokens = max_new_tokens
    config.return_dict_in_generate = True
    if request.temperature == 0:
        config.do_sample, config.temperature, config.top_p, config.top_k = False, None, None, None
    else:
        config.do_sample, config.temperature, config.top_p = True, request.temperature, request.top_p
    stops = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    if stops:
        config.stop_strings = stops
    want_logprobs = request.logprobs or bool(request.top_logprobs)
    config.output_logits = want_logprobs
    if request.seed is not None:
        torch.manual_seed(request.seed)  # safe: generation is serialised on one worker thread
    with torch.inference_mode():
        out = model.generate(**inputs, generation_config=config, tokenizer=tokenizer if stops else None)
    new_ids = out.sequences[0, prompt_tokens:].tolist()
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
        logprobs = []
        token_text = _TokenText(tokenizer)
        k = request.top_logprobs or 0
        for step, token_id in enumerate(new_ids):
            row = torch.log_softmax(out.logits[step][0].float(), dim=-1)
            top = torch.topk(row, k) if k else None
            alternatives = [] if top is None else [
                TopLogprob(**token_text.entry(int(i), float(v)))
                for v, i in zip(top.values, top.indices, strict=True)]
            logprobs.append(TokenLogprob(**token_text.entry(token_id, float(row[token_id])),
                                         top_logprobs=alternatives))
    return _Generation(text=text, finish_reason=finish, prompt_tokens=prompt_tokens,
                       completion_tokens=len(new_ids), logprobs=logprobs)


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
        # Snapshot now: a request accepted before a /reload finishes on the model it was accepted by.
        policy = self.policy
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._worker, _generate, policy, request, messages, images,
                                            max_new, self.settings.device)
        self.requests_served += 1
        return ChatCompletionResponse(
            id=f"chatcmpl-{uuid.uuid4().hex}", created=int(time.time()), model=request.model,
            system_fingerprint=version_fingerprint(policy.version),
            choices=[Choice(message=AssistantMessage(content=result.text), finish_reason=result.finish_reason,
                            logprobs=ChoiceLogprobs(content=result.logprobs) if result.logprobs is not None
                            else None)],
            usage=Usage(prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
                        total_tokens=result.prompt_tokens + result.completion_tokens),
        )

    async def reload(self, request: ReloadRequest) -> ReloadResponse:
        from webgym_rollout.modeling import ModelingError

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
            # One reference swap: a generation already running holds the old `_Policy` to its end.
            self.policy = policy
            self.reloads += 1
            logger.info("reloaded: %s (v%d) -> %s (v%d)", previous, previous_version, request.model, version)
            return ReloadResponse(model=self.settings.name, checkpoint=request.model,
                                  previous_checkpoint=previous, version=version,
                                  previous_version=previous_version, load_s=time.perf_counter() - started)

    def close(self) -> None:
        self._worker.shutdown(wait=True)


def _error_body(message: str, param: str | None, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": kind}}


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

    @app.exception_handler(PolicyServerError)
    async def _policy_error(_: Request, exc: PolicyServerError) -> JSONResponse:
        return JSONResponse(_error_body(str(exc), getattr(exc, "param", None), exc.kind),
                            status_code=exc.status_code)

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

    @app.get("/health", response_model=HealthResponse)
    async def health() -> HealthResponse:
        policy = service.policy
        return HealthResponse(model=settings.name, checkpoint=policy.checkpoint, version=policy.version,
                              pid=os.getpid(), requests_served=service.requests_served,
                              reloads=service.reloads)

    return app


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
    POST /reload {"model": DIR} swaps in a new checkpoint without a restart.

    \b
    Example:
      webgym-rl tiny-model out/tiny-qwen2vl
      webgym-rollout serve-policy --model out/tiny-qwen2vl --port 8500
      curl -s http://127.0.0.1:8500/v1/models
      curl -s -X POST http://127.0.0.1:8500/reload -H 'content-type: application/json' \\
          -d '{"model": "out/checkpoints/iter-0001"}'
    """
    import uvicorn

    from webgym_rollout.modeling import ModelingError

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
