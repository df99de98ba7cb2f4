"""The exception tree of `webgym_core`: catch at the level you can handle.

Every public exception class of `webgym_core` is defined here (checked by
``tests/webgym_core/test_errors.py``); the modules that raise them import them from here.

::

    CoreError                     the root of every error webgym_core raises
     ├── SettingsError            a setting that is unknown, of the wrong type or out of range;
     │                            names the YAML key and the CLI flag (also a ValueError)
     ├── EndpointError            an OpenAI-compatible endpoint failed (the callers pass their own
     │    ├── EndpointUnavailable subclasses, e.g. PolicyUnavailable, so their trees stay theirs):
     │    │                       unreachable, or 5xx/429 through every retry
     │    ├── EndpointTimeout     no answer within the timeout, through every retry
     │    ├── EndpointRejected    the endpoint refused the request (4xx other than 429)
     │    └── EndpointReplyInvalid  HTTP 200 with no usable chat completion: no choices, no
     │                            message, content that is not text (`webgym_core.completion`)
     └── FailpointError           a failpoint set to ``raise`` fired, or ``WEBGYM_FAILPOINTS`` is
                                  malformed (`webgym_core.failpoints`)

Exempt: ``webgym_core.endpoint._Transient``, a private signal inside `ChatClient`'s retry loop
(it carries which error class to raise once the retries are spent) that never leaves the module.
"""

from __future__ import annotations

__all__ = ["CoreError", "EndpointError", "EndpointRejected", "EndpointReplyInvalid", "EndpointTimeout",
           "EndpointUnavailable", "FailpointError", "SettingsError"]


class CoreError(Exception):
    """Base of every error raised by `webgym_core`."""


class SettingsError(CoreError, ValueError):
    """A setting that is unknown, of the wrong type or out of range; the message names it."""


class EndpointError(CoreError):
    """An OpenAI-compatible endpoint failed."""


class EndpointUnavailable(EndpointError):
    """The endpoint could not be reached, or answered 5xx/429 through every retry."""


class EndpointTimeout(EndpointError):
    """The endpoint did not answer within the timeout, through every retry."""


class EndpointRejected(EndpointError):
    """The endpoint refused the request (HTTP 4xx other than 429); retrying would not help."""


class EndpointReplyInvalid(EndpointError):
    """The endpoint answered (HTTP 200) with a body that is no usable chat completion; not retried.

    ``prompt_tokens`` and ``completion_tokens`` are the counts the body reported all the same."""

    def __init__(self, message: str, *, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        super().__init__(message)
        self.prompt_tokens, self.completion_tokens = prompt_tokens, completion_tokens


class FailpointError(CoreError):
    """Raised by a failpoint set to ``raise``; also a malformed ``WEBGYM_FAILPOINTS``."""
