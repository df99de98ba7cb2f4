"""The staleness rule of the asynchronous schedule, in one place: `StalenessManager`.

An episode's version is the policy version of its oldest step (the random bootstrap and replies
naming no version count as 0); trained in the round that publishes version w + 1, that is at
trainer version w, its staleness is ``w - v``. The asynchronous schedule trains only the episodes at
most ``max_staleness`` versions behind (`StalenessManager.too_stale`), and so that the rollout does
not play episodes it would throw away, it starts at most ``limit(v)`` episodes in total while
version v serves::

    limit(v)    = min((v + max_staleness + 1) x batch_episodes + overprovision, total)
    capacity(v) = limit(v) - submitted        episodes that may still start now (never below 0)

Each round's batch takes ``batch_episodes`` episodes in commit order, so the episodes begun within
``limit(v)`` fill the batches of rounds up to ``v + max_staleness`` (commit order aside): at most
``max_staleness`` versions after the one they began under. ``overprovision`` episodes more run so
that a batch takes the first to finish, not the slowest; ``total`` is what the whole run needs.

The manager counts, by version: episodes **submitted** (begun, under the version serving when they
began), **accepted** (taken into a batch and trained on) and **rejected** (taken, but too stale:
left out of the batch), the last two under the episode's own version. It only counts and answers:
the caller asks `capacity` before it submits (`webgym_rl.loop.asynchronous` admits episodes through
it). Every method may be called from any thread.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["StalenessCounts", "StalenessManager"]


@dataclass(frozen=True)
class StalenessCounts:
    """What a `StalenessManager` has counted, each as version -> episodes."""

    submitted: dict[int, int] = field(default_factory=dict)
    """Episodes begun, by the version serving when they began (those begun before the manager
    was made, ``StalenessManager(submitted=...)``, are counted in the bound but under no version)."""
    accepted: dict[int, int] = field(default_factory=dict)
    """Episodes taken into a batch and trained on, by their version."""
    rejected: dict[int, int] = field(default_factory=dict)
    """Episodes taken but left out of their batch as too stale, by their version."""


class StalenessManager:
    """How many episodes may start under the staleness bound, and whether one is too stale to train.

    `max_staleness`: versions an episode may be behind the trainer. `batch_episodes`: episodes each
    training round takes. `overprovision`: episodes more that may run beyond the bound. `total`:
    the most episodes ever begun (None: no limit). `version`: the version serving now.
    `submitted`: episodes begun before this manager was made (a resumed run's committed episodes).
    """

    def __init__(self, max_staleness: int, batch_episodes: int, *, overprovision: int = 0,
                 total: int | None = None, version: int = 0, submitted: int = 0):
        for name, value, least in (("max_staleness", max_staleness, 0), ("batch_episodes", batch_episodes, 1),
                                   ("overprovision", overprovision, 0), ("version", version, 0),
                                   ("submitted", submitted, 0), ("total", 0 if total is None else total, 0)):
            if value < least:
                raise ValueError(f"{name}: must be >= {least}, got {value}")
        self.max_staleness, self.batch_episodes = max_staleness, batch_episodes
        self.overprovision, self.total = overprovision, total
        self._version, self._earlier = version, submitted
        self._lock = threading.Lock()
        self._submitted: Counter[int] = Counter()
        self._accepted: Counter[int] = Counter()
        self._rejected: Counter[int] = Counter()

    @property
    def version(self) -> int:
        """The version serving now (the trainer's latest published one)."""
        return self._version

    def publish(self, version: int) -> None:
        """`version` serves from now on; it never goes back."""
        with self._lock:
            if version < self._version:
                raise ValueError(f"version: {version} would go back from {self._version}")
            self._version = version

    @property
    def submitted(self) -> int:
        """Episodes begun in all (those before this manager included)."""
        with self._lock:
            return self._earlier + sum(self._submitted.values())

    def limit(self, version: int | None = None) -> int:
        """The most episodes begun in all while `version` (default: the one serving) serves."""
        version = self._version if version is None else version
        bound = (version + self.max_staleness + 1) * self.batch_episodes + self.overprovision
        return bound if self.total is None else min(bound, self.total)

    def capacity(self, version: int | None = None) -> int:
        """Episodes that may still begin while `version` (default: the one serving) serves."""
        return max(0, self.limit(version) - self.submitted)

    def submit(self) -> int:
        """Count one episode begun under the version serving now; returns that version."""
        with self._lock:
            self._submitted[self._version] += 1
            return self._version

    def accept(self, version: int) -> None:
        """Count one episode of `version` taken into a batch and trained on."""
        with self._lock:
            self._accepted[version] += 1

    def reject(self, version: int) -> None:
        """Count one episode of `version` left out of its batch as too stale."""
        with self._lock:
            self._rejected[version] += 1

    @staticmethod
    def staleness(episode_version: int, trainer_version: int) -> int:
        """Versions the episode is behind the trainer (0 for one as new as the trainer, or newer)."""
        return max(0, trainer_version - episode_version)

    def too_stale(self, episode_version: int, trainer_version: int) -> bool:
        """Whether an episode of `episode_version` is too stale to train at `trainer_version`."""
        return self.staleness(episode_version, trainer_version) > self.max_staleness

    def counts(self) -> StalenessCounts:
        """The counts so far (a copy), each sorted by version."""
        with self._lock:
            return StalenessCounts(submitted=dict(sorted(self._submitted.items())),
                                   accepted=dict(sorted(self._accepted.items())),
                                   rejected=dict(sorted(self._rejected.items())))
