"""The exception tree of `webgym_rollout`: catch at the level you can handle.

Infrastructure failures raise these; agent mistakes (a click on nothing, a bad selector value) are
data and come back as ``ExecuteResult(ok=False, error=...)`` instead. Retry decisions are made by
``except`` clauses on these classes, never by matching message text. Every class has a ``kind``
(snake_case) used in HTTP error bodies, in ``/metrics`` and in trajectory statuses
(``error:<kind>``); `error_for_kind` maps a kind back to its class (the client does this).

::

    RolloutError
     ├── BrowserError                  browser environment server and its client
     │    ├── SessionNotFound          unknown or expired session id (HTTP 404)
     │    ├── BrowserCrashed           the session's page, context or browser process died (HTTP 502)
     │    ├── OperationTimeout         an operation ran past its bound: hung page, endless load (504)
     │    ├── NavigationRefused        the URL guard or the egress proxy refused a URL; names it (403)
     │    ├── SiteBlocked              the origin is on the failure blocklist until it expires or an
     │    │                            operator lifts it (HTTP 423)
     │    ├── ServerBusy               an operation queue is full; transient, retry later (HTTP 429)
     │    ├── ServerUnavailable        no server answers / connection failed / 5xx (transient)
     │    ├── Unauthorized             missing or wrong bearer token (HTTP 401)
     │    └── InvalidRequest           the request itself is malformed (HTTP 422)
     ├── PolicyError                   the policy endpoint: PolicyUnavailable, PolicyTimeout,
     │                                 PolicyRejected (webgym_rollout.policy); the CPU policy
     │                                 server's own (webgym_rollout.policy_server)
     ├── JudgeError                    the judge endpoint: JudgeUnavailable, JudgeTimeout, JudgeRejected,
     │                                 JudgeReplyInvalid (webgym_rollout.judge)
     ├── TrajectoryError               a trajectory source or row that does not fit the contract
     │                                 (webgym_rollout.trajectory; ShardSchemaError: a shard's
     │                                 columns); DatasetExists, EpisodeRepeated, EpisodeUnstorable,
     │                                 PushRefused (webgym_rollout.dataset)
     ├── EpisodeOver                   WebEnv.step after the episode ended (webgym_rollout.env)
     └── ModelingError                 a checkpoint that cannot be loaded (webgym_rollout.modeling)

An episode that fails records its error's kind as its `EpisodeStatus` (``error:<kind>``).
"""

from __future__ import annotations

__all__ = [
    "BrowserCrashed",
    "BrowserError",
    "InvalidRequest",
    "JudgeError",
    "NavigationRefused",
    "OperationTimeout",
    "PolicyError",
    "RolloutError",
    "ServerBusy",
    "ServerUnavailable",
    "SessionNotFound",
    "SiteBlocked",
    "TRANSIENT_ERRORS",
    "Unauthorized",
    "error_for_kind",
]


class RolloutError(Exception):
    """Base of every error raised by `webgym_rollout`."""

    kind = "rollout_error"


class BrowserError(RolloutError):
    """A failure of the browser environment (server side or talking to it)."""

    kind = "browser_error"
    status_code = 500
    session_closed = False
    """True when the server closed the session because of this error (e.g. a hung page)."""


class SessionNotFound(BrowserError):
    """The session id is unknown: never created, closed, or expired after being idle."""

    kind = "session_not_found"
    status_code = 404


class BrowserCrashed(BrowserError):
    """The page, context or browser process of this session died; the session is gone."""

    kind = "browser_crashed"
    status_code = 502


class OperationTimeout(BrowserError):
    """An operation ran past its time bound (a page stuck in a JS loop, a load that never ends)."""

    kind = "operation_timeout"
    status_code = 504


class NavigationRefused(BrowserError):
    """The URL guard or the egress proxy refused a URL (scheme, private address or a name that
    resolves to one, not allowlisted); names the URL."""

    kind = "navigation_refused"
    status_code = 403

    def __init__(self, message: str, url: str = ""):
        super().__init__(message)
        self.url = url


class SiteBlocked(BrowserError):
    """The origin failed repeatedly and is on the blocklist until its entry expires or is lifted."""

    kind = "site_blocked"
    status_code = 423


class ServerBusy(BrowserError):
    """An operation queue of the server is full; transient."""

    kind = "server_busy"
    status_code = 429


class ServerUnavailable(BrowserError):
    """No browser server answered (connection refused, reset, 5xx); transient."""

    kind = "server_unavailable"
    status_code = 503


class Unauthorized(BrowserError):
    """The server wants a bearer token and the request had none or a wrong one."""

    kind = "unauthorized"
    status_code = 401


class InvalidRequest(BrowserError):
    """The request is malformed (bad action fields, bad screenshot format)."""

    kind = "invalid_request"
    status_code = 422


class PolicyError(RolloutError):
    """Base for failures of the policy endpoint; subclasses live with the policy code."""

    kind = "policy_error"


class JudgeError(RolloutError):
    """Base for failures of the judge endpoint; subclasses live with the judge code."""

    kind = "judge_error"


# The client retries these (on another server where it can); everything else is final.
TRANSIENT_ERRORS: tuple[type[BrowserError], ...] = (ServerBusy, ServerUnavailable)

_BY_KIND: dict[str, type[BrowserError]] = {
    cls.kind: cls
    for cls in (
        BrowserError,
        SessionNotFound,
        BrowserCrashed,
        OperationTimeout,
        NavigationRefused,
        SiteBlocked,
        ServerBusy,
        ServerUnavailable,
        Unauthorized,
        InvalidRequest,
    )
}


def error_for_kind(kind: str) -> type[BrowserError]:
    """The `BrowserError` subclass whose ``kind`` is `kind` (`BrowserError` for unknown kinds)."""
    return _BY_KIND.get(kind, BrowserError)
