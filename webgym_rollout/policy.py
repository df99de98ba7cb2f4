"""Policies: ``await policy.act(observation) -> PolicyOutput``.

- `OpenAIPolicy`: any OpenAI-compatible chat-completions endpoint through the `openai` client (vLLM
  in production, ``webgym-rollout serve-policy`` on CPU, hosted APIs for baselines). Screenshots go
  inline as base64 ``data:`` URLs, never as file paths, so policy and browsers need no shared disk.
  Sampling settings live in `SamplingSettings`; requests are bounded by a semaphore, each has a
  timeout, transient failures are retried with backoff, token usage is counted in `PolicyUsage`.
- `RandomPolicy`: clicks the centre of a random interactive element or types words from the
  instruction; seeded, needs no model. It writes its replies in the agent protocol's format, so its
  successful episodes can bootstrap training and it benchmarks the rollout machinery alone.

A reply that does not parse is not an error here: `PolicyOutput.parsed` has ``action=None`` and the
reason, and the runner records it as a no-op step. Failures of the endpoint raise::

    RolloutError
     └── PolicyError                  (webgym_rollout.errors)
          ├── PolicyUnavailable       connection failed, or HTTP 5xx/429 after the retries; names the URL
          ├── PolicyTimeout           no answer within timeout_s, after the retries
          └── PolicyRejected          HTTP 4xx other than 429 (bad key, unknown model); not retried

Serving Qwen3-VL-8B-Instruct with vLLM (untested here: these machines have no GPU; ``pip install
'webgym[vllm]'`` on a CUDA machine)::

    vllm serve Qwen/Qwen3-VL-8B-Instruct --port 8000 --served-model-name qwen3-vl-8b \\
        --max-model-len 32768 --limit-mm-per-prompt '{"image": 5, "video": 0}' \\
        --mm-processor-kwargs '{"max_pixels": 1003520}' --gpu-memory-utilization 0.9 \\
        --max-num-seqs 128 --tensor-parallel-size 1

and point the policy at it: ``OpenAIPolicySettings(base_url="http://HOST:8000/v1",
model="qwen3-vl-8b")``. ``--limit-mm-per-prompt`` must allow ``AgentSettings.full_rounds + 1``
images (the last 4 rounds plus the current screenshot).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from webgym_rollout.actions import AgentAction, pixels_to_grid
from webgym_rollout.agent import (
    AgentSettings,
    Observation,
    ParsedResponse,
    build_messages,
    format_response,
    inline_images,
    observation_images,
    parse_response,
)
from webgym_rollout.errors import PolicyError

__all__ = [
    "OpenAIPolicy",
    "OpenAIPolicySettings",
    "Policy",
    "PolicyOutput",
    "PolicyRejected",
    "PolicyTimeout",
    "PolicyUnavailable",
    "PolicyUsage",
    "RandomPolicy",
    "RandomPolicySettings",
    "SamplingSettings",
]

logger = logging.getLogger(__name__)


class PolicyUnavailable(PolicyError):
    """The endpoint could not be reached, or answered 5xx/429 through every retry."""

    kind = "policy_unavailable"


class PolicyTimeout(PolicyError):
    """The endpoint did not answer within the timeout, through every retry."""

    kind = "policy_timeout"


class PolicyRejected(PolicyError):
    """The endpoint refused the request (HTTP 4xx other than 429); retrying would not help."""

    kind = "policy_rejected"


@dataclass
class PolicyUsage:
    """Counters over the life of a policy (all requests, all episodes)."""

    requests: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class PolicyOutput:
    """One policy step: the reply, what it parsed to, and the messages as sent (image placeholders)."""

    response: str
    parsed: ParsedResponse
    messages: list[dict[str, Any]]
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = ""
    latency_s: float = 0.0

    @property
    def action(self) -> AgentAction | None:
        return self.parsed.action

    @property
    def messages_json(self) -> str:
        """The messages as a trajectory step stores them."""
        return json.dumps(self.messages, ensure_ascii=False)


@runtime_checkable
class Policy(Protocol):
    """Anything that maps an observation to a reply."""

    model_id: str

    async def act(self, observation: Observation) -> PolicyOutput: ...


@dataclass(frozen=True)
class SamplingSettings:
    """Sampling parameters sent with every request."""

    temperature: float = 1.0
    """Sampling temperature (RL rollouts sample; use 0 for evaluation)."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    max_tokens: int = 1024
    """Longest reply; a reply cut here usually fails to parse and becomes a no-op step."""
    seed: int | None = None
    """Per-request seed where the server supports it (vLLM does)."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Server-specific fields passed through, e.g. ``{"top_k": 50}`` for vLLM."""


@dataclass(frozen=True)
class OpenAIPolicySettings:
    """Where the policy model is served and how it is called."""

    base_url: str
    """OpenAI-compatible endpoint, e.g. ``http://127.0.0.1:8000/v1``."""
    model: str
    """Model name as the server knows it (``/v1/models``)."""
    api_key: str | None = None
    """API key; falls back to the ``OPENAI_API_KEY`` environment variable, then ``EMPTY``."""
    max_concurrency: int = 64
    """Requests in flight at once from this policy (the rest wait)."""
    timeout_s: float = 120.0
    """Seconds one request may take."""
    max_retries: int = 3
    """Retries after the first attempt for transient failures (connection, timeout, 5xx, 429)."""
    backoff_s: float = 0.5
    """First retry delay; doubles each retry, with jitter."""
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    """Sampling parameters."""
    agent: AgentSettings = field(default_factory=AgentSettings)
    """Prompt variant and context window."""


class _Transient(Exception):
    def __init__(self, error: type[Exception], reason: str) -> None:
        super().__init__(reason)
        self.error, self.reason = error, reason


class _ChatEndpoint:
    """An `AsyncOpenAI` client with bounded concurrency, typed retries and usage counting.

    Shared by the policy and the rubric judge, which pass their own error classes. The client and
    semaphore are created for the running event loop on first use (both are bound to one loop).
    """

    def __init__(self, *, base_url: str, api_key: str | None, max_concurrency: int, timeout_s: float,
                 max_retries: int, backoff_s: float, unavailable: type[Exception],
                 timeout: type[Exception], rejected: type[Exception]) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.base_url = base_url
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self._max_concurrency, self._timeout_s = max_concurrency, timeout_s
        self._max_retries, self._backoff_s = max_retries, backoff_s
        self._errors = (unavailable, timeout, rejected)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self._semaphore: asyncio.Semaphore | None = None
        self.usage = PolicyUsage()

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            from openai import AsyncOpenAI

            # Retries are ours (typed, counted); the client's own would hide them.
            self._client = AsyncOpenAI(base_url=self.base_url, api_key=self._api_key,
                                       timeout=self._timeout_s, max_retries=0)
            self._semaphore = asyncio.Semaphore(self._max_concurrency)
            self._loop = loop

    async def complete(self, **request: Any) -> Any:
        """``chat.completions.create(**request)`` with retries; returns the completion object."""
        import openai

        self._bind()
        unavailable, timeout, rejected = self._errors
        attempt = 0
        while True:
            try:
                async with self._semaphore:  # type: ignore[union-attr]
                    self.usage.requests += 1
                    try:
                        completion = await self._client.chat.completions.create(**request)
                    except openai.APITimeoutError:
                        raise _Transient(timeout, f"no answer within {self._timeout_s:g} s") from None
                    except openai.APIConnectionError as exc:
                        raise _Transient(unavailable, f"connection failed: {exc}") from None
                    except (openai.InternalServerError, openai.RateLimitError) as exc:
                        raise _Transient(unavailable, f"HTTP {exc.status_code}") from None
                    except openai.APIStatusError as exc:
                        self.usage.failures += 1
                        raise rejected(f"{self.base_url} rejected the request (HTTP {exc.status_code}): "
                                       f"{exc.message}") from None
                if completion.usage is not None:
                    self.usage.prompt_tokens += completion.usage.prompt_tokens or 0
                    self.usage.completion_tokens += completion.usage.completion_tokens or 0
                return completion
            except _Transient as exc:
                if attempt >= self._max_retries:
                    self.usage.failures += 1
                    raise exc.error(f"{self.base_url}: {exc.reason} (after {attempt + 1} attempts)") from None
                delay = self._backoff_s * (2 ** attempt) * (0.5 + random.random())
                logger.info("%s: %s; retry %d in %.2f s", self.base_url, exc.reason, attempt + 1, delay)
                attempt += 1
                self.usage.retries += 1
                await asyncio.sleep(delay)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client, self._loop = None, None


class OpenAIPolicy:
    """A VLM behind an OpenAI-compatible endpoint. Use as ``async with OpenAIPolicy(settings) as p``."""

    def __init__(self, settings: OpenAIPolicySettings) -> None:
        self.settings = settings
        self.model_id = settings.model
        self._endpoint = _ChatEndpoint(
            base_url=settings.base_url, api_key=settings.api_key, max_concurrency=settings.max_concurrency,
            timeout_s=settings.timeout_s, max_retries=settings.max_retries, backoff_s=settings.backoff_s,
            unavailable=PolicyUnavailable, timeout=PolicyTimeout, rejected=PolicyRejected)

    @property
    def usage(self) -> PolicyUsage:
        return self._endpoint.usage

    async def __aenter__(self) -> OpenAIPolicy:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._endpoint.close()

    async def act(self, observation: Observation) -> PolicyOutput:
        messages = build_messages(observation, self.settings.agent)
        sampling = self.settings.sampling
        request: dict[str, Any] = {
            "model": self.settings.model,
            "messages": inline_images(messages, observation_images(observation)),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if sampling.seed is not None:
            request["seed"] = sampling.seed
        if sampling.extra_body:
            request["extra_body"] = dict(sampling.extra_body)
        started = time.perf_counter()
        completion = await self._endpoint.complete(**request)
        latency = time.perf_counter() - started
        if not completion.choices:
            raise PolicyUnavailable(f"{self.settings.base_url} returned a completion without choices")
        choice = completion.choices[0]
        text = _reply_text(choice.message)
        usage = completion.usage
        return PolicyOutput(
            response=text,
            parsed=parse_response(text, self.settings.agent.variant),
            messages=messages,
            model=self.model_id,
            prompt_tokens=(usage.prompt_tokens or 0) if usage else 0,
            completion_tokens=(usage.completion_tokens or 0) if usage else 0,
            finish_reason=choice.finish_reason or "",
            latency_s=latency,
        )


def _reply_text(message: Any) -> str:
    """The reply as text. A server running a tool-call parser (vLLM ``--enable-auto-tool-choice``)
    moves the call out of the text into ``tool_calls``; it is put back as a ``<tool_call>`` block so
    that the stored response is the full training target and parses the same way."""
    text = message.content or ""
    for call in getattr(message, "tool_calls", None) or ():
        function = getattr(call, "function", None)
        if function is None:
            continue
        try:
            arguments = json.loads(function.arguments or "{}")
        except json.JSONDecodeError:
            arguments = function.arguments  # kept verbatim: the parser reports it as invalid
        call_json = json.dumps({"name": function.name, "arguments": arguments}, ensure_ascii=False)
        text += f"\n<tool_call>\n{call_json}\n</tool_call>"
    return text


@dataclass(frozen=True)
class RandomPolicySettings:
    """The random baseline policy."""

    seed: int = 0
    """Base seed; each step's choice depends only on (seed, episode id, step), not on timing."""
    type_probability: float = 0.2
    """Chance of typing words from the instruction instead of clicking."""
    scroll_probability: float = 0.05
    """Chance of scrolling down instead of clicking."""
    max_words: int = 3
    """Most words typed at once."""
    agent: AgentSettings = field(default_factory=AgentSettings)
    """Prompt variant (the random policy records the messages a model would have seen)."""


# Elements worth clicking; others (plain text, layout boxes) are skipped when any of these exist.
_INTERACTIVE_TAGS = {"a", "button", "input", "select", "textarea", "option", "label", "summary"}
_INTERACTIVE_ROLES = {"button", "link", "checkbox", "radio", "tab", "menuitem", "option", "textbox",
                      "combobox", "searchbox", "switch", "slider"}
_WORD = re.compile(r"[A-Za-z0-9][\w'-]*")


def _field(element: Any, name: str, default: Any = None) -> Any:
    if isinstance(element, dict):
        return element.get(name, default)
    return getattr(element, name, default)


class RandomPolicy:
    """Clicks the centre of a random interactive element, sometimes types instruction words."""

    model_id = "random"

    def __init__(self, settings: RandomPolicySettings | None = None) -> None:
        self.settings = settings or RandomPolicySettings()

    async def act(self, observation: Observation) -> PolicyOutput:
        started = time.perf_counter()
        settings = self.settings
        # A string seed hashes with SHA-512: the same on every run and process.
        rng = random.Random(
            f"{settings.seed}|{observation.episode_id}|{observation.instruction}|{observation.step}")
        words = _WORD.findall(observation.instruction)
        targets = self._targets(observation)
        roll = rng.random()
        if words and roll < settings.type_probability:
            count = rng.randint(1, max(1, min(settings.max_words, len(words))))
            start = rng.randrange(0, len(words) - count + 1)
            text = " ".join(words[start:start + count])
            action = AgentAction(name="type", text=text)
            intention = f"Type {text!r} into the focused field."
        elif targets and roll >= settings.type_probability + settings.scroll_probability:
            x, y, label = rng.choice(targets)
            action = AgentAction(name="left_click", coordinate=pixels_to_grid(x, y, observation.viewport))
            intention = f"Click {label}."
        else:
            action = AgentAction(name="scroll", direction="down")
            intention = "Scroll down to see more of the page."
        response = format_response(action, variant=settings.agent.variant,
                                   memory="Nothing recorded (random policy).",
                                   progress=f"Step {observation.step}.", intention=intention)
        return PolicyOutput(
            response=response,
            parsed=parse_response(response, settings.agent.variant),
            messages=build_messages(observation, settings.agent),
            model=self.model_id,
            finish_reason="stop",
            latency_s=time.perf_counter() - started,
        )

    @staticmethod
    def _targets(observation: Observation) -> list[tuple[float, float, str]]:
        """(centre x, centre y, label) of visible elements, interactive ones only if there are any."""
        width, height = observation.viewport
        visible, interactive = [], []
        for element in observation.elements:
            x, y = float(_field(element, "x", 0) or 0), float(_field(element, "y", 0) or 0)
            w, h = float(_field(element, "width", 0) or 0), float(_field(element, "height", 0) or 0)
            cx, cy = x + w / 2, y + h / 2
            if w <= 0 or h <= 0 or not (0 <= cx < width and 0 <= cy < height):
                continue
            tag = str(_field(element, "tag", "") or "").lower()
            role = str(_field(element, "role", "") or "").lower()
            text = " ".join(str(_field(element, "text", "") or "").split())[:40]
            label = f"the {tag or role or 'element'}" + (f" {text!r}" if text else "")
            visible.append((cx, cy, label))
            if tag in _INTERACTIVE_TAGS or role in _INTERACTIVE_ROLES:
                interactive.append((cx, cy, label))
        return interactive or visible
