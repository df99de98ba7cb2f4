"""The exception tree of `webgym_core`: catch at the level you can handle.

::

    CoreError
     ├── SettingsError            a setting that is unknown, of the wrong type or out of range;
     │                            names the YAML key and the CLI flag (also a ValueError)
     └── EndpointError            an OpenAI-compatible endpoint failed (the callers pass their own
          ├── EndpointUnavailable subclasses, e.g. PolicyUnavailable, so their trees stay theirs)
          ├── EndpointTimeout
          └── EndpointRejected
"""

from __future__ import annotations

__all__ = ["CoreError", "EndpointError", "EndpointRejected", "EndpointTimeout", "EndpointUnavailable",
           "SettingsError"]


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
