"""The loop's state file, ``OUT/loop_state.json``: which phases of which iterations are finished.

::

    {"version": 1,
     "identity": {"tasks": ..., "model": ..., "objective": ..., ...},   what defines this run
     "settings": {...},                                                  as `settings_to_dict` writes them
     "iterations": {"0": {"rollout": {...}, "train": {...}, ...}, ...},  --mode sync: each finished phase
     "async": {"versions": [...], "position": {...}, "batches": {...},   --mode async (`webgym_rl.async_loop`)
               "metrics": {...}},
     "last_error": null | {"iteration", "phase", "error", "at"}}

The file is rewritten atomically (`webgym_core.files.write_json_atomic`) after every phase, so a
crash leaves the previous state. A rerun with other values of the identity settings (`IDENTITY`)
is another run and is refused with `LoopStateError`; any other setting may change between reruns
(more iterations, a new learning rate). Secrets (API keys, tokens) are not written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webgym_core.files import write_json_atomic
from webgym_core.settings import settings_to_dict
from webgym_rl.errors import LoopStateError

if TYPE_CHECKING:
    from webgym_rl.loop import LoopSettings

__all__ = ["IDENTITY", "STATE_FILE", "STATE_VERSION", "load_state", "save_state"]

STATE_FILE = "loop_state.json"
STATE_VERSION = 1
IDENTITY = ("tasks", "model", "objective", "bootstrap_policy", "attempts", "split", "sampler",
            "seed", "mode")
"""Settings that define what a loop folder holds (YAML keys): a rerun with other values is another run."""
_SECRETS = ("api_key", "browser_token")


def _recorded(value: Any) -> Any:
    """`value` (from `settings_to_dict`) with the secrets blanked out."""
    if isinstance(value, Mapping):
        return {k: ("(set)" if k in _SECRETS and v else _recorded(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_recorded(v) for v in value]
    return value


def _identity(settings: LoopSettings) -> dict[str, Any]:
    # Flat groups' keys sit beside the loop's own (``objective``, ``attempts``), as in YAML.
    recorded = settings_to_dict(settings)
    return {name: recorded[name] for name in IDENTITY}


def load_state(settings: LoopSettings) -> dict[str, Any]:
    """The state of the loop folder ``settings.out``: a fresh one for a new folder, else the one in
    the file, checked against the identity settings (raises `LoopStateError` naming the one that
    differs) and with the current settings recorded."""
    out = settings.out_dir
    path = out / STATE_FILE
    identity = _identity(settings)
    recorded = _recorded(settings_to_dict(settings))
    if not path.exists():
        if out.is_dir() and any(p.name.startswith("iter-") for p in out.iterdir()):
            raise LoopStateError(f"{out} holds iteration folders but no {STATE_FILE}; "
                                 "choose an empty or new --out folder")
        return {"version": STATE_VERSION, "identity": identity, "settings": recorded,
                "iterations": {}, "last_error": None}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise LoopStateError(f"{path} is unreadable: {exc}") from None
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise LoopStateError(f"{path}: not a webgym-rl loop state (version {STATE_VERSION})")
    for name, value in identity.items():
        if state["identity"].get(name) != value:
            raise LoopStateError(
                f"{path} belongs to a run with {name}={state['identity'].get(name)!r}, not {value!r}; "
                "rerun with the same value to resume, or choose a new --out folder")
    state["settings"] = recorded
    return state


def save_state(settings: LoopSettings, state: dict[str, Any]) -> Path:
    """Write `state` to the loop folder's state file, atomically; returns its path."""
    path = settings.out_dir / STATE_FILE
    write_json_atomic(path, state)
    return path
