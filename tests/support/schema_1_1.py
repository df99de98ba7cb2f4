"""A schema 1.1 trajectory folder, as the toolkit wrote it before schema 1.2.

`features_1_1()` is a frozen copy of the 1.1 row layout (``trajectory_features()`` of
``webgym_rollout/trajectory/contract.py`` at schema 1.1: no per-step ``policy_version`` / ``logprobs``, no
per-episode ``outcome``). `write_1_1(out, episodes)` writes `Episode`s in that layout the way the
1.1 writer did: ``data/<split>-00000.parquet`` (no run id in the name) and a manifest with
``schema_version: "1.1"``. Nothing here is committed as a binary fixture: the folder is made in
the test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from webgym_rollout.trajectory.contract import Episode


def features_1_1():
    """The `datasets.Features` of a schema 1.1 episode row (frozen; never derived from today's code)."""
    from datasets import Features, Image, List, Value

    step = {
        "index": Value("int32"),
        "screenshot": Image(),
        "screenshot_sha256": Value("string"),
        "messages": Value("string"),
        "response": Value("string"),
        "action": Value("string"),
        "action_error": Value("string"),
        "memory": Value("string"),
        "url": Value("string"),
        "title": Value("string"),
        "same_as_next": Value("bool"),
        "finish_reason": Value("string"),
        "usage": {"prompt_tokens": Value("int32"), "completion_tokens": Value("int32")},
        "latency": {"policy_s": Value("float32"), "execute_s": Value("float32"),
                    "screenshot_s": Value("float32")},
    }
    return Features({
        "episode_id": Value("string"),
        "iteration": Value("int32"),
        "attempt": Value("int32"),
        "split": Value("string"),
        "task_id": Value("string"),
        "task_name": Value("string"),
        "website": Value("string"),
        "start_url": Value("string"),
        "benchmark_name": Value("string"),
        "domain": Value("string"),
        "subdomain": Value("string"),
        "difficulty": Value("int32"),
        "difficulty_level": Value("string"),
        "evaluator_reference": List({"id": Value("string"), "description": Value("string"),
                                     "facts": List(Value("string"))}),
        "definite_answer": Value("string"),
        "parent_task_id": Value("string"),
        "environment": Value("string"),
        "env_seed": Value("int64"),
        "instruction": Value("string"),
        "policy_model": Value("string"),
        "judge_model": Value("string"),
        "reward": Value("float32"),
        "status": Value("string"),
        "answer": Value("string"),
        "verdicts": List({"criterion": Value("string"), "passed": Value("bool"), "reason": Value("string")}),
        "num_steps": Value("int32"),
        "started_at": Value("float64"),
        "duration_s": Value("float32"),
        "judge_s": Value("float32"),
        "steps": List(step),
    })


def _row_1_1(episode: Episode, features) -> dict:
    """The 1.1 row of `episode`: exactly the 1.1 columns and step fields, nothing newer."""
    row = episode.to_row()
    step_fields = set(features["steps"].feature)
    row["steps"] = [{k: v for k, v in step.items() if k in step_fields} for step in row["steps"]]
    return {name: row[name] for name in features}


def write_1_1(out: Path, episodes: Sequence[Episode]) -> Path:
    """A schema 1.1 rollout folder holding `episodes` (one train shard); returns `out`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out)
    (out / "data").mkdir(parents=True, exist_ok=True)
    features = features_1_1()
    encoded = [features.encode_example(_row_1_1(episode, features)) for episode in episodes]
    shard = "data/train-00000.parquet"
    pq.write_table(pa.Table.from_pylist(encoded, schema=features.arrow_schema), out / shard)
    now = time.time()
    manifest = {"format": "webgym-trajectories", "schema_version": "1.1", "created_at": now,
                "updated_at": now, "run": {},
                "shards": [{"path": shard, "split": "train", "num_rows": len(episodes),
                            "episodes": [[e.task.task_id, e.attempt, e.episode_id] for e in episodes]}]}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return out
