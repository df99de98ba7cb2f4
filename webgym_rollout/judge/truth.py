"""The ground-truth file of a run on the local sites: ``truth.jsonl`` (`TRUTH_FILE`), beside its manifest.

A run of generated site tasks made with a site server's truth source (``webgym-rollout run ...
--truth-url URL``) keeps one line per finished episode, ``{"episode_id": ..., "task_id": ...,
"facts": {...}}``: the session's `SessionFacts` as the site recorded them when the episode ended.
`append_truth` writes a line (the runner), `read_truth` reads the file (``webgym-rollout
judge-eval``, whose labels they then give: `webgym_rollout.judge.labels.TruthLabels`).

Exceptions: `TruthFileError` (a `RolloutError`) for a file that is missing or holds a line that is
not a truth record.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from webgym_rollout.errors import TruthFileError
from webgym_sites.facts import SessionFacts

__all__ = ["TRUTH_FILE", "TruthFileError", "append_truth", "read_truth"]

log = logging.getLogger(__name__)

TRUTH_FILE = "truth.jsonl"
"""The ground-truth file of a run, beside its manifest: one JSON object per finished episode."""

_append_lock = threading.Lock()


def append_truth(run_dir: str | Path, episode_id: str, task_id: str, facts: SessionFacts) -> None:
    """Append the ground truth of one finished episode to ``run_dir/truth.jsonl`` as one line,
    flushed to disk before returning. A line a crash left half-written (no newline at the end of
    the file) is cut off first, so it never runs into the new one. Thread-safe within a process.
    A later line for the same episode id replaces an earlier one (a resumed run redoes episodes
    that never reached a shard)."""
    line = json.dumps({"episode_id": episode_id, "task_id": task_id, "facts": facts.model_dump(mode="json")},
                      ensure_ascii=False, separators=(",", ":")) + "\n"
    path = Path(run_dir) / TRUTH_FILE
    with _append_lock, open(path, "a+b") as file:
        size = file.seek(0, os.SEEK_END)
        if size:
            file.seek(size - 1)
            if file.read(1) != b"\n":
                file.truncate(_last_line_end(file, size))
        file.write(line.encode("utf-8"))
        file.flush()
        os.fsync(file.fileno())


def _last_line_end(file: Any, size: int, chunk: int = 1 << 16) -> int:
    """The offset just after the last newline of the file (0 when it has none)."""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        file.seek(start)
        at = file.read(end - start).rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


def read_truth(run_dir: str | Path) -> dict[str, tuple[str, SessionFacts]]:
    """``{episode_id: (task_id, facts)}`` from ``run_dir/truth.jsonl``; a later line for an episode
    replaces an earlier one. A last line a crash cut short (not JSON and no newline after it) is
    skipped with a warning. Raises `TruthFileError` for a missing file, and one naming the file
    and line for any other line that is not a truth record."""
    path = Path(run_dir) / TRUTH_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TruthFileError(f"{path}: no such file: the run holds no ground truth. The run must be made on "
                             "generated site tasks with a site server truth source (webgym-rollout run ... "
                             f"--truth-url URL), which writes {TRUTH_FILE} beside the episodes") from None
    except OSError as exc:
        raise TruthFileError(f"{path}: cannot read the truth file: {exc}") from None
    lines = data.split(b"\n")
    torn = lines.pop()  # after the last newline: "" when the file ends properly
    truth: dict[str, tuple[str, SessionFacts]] = {}
    numbered = [(n, line) for n, line in enumerate(lines, start=1)]
    if torn.strip():
        try:
            json.loads(torn)
        except ValueError:
            log.warning("%s line %d: a line cut short (a crash while writing it?); skipped",
                        path, len(lines) + 1)
        else:
            numbered.append((len(lines) + 1, torn))
    for number, raw in numbered:
        if not raw.strip():
            continue
        where = f"{path} line {number}"
        try:
            record = json.loads(raw)
        except ValueError as exc:
            raise TruthFileError(f"{where}: not JSON: {exc}") from None
        if not isinstance(record, dict):
            raise TruthFileError(f"{where}: expected an object, got {type(record).__name__}")
        for name in ("episode_id", "task_id"):
            if not isinstance(record.get(name), str) or not record[name]:
                raise TruthFileError(f"{where}: {name}: expected a non-empty string, "
                                     f"got {record.get(name)!r}")
        try:
            facts = SessionFacts.model_validate(record.get("facts"))
        except ValidationError as exc:
            problem = exc.errors()[0]
            place = ".".join(str(part) for part in problem["loc"])
            raise TruthFileError(f"{where}: facts{'.' + place if place else ''}: {problem['msg']}") from None
        truth[record["episode_id"]] = (record["task_id"], facts)
    return truth
