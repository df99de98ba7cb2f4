"""`VersionFence`: no policy request overlaps a change of weights, where the endpoint cannot say which
weights answered.

The CPU policy server stamps every reply with the version that produced it (``system_fingerprint``),
so a step's version is the server's word even when a publish lands while the request runs. vLLM's
weight updates (``--policy-updater vllm_weights``), an endpoint reloaded through a hook of its own
(``--policy-reload-url``) and a restarted ``--policy-command`` do not: a request sent just before a
publish may be answered by the new weights, and the client's belief (the version when it sent the
request) would be off by one. For those, the loop puts a fence around each publish: while the
weights change (and the loop's version number with them), no new request starts, and the publish
waits for the requests already running to finish. Then the version a request reads when it starts
is the one that answers it, exactly. The cost is a short pause of the rollouts at each publish
(vLLM's own ``/pause`` pauses them too).

The fence is shared by threads (the rollout's and the evaluation's event loops ask, the trainer's
thread publishes): a request waits for it on its event loop, never blocking it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator

__all__ = ["POLL_S", "VersionFence"]

POLL_S = 0.01
"""How often a request waiting for a publish to end looks again."""


class VersionFence:
    """A readers-writer fence: many requests at once, or one publish (which waits for them)."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        """False: requests and publishes never wait (an endpoint that stamps its replies)."""
        self._cond = threading.Condition()
        self._running = 0
        self._publishing = False
        self.publishes = 0
        """Publishes that went through the fence."""

    def _try_enter(self) -> bool:
        with self._cond:
            if self._publishing:
                return False
            self._running += 1
            return True

    def _leave(self) -> None:
        with self._cond:
            self._running -= 1
            self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def request(self) -> AsyncIterator[None]:
        """Around one policy request: waits while a publish is under way (polling its event loop every
        `POLL_S`, so a cancelled request never holds the fence)."""
        if not self.enabled:
            yield
            return
        while not self._try_enter():
            await asyncio.sleep(POLL_S)
        try:
            yield
        finally:
            self._leave()

    @contextlib.contextmanager
    def publish(self) -> Iterator[None]:
        """Around one publish (new weights and the loop's version number): no new request starts, and
        the ones running finish first."""
        if not self.enabled:
            yield
            return
        with self._cond:
            self._cond.wait_for(lambda: not self._publishing)
            self._publishing = True
            self._cond.wait_for(lambda: self._running == 0)
        try:
            yield
        finally:
            with self._cond:
                self._publishing = False
                self.publishes += 1
                self._cond.notify_all()
