"""An OpenAI-compatible chat endpoint: `Endpoint` says where and how hard to try, `ChatClient` calls it.

One client serves every model call of the toolkit: the data pipeline's LLM (rubrics, taxonomy),
the policy and the judge. It wraps `openai.AsyncOpenAI` with

- bounded concurrency (at most `Endpoint.max_concurrency` requests in flight; the rest wait);
- typed retries with exponential backoff and jitter for what may pass (connection errors,
  timeouts, HTTP 5xx and 429, a body that is not JSON: a proxy's error page), and none for what
  will not (other 4xx);
- usage counting (requests, retries, failures, prompt and completion tokens);
- one reading of the reply: `complete` returns a `webgym_core.completion.ChatReply`, checked once
  (a body without choices, without a message or with content that is not text raises, not retried).

Failures raise the classes of `EndpointErrors`: by default those of `webgym_core.errors`; the
policy, the judge and the data pipeline's LLM pass their own classes so that their callers catch
``PolicyError``, ``JudgeError`` or ``LLMError``. The `AsyncOpenAI` client and the semaphore are
made for the running event loop on first use (both belong to the loop that made them), so one
`ChatClient` works across ``asyncio.run`` calls::

    client = ChatClient(Endpoint(base_url="http://127.0.0.1:8000/v1", model="qwen"))
    reply = await client.complete(messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    reply.text, reply.finish_reason, reply.completion_tokens
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from webgym_core.completion import ChatReply
from webgym_core.errors import EndpointRejected, EndpointReplyInvalid, EndpointTimeout, EndpointUnavailable

__all__ = ["ChatClient", "Endpoint", "EndpointErrors", "Usage"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Endpoint:
    """Where an OpenAI-compatible model is served, and how hard to try."""

    base_url: str = ""
    """Base URL of the OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1."""
    model: str = ""
    """Model name sent with each request (as the server lists it at /v1/models)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable that holds the API key ("EMPTY" is sent when it is unset)."""
    api_key: str | None = field(default=None, metadata={"cli": False})
    """The API key itself, for programs (never a CLI flag: command lines are visible to others)."""
    timeout_s: float = 120.0
    """Seconds one request may take."""
    max_retries: int = 3
    """Retries after the first attempt for transient failures (connection, timeout, 5xx, 429)."""
    backoff_s: float = 0.5
    """First retry delay in seconds; it doubles with each retry (with jitter)."""
    max_backoff_s: float = 30.0
    """Longest single retry delay in seconds."""
    max_concurrency: int = 64
    """Requests in flight at once; the others wait."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "max_concurrency"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries: must be >= 0, got {self.max_retries}")

    @property
    def configured(self) -> bool:
        """Both the URL and the model name are set."""
        return bool(self.base_url and self.model)

    def resolved_api_key(self) -> str:
        """`api_key`, else the value of `api_key_env`, else ``EMPTY`` (what vLLM accepts without a key)."""
        return self.api_key or (os.environ.get(self.api_key_env) if self.api_key_env else None) or "EMPTY"


class EndpointErrors(NamedTuple):
    """The exception classes a `ChatClient` raises; each is called with one message string."""

    unavailable: type[Exception] = EndpointUnavailable
    timeout: type[Exception] = EndpointTimeout
    rejected: type[Exception] = EndpointRejected
    invalid: type[Exception] = EndpointReplyInvalid
    """HTTP 200 without a usable chat completion (no choices, no message, content not text)."""


@dataclass
class Usage:
    """Counters over the life of a client (all requests)."""

    requests: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Transient(Exception):
    def __init__(self, error: type[Exception], reason: str) -> None:
        super().__init__(reason)
        self.error, self.reason = error, reason


class ChatClient:
    """``await client.complete(**request)``: ``chat.completions.create`` with the retries above."""

    def __init__(self, endpoint: Endpoint, *, errors: EndpointErrors = EndpointErrors()) -> None:
        if not endpoint.base_url:
            raise ValueError("the endpoint has no base_url (e.g. http://127.0.0.1:8000/v1)")
        self.endpoint = endpoint
        self.errors = errors
        self.usage = Usage()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self._semaphore: asyncio.Semaphore | None = None

    @property
    def base_url(self) -> str:
        return self.endpoint.base_url

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            from openai import AsyncOpenAI  # optional: openai

            # The retries are ours (typed, counted); the client's own would hide them.
            self._client = AsyncOpenAI(base_url=self.endpoint.base_url,
                                       api_key=self.endpoint.resolved_api_key(),
                                       timeout=self.endpoint.timeout_s, max_retries=0)
            self._semaphore = asyncio.Semaphore(self.endpoint.max_concurrency)
            self._loop = loop

    async def complete(self, **request: Any) -> ChatReply:
        """``chat.completions.create(**request)`` (``model`` defaults to the endpoint's); returns its
        reply, read by `ChatReply.read`. Raises the `errors` classes: after the retries for what may
        pass, at once for the rest (``errors.invalid`` for a body that is no usable completion)."""
        import openai  # optional: openai

        self._bind()
        request.setdefault("model", self.endpoint.model)
        attempt = 0
        while True:
            try:
                async with self._semaphore:  # type: ignore[union-attr]
                    self.usage.requests += 1
                    try:
                        # The raw response first: the body is decoded below, apart from the request,
                        # so that only a broken body (not a bug in our request) reads as one.
                        response = await self._client.chat.completions.with_raw_response.create(**request)
                    except openai.APITimeoutError:
                        raise _Transient(self.errors.timeout,
                                         f"no answer within {self.endpoint.timeout_s:g} s") from None
                    except openai.APIConnectionError as exc:
                        raise _Transient(self.errors.unavailable, f"connection failed: {exc}") from None
                    except (openai.InternalServerError, openai.RateLimitError) as exc:
                        raise _Transient(self.errors.unavailable, f"HTTP {exc.status_code}") from None
                    except openai.APIStatusError as exc:
                        self.usage.failures += 1
                        raise self.errors.rejected(
                            f"{self.base_url} rejected the request (HTTP {exc.status_code}): {exc.message}"
                        ) from None
                    try:
                        completion = response.parse()
                    except (ValueError, RecursionError) as exc:  # not JSON (a proxy's error page), too deep
                        raise _Transient(self.errors.unavailable, "the reply is not a chat completion "
                                         f"({type(exc).__name__}: {str(exc)[:120]})") from None
                # Nor are the body's types checked: `ChatReply.read` does, once for every caller.
                try:
                    reply = ChatReply.read(completion, url=self.base_url)
                except EndpointReplyInvalid as exc:
                    self._count(exc.prompt_tokens, exc.completion_tokens)
                    raise self.errors.invalid(str(exc)) from None
                self._count(reply.prompt_tokens, reply.completion_tokens)
                return reply
            except _Transient as exc:
                if attempt >= self.endpoint.max_retries:
                    self.usage.failures += 1
                    raise exc.error(f"{self.base_url}: {exc.reason} (after {attempt + 1} attempts)") from None
                delay = min(self.endpoint.max_backoff_s,
                            self.endpoint.backoff_s * (2 ** attempt) * (0.5 + random.random()))
                log.info("%s: %s; retry %d in %.2f s", self.base_url, exc.reason, attempt + 1, delay)
                attempt += 1
                self.usage.retries += 1
                await asyncio.sleep(delay)

    def _count(self, prompt_tokens: int, completion_tokens: int) -> None:
        self.usage.prompt_tokens += prompt_tokens
        self.usage.completion_tokens += completion_tokens

    async def close(self) -> None:
        """Close the HTTP client (a later `complete` makes a new one)."""
        if self._client is not None:
            await self._client.close()
            self._client, self._loop = None, None
