"""What the loop tells its caller as it goes: one small frozen dataclass per kind of event.

`run_loop(settings, on_event=...)` calls ``on_event(event)`` with one of these; each says in
`Event.describe` how the command line shows it, so the CLI's progress is ``print(event.describe())``
and a caller that wants one kind matches on the class (``isinstance(event, VersionPublished)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BatchReady",
    "CheckpointWritten",
    "EvalDone",
    "EvalStarted",
    "Event",
    "OnEvent",
    "PhaseDone",
    "PhaseSkipped",
    "PhaseStarted",
    "PolicyServing",
    "ResumedFrom",
    "RolloutStarted",
    "ServiceStarted",
    "VersionPublished",
]


@dataclass(frozen=True)
class Event:
    """Base of the loop's events."""

    def describe(self) -> str:
        return type(self).__name__


OnEvent = Callable[[Event], None]


@dataclass(frozen=True)
class ServiceStarted(Event):
    """The loop started a service it needs: ``browser`` server, ``sites`` server or ``policy``
    endpoint."""

    service: str
    url: str
    seconds: float = 0.0
    checkpoint: str = ""
    pid: int | None = None

    def describe(self) -> str:
        what = f" serving {self.checkpoint}" if self.checkpoint else ""
        return f"{self.service} started: {self.url}{what} ({self.seconds:.1f} s)"


@dataclass(frozen=True)
class PolicyServing(Event):
    """The policy endpoint serves `version` from now on (published by `path`)."""

    version: int
    path: str
    """memory, folder, or start (the starting model)."""
    seconds: float
    weights: str = ""
    """The folder it loaded (folder path), or '' (memory)."""

    def describe(self) -> str:
        where = f" from {self.weights}" if self.weights else ""
        return f"policy serves v{self.version} ({self.path}{where}, {self.seconds:.2f} s)"


@dataclass(frozen=True)
class ResumedFrom(Event):
    """A rerun continues a loop folder: the trainer restored `checkpoint` (after `round`) and the
    versions after it are `superseded` (their rounds are trained again)."""

    round: int
    checkpoint: str
    superseded: tuple[int, ...] = ()

    def describe(self) -> str:
        again = (f"; versions {', '.join(f'v{v}' for v in self.superseded)} superseded, their rounds train "
                 "again" if self.superseded else "")
        return f"resumed: trainer at round {self.round} from {self.checkpoint}{again}"


@dataclass(frozen=True)
class PhaseStarted(Event):
    round: int
    phase: str

    def describe(self) -> str:
        return f"round {self.round}: {self.phase} ..."


@dataclass(frozen=True)
class PhaseSkipped(Event):
    """A phase finished by an earlier run of the same command."""

    round: int
    phase: str

    def describe(self) -> str:
        return f"round {self.round}: {self.phase} already done"


@dataclass(frozen=True)
class PhaseDone(Event):
    round: int
    phase: str
    record: Any
    """The phase's record, as `webgym_rl.loop.state` keeps it."""

    def describe(self) -> str:
        return f"round {self.round}: {self.phase} done ({self.record.summary()})"


@dataclass(frozen=True)
class RolloutStarted(Event):
    """The asynchronous rollout began (from `version`)."""

    version: int
    batch_episodes: int
    max_staleness: int
    overprovision: int
    base_url: str

    def describe(self) -> str:
        return (f"async: from v{self.version}, {self.batch_episodes} episodes per version, max staleness "
                f"{self.max_staleness}, {self.overprovision} over-provisioned")


@dataclass(frozen=True)
class BatchReady(Event):
    """The trainer took the episodes of round `round` (they train version ``round + 1``)."""

    round: int
    episodes: int
    dropped_stale: int
    waited_s: float

    def describe(self) -> str:
        return (f"async: batch for v{self.round + 1} ready ({self.episodes} episodes, {self.dropped_stale} "
                f"too stale, waited {self.waited_s:.1f} s); training")


@dataclass(frozen=True)
class VersionPublished(Event):
    version: int
    path: str
    publish_s: float
    metrics: Any = None
    """`AsyncMetrics` (async schedule) or None."""
    checkpoint: str = ""

    def describe(self) -> str:
        line = f"v{self.version} published ({self.path}, {self.publish_s:.2f} s)"
        if self.metrics is not None:
            line += f"; {self.metrics.summary()}"
        return line


@dataclass(frozen=True)
class CheckpointWritten(Event):
    round: int
    folder: str
    seconds: float

    def describe(self) -> str:
        return f"full checkpoint after round {self.round}: {self.folder} ({self.seconds:.1f} s)"


@dataclass(frozen=True)
class EvalStarted(Event):
    version: int

    def describe(self) -> str:
        return f"evaluating v{self.version}"


@dataclass(frozen=True)
class EvalDone(Event):
    version: int
    record: Any = field(repr=False)

    def describe(self) -> str:
        return f"v{self.version} evaluated: {self.record.summary()}"
