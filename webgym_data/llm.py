"""One small client for every LLM call of the data pipeline (rubrics, taxonomy, decomposition).

It talks to any OpenAI-compatible endpoint (vLLM, a hosted API, the scripted test server) through
`webgym_core.endpoint.ChatClient`, the toolkit's one retry client, asks for JSON-schema structured
output, validates every reply with a callback, and caches valid replies on disk so that a rerun
sends no request at all::

    client = LLMClient(LLMSettings(endpoint=Endpoint(base_url="http://127.0.0.1:8000/v1", model="qwen"),
                                   cache_dir=path))
    groups = await client.complete_json(purpose="rubric", prompt_version="rubric-v1",
                                        messages=[...], schema={...}, validate=parse_groups,
                                        cache_key=(task.task_name, task.website))
    client.usage.summary()   # requests, cache hits, tokens, cost

Many calls: ``await gather_all([...], label="rubrics", progress=True)`` (results in order; the first
error cancels the rest and is raised alone); from synchronous code ``run_sync(coroutine, client)``.

Retries, up to ``endpoint.max_retries`` after the first attempt: the `ChatClient` retries
connection errors, timeouts, HTTP 5xx and 429 (exponential backoff with jitter) and not other
HTTP errors (bad key, unknown model); this client then asks again, as often, when a reply is not
JSON (or JSON nested too deeply, or text with a lone surrogate that no file could store), is cut
off, is no chat completion (no choices, no text), or fails `validate`.

Exceptions (defined in `webgym_data.errors`)::

    WebgymDataError
     ├── LLMError
     │    ├── LLMUnavailable       endpoint unreachable, or still 5xx/429 or a body that is not JSON
     │    │                        after the retries (names the URL)
     │    │    └── LLMTimeout      no answer within the timeout, through every retry
     │    ├── LLMRequestRejected   the endpoint refused the request: 4xx other than 429 (names the URL)
     │    ├── LLMReplyInvalid      the replies stayed malformed or invalid after the retries
     │    └── LLMSettingsError     settings that cannot work (a URL without a model; also a ValueError)
     └── EventLoopError            a synchronous entry point called inside a running event loop
                                   (also a RuntimeError)

The client can be used from any event loop: the `ChatClient` makes its HTTP client and its
concurrency bound for the running loop on first use.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from webgym_core.completion import ChatReply
from webgym_core.endpoint import ChatClient, Endpoint, EndpointErrors
from webgym_core.files import write_atomic
from webgym_core.settings import flat
from webgym_data.errors import (
    EventLoopError,
    LLMError,
    LLMReplyInvalid,
    LLMRequestRejected,
    LLMSettingsError,
    LLMTimeout,
    LLMUnavailable,
)

__all__ = [
    "EventLoopError",
    "LLMClient",
    "LLMError",
    "LLMReplyInvalid",
    "LLMRequestRejected",
    "LLMSettings",
    "LLMSettingsError",
    "LLMTimeout",
    "LLMUnavailable",
    "Usage",
    "default_cache_dir",
    "gather_all",
    "run_sync",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Exceptions a `validate` callback may raise to say "this reply is not acceptable, ask again".
_INVALID_REPLY_ERRORS = (ValueError, TypeError, KeyError, IndexError)


class _InvalidReply(Exception):
    """Internal: one reply could not be used (asked again)."""


_ERRORS = EndpointErrors(unavailable=LLMUnavailable, timeout=LLMTimeout, rejected=LLMRequestRejected,
                         invalid=_InvalidReply)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/webgym/llm`` (``~/.cache/webgym/llm`` when XDG_CACHE_HOME is unset)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "webgym" / "llm"


@dataclass
class LLMSettings:
    """The data pipeline's LLM: where it is served (an `Endpoint`) and how its replies are asked for,
    cached and priced. With no ``base_url`` there is no LLM (the build runs offline)."""

    endpoint: Endpoint = flat(Endpoint)
    cache: bool = True
    """Cache valid replies on disk, so that a rerun sends no request for them."""
    cache_dir: Path | None = None
    """Folder of cached replies (one JSON file per request); unset: $XDG_CACHE_HOME/webgym/llm."""
    temperature: float = 0.0
    """Sampling temperature sent with each request."""
    max_tokens: int | None = None
    """Cap on completion tokens per request; unset leaves it to the server."""
    price_per_1k_input: float = 0.0
    """Price of 1,000 prompt tokens, for the cost summary (any currency)."""
    price_per_1k_output: float = 0.0
    """Price of 1,000 completion tokens, for the cost summary."""

    def __post_init__(self) -> None:
        if self.endpoint.base_url and not self.endpoint.model:
            raise LLMSettingsError(f"model: required with base_url {self.endpoint.base_url}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise LLMSettingsError(f"max_tokens: must be >= 1, got {self.max_tokens}")
        if self.cache_dir is not None:
            self.cache_dir = Path(self.cache_dir)

    @property
    def configured(self) -> bool:
        """An endpoint is set (URL and model): the pipeline may ask the LLM."""
        return self.endpoint.configured

    @property
    def resolved_cache_dir(self) -> Path | None:
        """The reply cache folder, or None when caching is off."""
        if not self.cache:
            return None
        return self.cache_dir or default_cache_dir()


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
        if not settings.configured:
            raise LLMSettingsError("base_url: the LLM client needs an endpoint URL and a model, "
                                   "e.g. http://127.0.0.1:8000/v1")
        self.settings = settings
        self.chat = ChatClient(settings.endpoint, errors=_ERRORS)
        self._cache_hits = 0
        self._reply_retries = 0

    @property
    def usage(self) -> Usage:
        """A snapshot of what this client has spent (requests and tokens as the `ChatClient` counted)."""
        chat = self.chat.usage
        return Usage(requests=chat.requests, cache_hits=self._cache_hits,
                     retries=chat.retries + self._reply_retries, prompt_tokens=chat.prompt_tokens,
                     completion_tokens=chat.completion_tokens,
                     cost=(chat.prompt_tokens * self.settings.price_per_1k_input
                           + chat.completion_tokens * self.settings.price_per_1k_output) / 1000)

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
                self._cache_hits += 1
                return result

        request: dict[str, Any] = {
            "messages": messages,
            "temperature": self.settings.temperature,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": purpose, "schema": schema, "strict": True}},
        }
        if self.settings.max_tokens is not None:
            request["max_tokens"] = self.settings.max_tokens
        attempts = self.settings.endpoint.max_retries + 1
        for attempt in range(attempts):
            if attempt:
                self._reply_retries += 1
            # Transport failures are retried inside and raised as LLMUnavailable / LLMRequestRejected.
            try:
                # A body without a text message raises _InvalidReply (the client's ``invalid`` class).
                reply = await self.chat.complete(**request)
                parsed, value = self._parse(reply, validate)
            except _InvalidReply as exc:
                logger.debug("%s attempt %d/%d: invalid reply: %s", purpose, attempt + 1, attempts, exc)
                if attempt == attempts - 1:
                    raise LLMReplyInvalid(purpose, cache_key, attempts, str(exc)) from None
                continue
            self._cache_write(key, cache_key, purpose, prompt_version, parsed)
            return value
        raise AssertionError("unreachable")  # pragma: no cover

    def cache_file_key(self, cache_key: Sequence[str], *, purpose: str, prompt_version: str) -> str:
        """The sha256 naming the cache file of one call."""
        material = json.dumps([list(map(str, cache_key)), self.settings.endpoint.model, purpose,
                               prompt_version], ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(material.encode("utf-8")).hexdigest()

    async def aclose(self) -> None:
        """Close the HTTP connections (the client makes new ones if used again)."""
        try:
            await self.chat.close()
        except RuntimeError:
            pass  # made in a loop that is closed now: its sockets are gone with it

    # -- internals ----------------------------------------------------------------------------
    @staticmethod
    def _parse(reply: ChatReply, validate: Callable[[Any], T]) -> tuple[Any, T]:
        if reply.finish_reason == "length":
            raise _InvalidReply("the reply was cut off (finish_reason=length)")
        if not (reply.text or "").strip():
            raise _InvalidReply("the reply is empty")
        parsed = _parse_json(reply.text)
        try:
            # What is cached and what the pipeline writes must be storable (no lone surrogate).
            json.dumps(parsed, ensure_ascii=False).encode("utf-8")
        except (UnicodeEncodeError, RecursionError):
            raise _InvalidReply("the reply holds text that is not valid Unicode (a lone surrogate)") from None
        try:
            return parsed, validate(parsed)
        except _INVALID_REPLY_ERRORS as exc:
            raise _InvalidReply(f"the reply failed validation: {exc}") from None

    def _cache_path(self, key: str) -> Path | None:
        folder = self.settings.resolved_cache_dir
        if folder is None:
            return None
        return folder / key[:2] / f"{key}.json"

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
        entry = {"key": list(map(str, cache_key)), "model": self.settings.endpoint.model, "purpose": purpose,
                 "prompt_version": prompt_version, "reply": parsed}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Written whole or not at all: a crash never leaves a half entry that a rerun would trust.
            write_atomic(path, json.dumps(entry, ensure_ascii=False))
        except OSError as exc:
            raise LLMError(f"cannot write the LLM reply cache {path}: {exc}") from None


def _parse_json(content: str) -> Any:
    """The JSON of a reply (in a code fence or not); `_InvalidReply` for anything else: bad JSON, an
    integer of more than 4,300 digits, nesting deeper than the recursion limit."""
    try:
        return json.loads(_strip_code_fence(content))
    except json.JSONDecodeError as exc:
        raise _InvalidReply(f"the reply is not JSON ({exc.msg} at char {exc.pos}): "
                            f"{content[:120]!r}") from None
    except ValueError as exc:
        raise _InvalidReply(f"the reply is not usable JSON ({exc})") from None
    except RecursionError:
        raise _InvalidReply("the reply's JSON is nested too deeply") from None


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
        raise EventLoopError(f"called from a running event loop: use 'await {async_name}(...)' there")

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
        # lazy: import time
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
