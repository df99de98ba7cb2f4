"""Failpoints: named places where a test or a soak run makes the toolkit fail on purpose.

A failpoint costs one dictionary lookup when none is set. Set them in the environment (child
processes inherit them, so a point inside the resident trainer or the policy server fires there)::

    WEBGYM_FAILPOINTS="loop.publish=kill@2,trainer.train_round=raise"

Each entry is ``name=action`` with an optional ``@n``: the action happens the n-th time this process
reaches the point (the first time by default), once. Actions:

- ``kill``: SIGKILL this process (nothing after the point runs: no ``finally``, no flush);
- ``raise``: raise `FailpointError` (an ordinary exception: the code around it handles it as it
  would any failure);
- ``exit``: ``os._exit(70)``.

The points the toolkit has (grep ``failpoint(`` for the list): ``loop.publish`` (the endpoint
has the new weights, the loop has not recorded the version), ``trainer.train_round`` (the resident
trainer has trained the round's steps, the loop has not recorded the round).
"""

from __future__ import annotations

import os
import signal
import threading

from webgym_core.errors import FailpointError

__all__ = ["ENV", "FailpointError", "failpoint"]

ENV = "WEBGYM_FAILPOINTS"
_ACTIONS = ("kill", "raise", "exit")

_lock = threading.Lock()
_hits: dict[str, int] = {}
_parsed: tuple[str, dict[str, tuple[str, int]]] | None = None


def _points() -> dict[str, tuple[str, int]]:
    global _parsed
    text = os.environ.get(ENV, "")
    if _parsed is not None and _parsed[0] == text:
        return _parsed[1]
    points: dict[str, tuple[str, int]] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, _, rest = entry.partition("=")
        action, _, nth = rest.partition("@")
        if not name or action not in _ACTIONS or (nth and not nth.isdigit()) or nth == "0":
            raise FailpointError(f"{ENV}: {entry!r} is not name=ACTION[@N] (ACTION one of "
                                 f"{', '.join(_ACTIONS)}; N from 1)")
        points[name] = (action, int(nth or 1))
    _parsed = (text, points)
    return points


def failpoint(name: str) -> None:
    """Fail here if ``WEBGYM_FAILPOINTS`` sets `name` and this is the hit it names."""
    points = _points()
    if name not in points:
        return
    action, nth = points[name]
    with _lock:
        _hits[name] = hit = _hits.get(name, 0) + 1
    if hit != nth:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "exit":
        os._exit(70)
    raise FailpointError(f"failpoint {name} (hit {hit}) raised, as {ENV} asked")
