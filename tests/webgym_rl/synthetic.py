"""Synthetic trajectory shards in the exact format of `webgym_rollout.trajectory`.

`write_shards(out, episodes)` writes ``<out>/data/shard-00000.parquet`` (rows typed with
`trajectory_features()`, written through `datasets`) plus a ``manifest.json``, the way a rollout
output folder looks. `episode(...)` builds one row: every step has a real PNG screenshot, the
messages as sent (image parts stored as ``{"type": "image", "step": j}``) and a raw response.

The responses are a deterministic function of the task, so a model trained on them can learn them
(a falling loss is a meaningful check).
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from webgym_rollout.trajectory import TRAJECTORY_SCHEMA_VERSION, trajectory_features

SYSTEM_PROMPT = "You are a web agent. Reply with one action."


def screenshot(seed: int, size: tuple[int, int] = (56, 56)) -> Image.Image:
    """A small RGB image whose pixels depend on `seed` (blocks of colour, PNG-friendly)."""
    rng = random.Random(seed)
    image = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
    for _ in range(4):
        x, y = rng.randrange(size[0]), rng.randrange(size[1])
        box = (x, y, min(size[0], x + 12), min(size[1], y + 12))
        image.paste(tuple(rng.randrange(256) for _ in range(3)), box)
    return image


def response_for(task_id: str, step: int) -> str:
    return f'{{"action": "click", "x": {10 * (step + 1)}, "y": {len(task_id) * 7}}}'


def episode(
    *,
    task_id: str,
    iteration: int = 0,
    attempt: int = 0,
    reward: float | None = 1.0,
    num_steps: int = 2,
    same_as_next: Sequence[bool] | None = None,
    status: str = "ok",
    image_size: tuple[int, int] = (56, 56),
    window: int = 2,
    responses: Sequence[str] | None = None,
) -> dict[str, Any]:
    """One episode row; step ``i``'s prompt shows the screenshots of the last `window` steps."""
    same_as_next = list(same_as_next) if same_as_next is not None else [False] * num_steps
    steps = []
    for i in range(num_steps):
        shown = list(range(max(0, i - window + 1), i + 1))
        user_content: list[dict[str, Any]] = [{"type": "text", "text": f"Task: do {task_id}. Step {i}."}]
        for j in shown:
            user_content.append({"type": "text", "text": f"Screenshot {j}:"})
            user_content.append({"type": "image", "step": j})
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user_content},
        ]
        image = screenshot(zlib.crc32(f"{task_id}/{iteration}/{attempt}/{i}".encode()), image_size)
        steps.append({
            "index": i,
            "screenshot": image,
            "screenshot_sha256": f"{i:064x}",
            "messages": json.dumps(messages),
            "response": responses[i] if responses is not None else response_for(task_id, i),
            "action": "click",
            "action_error": "",
            "memory": "",
            "url": f"http://127.0.0.1/{task_id}/{i}",
            "title": task_id,
            "same_as_next": bool(same_as_next[i]),
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 100, "completion_tokens": 10},
            "latency": {"policy_s": 0.1, "execute_s": 0.05, "screenshot_s": 0.02},
        })
    return {
        "episode_id": f"{task_id}-it{iteration}-a{attempt}",
        "iteration": iteration,
        "attempt": attempt,
        "split": "train",
        "task_id": task_id,
        "task_name": f"do {task_id}",
        "website": "127.0.0.1",
        "start_url": f"http://127.0.0.1/{task_id}",
        "benchmark_name": "synthetic",
        "domain": "test",
        "subdomain": "test",
        "difficulty": 1,
        "difficulty_level": "easy",
        "evaluator_reference": [{"id": "g0", "description": "done", "facts": ["it is done"]}],
        "definite_answer": "",
        "parent_task_id": "",
        "environment": "web",
        "env_seed": 0,
        "instruction": f"do {task_id}",
        "policy_model": "tiny",
        "judge_model": "rule",
        "reward": reward,
        "status": status,
        "answer": "",
        "verdicts": [{"criterion": "g0", "passed": bool(reward), "reason": "synthetic"}],
        "num_steps": num_steps,
        "started_at": 0.0,
        "duration_s": 1.0,
        "judge_s": 0.1,
        "steps": steps,
    }


def write_shards(out: Path, episodes: Sequence[dict[str, Any]], *, shard_size: int = 0,
                 drop_columns: Sequence[str] = ()) -> Path:
    """Write `episodes` to ``out/data/shard-NNNNN.parquet`` (+ ``manifest.json``); returns `out`.

    `shard_size` > 0 splits the rows over several shards; `drop_columns` removes top-level columns
    (to test a broken shard)."""
    from datasets import Dataset, Features

    out = Path(out)
    (out / "data").mkdir(parents=True, exist_ok=True)
    features = trajectory_features()
    if drop_columns:
        features = Features({k: v for k, v in features.items() if k not in set(drop_columns)})
    size = shard_size or max(1, len(episodes))
    shards = []
    for number, start in enumerate(range(0, len(episodes), size) or [0]):  # an empty set: one empty shard
        rows = [{k: v for k, v in row.items() if k in features} for row in episodes[start:start + size]]
        name = f"data/shard-{number:05d}.parquet"
        table = (Dataset.from_list(rows, features=features) if rows
                 else Dataset.from_dict({key: [] for key in features}, features=features))
        table.to_parquet(str(out / name))
        shards.append({"path": name, "split": "train", "num_rows": len(rows),
                       "episodes": [[row["task_id"], row["attempt"]] for row in rows]})
    manifest = {"schema_version": TRAJECTORY_SCHEMA_VERSION, "shards": shards,
                "episodes": [row["episode_id"] for row in episodes]}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return out


def standard_iteration(out: Path, *, iteration: int = 0, tasks: int = 3, attempts: int = 2,
                       num_steps: int = 2, image_size: tuple[int, int] = (56, 56)) -> Path:
    """A rollout folder where, per task, attempt 0 succeeds (reward 1) and the others fail."""
    rows = [
        episode(task_id=f"task{t}", iteration=iteration, attempt=a, reward=1.0 if a == 0 else 0.0,
                num_steps=num_steps, image_size=image_size)
        for t in range(tasks) for a in range(attempts)
    ]
    return write_shards(out, rows)


_TINY: dict[str, Path] = {}


def tiny_checkpoint(root_factory, family: str = "qwen2_vl") -> Path:
    """A tiny random checkpoint of `family`, built once per test session (``tmp_path_factory``)."""
    from webgym_rl.modeling import build_tiny_model

    if family not in _TINY:
        _TINY[family] = build_tiny_model(root_factory.mktemp(f"tiny-{family}"), family=family, seed=0)
    return _TINY[family]
