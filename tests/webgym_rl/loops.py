"""Loop settings for the loop tests: four MiniWoB tasks and a small, fast configuration."""

from __future__ import annotations

import json
from pathlib import Path

from webgym_core.settings import settings_from_dict
from webgym_rl.loop.settings import LoopSettings

MINIWOB = [("click-test", 0), ("click-test", 1), ("click-test-2", 0), ("click-test-2", 1)]


def tasks_file(path: Path) -> Path:
    """A JSONL task file of the `MINIWOB` tasks (name, seed)."""
    from webgym_data.importers.miniwob import miniwob_task

    path.write_text("".join(json.dumps(miniwob_task(name, seed).to_row()) + "\n" for name, seed in MINIWOB))
    return path


def loop_settings(tmp_path: Path, model: Path, **changes) -> LoopSettings:
    """`LoopSettings` from YAML-style keys (flat groups beside the loop's own, ``policy: {...}``)."""
    tasks = tasks_file(tmp_path / "tasks.jsonl")
    values = dict(tasks=str(tasks), model=str(model), out=str(tmp_path / "loop"), iterations=2,
                  miniwob_horizon=3, viewport="320x240", concurrency=4, policy={"max_new_tokens": 8},
                  learning_rate=1e-3, epochs=1.0, per_device_batch_size=2, log_with="none", eval_every=2,
                  eval_split="train", progress=False)
    for key, value in changes.items():
        values[key] = {**values.get(key, {}), **value} if isinstance(value, dict) else value
    return settings_from_dict(LoopSettings, values)
