"""Files written so that a crash never leaves half of one: a temporary file, fsync, then a rename."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["TMP_PREFIX", "sha256_file", "write_atomic", "write_json_atomic"]

TMP_PREFIX = ".tmp-"
"""Name prefix of temporary files: readers skip them, resumers remove them."""


def write_atomic(path: str | Path, data: bytes | str) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never a part."""
    path = Path(path)
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}.{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: str | Path, value: Any) -> None:
    """`write_atomic` of `value` as indented JSON (paths and other objects as strings)."""
    write_atomic(path, json.dumps(value, indent=1, ensure_ascii=False, default=str))


def sha256_file(path: str | Path) -> str:
    """The SHA-256 hex digest of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
