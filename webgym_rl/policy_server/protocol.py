"""The wire: the typed requests and replies of the policy server's HTTP API (pydantic models).

The chat models are the subset of the OpenAI chat-completions API the server implements, plus
vLLM's ``top_k`` and ``return_token_ids``; the others are the server's own endpoints (/reload,
/weights, /health). Errors travel in the OpenAI shape (`error_body`). The server
(`webgym_rl.policy_server.app`) validates every request into these models and answers with them;
the client (`webgym_rl.policy_server.client`) reads its replies back into them. Two conventions of
the weights handover are shared the same way: `SHM_DIR` and `IMAGE_PROCESSOR_METADATA`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "IMAGE_PROCESSOR_METADATA",
    "SHM_DIR",
    "AssistantMessage",
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "ChatMessage",
    "Choice",
    "ChoiceLogprobs",
    "ContentPart",
    "HealthResponse",
    "ImagePart",
    "ImageURL",
    "ModelCard",
    "ModelList",
    "ReloadRequest",
    "ReloadResponse",
    "SharedWeightsRequest",
    "TextPart",
    "TokenLogprob",
    "TopLogprob",
    "Usage",
    "WeightsResponse",
    "error_body",
    "version_fingerprint",
]

SHM_DIR = "/dev/shm"
"""Where shared-memory weights files lie (``POST /weights`` names one); the server reads no other
directory."""
IMAGE_PROCESSOR_METADATA = "webgym.image_processor"
"""The safetensors ``__metadata__`` key of a push's image processor settings
(`webgym_rl.pixels.image_processor_config` as JSON): the server refuses weights made for other ones."""


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
    keep: bool = False
    """The client writes the file again for a later push (``push_weights(reuse_buffers=True)``,
    never while it is served from): the server leaves its name in place instead of removing it."""


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


def error_body(message: str, param: str | None, kind: str) -> dict[str, Any]:
    """An error reply's body in the OpenAI shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": kind}}
