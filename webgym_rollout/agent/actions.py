"""Moved: the action space is `webgym_rollout.actions` (a trajectory step holds a typed action, so the
action space sits below the trajectory contract). This module re-exports its names, with a
DeprecationWarning, for one release."""

from __future__ import annotations

import warnings
from typing import Any

import webgym_rollout.actions as _actions


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    value = getattr(_actions, name)  # AttributeError for a name the action space never had
    warnings.warn(f"webgym_rollout.agent.actions.{name} moved to webgym_rollout.actions.{name}; "
                  "the old path goes away in the next release", DeprecationWarning, stacklevel=2)
    return value
