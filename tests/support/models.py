"""Tiny random Qwen-VL checkpoints, built once per test session.

`tiny_model_dir(family)` builds (on first use) and returns the folder of a tiny random checkpoint
of that family under one session-wide temporary folder. The fixtures `tiny_qwen2_vl` and
`tiny_qwen3_vl` wrap it. Tests must treat these folders as read-only: copy one (or
`webgym_rl.tiny.build_tiny_model` into `tmp_path`) before changing anything.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

__all__ = ["tiny_model_dir", "tiny_qwen2_vl", "tiny_qwen3_vl"]

_lock = threading.Lock()
_built: dict[tuple[str, int], Path] = {}
_root: Path | None = None


def _session_root() -> Path:
    global _root
    if _root is None:
        _root = Path(tempfile.mkdtemp(prefix="webgym-tiny-models-"))
        atexit.register(shutil.rmtree, _root, ignore_errors=True)
    return _root


def tiny_model_dir(family: str = "qwen2_vl", seed: int = 0) -> Path:
    """The folder of a tiny random `family` checkpoint with `seed`, built on first use."""
    from webgym_rl.tiny import build_tiny_model

    with _lock:
        key = (family, seed)
        if key not in _built:
            _built[key] = build_tiny_model(_session_root() / f"tiny-{family}-seed{seed}", family=family,
                                           seed=seed)
        return _built[key]


@pytest.fixture(scope="session")
def tiny_qwen2_vl() -> Path:
    """A tiny random Qwen2-VL checkpoint folder (read-only; shared by the whole session)."""
    return tiny_model_dir("qwen2_vl")


@pytest.fixture(scope="session")
def tiny_qwen3_vl() -> Path:
    """A tiny random Qwen3-VL checkpoint folder (read-only; shared by the whole session)."""
    return tiny_model_dir("qwen3_vl")
