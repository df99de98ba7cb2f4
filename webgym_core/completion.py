"""One chat completion as the toolkit reads it: `ChatReply`, checked once; `clean_text` for storable text.

`ChatClient.complete` returns a `ChatReply` read from the endpoint's body by `ChatReply.read`.
The ``openai`` client checks none of the body's types, and a broken server (or a proxy in front
of it) can send anything with HTTP 200, so every field is read here as possibly anything:

- what a caller cannot do without raises `webgym_core.errors.EndpointReplyInvalid` (or the class
  the caller passed to `ChatClient`), naming the URL and what is missing: no ``choices``, a first
  choice without a ``message``, a ``content`` that is neither text nor null;
- what is only reported about the reply is read as "nothing" when it is not what it should be: a
  token count that is not a positive integer is 0, a ``finish_reason`` that is not text is "", a
  log-probability list with one entry that is not a number is empty (a partial list would no
  longer line up with the tokens), token ids outside 0..2**31-1 are dropped as a whole.

The token ids are the extension that vLLM (0.10.2+, ``return_token_ids``) and the CPU policy server
add to OpenAI's format: ``choices[0].token_ids`` (the reply's) and ``prompt_token_ids`` beside
``choices`` (the prompt's). All text of the reply goes through `clean_text`, so that what a
caller stores (a step's response, a judge's reason) can be written to a file.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from webgym_core.errors import EndpointReplyInvalid

__all__ = ["ChatReply", "ToolCall", "clean_text"]

_SURROGATE = re.compile(r"[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """`text` with each lone UTF-16 surrogate replaced by U+FFFD. A Python string can hold one
    (JSON's ``"\\ud800"`` escape decodes to it) but UTF-8 cannot encode it, so no file could store
    the text. ASCII text is returned as it is without a scan."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def _field(value: Any, name: str) -> Any:
    """``value.name`` (an ``openai`` object) or ``value[name]`` (a plain dict); None when absent."""
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)


def _count(value: Any) -> int:
    """A token count as the endpoint reported it; 0 when it is not a count (a broken server)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _text(value: Any) -> str:
    """`value` as clean text; "" when it is not text."""
    return clean_text(value) if isinstance(value, str) else ""


def _logprobs(choice: Any) -> tuple[float, ...]:
    """The reply tokens' log-probabilities from ``choice.logprobs.content``; empty when absent or
    when any of them is not a number."""
    content = _field(_field(choice, "logprobs"), "content")
    if not isinstance(content, list):
        return ()
    values = [_field(token, "logprob") for token in content]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return ()
    try:
        return tuple(float(v) for v in values)
    except OverflowError:  # an integer beyond any float
        return ()


def _token_ids(value: Any) -> tuple[int, ...]:
    """Token ids as the endpoint returned them; empty when absent or when any is not an id."""
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31 for v in value):
        return ()
    return tuple(value)


class ToolCall(BaseModel):
    """A call the server moved out of the text (vLLM ``--enable-auto-tool-choice``), as it came:
    the name and the arguments may be anything, and it is the agent's parser that judges them."""

    model_config = ConfigDict(frozen=True)

    name: Any = None
    arguments: Any = None


class ChatReply(BaseModel):
    """The first choice of a chat completion and what the endpoint reported with it."""

    model_config = ConfigDict(frozen=True, strict=True)

    url: str
    """The endpoint's base URL (errors about this reply name it)."""
    text: str | None
    """The message content, cleaned (`clean_text`); None when the server sent null."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The message's tool calls that have a ``function`` (others are not calls at all)."""
    finish_reason: str = ""
    """``stop``, ``length``, ... ("" when the server sent none, or something that is not text)."""
    logprobs: tuple[float, ...] = ()
    """Log-probability of each reply token, when the endpoint returned them all."""
    token_ids: tuple[int, ...] = ()
    """The reply's token ids as sampled (``choices[0].token_ids``), when the endpoint returned them."""
    prompt_token_ids: tuple[int, ...] = ()
    """The prompt's token ids (``prompt_token_ids``), when the endpoint returned them."""
    prompt_tokens: int = 0
    """``usage.prompt_tokens`` (0 when it is not a positive count)."""
    completion_tokens: int = 0
    """``usage.completion_tokens`` (0 when it is not a positive count)."""
    served_model: str = ""
    """The ``model`` the endpoint answered as ("" when absent)."""
    system_fingerprint: str = ""
    """The ``system_fingerprint`` ("" when absent; the CPU policy server sets its weights' ``v<N>``)."""

    @classmethod
    def read(cls, body: Any, *, url: str) -> ChatReply:
        """The reply in `body` (an ``openai`` ``ChatCompletion`` or its JSON as a dict), whatever the
        endpoint at `url` sent. Raises `EndpointReplyInvalid` (with the token counts the body reported, which
        were spent all the same) when it has no choice, no message or content that is not text."""
        usage = _field(body, "usage")
        tokens = {"prompt_tokens": _count(_field(usage, "prompt_tokens")),
                  "completion_tokens": _count(_field(usage, "completion_tokens"))}
        choices = _field(body, "choices")
        if not isinstance(choices, list) or not choices:
            raise EndpointReplyInvalid(f"{url} returned a completion without choices", **tokens)
        choice = choices[0]
        message = _field(choice, "message")
        if message is None:
            raise EndpointReplyInvalid(f"{url} returned a choice without a message", **tokens)
        content = _field(message, "content")
        if content is not None and not isinstance(content, str):
            raise EndpointReplyInvalid(f"{url} returned a message whose content is "
                                       f"{type(content).__name__}, not text", **tokens)
        calls = _field(message, "tool_calls")
        functions = [_field(call, "function") for call in (calls if isinstance(calls, list) else ())]
        return cls(
            url=url,
            text=None if content is None else clean_text(content),
            tool_calls=tuple(ToolCall(name=_field(f, "name"), arguments=_field(f, "arguments"))
                             for f in functions if f is not None),
            finish_reason=_text(_field(choice, "finish_reason")),
            logprobs=_logprobs(choice),
            token_ids=_token_ids(_field(choice, "token_ids")),
            prompt_token_ids=_token_ids(_field(body, "prompt_token_ids")),
            served_model=_text(_field(body, "model")),
            system_fingerprint=_text(_field(body, "system_fingerprint")),
            **tokens,
        )

