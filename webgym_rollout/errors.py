"""The exception tree of `webgym_rollout`: catch at the level you can handle.

Infrastructure failures raise these; agent mistakes (a click on nothing, a bad selector value, a
reply without a valid tool call) are data and come back as ``ExecuteResult(ok=False, error=...)``
or a step's parse error instead. Retry decisions are made by ``except`` clauses on these classes,
never by matching message text. Every class has its own ``kind`` (snake_case) used in HTTP error
bodies, in ``/metrics`` and in trajectory statuses (``error:<kind>``); `error_for_kind` maps a
browser error's kind back to its class (the client does this).

Every public exception class of `webgym_rollout` is defined here (checked by
``tests/webgym_rollout/test_errors.py``); the modules that raise one import it from here and still
export it (``from webgym_rollout.judge.judges import JudgeTimeout`` works).

::

    RolloutError                      the root of every error webgym_rollout raises
     ├── BrowserError                 browser environment server and its client (HTTP 500)
     │    ├── SessionNotFound         unknown or expired session id (HTTP 404)
     │    ├── BrowserCrashed          the session's page, context or browser process died (HTTP 502)
     │    ├── OperationTimeout        an operation ran past its bound: hung page, endless load (504)
     │    ├── NavigationRefused       the URL guard or the egress proxy refused a URL; names it (403)
     │    ├── SiteBlocked             the origin is on the failure blocklist until it expires or an
     │    │                           operator lifts it (HTTP 423)
     │    ├── ServerBusy              an operation queue is full; transient, retry later (HTTP 429)
     │    ├── ServerUnavailable       no server answers / connection failed / 5xx (transient)
     │    ├── Unauthorized            missing or wrong bearer token (HTTP 401)
     │    └── InvalidRequest          the request itself is malformed, or names a page its kind's
     │                                site does not have (HTTP 422)
     ├── ConnectionBroke              a connection to a browser server broke after the request was
     │                                written, so it may have run (`browser.http`; the client turns
     │                                it into ServerUnavailable and resends only idempotent calls)
     ├── AllowlistError (ValueError)  an ``--allow-hosts`` entry the URL guard does not take: malformed,
     │                                or a whole local host (`browser.guard`; names the entry)
     ├── ResolutionFailed (OSError)   the egress proxy's resolver found no address for a name
     │                                (`browser.egress`; the proxy answers ``unresolved``)
     ├── ActionParseError (ValueError) a policy reply without one valid ``computer_use`` call, or an
     │                                element action naming an element the page does not list
     │                                (`webgym_rollout.actions`; `parse_response` and the env record it
     │                                on the step)
     ├── PolicyError                  the policy endpoint (`agent.policies`); the CPU policy server's
     │    │                           errors (`webgym_rl.errors.PolicyServerError`) are PolicyErrors too
     │    ├── PolicyUnavailable       unreachable, or 5xx/429 through every retry
     │    ├── PolicyTimeout           no answer within the timeout, through every retry
     │    └── PolicyRejected          the endpoint refused the request (4xx other than 429)
     ├── JudgeError                   the judge endpoint (`judge.judges`)
     │    ├── JudgeUnavailable        unreachable, or 5xx/429 through every retry
     │    ├── JudgeTimeout            no answer within the timeout, through every retry
     │    ├── JudgeRejected           the endpoint refused the request (4xx other than 429)
     │    └── JudgeReplyInvalid       a reply cut off, or its verdict line missing or ambiguous
     ├── LabelError                   human labels that cannot be read or do not match the episodes
     │                                (`judge.labels`; names the file, line and field)
     ├── TruthFileError               a run's ground-truth file (truth.jsonl) that is missing or cannot
     │                                be read (`judge.truth`; names the file and line)
     ├── TrajectoryError              a trajectory source or row that does not fit the contract
     │    │                           (`trajectory.contract`, `.reader`, `.recordings`)
     │    ├── ShardSchemaError        a shard whose columns are not its schema version's (names it)
     │    ├── DatasetExists           the output folder already holds a run (`trajectory.writer`)
     │    ├── EpisodeRepeated (ValueError)   an episode (task id, attempt) already in the dataset
     │    ├── EpisodeUnstorable (ValueError) an episode whose row does not fit the columns
     │    └── PushRefused             the folder to push is not a finished dataset (`trajectory.hub`)
     ├── EpisodeOver                  `WebEnv.step` after the episode ended (`env`)
     └── FleetError                   no such fleet, Ray not reachable, or the fleet did not come up
                                      (`fleet`)

Exempt (control flow inside one module, never raised to a caller):
``webgym_rollout.browser.operations._LimitReached``, a Playwright call that ran out of its own
time limit, which the operation turns into `OperationTimeout` naming the limit.

The local sites' truth errors, `TruthUnavailable` and its `TruthTimeout`, are the sites' own
(`webgym_sites.errors`, under `SitesError`); this module still exports them, where they were
defined before the sites had a package of their own.

An episode that fails records its error's kind as its `EpisodeStatus` (``error:<kind>``). Models
that do not load raise `webgym_rl.errors.ModelingError`, in the package that loads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from webgym_sites.errors import TruthTimeout, TruthUnavailable

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "TRANSIENT_ERRORS",
    "ActionParseError",
    "AllowlistError",
    "BrowserCrashed",
    "BrowserError",
    "ConnectionBroke",
    "DatasetExists",
    "EpisodeOver",
    "EpisodeRepeated",
    "EpisodeUnstorable",
    "FleetError",
    "InvalidRequest",
    "JudgeError",
    "JudgeRejected",
    "JudgeReplyInvalid",
    "JudgeTimeout",
    "JudgeUnavailable",
    "LabelError",
    "NavigationRefused",
    "OperationTimeout",
    "PolicyError",
    "PolicyRejected",
    "PolicyTimeout",
    "PolicyUnavailable",
    "PushRefused",
    "ResolutionFailed",
    "RolloutError",
    "ServerBusy",
    "ServerUnavailable",
    "SessionNotFound",
    "ShardSchemaError",
    "SiteBlocked",
    "TrajectoryError",
    "TruthFileError",
    "TruthTimeout",
    "TruthUnavailable",
    "Unauthorized",
    "error_for_kind",
]


class RolloutError(Exception):
    """Base of every error raised by `webgym_rollout`."""

    kind = "rollout_error"


# ------------------------------------------------------------ browser server (HTTP error bodies)

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
    """The request is malformed (bad action fields, bad screenshot format), or its environment's start
    page is missing on the site (a MiniWoB task name the site server does not serve)."""

    kind = "invalid_request"
    status_code = 422


# -------------------------------------------------------------- browser client, guard, egress proxy

class ConnectionBroke(RolloutError):
    """The connection failed after the request was written: it may have reached the server.
    (Failing to connect is `ServerUnavailable` at once: that request cannot have run.)"""

    kind = "connection_broke"


class AllowlistError(RolloutError, ValueError):
    """An ``--allow-hosts`` entry the guard does not take: malformed, or a whole local host (a bare
    loopback or private IP literal, ``localhost``) where a ``host:port`` is needed. Names the entry."""

    kind = "allowlist_error"


class ResolutionFailed(RolloutError, OSError):
    """A name could not be resolved (the proxy answers ``unresolved``)."""

    kind = "resolution_failed"


# --------------------------------------------------------------------------------------- agent

class ActionParseError(RolloutError, ValueError):
    """The policy's reply holds no valid ``computer_use`` call, or its element action names an element
    the step's list does not hold; the message says what is wrong."""

    kind = "action_parse_error"


class PolicyError(RolloutError):
    """Base for failures of the policy endpoint."""

    kind = "policy_error"


class PolicyUnavailable(PolicyError):
    """The endpoint could not be reached, or answered 5xx/429 through every retry."""

    kind = "policy_unavailable"


class PolicyTimeout(PolicyError):
    """The endpoint did not answer within the timeout, through every retry."""

    kind = "policy_timeout"


class PolicyRejected(PolicyError):
    """The endpoint refused the request (HTTP 4xx other than 429); retrying would not help."""

    kind = "policy_rejected"


# --------------------------------------------------------------------------------------- judge

class JudgeError(RolloutError):
    """Base for failures of the judge endpoint."""

    kind = "judge_error"


class JudgeUnavailable(JudgeError):
    """The judge endpoint could not be reached, or answered 5xx/429 through every retry."""

    kind = "judge_unavailable"


class JudgeTimeout(JudgeError):
    """The judge endpoint did not answer within the timeout, through every retry."""

    kind = "judge_timeout"


class JudgeRejected(JudgeError):
    """The judge endpoint refused the request (HTTP 4xx other than 429)."""

    kind = "judge_rejected"


class JudgeReplyInvalid(JudgeError):
    """A judge reply was truncated, or its verdict line was missing or ambiguous."""

    kind = "judge_reply_invalid"


class LabelError(RolloutError):
    """Human labels that cannot be read, or that do not match the episodes."""

    kind = "label_error"


class TruthFileError(RolloutError):
    """A run's ground-truth file (``truth.jsonl``, the local sites' facts of each episode) that is
    missing, cannot be read, or does not match the run's episodes."""

    kind = "truth_file_error"


# ---------------------------------------------------------------------------------- trajectory

class TrajectoryError(RolloutError):
    """A source that is not a trajectory dataset, or a row that does not fit the contract."""

    kind = "trajectory_error"


class ShardSchemaError(TrajectoryError):
    """A shard (or a Hub dataset) whose columns are not those of its trajectory schema version: one
    missing, one unknown, or one of another type. `path` is the shard (None for a Hub dataset)."""

    kind = "shard_schema_error"

    def __init__(self, message: str, *, path: Path | None = None, version: str = "") -> None:
        super().__init__(message)
        self.path, self.version = path, version


class DatasetExists(TrajectoryError):
    """The output folder already holds a run; resume it or choose another folder."""

    kind = "dataset_exists"


class EpisodeRepeated(TrajectoryError, ValueError):
    """An episode (task id and attempt) that the dataset already holds."""

    kind = "episode_repeated"


class EpisodeUnstorable(TrajectoryError, ValueError):
    """An episode whose row does not fit the trajectory columns (a number out of its column's range);
    nothing of it is written, and the episodes buffered with it are kept."""

    kind = "episode_unstorable"


class PushRefused(TrajectoryError):
    """The folder is not a finished trajectory dataset."""

    kind = "push_refused"


# -------------------------------------------------------------------------- environment, fleet

class EpisodeOver(RolloutError):
    """`step` was called on an environment whose episode has ended (or never began): `reset` first."""

    kind = "episode_over"


class FleetError(RolloutError):
    """A fleet that does not exist, did not come up, or a Ray cluster that cannot be reached."""

    kind = "fleet_error"


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
