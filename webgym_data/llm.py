"""One small client for every LLM call of the data pipeline (rubrics, taxonomy, decomposition).

It talks to any OpenAI-compatible endpoint (vLLM, a hosted API, the scripted test server) through
the `openai` package, asks for JSON-schema structured output, validates every reply with a callback,
and caches valid replies on disk so that a rerun sends no request at all::

    client = LLMClient(LLMSettings(base_url="http://127.0.0.1:8000/v1", model="qwen", cache_dir=path))
    groups = await client.complete_json(purpose="rubric", prompt_version="rubric-v1",
                                        messages=[...], schema={...}, validate=parse_groups,
                                        cache_key=(task.task_name, task.website))
    client.usage.summary()   # requests, cache hits, tokens, cost

Many calls: ``await gather_all([...], label="rubrics", progress=True)`` (results in order; the first
error cancels the rest and is raised alone); from synchronous code ``run_sync(coroutine, client)``.

Retries (exponential backoff, up to ``max_retries`` after the first attempt): transport errors,
HTTP 5xx and 429, and replies that are not JSON, are cut off, or fail `validate`. Other HTTP errors
(bad key, unknown model) are not retried.

Exceptions::

    WebgymDataError
     └── LLMError
          ├── LLMUnavailable       endpoint unreachable, or still 5xx/429 after the retries (names the URL)
          ├── LLMRequestRejected   the endpoint refused the request: 4xx other than 429 (names URL, status)
          └── LLMReplyInvalid      the replies stayed malformed or invalid after the retries

The client can be used from any event loop: the `AsyncOpenAI` client and the concurrency semaphore
are made for the running loop on first use (both are bound to the loop they were created in).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import random
import tempfile
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from webgym_data.schema import WebgymDataError

__all__ = [
    "LLMClient",
    "LLMError",
    "LLMReplyInvalid",
    "LLMRequestRejected",
    "LLMSettings",
    "LLMUnavailable",
    "Usage",
    "gather_all",
    "run_sync",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Exceptions a `validate` callback may raise to say "this reply is not acceptable, ask again".
_INVALID_REPLY_ERRORS = (ValueError, TypeError, KeyError, IndexError)


class LLMError(WebgymDataError):
    """Base class of the LLM client's errors."""


class LLMUnavailable(LLMError):
    """The endpoint could not be reached, or kept failing (5xx, 429) after every retry."""

    def __init__(self, base_url: str, reason: str) -> None:
        self.base_url, self.reason = base_url, reason
        super().__init__(f"LLM endpoint {base_url} is unavailable: {reason}")


class LLMRequestRejected(LLMError):
    """The endpoint refused the request (4xx other than 429: bad API key, unknown model, ...)."""

    def __init__(self, base_url: str, status: int, reason: str) -> None:
        self.base_url, self.status, self.reason = base_url, status, reason
        super().__init__(f"LLM endpoint {base_url} rejected the request (HTTP {status}): {reason}")


class LLMReplyInvalid(LLMError):
    """Every attempt gave a reply that was not JSON, was cut off, or failed validation."""

    def __init__(self, purpose: str, cache_key: Sequence[str], attempts: int, reason: str) -> None:
        self.purpose, self.cache_key, self.attempts, self.reason = purpose, tuple(cache_key), attempts, reason
        what = " | ".join(str(part)[:80] for part in cache_key)
        super().__init__(f"{purpose} reply still invalid after {attempts} attempt(s) for [{what}]: {reason}")


class _InvalidReply(Exception):
    """Internal: one reply could not be used (retried)."""


@dataclass
class LLMSettings:
    """How to reach the model and how hard to try."""

    base_url: str
    """OpenAI-compatible base URL, e.g. ``http://127.0.0.1:8000/v1``."""
    model: str
    """Model name sent with each request; part of the cache key."""
    api_key: str | None = None
    """API key; None falls back to the OPENAI_API_KEY environment variable, then to "EMPTY"."""
    max_concurrency: int = 8
    """Most requests in flight at once."""
    max_retries: int = 3
    """Retries after the first attempt, for transport errors, 5xx/429 and invalid replies."""
    timeout_s: float = 60.0
    """Timeout of one HTTP request, in seconds."""
    cache_dir: Path | None = None
    """Folder of cached replies (one JSON file per key); None disables the cache."""
    temperature: float = 0.0
    """Sampling temperature sent with each request."""
    max_tokens: int | None = None
    """Cap on completion tokens per request; None leaves it to the server."""
    price_per_1k_input: float = 0.0
    """Price of 1,000 prompt tokens, for the cost summary (any currency)."""
    price_per_1k_output: float = 0.0
    """Price of 1,000 completion tokens, for the cost summary."""
    backoff_s: float = 1.0
    """First retry delay in seconds; doubles with each retry (with a little jitter)."""
    max_backoff_s: float = 30.0
    """Longest single retry delay, in seconds."""

    def __post_init__(self) -> None:
        if not self.base_url or not str(self.base_url).strip():
            raise ValueError("LLMSettings.base_url must be a URL, e.g. http://127.0.0.1:8000/v1")
        if not self.model:
            raise ValueError("LLMSettings.model must name a model")
        if self.max_concurrency < 1:
            raise ValueError(f"LLMSettings.max_concurrency must be >= 1, got {self.max_concurrency}")
        if self.max_retries < 0:
            raise ValueError(f"LLMSettings.max_retries must be >= 0, got {self.max_retries}")
        if self.cache_dir is not None:
            self.cache_dir = Path(self.cache_dir)

    @property
    def resolved_api_key(self) -> str:
        return self.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"


@dataclass
class Usage:
    """What the client has spent so far. `cost` uses the settings' prices."""

    requests: int = 0
    """HTTP requests sent (every attempt counts)."""
    cache_hits: int = 0
    """Calls answered from the on-disk cache (no request sent)."""
    retries: int = 0
    """Attempts that failed and were tried again."""
    prompt_tokens: int = 0
    """Prompt tokens the server reported, over every reply (invalid ones were paid for too)."""
    completion_tokens: int = 0
    """Completion tokens the server reported, over every reply."""
    cost: float = 0.0
    """Tokens priced with `LLMSettings.price_per_1k_input` / `price_per_1k_output`."""

    def __sub__(self, other: Usage) -> Usage:
        return Usage(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def copy(self) -> Usage:
        return Usage(**{f.name: getattr(self, f.name) for f in fields(self)})

    def summary(self) -> str:
        return (f"{self.requests} requests ({self.retries} retried), {self.cache_hits} cache hits, "
                f"{self.prompt_tokens} prompt + {self.completion_tokens} completion tokens, "
                f"cost {self.cost:.4f}")


class LLMClient:
    """JSON-only chat completions with validation, retries, a concurrency bound and a disk cache."""

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self.usage = Usage()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._openai = None
        self._semaphore: asyncio.Semaphore | None = None

    # -- public -------------------------------------------------------------------------------
    async def complete_json(self, *, purpose: str, prompt_version: str, messages: list[dict],
                            schema: dict, validate: Callable[[Any], T], cache_key: tuple[str, ...]) -> T:
        """Ask for a JSON reply matching `schema`; return ``validate(reply)``.

        `validate` gets the parsed JSON and raises ValueError/TypeError/KeyError for a reply that
        must be asked again. Valid replies are cached by (cache_key, model, purpose, prompt_version).
        """
        key = self.cache_file_key(cache_key, purpose=purpose, prompt_version=prompt_version)
        cached = self._cache_read(key)
        if cached is not None:
            try:
                result = validate(cached)
            except _INVALID_REPLY_ERRORS as exc:
                # A stale entry (the validator got stricter): ask again and overwrite it.
                logger.info("cached %s reply %s no longer validates (%s); asking again", purpose, key, exc)
            else:
                self.usage.cache_hits += 1
                return result

        settings = self.settings
        attempts = settings.max_retries + 1
        last_reason = ""
        for attempt in range(attempts):
            if attempt:
                self.usage.retries += 1
                delay = min(settings.max_backoff_s, settings.backoff_s * 2 ** (attempt - 1))
                await asyncio.sleep(delay * (1 + random.random() / 4))
            try:
                reply = await self._request(purpose, messages, schema)
                result = self._parse(reply, validate)
            except _Transient as exc:
                last_reason = str(exc)
                logger.debug("%s attempt %d/%d: %s", purpose, attempt + 1, attempts, exc)
                if attempt == attempts - 1:
                    raise LLMUnavailable(settings.base_url, last_reason) from None
                continue
            except _InvalidReply as exc:
                last_reason = str(exc)
                logger.debug("%s attempt %d/%d: invalid reply: %s", purpose, attempt + 1, attempts, exc)
                if attempt == attempts - 1:
                    raise LLMReplyInvalid(purpose, cache_key, attempts, last_reason) from None
                continue
            parsed, value = result
            self._cache_write(key, cache_key, purpose, prompt_version, parsed)
            return value
        raise AssertionError("unreachable")  # pragma: no cover

    def cache_file_key(self, cache_key: Sequence[str], *, purpose: str, prompt_version: str) -> str:
        """The sha256 naming the cache file of one call."""
        material = json.dumps([list(map(str, cache_key)), self.settings.model, purpose, prompt_version],
                              ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(material.encode("utf-8")).hexdigest()

    async def aclose(self) -> None:
        """Close the HTTP connections (the client makes new ones if used again)."""
        if self._openai is not None:
            openai_client, self._openai = self._openai, None
            try:
                await openai_client.close()
            except RuntimeError:
                pass  # made in a loop that is closed now: its sockets are gone with it
        self._loop = None
        self._semaphore = None

    # -- internals ----------------------------------------------------------------------------
    def _for_running_loop(self):
        loop = asyncio.get_running_loop()
        if loop is not self._loop or self._openai is None:
            from openai import AsyncOpenAI

            # max_retries=0: this class does the retrying, so `usage.requests` counts every request.
            self._openai = AsyncOpenAI(base_url=self.settings.base_url,
                                       api_key=self.settings.resolved_api_key,
                                       timeout=self.settings.timeout_s, max_retries=0)
            self._semaphore = asyncio.Semaphore(self.settings.max_concurrency)
            self._loop = loop
        return self._openai, self._semaphore

    async def _request(self, purpose: str, messages: list[dict], schema: dict):
        import openai

        client, semaphore = self._for_running_loop()
        kwargs: dict[str, Any] = {
            "model": self.settings.model,
            "messages": messages,
            "temperature": self.settings.temperature,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": purpose, "schema": schema, "strict": True}},
        }
        if self.settings.max_tokens is not None:
            kwargs["max_tokens"] = self.settings.max_tokens
        async with semaphore:
            self.usage.requests += 1
            try:
                reply = await client.chat.completions.create(**kwargs)
            except openai.APITimeoutError:
                raise _Transient(f"no reply within {self.settings.timeout_s:g} s") from None
            except openai.APIConnectionError as exc:
                # The transport's own error (e.g. "[Errno 111] Connection refused") says the most.
                raise _Transient(f"cannot connect ({exc.__cause__ or exc})") from None
            except openai.APIStatusError as exc:
                if exc.status_code == 429 or exc.status_code >= 500:
                    raise _Transient(f"HTTP {exc.status_code}: {_error_text(exc)}") from None
                raise LLMRequestRejected(self.settings.base_url, exc.status_code, _error_text(exc)) from None
        usage = getattr(reply, "usage", None)
        if usage is not None:
            prompt, completion = int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)
            self.usage.prompt_tokens += prompt
            self.usage.completion_tokens += completion
            self.usage.cost += (prompt * self.settings.price_per_1k_input
                                + completion * self.settings.price_per_1k_output) / 1000
        return reply

    @staticmethod
    def _parse(reply, validate: Callable[[Any], T]) -> tuple[Any, T]:
        choices = getattr(reply, "choices", None) or []
        if not choices:
            raise _InvalidReply("the reply has no choices")
        choice = choices[0]
        if choice.finish_reason == "length":
            raise _InvalidReply("the reply was cut off (finish_reason=length)")
        content = getattr(choice.message, "content", None)
        if not isinstance(content, str) or not content.strip():
            raise _InvalidReply("the reply is empty")
        try:
            parsed = json.loads(_strip_code_fence(content))
        except json.JSONDecodeError as exc:
            raise _InvalidReply(f"the reply is not JSON ({exc.msg} at char {exc.pos}): "
                                f"{content[:120]!r}") from None
        try:
            return parsed, validate(parsed)
        except _INVALID_REPLY_ERRORS as exc:
            raise _InvalidReply(f"the reply failed validation: {exc}") from None

    def _cache_path(self, key: str) -> Path | None:
        if self.settings.cache_dir is None:
            return None
        return self.settings.cache_dir / key[:2] / f"{key}.json"

    def _cache_read(self, key: str) -> Any | None:
        path = self._cache_path(key)
        if path is None or not path.is_file():
            return None
        try:
            return json.loads(path.read_text("utf-8"))["reply"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("ignoring unreadable cache file %s: %s", path, exc)
            return None

    def _cache_write(self, key: str, cache_key: Sequence[str], purpose: str, prompt_version: str,
                     parsed: Any) -> None:
        path = self._cache_path(key)
        if path is None:
            return
        entry = {"key": list(map(str, cache_key)), "model": self.settings.model, "purpose": purpose,
                 "prompt_version": prompt_version, "reply": parsed}
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename: a crash never leaves a half-written entry that a rerun would trust.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(entry, handle, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class _Transient(Exception):
    """Internal: a transport error, 5xx or 429 (retried, then LLMUnavailable)."""


def _error_text(exc) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return str(getattr(exc, "message", "") or exc)


def _strip_code_fence(text: str) -> str:
    # Servers without structured output often wrap JSON in a ```json fence.
    text = text.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        if text.rstrip().endswith("```"):
            text = text.rstrip()[:-3]
    return text


# -- running many calls ----------------------------------------------------------------------------
async def gather_all(awaitables: Sequence[Awaitable[T]], *, label: str = "",
                     progress: bool = False) -> list[T]:
    """Await all concurrently (the client's semaphore bounds the requests) and return their results
    in order. The first exception cancels the rest and is raised alone: one clear error, not a
    group of a hundred identical ones. `progress` shows a bar on stderr."""
    futures = [asyncio.ensure_future(a) for a in awaitables]
    bar = _ProgressBar(len(futures), label, enabled=progress)
    pending = set(futures)
    try:
        with bar as advance:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                for future in done:
                    future.result()  # raises the first failure
                    advance()
    finally:
        for future in pending:
            future.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    return [future.result() for future in futures]


def run_sync(coroutine: Coroutine[Any, Any, T], client: LLMClient,
             async_name: str = "the async variant") -> T:
    """Run `coroutine` to completion from synchronous code, then close `client`'s connections
    (they belong to the loop that ends here; the client reconnects if used again)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coroutine.close()
        raise RuntimeError(f"called from a running event loop: use 'await {async_name}(...)' there")

    async def main() -> T:
        try:
            return await coroutine
        finally:
            await client.aclose()

    return asyncio.run(main())


class _ProgressBar:
    """A rich progress bar on stderr (or nothing); the context value is ``advance()``."""

    def __init__(self, total: int, label: str, *, enabled: bool) -> None:
        self.total, self.label, self.enabled = total, label, enabled and total > 0
        self._progress = None

    def __enter__(self) -> Callable[[], None]:
        if not self.enabled:
            return lambda: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeRemainingColumn(), console=Console(stderr=True))
        self._progress.start()
        task_id = self._progress.add_task(self.label, total=self.total)
        return lambda: self._progress.advance(task_id)

    def __exit__(self, *exc_info) -> None:
        if self._progress is not None:
            self._progress.stop()
